//! Integrations: every route and error body, the connect page end to end over HTTP, session
//! expiry, the plan's connection limit, the Stripe sync and webhook against a fake Stripe, and
//! isolation between organizations.

use std::time::Duration;

use chrono::Utc;
use custintel::{
    integrations::{scheduler, sessions, webhook, IntegrationsConfig},
    ops::admin::{self, NewOrganization, Plan},
};
use reqwest::{Method, StatusCode};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter, Set};
use serde_json::{json, Value};

use crate::{
    db_test,
    fake_stripe::{customer_json, subscription_json, Account, FakeStripe},
    helpers::{self, Backend, TestApp},
    snap,
};
use entity::{
    billing_change,
    connect_session::{self, SessionStatus},
    customer::{self, BillingStatus},
    integration_connection,
};

const LIST: &str = "/api/integrations";
const CAPS: &str = "/api/integrations/capabilities";
const CONNECT: &str = "/api/integrations/connect";
const STATUS: &str = "/api/integrations/connect/status";
const DISCONNECT: &str = "/api/integrations/disconnect";
const SYNC: &str = "/api/integrations/sync-status";
const SETUP: &str = "/api/integrations/setup-step";
const WEBHOOK: &str = "/api/webhooks/stripe/{connectionId}";

/// Replaces the server's address (its port changes per run) and ids inside text (messages,
/// URLs) in every string; whole-value ids and timestamps are left to `snap!`'s redaction.
fn scrub(v: &Value, base: &str) -> Value {
    match v {
        Value::String(s) if uuid::Uuid::parse_str(s).is_ok() => v.clone(),
        Value::String(s) => Value::String(scrub_ids(&s.replace(base, "http://[base]"))),
        Value::Array(a) => Value::Array(a.iter().map(|x| scrub(x, base)).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, x)| (k.clone(), scrub(x, base))).collect())
        }
        other => other.clone(),
    }
}

fn scrub_ids(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if i + 36 <= chars.len() {
            let candidate: String = chars[i..i + 36].iter().collect();
            if uuid::Uuid::parse_str(&candidate).is_ok() && candidate.contains('-') {
                out.push_str("[uuid]");
                i += 36;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

async fn org_with_limit(
    app: &TestApp,
    name: &str,
    plan: Plan,
    limit: Option<i64>,
) -> admin::CreatedOrganization {
    admin::create_org(
        &app.db,
        NewOrganization {
            name: name.into(),
            plan,
            api_call_limit: None,
            connection_limit: limit,
            ingest_rate_limit: None,
            tracking_domains: vec![],
        },
    )
    .await
    .expect("create org")
}

/// Submits the connect page's form like a browser.
async fn submit_page(app: &TestApp, url: &str, fields: &[(&str, &str)]) -> (StatusCode, String) {
    let resp = app
        .client
        .post(url)
        .form(fields)
        .send()
        .await
        .expect("submit connect page");
    let status = resp.status();
    (status, resp.text().await.expect("page body"))
}

async fn fetch_page(app: &TestApp, url: &str) -> (StatusCode, String, reqwest::header::HeaderMap) {
    let resp = app.client.get(url).send().await.expect("open connect page");
    let status = resp.status();
    let headers = resp.headers().clone();
    (status, resp.text().await.expect("page body"), headers)
}

db_test!(providers_and_capabilities, |app: TestApp| async move {
    let org = app.org("Caps Inc").await;
    let key = &org.api_key;

    let r = app.get(LIST, LIST, key).await;
    assert_eq!(r.status, StatusCode::OK);
    let ids: Vec<&str> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "hubspot",
            "attio",
            "slack",
            "fireflies",
            "granola",
            "google-calendar",
            "google-mail",
            "posthog",
            "stripe",
            "supabase",
            "clerk",
            "pylon"
        ]
    );
    snap!("list_all_not_connected", scrub(&r.body, &app.base));
    let r = app
        .get(LIST, &format!("{LIST}?connectedOnly=true"), key)
        .await;
    assert_eq!(r.body, json!({"items": []}));

    let r = app.get(CAPS, CAPS, key).await;
    assert_eq!(r.status, StatusCode::OK);
    // Keyed by provider ID at the top level: a client reads `answer[providerId]`.
    assert_eq!(r.body.as_object().unwrap().len(), 12);
    assert_eq!(r.body["google-mail"]["providerId"], "google-mail");
    assert_eq!(r.body["stripe"]["cliName"], "stripe");
    snap!("capabilities_all", scrub(&r.body, &app.base));

    for (asked, id) in [
        ("stripe", "stripe"),
        ("gmail", "google-mail"),
        ("google-mail", "google-mail"),
    ] {
        let r = app
            .get(CAPS, &format!("{CAPS}?provider={asked}"), key)
            .await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body["provider"]["providerId"], id);
    }
    let r = app.get(CAPS, &format!("{CAPS}?provider=stripe"), key).await;
    snap!("capability_stripe", scrub(&r.body, &app.base));
    let r = app.get(CAPS, &format!("{CAPS}?provider=gmail"), key).await;
    assert_eq!(r.body["provider"]["cliName"], "gmail");
    assert_eq!(r.body["provider"]["setupMode"], "browser_session");
    // No sync for Gmail: no sync-status command is offered.
    assert!(!r.body["provider"]["commands"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c.as_str().unwrap().contains("sync-status")));
    snap!("capability_gmail", scrub(&r.body, &app.base));
    let r = app
        .get(CAPS, &format!("{CAPS}?provider=fireflies"), key)
        .await;
    assert_eq!(
        r.body["provider"]["postConnectSteps"][0]["supported"],
        false
    );

    let r = app
        .get(CAPS, &format!("{CAPS}?provider=salesforce"), key)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("capability_unknown_provider", scrub(&r.body, &app.base));
});

