//! The browser tracker, `custintel.js`, as the service serves it (`GET /sdk/v1/custintel.js`),
//! in headless Chromium on a page of an enabled tracking domain (`localhost`). What arrived is
//! read from the stored events. A proxy in front of the Ingest API can fail requests and
//! records what the page sent (how, and the bodies), so retries, beacons and what never left
//! the page can be checked.

use std::{
    collections::HashMap,
    io::Write,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use entity::event;
use poem::{
    get, handler,
    http::{HeaderMap, Method, StatusCode},
    web::{Data, Html, Path, Query},
    Body, EndpointExt, Response,
};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::json;

use crate::{browser::Browser, db_test, helpers::TestApp};

/// What the proxy saw: each request's content type, answer and body.
#[derive(Clone, Debug)]
struct Sent {
    content_type: String,
    status: u16,
    body: String,
}

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    /// POSTs still to answer with 503.
    fail: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<Sent>>>,
    client: reqwest::Client,
}

#[handler]
async fn forward(
    method: Method,
    headers: &HeaderMap,
    Path(key): Path<String>,
    body: Body,
    state: Data<&ProxyState>,
) -> Response {
    let origin = headers
        .get("origin")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = body.into_vec().await.unwrap_or_default();
    if method == Method::POST
        && state
            .fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    {
        state.log.lock().unwrap().push(Sent {
            content_type,
            status: 503,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        });
        return Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header("access-control-allow-origin", origin)
            .body("{\"error\":\"unavailable\"}");
    }
    let mut req = state.client.request(
        reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap(),
        format!("{}/api/i/v1/{key}/events", state.upstream),
    );
    for name in [
        "origin",
        "content-type",
        "access-control-request-method",
        "access-control-request-headers",
    ] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            req = req.header(name, v);
        }
    }
    let answer = req.body(bytes.clone()).send().await.expect("upstream");
    let status = answer.status().as_u16();
    let mut out = Response::builder().status(StatusCode::from_u16(status).unwrap());
    for (name, value) in answer.headers() {
        if name.as_str().starts_with("access-control") || name.as_str() == "content-type" {
            out = out.header(name.as_str(), value.to_str().unwrap_or_default());
        }
    }
    let text = answer.text().await.unwrap_or_default();
    if method == Method::POST {
        state.log.lock().unwrap().push(Sent {
            content_type,
            status,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        });
    }
    out.body(text)
}

/// A page with the tracker: `key`, `api` (the API host), `flush` (ms) and `forms` (capture
/// forms) in the query.
#[handler]
fn tracked_page(
    Query(q): Query<HashMap<String, String>>,
    script: Data<&ScriptUrl>,
) -> Html<String> {
    let options = json!({
        "apiHost": q.get("api"),
        "flushIntervalMs": q.get("flush").and_then(|f| f.parse::<u64>().ok()).unwrap_or(300),
        "captureForms": q.contains_key("forms"),
    });
    let key = json!(q.get("key"));
    Html(format!(
        r#"<!doctype html><html><head><title>Tracked</title>
<script src="{script}"></script>
<script>custintel.init({key}, {options});</script></head>
<body><p>Tracked</p><input id="typing">
<a id="away" href="/away">away</a>
<form id="signup" action="/thanks" method="post">
  <input name="company" value="Acme"><input name="email" value="ada@acme.com">
  <input type="password" name="password" value="hunter2">
  <input name="cardNumber" autocomplete="cc-number" value="4111111111111111">
  <button id="go" type="submit">Sign up</button>
</form></body></html>"#,
        script = script.0 .0,
    ))
}

/// The README's snippet as a user pastes it: the stub, a call before the script loads, and the
/// `data-key` tag (the API host is the script's origin).
#[handler]
fn snippet_page(
    Query(q): Query<HashMap<String, String>>,
    script: Data<&ScriptUrl>,
) -> Html<String> {
    let readme = include_str!("../../README.md");
    let stub = readme
        .split("<script>\nwindow.custintel")
        .nth(1)
        .and_then(|rest| rest.split("</script>").next())
        .map(|body| format!("window.custintel{body}"))
        .expect("the README shows the stub");
    Html(format!(
        r#"<!doctype html><html><head><title>Snippet</title>
<script>{stub}
custintel.track('before load', {{early: true}});</script>
<script src="{script}" data-key="{key}" async></script></head><body><p>Snippet</p></body></html>"#,
        script = script.0 .0,
        key = q.get("key").cloned().unwrap_or_default(),
    ))
}

