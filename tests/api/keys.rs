//! `POST /api/validate-api-key`.

use reqwest::{Method, StatusCode};

use crate::{db_test, helpers::TestApp, snap};

db_test!(validate_api_key, |app: TestApp| async move {
    let org = app.org("Keys Inc").await;
    let r = app
        .post(
            "/api/validate-api-key",
            "/api/validate-api-key",
            &org.api_key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["valid"], true);
    assert_eq!(r.body["organizationId"], org.organization_id.as_str());
    snap!("validate_key_ok", r.body);

    let r = app
        .post(
            "/api/validate-api-key",
            "/api/validate-api-key",
            "ok_nope",
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.body["valid"], false);
    snap!("validate_key_invalid", r.body);

    let r = app
        .call(
            Method::POST,
            "/api/validate-api-key",
            "/api/validate-api-key",
            None,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.body["valid"], false);
    snap!("validate_key_missing", r.body);

    let extra =
        custintel::ops::admin::create_key(&app.db, &org.organization_id, Some("ci".into()), false)
            .await
            .unwrap();
    custintel::ops::admin::disable_key(&app.db, &extra.key_id)
        .await
        .unwrap();
    let r = app
        .post(
            "/api/validate-api-key",
            "/api/validate-api-key",
            &extra.api_key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.body["error"], "this API key is disabled");
});