db_test!(auth_and_malformed_requests, |app: TestApp| async move {
    let org = app.org("Errors Inc").await;
    let key = &org.api_key;

    let r = app.call(Method::GET, LIST, LIST, None, None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    snap!("unauthorized_missing_key", scrub(&r.body, &app.base));
    let r = app.get(LIST, LIST, "ok_not_a_key").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    snap!("unauthorized_unknown_key", scrub(&r.body, &app.base));
    let r = app
        .call(
            Method::POST,
            CONNECT,
            CONNECT,
            None,
            Some(json!({"provider": "stripe"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    let r = app
        .post(CONNECT, CONNECT, key, Some(json!({"provider": "nope"})))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["details"][0]["path"], json!(["provider"]));
    snap!("connect_invalid_provider", scrub(&r.body, &app.base));
    let r = app
        .post(CONNECT, CONNECT, key, Some(json!({"provider": "gmail"})))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("connect_gmail_alias_refused", scrub(&r.body, &app.base));
    let r = app.post(CONNECT, CONNECT, key, Some(json!({}))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("connect_missing_provider", scrub(&r.body, &app.base));
    let r = app
        .raw(
            Method::POST,
            CONNECT,
            key,
            Some("application/json"),
            "{\"provider\": ",
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    helpers::check_schema("POST", CONNECT, 400, &r.body);
    assert!(r.body["error"].as_str().unwrap().contains("malformed JSON"));
    let r = app
        .raw(
            Method::POST,
            CONNECT,
            key,
            Some("text/plain"),
            "provider=stripe",
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    helpers::check_schema("POST", CONNECT, 400, &r.body);
    snap!("connect_wrong_content_type", scrub(&r.body, &app.base));
    let r = app
        .post(
            CONNECT,
            CONNECT,
            key,
            Some(json!({"provider": "stripe", "config": "sk_x"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["details"][0]["path"], json!(["config"]));

    // Required fields are named; empty ones and unknown ones too.
    let r = app
        .post(
            CONNECT,
            CONNECT,
            key,
            Some(json!({"provider": "posthog", "config": {"apiKey": "phx_1"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let error = r.body["error"].as_str().unwrap();
    assert!(
        error.contains("`region` is required") && error.contains("`projectId` is required"),
        "{error}"
    );
    snap!("connect_missing_fields", scrub(&r.body, &app.base));
    let r = app
        .post(
            CONNECT,
            CONNECT,
            key,
            Some(json!({"provider": "supabase", "config": {"projectUrl": " ", "serviceRoleKey": "x", "extra": 1}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!(
        "connect_empty_and_unknown_fields",
        scrub(&r.body, &app.base)
    );
    let r = app
        .post(
            CONNECT,
            CONNECT,
            key,
            Some(json!({"provider": "hubspot", "config": {"apiKey": "x"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!(
        "connect_browser_only_with_config",
        scrub(&r.body, &app.base)
    );

    let r = app
        .post(
            DISCONNECT,
            DISCONNECT,
            key,
            Some(json!({"provider": "stripe"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body["success"], false);
    snap!("disconnect_not_connected", scrub(&r.body, &app.base));
    let r = app
        .post(DISCONNECT, DISCONNECT, key, Some(json!({"provider": "x"})))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = app
        .call(
            Method::POST,
            DISCONNECT,
            DISCONNECT,
            None,
            Some(json!({"provider": "stripe"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    let r = app.get(SYNC, &format!("{SYNC}?provider=stripe"), key).await;
    assert_eq!(r.status, StatusCode::OK);
    snap!("sync_status_not_connected", scrub(&r.body, &app.base));
    let r = app.get(SYNC, SYNC, key).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("sync_status_missing_provider", scrub(&r.body, &app.base));

    let r = app
        .get(
            STATUS,
            &format!("{STATUS}?sessionId={}", uuid::Uuid::new_v4()),
            key,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    snap!("status_unknown_session", scrub(&r.body, &app.base));

    let r = app
        .post(
            SETUP,
            SETUP,
            key,
            Some(json!({"provider": "stripe", "step": "webhooks"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    snap!("setup_step_not_connected", scrub(&r.body, &app.base));
    let r = app
        .post(
            SETUP,
            SETUP,
            key,
            Some(json!({"provider": "stripe", "step": "mappings"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("setup_step_unknown_step", scrub(&r.body, &app.base));
    let r = app
        .post(
            SETUP,
            SETUP,
            key,
            Some(json!({"provider": "fireflies", "step": "webhooks"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("setup_step_not_supported", scrub(&r.body, &app.base));
    let r = app
        .post(SETUP, SETUP, key, Some(json!({"provider": "stripe"})))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["details"][0]["path"], json!(["step"]));

    // A read-only key reads but cannot change connections.
    let ro = admin::create_key(&app.db, &org.organization_id, None, true)
        .await
        .unwrap();
    let r = app.get(LIST, LIST, &ro.api_key).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = app
        .post(
            CONNECT,
            CONNECT,
            &ro.api_key,
            Some(json!({"provider": "stripe", "config": {"apiKey": "sk_1"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    snap!("connect_read_only_key", scrub(&r.body, &app.base));
    let r = app
        .post(
            DISCONNECT,
            DISCONNECT,
            &ro.api_key,
            Some(json!({"provider": "stripe"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
});

db_test!(
    direct_connect_disconnect_and_secrecy,
    |app: TestApp| async move {
        let org = app.org("Direct Inc").await;
        let key = &org.api_key;
        let secret = "fireflies-secret-value-123";
        let r = app
            .post(
                CONNECT,
                CONNECT,
                key,
                Some(json!({"provider": "fireflies", "config": {"apiKey": secret}})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body["connected"], true);
        assert_eq!(r.body["alreadyConnected"], false);
        snap!("connect_direct", scrub(&r.body, &app.base));
        let first_id = r.body["connectionId"].clone();
        let r = app
            .post(
                CONNECT,
                CONNECT,
                key,
                Some(json!({"provider": "fireflies", "config": {"apiKey": "other"}})),
            )
            .await;
        assert_eq!(r.body["alreadyConnected"], true);
        assert_eq!(r.body["connectionId"], first_id);

        // Encrypted at rest, never returned.
        let row = integration_connection::Entity::find()
            .filter(integration_connection::Column::Provider.eq("fireflies"))
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        let sealed = row.credentials_ciphertext.clone().unwrap();
        assert!(!sealed.contains("other") && !sealed.contains(secret));
        assert!(app
            .state
            .secrets
            .decrypt(&sealed)
            .unwrap()
            .contains("other"));
        let r = app
            .get(LIST, &format!("{LIST}?connectedOnly=true"), key)
            .await;
        assert!(!r.body.to_string().contains("other"));
        assert_eq!(r.body["items"][0]["syncStatus"], "NO_SYNC");
        snap!("list_connected_only", scrub(&r.body, &app.base));
        let r = app
            .get(SYNC, &format!("{SYNC}?provider=fireflies"), key)
            .await;
        assert_eq!(r.body["status"], "connected");
        assert_eq!(r.body["syncs"], json!([]));

        let r = app
            .post(
                DISCONNECT,
                DISCONNECT,
                key,
                Some(json!({"provider": "fireflies"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
        snap!("disconnect_ok", scrub(&r.body, &app.base));
        let r = app
            .get(LIST, &format!("{LIST}?connectedOnly=true"), key)
            .await;
        assert_eq!(r.body["items"], json!([]));
        let r = app
            .post(
                DISCONNECT,
                DISCONNECT,
                key,
                Some(json!({"provider": "fireflies"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
    }
);

db_test!(connect_page_end_to_end, |app: TestApp| async move {
    let org = app.org("Browser Inc").await;
    let key = &org.api_key;

    // Browser-only provider: the page's authorization step.
    let r = app
        .post(
            CONNECT,
            CONNECT,
            key,
            Some(json!({"provider": "google-mail"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["alreadyConnected"], false);
    snap!("connect_session", scrub(&r.body, &app.base));
    let session = r.body["sessionId"].as_str().unwrap().to_string();
    let url = r.body["connectUrl"].as_str().unwrap().to_string();
    assert_eq!(url, format!("{}/connect/{session}", app.base));
    let r = app
        .get(STATUS, &format!("{STATUS}?sessionId={session}"), key)
        .await;
    assert_eq!(
        r.body,
        json!({"status": "pending", "provider": "google-mail"})
    );
    snap!("status_pending", scrub(&r.body, &app.base));

    let (status, html, headers) = fetch_page(&app, &url).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert_eq!(headers["x-frame-options"], "DENY");
    assert!(html.contains("Connect Gmail"));
    assert!(html.contains("email messages"));
    assert!(html.contains("value=\"authorize\""));
    assert!(html.contains(&format!("action=\"/connect/{session}\"")));
    let (status, html) = submit_page(&app, &url, &[("action", "authorize")]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("data-status=\"connected\""), "{html}");
    let r = app
        .get(STATUS, &format!("{STATUS}?sessionId={session}"), key)
        .await;
    assert_eq!(r.body["status"], "connected");
    snap!("status_connected", scrub(&r.body, &app.base));
    // The finished page keeps showing its result.
    let (_, html, _) = fetch_page(&app, &url).await;
    assert!(html.contains("data-status=\"connected\""));
    let r = app
        .get(LIST, &format!("{LIST}?connectedOnly=true"), key)
        .await;
    assert_eq!(r.body["items"][0]["id"], "google-mail");
    assert_eq!(r.body["items"][0]["status"], "connected");
    // Connecting again says so.
    let r = app
        .post(
            CONNECT,
            CONNECT,
            key,
            Some(json!({"provider": "google-mail"})),
        )
        .await;
    assert_eq!(r.body["alreadyConnected"], true);

    // Direct provider through the page: fields, a refused empty submit, then success.
    let r = app
        .post(CONNECT, CONNECT, key, Some(json!({"provider": "pylon"})))
        .await;
    let session = r.body["sessionId"].as_str().unwrap().to_string();
    let url = r.body["connectUrl"].as_str().unwrap().to_string();
    let (_, html, _) = fetch_page(&app, &url).await;
    assert!(html.contains("name=\"apiToken\"") && html.contains("type=\"password\""));
    let (status, html) = submit_page(&app, &url, &[("action", "connect"), ("apiToken", " ")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(html.contains("must not be empty"));
    let r = app
        .get(STATUS, &format!("{STATUS}?sessionId={session}"), key)
        .await;
    assert_eq!(r.body["status"], "pending");
    let (status, html) = submit_page(
        &app,
        &url,
        &[("action", "connect"), ("apiToken", "pylon-token")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Pylon is connected"));
    let r = app
        .get(STATUS, &format!("{STATUS}?sessionId={session}"), key)
        .await;
    assert_eq!(r.body["status"], "connected");

    // Declining fails the session with an error.
    let r = app
        .post(CONNECT, CONNECT, key, Some(json!({"provider": "hubspot"})))
        .await;
    let session = r.body["sessionId"].as_str().unwrap().to_string();
    let url = r.body["connectUrl"].as_str().unwrap().to_string();
    let (_, html) = submit_page(&app, &url, &[("action", "deny")]).await;
    assert!(html.contains("data-status=\"failed\""));
    let r = app
        .get(STATUS, &format!("{STATUS}?sessionId={session}"), key)
        .await;
    assert_eq!(r.body["status"], "failed");
    snap!("status_failed", scrub(&r.body, &app.base));

    // Unknown and malformed page ids.
    let (status, _, _) = fetch_page(
        &app,
        &format!("{}/connect/{}", app.base, uuid::Uuid::new_v4()),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = fetch_page(&app, &format!("{}/connect/not-a-session", app.base)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Another organization sees none of it.
    let other = app.org("Other Inc").await;
    let r = app
        .get(
            STATUS,
            &format!("{STATUS}?sessionId={session}"),
            &other.api_key,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = app
        .get(LIST, &format!("{LIST}?connectedOnly=true"), &other.api_key)
        .await;
    assert_eq!(r.body["items"], json!([]));
    let r = app
        .post(
            DISCONNECT,
            DISCONNECT,
            &other.api_key,
            Some(json!({"provider": "google-mail"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = app
        .get(LIST, &format!("{LIST}?connectedOnly=true"), key)
        .await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 2);
});

db_test!(session_expiry, |app: TestApp| async move {
    let org = app.org("Expiry Inc").await;
    let key = &org.api_key;
    let r = app
        .post(CONNECT, CONNECT, key, Some(json!({"provider": "slack"})))
        .await;
    let session = r.body["sessionId"].as_str().unwrap().to_string();
    let url = r.body["connectUrl"].as_str().unwrap().to_string();

    // Still pending at 29 minutes, expired after 30 (injected "now").
    let now = Utc::now();
    let v = sessions::status(
        &app.db,
        &org.organization_id,
        &session,
        now + chrono::Duration::minutes(29),
    )
    .await
    .unwrap();
    assert_eq!(v.session.status, SessionStatus::Pending);
    let v = sessions::status(
        &app.db,
        &org.organization_id,
        &session,
        now + chrono::Duration::minutes(31),
    )
    .await
    .unwrap();
    assert_eq!(v.session.status, SessionStatus::Expired);
    let r = app
        .get(STATUS, &format!("{STATUS}?sessionId={session}"), key)
        .await;
    assert_eq!(r.body["status"], "expired");
    snap!("status_expired", scrub(&r.body, &app.base));
    let (status, html, _) = fetch_page(&app, &url).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("data-status=\"expired\""));
    let (_, html) = submit_page(&app, &url, &[("action", "authorize")]).await;
    assert!(html.contains("data-status=\"expired\""));
    let r = app
        .get(LIST, &format!("{LIST}?connectedOnly=true"), key)
        .await;
    assert_eq!(r.body["items"], json!([]));

    // The scheduler's sweep expires sessions nobody looks at.
    let r = app
        .post(CONNECT, CONNECT, key, Some(json!({"provider": "attio"})))
        .await;
    let id = r.body["sessionId"].as_str().unwrap().to_string();
    let row = connect_session::Entity::find_by_id(id.clone())
        .one(&app.db)
        .await
        .unwrap()
        .unwrap();
    let mut row = row.into_active_model();
    row.expires_at = Set(Utc::now() - chrono::Duration::seconds(1));
    row.update(&app.db).await.unwrap();
    assert_eq!(sessions::expire_due(&app.db, Utc::now()).await.unwrap(), 1);
    let row = connect_session::Entity::find_by_id(id)
        .one(&app.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, SessionStatus::Expired);
});

db_test!(connection_limit, |app: TestApp| async move {
    let org = org_with_limit(&app, "Small Co", Plan::Free, Some(1)).await;
    let key = &org.api_key;
    // A session opened under the limit...
    let r = app
        .post(CONNECT, CONNECT, key, Some(json!({"provider": "slack"})))
        .await;
    let url = r.body["connectUrl"].as_str().unwrap().to_string();
    let session = r.body["sessionId"].as_str().unwrap().to_string();
    let r = app
        .post(
            CONNECT,
            CONNECT,
            key,
            Some(json!({"provider": "clerk", "config": {"secretKey": "sk_c"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = app
        .post(
            CONNECT,
            CONNECT,
            key,
            Some(json!({"provider": "granola", "config": {"apiKey": "g"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.body,
        json!({
            "error": r.body["error"],
            "code": "plan_connection_limit_exceeded",
            "feature": "integration_connections",
            "plan": "free",
            "currentConnections": 1,
            "limit": 1
        })
    );
    snap!("connect_limit_exceeded", scrub(&r.body, &app.base));
    let r = app
        .post(CONNECT, CONNECT, key, Some(json!({"provider": "hubspot"})))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(r.body["code"], "plan_connection_limit_exceeded");
    // ...fails when completed over it.
    let (_, html) = submit_page(&app, &url, &[("action", "authorize")]).await;
    assert!(html.contains("data-status=\"failed\""));
    let r = app
        .get(STATUS, &format!("{STATUS}?sessionId={session}"), key)
        .await;
    assert_eq!(r.body["status"], "failed");
    assert!(r.body["error"]
        .as_str()
        .unwrap()
        .contains("free plan allows 1"));
    // Replacing an existing connection's credentials is not a new connection.
    let r = app
        .post(
            CONNECT,
            CONNECT,
            key,
            Some(json!({"provider": "clerk", "config": {"secretKey": "sk_d"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["alreadyConnected"], true);
    // Concurrent connects of different providers cannot both pass the limit.
    let race = org_with_limit(&app, "Race Co", Plan::Free, Some(1)).await;
    let connects = ["fireflies", "granola", "pylon", "clerk"].map(|p| {
        let field = match p {
            "pylon" => "apiToken",
            "clerk" => "secretKey",
            _ => "apiKey",
        };
        let client = app.client.clone();
        let url = format!("{}{CONNECT}", app.base);
        let key = race.api_key.clone();
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(key)
                .json(&json!({"provider": p, "config": {field: "k"}}))
                .send()
                .await
                .unwrap()
                .status()
        })
    });
    let mut statuses = Vec::new();
    for c in connects {
        statuses.push(c.await.unwrap());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::OK || *s == StatusCode::FORBIDDEN),
        "{statuses:?}"
    );
    // Unlimited plans have no limit.
    let big = org_with_limit(&app, "Big Co", Plan::Enterprise, None).await;
    for p in ["fireflies", "granola", "pylon"] {
        let field = if p == "pylon" { "apiToken" } else { "apiKey" };
        let r = app
            .post(
                CONNECT,
                CONNECT,
                &big.api_key,
                Some(json!({"provider": p, "config": {field: "k"}})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
    }
});

db_test!(crm_mappings_step, |app: TestApp| async move {
    let org = app.org("CRM Inc").await;
    let key = &org.api_key;
    let r = app
        .post(CONNECT, CONNECT, key, Some(json!({"provider": "hubspot"})))
        .await;
    let url = r.body["connectUrl"].as_str().unwrap().to_string();
    submit_page(&app, &url, &[("action", "authorize")]).await;

    let r = app
        .post(
            SETUP,
            SETUP,
            key,
            Some(json!({"provider": "hubspot", "step": "mappings"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["status"], "config_required");
    snap!("mappings_config_required", scrub(&r.body, &app.base));
    let mappings = json!([
        {"pipelineId": "default", "stageId": "closedwon", "status": "won"},
        {"pipelineId": "default", "stageId": "closedlost", "status": "lost"}
    ]);
    let r = app
        .post(SETUP, SETUP, key, Some(json!({"provider": "hubspot", "step": "mappings", "config": {"mappings": mappings}})))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["status"], "configured");
    snap!("mappings_configured", scrub(&r.body, &app.base));
    let r = app
        .post(
            SETUP,
            SETUP,
            key,
            Some(json!({"provider": "hubspot", "step": "mappings"})),
        )
        .await;
    assert_eq!(r.body["mappings"], mappings);
    assert_eq!(r.body["pipelines"], json!(["default"]));
    let r = app
        .post(
            SETUP,
            SETUP,
            key,
            Some(json!({"provider": "hubspot", "step": "mappings", "config": {"mappings": [{"pipelineId": "", "stageId": "s", "status": "maybe"}]}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("mappings_invalid", scrub(&r.body, &app.base));
});

async fn wait_for_sync(app: &TestApp, key: &str, want: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = app.get(SYNC, &format!("{SYNC}?provider=stripe"), key).await;
        let done = r.body["syncs"]
            .as_array()
            .is_some_and(|s| !s.is_empty() && s.iter().all(|m| m["status"] == want));
        if done {
            return r.body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {want} sync within 10 s of connect: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn customer_by_name(app: &TestApp, org: &str, name: &str) -> customer::Model {
    customer::Entity::find()
        .filter(customer::Column::OrganizationId.eq(org))
        .filter(customer::Column::Name.eq(name))
        .one(&app.db)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("customer {name}"))
}

fn signed(secret: &str, body: &str, at: i64) -> String {
    format!("t={at},v1={}", webhook::sign(secret, at, body.as_bytes()))
}

async fn post_webhook(
    app: &TestApp,
    connection: &str,
    signature: Option<&str>,
    body: &str,
) -> helpers::Reply {
    let path = format!("/api/webhooks/stripe/{connection}");
    let mut req = app
        .client
        .post(format!("{}{path}", app.base))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(s) = signature {
        req = req.header("Stripe-Signature", s);
    }
    let reply = helpers::read(req.send().await.unwrap()).await;
    helpers::check_schema("POST", WEBHOOK, reply.status.as_u16(), &reply.body);
    reply
}

async fn stripe_sync_and_webhook(backend: Backend) {
    let api_key = format!("sk_test_{}", uuid::Uuid::new_v4().simple());
    let fake = FakeStripe::start(
        &api_key,
        Account {
            customers: vec![
                customer_json(
                    "cus_A",
                    Some("Acme Incorporated"),
                    Some("billing@acme.com"),
                    None,
                ),
                customer_json("cus_B", Some("Beta LLC"), Some("x@beta.io"), Some("ext-42")),
                customer_json("cus_C", Some("Gamma"), Some("ops@gamma.dev"), None),
                customer_json("cus_D", None, None, None),
                customer_json("cus_E", Some("Epsilon"), Some("e@epsilon.org"), None),
            ],
            subscriptions: vec![
                subscription_json("sub_A1", "cus_A", "active", &[(5000, 2, "month")]),
                subscription_json("sub_A2", "cus_A", "past_due", &[(120_000, 1, "year")]),
                subscription_json("sub_B1", "cus_B", "trialing", &[(9900, 1, "month")]),
                subscription_json("sub_C1", "cus_C", "canceled", &[(3000, 1, "month")]),
                subscription_json("sub_E1", "cus_E", "active", &[(1200, 1, "week")]),
            ],
            requests: vec![],
        },
    )
    .await;
    let config = IntegrationsConfig {
        stripe_api_base: fake.base.clone(),
        sync_interval: Duration::from_secs(3600),
        scheduler_tick: Duration::from_millis(100),
        // The test starts and stops the scheduler itself.
        runs_scheduler: false,
    };
    let Some(app) = helpers::spawn_with(backend, config.clone()).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let org = app.org("Billing Inc").await;
    let key = &org.api_key;
    // Existing customers: one matched by domain (keeps its name), one by externalId.
    for (name, domain, ext) in [
        ("Acme", Some("acme.com"), None),
        ("Beta", None, Some("ext-42")),
    ] {
        customer::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org.organization_id.clone()),
            name: Set(name.to_string()),
            domain: Set(domain.map(str::to_string)),
            external_id: Set(ext.map(str::to_string)),
            billing_status: Set(BillingStatus::None),
            mrr_cents: Set(0),
            traits: Set(json!({})),
            last_activity_at: Set(None),
            events_counted: sea_orm::ActiveValue::Set(0),
            created_at: Set(Utc::now()),
            updated_at: Set(Utc::now()),
        }
        .insert(&app.db)
        .await
        .unwrap();
    }

    let r = app
        .post(
            CONNECT,
            CONNECT,
            key,
            Some(json!({"provider": "stripe", "config": {"apiKey": api_key}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let connection = r.body["connectionId"].as_str().unwrap().to_string();
    let r = app.get(SYNC, &format!("{SYNC}?provider=stripe"), key).await;
    snap!("stripe_sync_pending", scrub(&r.body, &app.base));

    let scheduler = scheduler::spawn(app.db.clone(), app.state.secrets.clone(), config.clone());
    let body = wait_for_sync(&app, key, "SUCCESS").await;
    snap!("stripe_sync_success", scrub(&body, &app.base));
    let requests = fake.requests();
    assert!(
        requests.iter().any(|r| r.contains("starting_after=cus_B")),
        "{requests:?}"
    );
    assert!(requests
        .iter()
        .any(|r| r.starts_with("/v1/subscriptions") && r.contains("status=all")));

    let acme = customer_by_name(&app, &org.organization_id, "Acme").await;
    assert_eq!(
        (acme.billing_status.as_str(), acme.mrr_cents),
        ("PAYING", 10_000 + 10_000)
    );
    let beta = customer_by_name(&app, &org.organization_id, "Beta").await;
    assert_eq!(
        (beta.billing_status.as_str(), beta.mrr_cents),
        ("TRIALING", 0)
    );
    let gamma = customer_by_name(&app, &org.organization_id, "Gamma").await;
    assert_eq!(gamma.domain.as_deref(), Some("gamma.dev"));
    assert_eq!(
        (gamma.billing_status.as_str(), gamma.mrr_cents),
        ("CHURNED", 0)
    );
    let d = customer_by_name(&app, &org.organization_id, "cus_D").await;
    assert_eq!(d.billing_status, BillingStatus::None);
    let epsilon = customer_by_name(&app, &org.organization_id, "Epsilon").await;
    assert_eq!(epsilon.mrr_cents, 1200 * 52 / 12);
    // A customer the sync created is found by its name, as agents look it up.
    let r = crate::tools::tool(&app, key, "svc_list_customers", json!({"name": "epsilon"})).await;
    assert_eq!(crate::tools::field(&r, "name"), ["Epsilon"], "{}", r.body);
    let history = billing_change::Entity::find()
        .filter(billing_change::Column::CustomerId.eq(acme.id.clone()))
        .all(&app.db)
        .await
        .unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(
        (history[0].origin.as_str(), history[0].mrr_cents),
        ("stripe", 20_000)
    );

    let r = app
        .get(LIST, &format!("{LIST}?connectedOnly=true"), key)
        .await;
    assert_eq!(r.body["items"][0]["syncStatus"], "SUCCESS");
    assert!(r.body["items"][0]["lastDataReceivedAt"].is_string());
    snap!("list_stripe_synced", scrub(&r.body, &app.base));

    // The webhooks step: URL, events, header; then the signing secret.
    let r = app
        .post(
            SETUP,
            SETUP,
            key,
            Some(json!({"provider": "stripe", "step": "webhooks"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body["url"],
        format!("{}/api/webhooks/stripe/{connection}", app.base)
    );
    let shown = r.body.to_string().replace(&connection, "[connectionId]");
    snap!(
        "webhooks_config_required",
        scrub(&serde_json::from_str(&shown).unwrap(), &app.base)
    );
    let r = app
        .post(SETUP, SETUP, key, Some(json!({"provider": "stripe", "step": "webhooks", "config": {"webhookSecret": "nope"}})))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("webhooks_invalid_secret", scrub(&r.body, &app.base));
    let secret = "whsec_test_secret_0123456789";
    // A delivery before the secret is stored is refused: the connection is not set up (409).
    let early = json!({"type": "customer.updated", "data": {"object": {}}}).to_string();
    let r = post_webhook(
        &app,
        &connection,
        Some(&signed(secret, &early, Utc::now().timestamp())),
        &early,
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    snap!("webhook_before_its_secret", scrub(&r.body, &app.base));
    let r = app
        .post(SETUP, SETUP, key, Some(json!({"provider": "stripe", "step": "webhooks", "config": {"webhookSecret": secret}})))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!r.body.to_string().contains(secret));
    snap!("webhooks_configured", scrub(&r.body, &app.base));

    // Gamma resubscribes; Beta starts paying. Only the verified delivery changes anything.
    fake.set_subscription_status("sub_C1", "active");
    fake.set_subscription_status("sub_B1", "active");
    let event = |sub: &str, customer: &str| {
        json!({"id": "evt_1", "object": "event", "type": "customer.subscription.updated",
               "data": {"object": {"id": sub, "object": "subscription", "customer": customer}}})
        .to_string()
    };
    let beta_event = event("sub_B1", "cus_B");
    let now = Utc::now().timestamp();
    let r = post_webhook(
        &app,
        &connection,
        Some(&signed("whsec_wrong", &beta_event, now)),
        &beta_event,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("webhook_bad_signature", scrub(&r.body, &app.base));
    let r = post_webhook(
        &app,
        &connection,
        Some(&signed(secret, &beta_event, now - 301)),
        &beta_event,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("webhook_stale_signature", scrub(&r.body, &app.base));
    let tampered = beta_event.replace("cus_B", "cus_A");
    let r = post_webhook(
        &app,
        &connection,
        Some(&signed(secret, &beta_event, now)),
        &tampered,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = post_webhook(&app, &connection, None, &beta_event).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("webhook_missing_signature", scrub(&r.body, &app.base));
    let beta = customer_by_name(&app, &org.organization_id, "Beta").await;
    assert_eq!(
        beta.billing_status,
        BillingStatus::Trialing,
        "a refused delivery changed nothing"
    );

    let gamma_event = event("sub_C1", "cus_C");
    let r = post_webhook(
        &app,
        &connection,
        Some(&signed(secret, &gamma_event, now)),
        &gamma_event,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    snap!("webhook_ok", scrub(&r.body, &app.base));
    let gamma = customer_by_name(&app, &org.organization_id, "Gamma").await;
    assert_eq!(
        (gamma.billing_status.as_str(), gamma.mrr_cents),
        ("PAYING", 3000)
    );
    // Concurrent deliveries of one new Stripe customer (a retry racing the first attempt)
    // create it once.
    let theta = json!({"id": "evt_2", "object": "event", "type": "customer.created",
        "data": {"object": customer_json("cus_T", Some("Theta"), Some("t@theta.io"), Some("ext-theta"))}})
    .to_string();
    let theta_signature = signed(secret, &theta, now);
    let deliveries =
        (0..8).map(|_| post_webhook(&app, &connection, Some(&theta_signature), &theta));
    for r in futures::future::join_all(deliveries).await {
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }
    let thetas = customer::Entity::find()
        .filter(customer::Column::OrganizationId.eq(org.organization_id.clone()))
        .filter(customer::Column::ExternalId.eq("ext-theta"))
        .all(&app.db)
        .await
        .unwrap();
    assert_eq!(
        thetas.len(),
        1,
        "one customer for concurrent deliveries: {thetas:?}"
    );
    let ignored = json!({"type": "invoice.paid", "data": {"object": {}}}).to_string();
    let r = post_webhook(
        &app,
        &connection,
        Some(&signed(secret, &ignored, now)),
        &ignored,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["handled"], false);
    let r = post_webhook(
        &app,
        &uuid::Uuid::new_v4().to_string(),
        Some(&signed(secret, &ignored, now)),
        &ignored,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Another organization: a wrong key fails its sync visibly, and it sees nothing of the first.
    let other = app.org("Other Billing").await;
    let r = app
        .post(
            CONNECT,
            CONNECT,
            &other.api_key,
            Some(json!({"provider": "stripe", "config": {"apiKey": "sk_test_wrong"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_ne!(r.body["connectionId"], connection.as_str());
    let body = wait_for_sync(&app, &other.api_key, "FAILED").await;
    assert!(body["syncs"][0]["errorMessage"]
        .as_str()
        .unwrap()
        .contains("Invalid API Key"));
    snap!("stripe_sync_failed", scrub(&body, &app.base));
    let r = app
        .get(LIST, &format!("{LIST}?connectedOnly=true"), &other.api_key)
        .await;
    assert_eq!(r.body["items"][0]["syncStatus"], "FAILED");
    let theirs = customer::Entity::find()
        .filter(customer::Column::OrganizationId.eq(other.organization_id.clone()))
        .all(&app.db)
        .await
        .unwrap();
    assert!(theirs.is_empty());
    let r = app
        .post(
            DISCONNECT,
            DISCONNECT,
            &other.api_key,
            Some(json!({"provider": "stripe"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = app.get(SYNC, &format!("{SYNC}?provider=stripe"), key).await;
    assert_eq!(
        r.body["status"], "connected",
        "the first organization keeps its connection"
    );

    // Disconnecting removes the scheduled sync and the webhook endpoint.
    scheduler.stop().await;
    let r = app
        .post(
            DISCONNECT,
            DISCONNECT,
            key,
            Some(json!({"provider": "stripe"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = post_webhook(
        &app,
        &connection,
        Some(&signed(secret, &gamma_event, now)),
        &gamma_event,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // A sweep after the disconnect finds nothing to run, and leaves no job behind.
    scheduler::tick(&app.db, &app.state.secrets, &config)
        .await
        .unwrap();
    assert_eq!(
        scheduler::claim(&app.db, Utc::now() + chrono::Duration::days(1))
            .await
            .unwrap()
            .map(|j| j.id),
        None
    );
}

mod stripe_sync_and_webhook {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::stripe_sync_and_webhook(super::Backend::Sqlite).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::stripe_sync_and_webhook(super::Backend::Postgres).await;
    }
}

db_test!(sync_job_claimed_once, |app: TestApp| async move {
    let org = app.org("Lease Inc").await;
    let connection = uuid::Uuid::new_v4().to_string();
    let now = Utc::now();
    scheduler::schedule_sync(&app.db, &org.organization_id, &connection, now)
        .await
        .unwrap();
    // Concurrent claims (as from several instances): exactly one wins.
    let (a, b) = tokio::join!(
        scheduler::claim(&app.db, now),
        scheduler::claim(&app.db, now)
    );
    let won: Vec<_> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
    assert_eq!(won.len(), 1);
    assert_eq!(won[0].id, scheduler::sync_job_id(&connection));
    assert!(scheduler::claim(&app.db, now).await.unwrap().is_none());
    // A lease that ran out (its instance died) is claimed again.
    let later = now + chrono::Duration::minutes(11);
    let again = scheduler::claim(&app.db, later)
        .await
        .unwrap()
        .expect("reclaimed");
    assert_eq!(again.attempts, 2);
});

/// A serving instance runs the scheduler in its background work: a due job of a connection that
/// no longer exists is claimed and dropped without anyone ticking.
async fn serving_instance_runs_the_scheduler(backend: Backend) {
    let config = IntegrationsConfig {
        scheduler_tick: Duration::from_millis(100),
        ..Default::default()
    };
    let Some(app) = helpers::spawn_with(backend, config).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let org = app.org("Ticking Inc").await;
    let connection = uuid::Uuid::new_v4().to_string();
    scheduler::schedule_sync(&app.db, &org.organization_id, &connection, Utc::now())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = entity::job::Entity::find_by_id(scheduler::sync_job_id(&connection))
            .one(&app.db)
            .await
            .unwrap();
        if left.is_none() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the instance's scheduler never took the due job"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

mod serving_instance_runs_the_scheduler {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::serving_instance_runs_the_scheduler(super::Backend::Sqlite).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::serving_instance_runs_the_scheduler(super::Backend::Postgres).await;
    }
}

// Setup steps of one connection from many clients at once: every call is answered, and the
// stored mappings are one caller's whole set, never a mix.
db_test!(
    concurrent_mapping_steps_keep_one_whole_set,
    |app: TestApp| async move {
        let org = app.org("CRM Race").await;
        let key = &org.api_key;
        let r = app
            .post(CONNECT, CONNECT, key, Some(json!({"provider": "hubspot"})))
            .await;
        let url = r.body["connectUrl"].as_str().unwrap().to_string();
        submit_page(&app, &url, &[("action", "authorize")]).await;
        let sets: Vec<Value> = (0..16)
            .map(|i| {
                json!([
                    {"pipelineId": format!("p{i}"), "stageId": "won", "status": "won"},
                    {"pipelineId": format!("p{i}"), "stageId": "lost", "status": "lost"}
                ])
            })
            .collect();
        let calls = sets.iter().map(|mappings| {
            app.post(
                SETUP,
                SETUP,
                key,
                Some(json!({"provider": "hubspot", "step": "mappings", "config": {"mappings": mappings}})),
            )
        });
        for r in futures::future::join_all(calls).await {
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
            assert_eq!(r.body["status"], "configured");
        }
        let r = app
            .post(
                SETUP,
                SETUP,
                key,
                Some(json!({"provider": "hubspot", "step": "mappings"})),
            )
            .await;
        assert!(sets.contains(&r.body["mappings"]), "{}", r.body["mappings"]);
    }
);