#[handler]
fn untracked() -> Html<&'static str> {
    Html("<!doctype html><html><head><title>Away</title></head><body><p id=away>Away</p></body></html>")
}

#[derive(Clone)]
struct ScriptUrl(String);

/// Starts the site (reached as `localhost`) and the proxy; answers their ports.
async fn serve(app: &TestApp, state: ProxyState) -> (u16, u16) {
    let bind = || async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        (
            poem::listener::TcpAcceptor::from_tokio(listener).expect("acceptor"),
            port,
        )
    };
    let (site, site_port) = bind().await;
    let script = ScriptUrl(format!("{}/sdk/v1/custintel.js", app.base));
    let site_app = poem::Route::new()
        .at("/p", get(tracked_page))
        .at("/snippet", get(snippet_page))
        .at("/away", get(untracked))
        .at("/thanks", get(untracked).post(untracked))
        .data(script)
        .boxed();
    tokio::spawn(poem::Server::new_with_acceptor(site).run(site_app));
    let (proxy, proxy_port) = bind().await;
    let proxy_app = poem::Route::new()
        .at(
            "/api/i/v1/:key/events",
            poem::post(forward).options(forward),
        )
        .data(state)
        .boxed();
    tokio::spawn(poem::Server::new_with_acceptor(proxy).run(proxy_app));
    (site_port, proxy_port)
}

/// The organization's stored events, oldest first, once `until` holds (or after 20 s).
async fn events_until(
    app: &TestApp,
    org: &str,
    until: impl Fn(&[event::Model]) -> bool,
) -> Vec<event::Model> {
    let mut rows = Vec::new();
    for _ in 0..100 {
        app.settle().await;
        rows = event::Entity::find()
            .filter(event::Column::OrganizationId.eq(org))
            .order_by_asc(event::Column::OccurredAt)
            // Events of one batch that share a millisecond keep the batch's order by id.
            .order_by_asc(event::Column::Id)
            .all(&app.db)
            .await
            .expect("events");
        if until(&rows) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rows
}

fn named<'a>(rows: &'a [event::Model], name: &str) -> Vec<&'a event::Model> {
    rows.iter()
        .filter(|r| r.event_name.as_deref() == Some(name))
        .collect()
}

/// Every stored event has its own `messageId`: nothing was stored twice.
fn once_each(rows: &[event::Model]) {
    let mut ids: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.message_id.as_deref())
        .collect();
    let all = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), all, "an event was stored twice");
    assert_eq!(all, rows.len(), "an event without its messageId");
}

