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
