//! What browsers use, in a real one: headless Chromium driven through chromedriver's WebDriver
//! HTTP API (plain JSON over reqwest, no extra crate). The connect page is filled in and
//! submitted; the Ingest API is called cross-origin with `fetch` (CORS preflight) and
//! `navigator.sendBeacon` (text/plain, no preflight), from an enabled and a foreign origin.
//!
//! `.ci/run` installs `chromium` and `chromium-driver` and sets `CUSTINTEL_REQUIRE_BROWSER=1`,
//! so there a missing browser fails the run; elsewhere these tests say they were skipped.

use std::{net::TcpListener, process::Stdio, time::Duration};

use entity::event;
use poem::{get, handler, web::Html, EndpointExt};
use reqwest::StatusCode;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{json, Value};

use crate::db_test;
use crate::helpers::TestApp;

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// One Chromium session behind its own chromedriver.
pub(crate) struct Browser {
    driver: std::process::Child,
    url: String,
    client: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session, or `None` when they are not
    /// installed and the run does not require them.
    pub(crate) async fn start() -> Option<Browser> {
        let installed = ["/usr/bin/chromedriver", "/usr/bin/chromium"]
            .iter()
            .all(|p| std::path::Path::new(p).exists());
        if !installed {
            assert!(
                std::env::var("CUSTINTEL_REQUIRE_BROWSER").is_err(),
                "CUSTINTEL_REQUIRE_BROWSER is set but chromium/chromedriver are not installed \
                 (apt-get install chromium chromium-driver)"
            );
            eprintln!("chromium/chromedriver not installed: browser test skipped");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let driver = std::process::Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().expect("profile dir");
        let client = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let mut ready = false;
        for _ in 0..100 {
            if let Ok(r) = client.get(format!("{base}/status")).send().await {
                let body: Value = r.json().await.unwrap_or_default();
                if body["value"]["ready"] == true {
                    ready = true;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ready, "chromedriver did not become ready");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless", "--no-sandbox", "--disable-background-networking",
                    "--disable-gpu", "--disable-dev-shm-usage",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let r: Value = client
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("session body");
        let session = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {r}"))
            .to_string();
        let browser = Browser {
            driver,
            url: format!("{base}/session/{session}"),
            client,
            _profile: profile,
        };
        browser
            .command(
                "POST",
                "/timeouts",
                json!({"script": 15_000, "pageLoad": 15_000}),
            )
            .await;
        Some(browser)
    }

    pub(crate) async fn command(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.url);
        let req = match method {
            "GET" => self.client.get(url),
            "DELETE" => self.client.delete(url),
            _ => self.client.post(url).json(&body),
        };
        let r: Value = req
            .send()
            .await
            .expect("webdriver")
            .json()
            .await
            .expect("webdriver body");
        assert!(
            r["value"].get("error").is_none(),
            "webdriver {method} {path}: {r}"
        );
        r["value"].clone()
    }

    pub(crate) async fn goto(&self, url: &str) {
        self.command("POST", "/url", json!({ "url": url })).await;
    }

    pub(crate) async fn find(&self, css: &str) -> String {
        let v = self
            .command(
                "POST",
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        v[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_string()
    }

    pub(crate) async fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css).await;
        self.command("POST", &format!("/element/{el}/clear"), json!({}))
            .await;
        self.command(
            "POST",
            &format!("/element/{el}/value"),
            json!({ "text": text }),
        )
        .await;
    }

    pub(crate) async fn click(&self, css: &str) {
        let el = self.find(css).await;
        self.command("POST", &format!("/element/{el}/click"), json!({}))
            .await;
    }

    /// Runs `script` in the page; it ends by calling its last argument with the result.
    pub(crate) async fn run_async(&self, script: &str, args: Value) -> Value {
        self.command(
            "POST",
            "/execute/async",
            json!({ "script": script, "args": args }),
        )
        .await
    }

    /// Clicks `css` and waits until the page that follows shows `expected` (a form post's
    /// answer may still be loading when the click returns).
    pub(crate) async fn submit(&self, css: &str, expected: &str) {
        self.click(css).await;
        let probe = format!("document.querySelector({}) !== null", json!(expected));
        for _ in 0..150 {
            if self.eval(&probe).await == true {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("`{expected}` did not appear after clicking `{css}`");
    }

    pub(crate) async fn eval(&self, expression: &str) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            json!({ "script": format!("return {expression};"), "args": [] }),
        )
        .await
    }

    /// Ends the session (Chromium exits) before chromedriver is stopped on drop.
    pub(crate) async fn quit(self) {
        let _ = self.client.delete(&self.url).send().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

db_test!(connect_page_in_a_browser, |app: TestApp| async move {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let org = app.org("Browser Co").await;
    let r = app
        .post(
            "/api/integrations/connect",
            "/api/integrations/connect",
            &org.api_key,
            Some(json!({"provider": "pylon"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let session = r.body["sessionId"].as_str().unwrap().to_string();
    let url = r.body["connectUrl"].as_str().unwrap().to_string();

    browser.goto(&url).await;
    assert_eq!(
        browser
            .eval("document.querySelector('h1').textContent")
            .await,
        "Connect Pylon"
    );
    // A blank token is refused on the page itself, which keeps the form.
    browser.type_into("#apiToken", " ").await;
    browser
        .submit("button[value=connect]", "[role=alert]")
        .await;
    let alert = browser
        .eval("document.querySelector('[role=alert]').textContent")
        .await;
    assert!(alert.as_str().unwrap().contains("apiToken"), "{alert}");
    browser.type_into("#apiToken", "pylon_live_token").await;
    browser.submit("button[value=connect]", "#result").await;
    assert_eq!(
        browser
            .eval("document.getElementById('result').dataset.status")
            .await,
        "connected"
    );

    let status = "/api/integrations/connect/status";
    let r = app
        .get(
            status,
            &format!("{status}?sessionId={session}"),
            &org.api_key,
        )
        .await;
    assert_eq!(r.body["status"], "connected");
    browser.quit().await;
});

#[handler]
fn shop_page() -> Html<&'static str> {
    Html("<!doctype html><html><head><title>Shop</title></head><body><p>Shop</p></body></html>")
}

/// A site on 127.0.0.1 that the browser reaches as `localhost` (an enabled tracking domain of
/// every test organization) or as `127.0.0.1` (not enabled).
async fn serve_site() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let acceptor = poem::listener::TcpAcceptor::from_tokio(listener).expect("acceptor");
    let app = poem::Route::new().at("/", get(shop_page)).boxed();
    tokio::spawn(poem::Server::new_with_acceptor(acceptor).run(app));
    port
}

fn batch(message_id: &str) -> Value {
    json!({
        "visitorId": "4a9e0c1e-7e2b-4c11-9d1d-0f3b2a1c9e77",
        "source": "client",
        "events": [{
            "type": "pageview",
            "url": "http://localhost/pricing",
            "path": "/pricing",
            "messageId": message_id,
        }],
    })
}

const FETCH: &str = "const [api, body, done] = arguments;
fetch(api, {method: 'POST', headers: {'Content-Type': 'application/json'}, body})
  .then(async r => done({status: r.status, body: await r.json(),
                         limit: r.headers.get('X-RateLimit-Limit')}))
  .catch(e => done({fetchError: String(e)}));";

const BEACON: &str = "const [api, body, done] = arguments;
done(navigator.sendBeacon(api, body));";

async fn stored(app: &TestApp, message_id: &str) -> bool {
    app.settle().await;
    event::Entity::find()
        .filter(event::Column::MessageId.eq(message_id))
        .one(&app.db)
        .await
        .expect("event")
        .is_some()
}

db_test!(ingest_from_a_browser, |app: TestApp| async move {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let org = app.org("Browser Shop").await;
    let api = format!("{}/api/i/v1/{}/events", app.base, org.public_key);
    let site = serve_site().await;

    // From an enabled domain: the preflight passes and the page reads the answer and headers.
    browser.goto(&format!("http://localhost:{site}/")).await;
    let body = batch("browser-fetch-1").to_string();
    let r = browser.run_async(FETCH, json!([api, body])).await;
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["body"]["success"], true);
    assert_eq!(r["body"]["processed"], 1);
    assert_eq!(r["limit"], "100");
    assert!(stored(&app, "browser-fetch-1").await);

    // sendBeacon posts text/plain without a preflight; the event is stored.
    let body = batch("browser-beacon-1").to_string();
    assert_eq!(browser.run_async(BEACON, json!([api, body])).await, true);
    let mut beaconed = false;
    for _ in 0..100 {
        if stored(&app, "browser-beacon-1").await {
            beaconed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(beaconed, "the beacon's event was not stored");

    // From a domain that is not enabled: the browser blocks the call, nothing is stored.
    browser.goto(&format!("http://127.0.0.1:{site}/")).await;
    let body = batch("browser-fetch-foreign").to_string();
    let r = browser.run_async(FETCH, json!([api, body])).await;
    assert!(
        r["fetchError"]
            .as_str()
            .is_some_and(|e| e.contains("Failed to fetch")),
        "{r}"
    );
    let body = batch("browser-beacon-foreign").to_string();
    browser.run_async(BEACON, json!([api, body])).await;
    // The foreign beacon is answered 403 before anything is written; a later call from the
    // enabled origin is stored, so by then the foreign one has been refused, not delayed.
    browser.goto(&format!("http://localhost:{site}/")).await;
    let body = batch("browser-fetch-2").to_string();
    let r = browser.run_async(FETCH, json!([api, body])).await;
    assert_eq!(r["status"], 200, "{r}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!stored(&app, "browser-fetch-foreign").await);
    assert!(!stored(&app, "browser-beacon-foreign").await);
    browser.quit().await;
});