db_test!(the_tracker_in_a_browser, |app: TestApp| async move {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let proxy = ProxyState {
        upstream: app.base.clone(),
        fail: Arc::new(AtomicUsize::new(0)),
        log: Arc::new(Mutex::new(Vec::new())),
        client: reqwest::Client::new(),
    };
    let (site, proxy_port) = serve(&app, proxy.clone()).await;
    let proxied = format!("http://127.0.0.1:{proxy_port}");
    let page = |org: &custintel::ops::admin::CreatedOrganization, api: &str, extra: &str| {
        format!(
            "http://localhost:{site}/p?key={}&api={api}{extra}",
            org.public_key
        )
    };

    // A pageview on load and one per pushState; track, identify and group with their fields;
    // the identity goes with later batches.
    let org = app.org("Tracked Basics").await;
    browser.goto(&page(&org, &app.base, "")).await;
    // The navigation starts 300 ms after the load: each batch's `occurredAt` is corrected by
    // its receive time less its `sentAt`, which includes the request's time in transit, so the
    // load's pageview (sent in a batch of its own) could land after the next page's when the
    // two were a few milliseconds apart on a busy machine.
    browser
        .eval(
            "(setTimeout(() => (history.pushState({}, '', '/p/pricing' + location.search), \
              history.pushState({}, '', '/p/docs' + location.search), \
              custintel.track('Plan Selected', {plan: 'pro', seats: 5}), \
              custintel.identify({email: 'Ada@Acme.com', userId: 'u_ada', traits: {name: 'Ada'}, \
                                  customerId: 'acct_acme', customerTraits: {name: 'Acme'}}), \
              custintel.group('acct_two', {name: 'Acme Two'}), \
              setTimeout(() => custintel.track('After Identify'), 500)), 300), true)",
        )
        .await;
    let rows = events_until(&app, &org.organization_id, |r| {
        named(r, "After Identify")
            .first()
            .is_some_and(|e| e.customer_id.is_some())
    })
    .await;
    once_each(&rows);
    let pageviews: Vec<&str> = rows
        .iter()
        .filter(|r| r.event_type == "pageview")
        .map(|r| r.path.as_str())
        .collect();
    // Each page once, in the order visited; two pages the browser left within one millisecond
    // carry the same `occurredAt`, and their order is then the order they arrived in (an
    // unload's beacon can come after the next page's first batch).
    let visited = ["/p", "/p/pricing", "/p/docs"];
    let mut seen = pageviews.clone();
    seen.sort_unstable();
    let mut expected = visited.to_vec();
    expected.sort_unstable();
    assert_eq!(seen, expected, "{rows:?}");
    let at = |path: &str| {
        rows.iter()
            .find(|r| r.event_type == "pageview" && r.path == path)
            .map(|r| r.occurred_at)
    };
    for pair in visited.windows(2) {
        assert!(
            at(pair[0]) <= at(pair[1]),
            "{pair:?} out of order: {rows:?}"
        );
    }
    let plan = named(&rows, "Plan Selected");
    assert_eq!(
        plan[0].data["properties"],
        json!({"plan": "pro", "seats": 5})
    );
    let identify = rows
        .iter()
        .find(|r| r.event_type == "identify")
        .expect("identify");
    assert_eq!(identify.data["email"], "ada@acme.com");
    assert_eq!(identify.data["userId"], "u_ada");
    assert_eq!(identify.data["customerId"], "acct_acme");
    let after = named(&rows, "After Identify")[0];
    assert!(after.user_id.is_some(), "{after:?}");
    let customer = entity::customer::Entity::find_by_id(after.customer_id.clone().unwrap())
        .one(&app.db)
        .await
        .expect("customer")
        .expect("the group's customer");
    assert_eq!(customer.external_id.as_deref(), Some("acct_two"));

    // The README's snippet, pasted into a page: it starts by itself and replays the call made
    // before it loaded.
    let org = app.org("Tracked Snippet").await;
    browser
        .goto(&format!(
            "http://localhost:{site}/snippet?key={}",
            org.public_key
        ))
        .await;
    let rows = events_until(&app, &org.organization_id, |r| {
        named(r, "before load").len() == 1 && r.iter().any(|e| e.event_type == "pageview")
    })
    .await;
    once_each(&rows);
    assert_eq!(named(&rows, "before load").len(), 1, "{rows:?}");
    assert!(rows.iter().any(|e| e.event_type == "pageview"), "{rows:?}");

    // The service answers 503 three times, then 200: retried with the same messageIds, each
    // event stored once.
    let org = app.org("Tracked Retries").await;
    proxy.fail.store(3, Ordering::SeqCst);
    proxy.log.lock().unwrap().clear();
    browser.goto(&page(&org, &proxied, "&flush=200")).await;
    browser
        .eval("(Array.from({length: 5}, (_, i) => custintel.track('flaky', {i})), true)")
        .await;
    let rows = events_until(&app, &org.organization_id, |r| named(r, "flaky").len() == 5).await;
    once_each(&rows);
    assert_eq!(named(&rows, "flaky").len(), 5);
    let statuses: Vec<u16> = proxy.log.lock().unwrap().iter().map(|s| s.status).collect();
    assert_eq!(&statuses[..3], [503, 503, 503], "{statuses:?}");
    assert!(statuses[3..].contains(&200), "{statuses:?}");

    // Events queued while the service fails survive a reload and arrive after it.
    let org = app.org("Tracked Reload").await;
    proxy.fail.store(1000, Ordering::SeqCst);
    browser.goto(&page(&org, &proxied, "&flush=600000")).await;
    browser
        .eval("(custintel.track('queued 1'), custintel.track('queued 2'), true)")
        .await;
    browser.eval("(location.reload(), true)").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(events_until(&app, &org.organization_id, |_| true)
        .await
        .is_empty());
    proxy.fail.store(0, Ordering::SeqCst);
    browser
        .run_async(
            "const done = arguments[0]; const go = () => window.custintel && custintel.flush \
             ? custintel.flush().then(() => done(true)) : setTimeout(go, 50); go();",
            json!([]),
        )
        .await;
    let rows = events_until(&app, &org.organization_id, |r| {
        named(r, "queued 1").len() == 1 && named(r, "queued 2").len() == 1
    })
    .await;
    once_each(&rows);
    assert_eq!(named(&rows, "queued 1").len(), 1, "{rows:?}");
    assert_eq!(named(&rows, "queued 2").len(), 1, "{rows:?}");

    // Navigating away: what is still queued goes by sendBeacon (text/plain), with an
    // engagement event of plausible active and total times.
    let org = app.org("Tracked Leaving").await;
    proxy.log.lock().unwrap().clear();
    browser.goto(&page(&org, &proxied, "&flush=600000")).await;
    let opened = std::time::Instant::now();
    for _ in 0..6 {
        browser.type_into("#typing", "ab").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    browser
        .eval("(Array.from({length: 10}, (_, i) => custintel.track('leaving', {i})), true)")
        .await;
    let spent = opened.elapsed().as_millis() as i64;
    browser.click("#away").await;
    let rows = events_until(&app, &org.organization_id, |r| {
        named(r, "leaving").len() == 10 && r.iter().any(|e| e.event_type == "engagement")
    })
    .await;
    once_each(&rows);
    assert_eq!(named(&rows, "leaving").len(), 10);
    assert!(
        proxy
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.content_type.starts_with("text/plain")),
        "no beacon"
    );
    let engagement = rows
        .iter()
        .find(|r| r.event_type == "engagement")
        .expect("engagement");
    let active = engagement.data["activeTimeMs"].as_i64().unwrap_or(-1);
    let total = engagement.data["totalTimeMs"].as_i64().unwrap_or(-1);
    assert!(
        (1_500..=total).contains(&active),
        "active {active} of {total}"
    );
    assert!(
        (spent - 3_000..=spent + 3_000).contains(&total),
        "total {total}, page open {spent} ms"
    );

    // A captured form never carries the password or the card number out of the page.
    let org = app.org("Tracked Forms").await;
    proxy.log.lock().unwrap().clear();
    browser.goto(&page(&org, &proxied, "&forms=1")).await;
    browser.click("#go").await;
    let rows = events_until(&app, &org.organization_id, |r| {
        r.iter().any(|e| e.event_type == "form")
    })
    .await;
    let form = rows.iter().find(|r| r.event_type == "form").expect("form");
    assert_eq!(form.data["formId"], "signup");
    assert_eq!(form.data["formFields"]["company"], "Acme");
    assert_eq!(form.data["formFields"]["email"], "ada@acme.com");
    let sent: String = proxy
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.body.clone())
        .collect();
    assert!(
        sent.contains("signup"),
        "the form was sent through the proxy"
    );
    assert!(!sent.contains("hunter2") && !sent.contains("4111111111111111"));

    // Opted out: nothing is sent, and the choice outlives a reload.
    let org = app.org("Tracked Consent").await;
    browser.goto(&page(&org, &app.base, "")).await;
    events_until(&app, &org.organization_id, |r| !r.is_empty()).await;
    browser
        .eval("(custintel.optOut(), custintel.track('after optout'), true)")
        .await;
    browser.eval("(location.reload(), true)").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    browser
        .eval("(window.custintel && custintel.track('still out'), true)")
        .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let rows = events_until(&app, &org.organization_id, |_| true).await;
    let kinds: Vec<&str> = rows.iter().map(|r| r.event_type.as_str()).collect();
    assert_eq!(
        kinds,
        ["pageview"],
        "only the pageview before optOut: {rows:?}"
    );
    browser.quit().await;
});

db_test!(
    the_script_is_served_small_and_cached,
    |app: TestApp| async move {
        let url = format!("{}/sdk/v1/custintel.js", app.base);
        let r = app.client.get(&url).send().await.expect("script");
        assert_eq!(r.status(), reqwest::StatusCode::OK);
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        assert!(header("content-type").starts_with("application/javascript"));
        assert_eq!(header("cache-control"), "public, max-age=3600");
        let etag = header("etag");
        assert!(etag.starts_with('"'), "{etag}");
        let script = r.text().await.expect("body");
        let committed = include_str!("../../sdk/js/custintel.js");
        assert_eq!(script, committed);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(script.as_bytes()).expect("gzip");
        let size = gz.finish().expect("gzip").len();
        assert!(size <= 8 * 1024, "custintel.js is {size} bytes gzipped");
        let again = app
            .client
            .get(&url)
            .header("if-none-match", &etag)
            .send()
            .await
            .expect("revalidate");
        assert_eq!(again.status(), reqwest::StatusCode::NOT_MODIFIED);
    }
);
