//! Operations endpoints: liveness (`/healthz`) and readiness (`/readyz`).

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::TestApp;

async fn get(app: &TestApp, path: &str) -> (StatusCode, Value) {
    let r = app
        .client
        .get(format!("{}{path}", app.base))
        .send()
        .await
        .expect("request");
    let status = r.status();
    (status, r.json().await.expect("json body"))
}

crate::db_test!(readyz_follows_the_database, |app: TestApp| async move {
    // Ready once the messageId window is loaded, at once on an empty database.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while get(&app, "/readyz").await.0 != StatusCode::OK && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        get(&app, "/readyz").await,
        (StatusCode::OK, json!({"status": "ready"}))
    );
    assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);

    // The database goes away (its pool closed under the running server): not ready, still live.
    app.db.clone().close().await.expect("close the pool");
    let (status, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body, json!({"error": "the database cannot be reached"}));
    assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);
});

/// The value of the first sample of `name` whose labels include every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| labels.iter().all(|label| l.contains(label)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

crate::db_test!(
    metrics_count_requests_ingest_and_queues,
    |app: TestApp| async move {
        let org = app.org("Metrics Co").await;
        let ok = app
            .get("/api/automations", "/api/automations", &org.api_key)
            .await;
        assert_eq!(ok.status, 200);
        let refused = app
            .client
            .get(format!("{}/api/automations", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
        let unknown = app
            .client
            .get(format!("{}/no/such/route", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(unknown.status(), 404);
        let batch = json!({
            "visitorId": "7d1f1c56-2b8f-4a43-9a8e-3f7f6f0b6d11",
            "events": [{"type": "custom", "eventName": "metrics_test", "url": "https://a.example/", "path": "/"}],
        });
        let r = app
            .client
            .post(format!("{}/api/i/v1/{}/events", app.base, org.public_key))
            .json(&batch)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        app.settle().await;

        let resp = app
            .client
            .get(format!("{}/metrics", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        let text = resp.text().await.unwrap();

        let requests = "custintel_http_requests_total";
        for labels in [
            &[r#"operation="listAutomations""#, r#"status="200""#][..],
            &[r#"operation="listAutomations""#, r#"status="401""#],
            &[r#"operation="other""#, r#"status="404""#],
        ] {
            let n =
                sample(&text, requests, labels).unwrap_or_else(|| panic!("{labels:?} in\n{text}"));
            assert!(n >= 1.0, "{labels:?}: {n}");
        }
        assert!(sample(
            &text,
            "custintel_http_request_duration_seconds_count",
            &[r#"operation="listAutomations""#]
        )
        .is_some_and(|n| n >= 2.0));
        // Process-wide counters: other tests in this binary add to them too.
        assert!(sample(
            &text,
            "custintel_ingest_events_total",
            &[r#"outcome="journaled""#]
        )
        .is_some_and(|n| n >= 1.0));
        assert!(sample(
            &text,
            "custintel_ingest_events_total",
            &[r#"outcome="applied""#]
        )
        .is_some());
        assert!(
            sample(&text, "custintel_ingest_effects_lag_seconds_count", &[])
                .is_some_and(|n| n >= 1.0)
        );
        assert!(sample(
            &text,
            "custintel_ingest_effects_lag_seconds_bucket",
            &[r#"le="+Inf""#]
        )
        .is_some());
        assert_eq!(
            sample(
                &text,
                "custintel_background_queue",
                &[r#"queue="ingest_journal_batches""#]
            ),
            Some(0.0)
        );
        assert!(
            sample(&text, "custintel_db_pool_connections", &[r#"state="max""#])
                .is_some_and(|n| n >= 1.0)
        );
        // Memory by part: the process's own pages (heap and all) exceed the parts it holds.
        let memory = |part: &str| {
            sample(
                &text,
                "custintel_memory_bytes",
                &[&format!(r#"part="{part}""#)],
            )
            .unwrap_or_else(|| panic!("memory part {part} in\n{text}"))
        };
        let own = memory("process_own");
        assert!(own > 1_048_576.0, "{own}");
        memory("mapped_database");
        for part in ["search_index", "message_window"] {
            assert!(
                memory(part) <= own,
                "{part} is part of the process's own memory"
            );
        }
        // Counts only: no organization, key or event name shows.
        assert!(!text.contains(&org.organization_id));
        assert!(!text.contains(&org.public_key));
        assert!(!text.contains("metrics_test"));
    }
);

crate::db_test!(
    a_database_outage_answers_503_on_every_kind_of_route,
    |app: TestApp| async move {
        let org = app.org("Outage Co").await;
        app.db.clone().close().await.expect("close the pool");
        let bearer = format!("Bearer {}", org.api_key);
        let ingest = format!("/api/i/v1/{}/events", org.public_key);
        // (method, route as described, path, body)
        let calls = [
            ("GET", "/api/automations", None),
            (
                "POST",
                "/api/signals",
                Some(
                    json!({"kind": "EVENT_MATCH", "name": "Down", "definition": {
                    "grain": "user", "subjectResolver": "email", "eventNames": ["x"],
                    "propertyConditions": [], "conditionMode": "ALL"}}),
                ),
            ),
            ("GET", "/api/tools", None),
            (
                "POST",
                "/api/tools/call",
                Some(json!({"tool": "svc_list_customers", "input": {}})),
            ),
            ("GET", "/api/integrations", None),
            ("POST", "/api/validate-api-key", None),
            (
                "POST",
                ingest.as_str(),
                Some(json!({"source": "server", "events": [{"type": "custom",
                    "eventName": "e", "url": "server://x", "path": "/", "userId": "u"}]})),
            ),
            (
                "POST",
                "/mcp",
                Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
            ),
            ("GET", "/readyz", None),
        ];
        let mut answers = serde_json::Map::new();
        for (method, path, body) in calls {
            let mut req = app
                .client
                .request(method.parse().unwrap(), format!("{}{path}", app.base))
                .header("authorization", &bearer)
                .header("accept", "application/json, text/event-stream");
            if let Some(body) = body {
                req = req.json(&body);
            }
            let r = req.send().await.expect("request");
            let status = r.status();
            let retry_after = r.headers().get("retry-after").cloned();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            assert_eq!(
                status,
                StatusCode::SERVICE_UNAVAILABLE,
                "{method} {path}: {body}"
            );
            assert!(
                retry_after.is_some(),
                "{method} {path}: a 503 without Retry-After"
            );
            let route = if path == ingest {
                "/api/i/v1/{publicKey}/events"
            } else {
                path
            };
            if !matches!(route, "/mcp" | "/readyz") {
                crate::helpers::check_schema(method, route, 503, &body);
            }
            answers.insert(
                format!("{method} {route}"),
                json!({
                    "retryAfter": retry_after.and_then(|v| v.to_str().ok().map(str::to_string)),
                    "body": body,
                }),
            );
        }
        crate::snap!("database_outage_503_bodies", Value::Object(answers));
    }
);

/// Until its `messageId` window is loaded, an instance takes no batch at once (they wait in
/// the writer's queue), so it does not call itself ready: a load balancer keeps sending to the
/// instances that are. The load is held back here (SQLite: a file where the window's directory
/// goes, which readiness names as the reason; PostgreSQL: the journal table locked), then let
/// go.
async fn readyz_waits_for_the_message_window(backend: crate::helpers::Backend) {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let Some((state, _tmp)) = crate::helpers::state_without_server(backend).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let org = crate::helpers::org_in(&state.db, "Window Co").await;
    let mut blocker = None;
    let mut held_lock = None;
    match custintel::db::sqlite_file(&state.db).await.expect("file") {
        Some(file) => {
            let path = custintel::db::beside(&file, "window");
            std::fs::write(&path, b"not a directory").expect("block the window's directory");
            blocker = Some(path);
        }
        None => {
            let txn = state.db.begin().await.expect("a transaction");
            txn.execute_unprepared("LOCK TABLE ingest_journal IN ACCESS EXCLUSIVE MODE")
                .await
                .expect("lock the journal");
            held_lock = Some(txn);
        }
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(custintel::http::server::serve(
        state.clone(),
        "127.0.0.1:0",
        move |addr| {
            let _ = tx.send(addr);
        },
    ));
    let base = format!("http://{}", rx.await.expect("bound address"));
    let client = reqwest::Client::new();
    let readyz = || async {
        let r = client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .expect("readyz");
        let status = r.status();
        let retry_after = r.headers().get("retry-after").cloned();
        (status, retry_after, r.json::<Value>().await.expect("json"))
    };
    // Loading; on SQLite, once the first try failed, why it cannot load (the blocked directory).
    let cannot_load = blocker.as_ref().map(|path| {
        format!(
            "the messageId window cannot be loaded (retrying): could not rebuild the messageId \
             window: could not open the messageId window in {}: ",
            path.display()
        )
    });
    let not_ready = |body: &Value| {
        let error = body["error"].as_str().unwrap_or_default();
        error == "the messageId window is loading"
            || cannot_load.as_ref().is_some_and(|c| error.starts_with(c))
    };
    let mut named = None;
    for round in 0..20 {
        let (status, retry_after, body) = readyz().await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(not_ready(&body), "{body}");
        assert!(retry_after.is_some(), "a 503 says when to retry");
        if body["error"] != "the messageId window is loading" {
            named = Some(body);
        } else if round == 0 && cannot_load.is_none() {
            crate::snap!("readyz_503_window_loading", body);
        }
        if named.is_some() || (cannot_load.is_none() && round >= 4) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    match (&blocker, &named) {
        (Some(path), Some(body)) => {
            let error = body["error"].as_str().unwrap_or_default();
            let shown = error.replace(&path.display().to_string(), "<window directory>");
            crate::snap!("readyz_503_window_cannot_load", json!({ "error": shown }));
        }
        (Some(_), None) => panic!("readiness did not name why the window cannot load"),
        _ => {}
    }
    let health = client.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK, "live while not ready");

    // A batch sent meanwhile waits, and is acknowledged once the window is loaded.
    let batch = tokio::spawn({
        let client = client.clone();
        let url = format!("{base}/api/i/v1/{}/events", org.public_key);
        async move {
            client
                .post(url)
                .json(&json!({
                    "visitorId": "7d1f1c56-2b8f-4a43-9a8e-3f7f6f0b6d11",
                    "events": [{
                        "type": "pageview",
                        "url": "https://app.example.com/pricing",
                        "path": "/pricing",
                        "messageId": "m-window-1"
                    }]
                }))
                .send()
                .await
                .expect("batch")
                .status()
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !batch.is_finished(),
        "no batch is taken before the window is loaded"
    );

    if let Some(path) = blocker {
        std::fs::remove_file(path).expect("unblock the window's directory");
    }
    drop(held_lock);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, _, body) = readyz().await;
        if status == StatusCode::OK {
            assert_eq!(body, json!({"status": "ready"}));
            break;
        }
        assert!(not_ready(&body), "{body}");
        assert!(
            std::time::Instant::now() < deadline,
            "not ready 10 s after the window could load"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(batch.await.expect("batch task"), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_the_message_window_sqlite() {
    readyz_waits_for_the_message_window(crate::helpers::Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_the_message_window_postgres() {
    readyz_waits_for_the_message_window(crate::helpers::Backend::Postgres).await;
}
