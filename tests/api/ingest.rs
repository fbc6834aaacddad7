//! The Ingest API: every event type, attribution rules, partial failures, request-level
//! failures, rate limits, CORS, dedup, sensitive fields, identity resolution, isolation.

use std::io::Write;

use custintel::ops::admin::{self, NewOrganization, Plan};
use entity::{
    billing_change,
    customer::{self, BillingStatus},
    engagement_session, event, user, visitor,
};
use reqwest::{Method, StatusCode};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{json, Value};

use crate::helpers::{check_schema, read, Reply, TestApp};
use crate::{db_test, snap};

const ROUTE: &str = "/api/i/v1/{publicKey}/events";
const VISITOR: &str = "7d1f1c56-2b8f-4a43-9a8e-3f7f6f0b6d11";
const SESSION: &str = "0b3c9a4e-6f57-4f0e-8a8e-1c2d3e4f5a6b";

impl TestApp {
    /// Posts a batch as JSON, checks the answer against the description and waits until its
    /// effects are applied.
    pub async fn ingest(&self, public_key: &str, body: Value) -> Reply {
        let reply = self.ingest_unapplied(public_key, body).await;
        self.settle().await;
        reply
    }

    /// [`TestApp::ingest`] without waiting for the applier.
    pub async fn ingest_unapplied(&self, public_key: &str, body: Value) -> Reply {
        let resp = self
            .client
            .post(format!("{}/api/i/v1/{public_key}/events", self.base))
            .json(&body)
            .send()
            .await
            .expect("request");
        let reply = read(resp).await;
        check_schema("post", ROUTE, reply.status.as_u16(), &reply.body);
        reply
    }

    /// Posts raw bytes with chosen headers and checks the answer against the description.
    pub async fn ingest_raw(
        &self,
        public_key: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Reply {
        let mut req = self
            .client
            .post(format!("{}/api/i/v1/{public_key}/events", self.base))
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let reply = read(req.send().await.expect("request")).await;
        check_schema("post", ROUTE, reply.status.as_u16(), &reply.body);
        self.settle().await;
        reply
    }

    pub async fn events_of(&self, org_id: &str) -> Vec<event::Model> {
        event::Entity::find()
            .filter(event::Column::OrganizationId.eq(org_id))
            .order_by_asc(event::Column::OccurredAt)
            .all(&self.db)
            .await
            .expect("events")
    }
}

fn page(kind: &str, extra: Value) -> Value {
    let mut e = json!({
        "type": kind,
        "url": "https://app.example.com/pricing",
        "path": "/pricing",
    });
    if let (Some(obj), Value::Object(more)) = (e.as_object_mut(), extra) {
        obj.extend(more);
    }
    e
}

fn every_type() -> Vec<Value> {
    vec![
        page(
            "pageview",
            json!({"title": "Pricing", "referrer": "https://google.com", "utm": {"source": "ads", "campaign": "q4"}}),
        ),
        page(
            "custom",
            json!({"eventName": "report_exported", "properties": {"format": "csv", "rows": 12, "ok": true, "note": null}}),
        ),
        page(
            "form",
            json!({"formId": "contact", "formFields": {"company": "Acme"}}),
        ),
        page(
            "identify",
            json!({"email": "Ada@Acme.com", "userId": "u_1", "traits": {"name": "Ada"}}),
        ),
        page(
            "engagement",
            json!({"activeTimeMs": 1200, "totalTimeMs": 3000, "sessionId": SESSION}),
        ),
        page(
            "calendar",
            json!({"provider": "cal.com", "eventType": "demo", "startTime": "2026-11-20T10:00:00Z", "endTime": "2026-11-20T10:30:00Z", "duration": 30, "isRecurring": false}),
        ),
        page(
            "stage",
            json!({"stage": "activated", "properties": {"feature": "reports"}}),
        ),
        page("billing", json!({"status": "paid", "customerId": "acct_1"})),
    ]
}

db_test!(every_event_type_is_stored, |app: TestApp| async move {
    let org = app.org("Acme").await;
    let r = app
        .ingest(
            &org.public_key,
            json!({"visitorId": VISITOR, "events": every_type()}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    snap!("ingest_ok", r.body);
    let rows = app.events_of(&org.organization_id).await;
    let mut types: Vec<&str> = rows.iter().map(|e| e.event_type.as_str()).collect();
    types.sort();
    assert_eq!(
        types,
        [
            "billing",
            "calendar",
            "custom",
            "engagement",
            "form",
            "identify",
            "pageview",
            "stage"
        ]
    );
    let custom = rows.iter().find(|e| e.event_type == "custom").unwrap();
    assert_eq!(custom.event_name.as_deref(), Some("report_exported"));
    assert_eq!(custom.data["properties"]["rows"], json!(12));
    assert_eq!(custom.url, "https://app.example.com/pricing");
    assert_eq!(custom.path, "/pricing");
    let pageview = rows.iter().find(|e| e.event_type == "pageview").unwrap();
    assert_eq!(pageview.data["title"], json!("Pricing"));
    assert_eq!(pageview.data["utm"]["campaign"], json!("q4"));
    assert_eq!(pageview.visitor_id.as_deref(), Some(VISITOR));
    // The server receive time is kept; without a timestamp the event happened then.
    assert_eq!(pageview.occurred_at, pageview.received_at);
});

db_test!(invalid_events_fail_alone, |app: TestApp| async move {
    let org = app.org("Acme").await;
    let events = vec![
        page("pageview", json!({})),                          // 0 ok
        json!({"url": "https://a.example.com", "path": "/"}), // 1 no type
        page("teleport", json!({})),                          // 2 unknown type
        page("pageview", json!({"colour": "red"})),           // 3 unknown field
        json!({"type": "pageview", "path": "/"}),             // 4 no url
        page("custom", json!({})),                            // 5 no eventName
        page(
            "custom",
            json!({"eventName": "x", "properties": {"a": {"b": 1}}}),
        ), // 6 nested property
        page("form", json!({"formFields": "nope"})),          // 7 fields not an object
        page("identify", json!({"traits": {}})),              // 8 neither email nor userId
        page("identify", json!({"email": "not-an-email"})),   // 9 bad email
        page(
            "engagement",
            json!({"activeTimeMs": 1, "totalTimeMs": 2, "sessionId": "abc"}),
        ), // 10
        page(
            "engagement",
            json!({"activeTimeMs": -1, "totalTimeMs": 2, "sessionId": SESSION}),
        ), // 11
        page(
            "engagement",
            json!({"totalTimeMs": 2, "sessionId": SESSION}),
        ), // 12 missing active
        page("calendar", json!({"provider": "zoom"})),        // 13 bad provider
        page(
            "calendar",
            json!({"provider": "calendly", "inviteeEmail": "a@b.co"}),
        ), // 14 client invitee
        page(
            "calendar",
            json!({"provider": "calendly", "startTime": "tomorrow"}),
        ), // 15 bad time
        page("stage", json!({"stage": "discovered"})),        // 16 inferred only
        page("billing", json!({"status": "paid"})),           // 17 no account
        page("billing", json!({"status": "refunded", "customerId": "a"})), // 18 bad status
        page("pageview", json!({"timestamp": "yesterday"})),  // 19 bad timestamp
        page("custom", json!({"eventName": "signup"})),       // 20 ok
        json!("pageview"),                                    // 21 not an object
    ];
    let r = app
        .ingest(
            &org.public_key,
            json!({"visitorId": VISITOR, "events": events}),
        )
        .await;
    assert_eq!(r.status, StatusCode::MULTI_STATUS, "{}", r.body);
    assert_eq!(r.body["processed"], json!(2));
    let indexes: Vec<i64> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["index"].as_i64().unwrap())
        .collect();
    assert_eq!(indexes, (1..=19).chain([21]).collect::<Vec<i64>>());
    snap!("ingest_partial", r.body);
    assert_eq!(app.events_of(&org.organization_id).await.len(), 2);
});

db_test!(server_attribution_rules, |app: TestApp| async move {
    let org = app.org("Acme").await;
    let server = |event: Value| json!({"source": "server", "events": [event]});
    let srv = |kind: &str, extra: Value| {
        let mut e = page(kind, extra);
        e["url"] = json!("server://backend/jobs");
        e["path"] = json!("/jobs");
        e
    };
    // Rule 1: custom events need one of email, userId, fingerprint, customerId.
    let r = app
        .ingest(
            &org.public_key,
            server(srv("custom", json!({"eventName": "invoice_sent"}))),
        )
        .await;
    assert_eq!(r.status, StatusCode::MULTI_STATUS);
    snap!("server_custom_unattributed", r.body);
    for who in [
        json!({"email": "ops@acme.com"}),
        json!({"userId": "u_9"}),
        json!({"fingerprint": "fp_1"}),
        json!({"customerId": "acct_9"}),
    ] {
        let mut extra = json!({"eventName": "invoice_sent"});
        extra
            .as_object_mut()
            .unwrap()
            .extend(who.as_object().unwrap().clone());
        let r = app
            .ingest(&org.public_key, server(srv("custom", extra)))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{who}: {}", r.body);
    }
    // Rule 2: identify needs email or userId.
    let r = app
        .ingest(
            &org.public_key,
            server(srv("identify", json!({"traits": {"name": "x"}}))),
        )
        .await;
    assert_eq!(r.status, StatusCode::MULTI_STATUS);
    let r = app
        .ingest(
            &org.public_key,
            server(srv("identify", json!({"userId": "u_10"}))),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    // Rule 3: billing needs customerId or stripeCustomerId.
    let r = app
        .ingest(
            &org.public_key,
            server(srv("billing", json!({"status": "trialing"}))),
        )
        .await;
    assert_eq!(r.status, StatusCode::MULTI_STATUS);
    let r = app
        .ingest(
            &org.public_key,
            server(srv(
                "billing",
                json!({"status": "trialing", "stripeCustomerId": "cus_S1"}),
            )),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    // A server batch needs no visitorId; a server calendar event may carry the invitee.
    let r = app
        .ingest(
            &org.public_key,
            server(srv(
                "calendar",
                json!({"provider": "calendly", "inviteeEmail": "x@y.co", "inviteeName": "X"}),
            )),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // The customer created from a Stripe id alone is named after it.
    let c = customer::Entity::find()
        .filter(customer::Column::OrganizationId.eq(org.organization_id.as_str()))
        .filter(customer::Column::ExternalId.eq("cus_S1"))
        .one(&app.db)
        .await
        .unwrap()
        .expect("customer from billing");
    assert_eq!(c.name, "cus_S1");
    assert_eq!(c.billing_status, BillingStatus::Trialing);
});

db_test!(request_level_failures, |app: TestApp| async move {
    let org = app.org("Acme").await;
    let ok_batch = json!({"visitorId": VISITOR, "events": [page("pageview", json!({}))]});

    let r = app.ingest("pk_doesnotexist", ok_batch.clone()).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    snap!("ingest_unknown_key", r.body);
    let r = app.ingest("ok_notapublickey", ok_batch.clone()).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // An inactive configuration is refused too.
    let other = app.org("Inactive Co").await;
    use sea_orm::sea_query::Expr;
    entity::tracking_config::Entity::update_many()
        .col_expr(entity::tracking_config::Column::Active, Expr::value(false))
        .filter(entity::tracking_config::Column::OrganizationId.eq(other.organization_id.as_str()))
        .exec(&app.db)
        .await
        .unwrap();
    let r = app.ingest(&other.public_key, ok_batch.clone()).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    let many: Vec<Value> = (0..101).map(|_| page("pageview", json!({}))).collect();
    let r = app
        .ingest(
            &org.public_key,
            json!({"visitorId": VISITOR, "events": many}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("ingest_too_many_events", r.body);

    let r = app
        .ingest_raw(
            &org.public_key,
            &[("content-type", "application/json")],
            b"{\"events\": [".to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .starts_with("malformed JSON"));

    let r = app
        .ingest(
            &org.public_key,
            json!({"events": [page("pageview", json!({}))]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    snap!("ingest_client_without_visitor", r.body);
    let r = app
        .ingest(
            &org.public_key,
            json!({"visitorId": "visitor-1", "events": []}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = app
        .ingest(
            &org.public_key,
            json!({"visitorId": VISITOR, "source": "robot", "events": []}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = app
        .ingest_raw(
            &org.public_key,
            &[("content-type", "application/xml")],
            b"<a/>".to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // Over 1 MiB of body.
    let big = format!(
        "{{\"visitorId\":\"{VISITOR}\",\"events\":[],\"pad\":\"{}\"}}",
        "x".repeat(1_048_576)
    );
    let r = app
        .ingest_raw(
            &org.public_key,
            &[("content-type", "application/json")],
            big.into_bytes(),
        )
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    snap!("ingest_too_large", r.body);

    // A gzip bomb: 50 MiB of zeros in ~50 KiB, refused after 1 MiB of output.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![b' '; 1 << 20];
    for _ in 0..50 {
        gz.write_all(&zeros).unwrap();
    }
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 200_000);
    let r = app
        .ingest_raw(
            &org.public_key,
            &[
                ("content-type", "application/json"),
                ("content-encoding", "gzip"),
            ],
            bomb,
        )
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);

    // Nothing of the refused requests was stored.
    assert!(app.events_of(&org.organization_id).await.is_empty());
});

db_test!(beacons_and_gzip_are_accepted, |app: TestApp| async move {
    let org = app.org("Acme").await;
    let batch = json!({"visitorId": VISITOR, "events": [page("pageview", json!({}))]});
    let r = app
        .ingest_raw(
            &org.public_key,
            &[("content-type", "text/plain;charset=UTF-8")],
            batch.to_string().into_bytes(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(batch.to_string().as_bytes()).unwrap();
    let r = app
        .ingest_raw(
            &org.public_key,
            &[
                ("content-type", "application/json"),
                ("content-encoding", "gzip"),
            ],
            gz.finish().unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(app.events_of(&org.organization_id).await.len(), 2);
});

db_test!(rate_limit_headers_and_429, |app: TestApp| async move {
    let org = admin::create_org(
        &app.db,
        NewOrganization {
            name: "Limited".into(),
            plan: Plan::Free,
            api_call_limit: None,
            connection_limit: None,
            ingest_rate_limit: Some(3),
            tracking_domains: vec!["localhost".into()],
        },
    )
    .await
    .unwrap();
    let batch = json!({"source": "server", "events": []});
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = app.ingest(&org.public_key, batch.clone()).await;
        assert_eq!(r.headers["x-ratelimit-limit"], "3");
        assert!(r.headers.contains_key("x-ratelimit-remaining"));
        assert!(r.headers.contains_key("x-ratelimit-reset"));
        statuses.push((
            r.status,
            r.headers["x-ratelimit-remaining"]
                .to_str()
                .unwrap()
                .to_string(),
            r,
        ));
    }
    assert_eq!(statuses[0].0, StatusCode::OK);
    assert_eq!(statuses[0].1, "2");
    assert_eq!(statuses[2].1, "0");
    let (status, _, last) = &statuses[3];
    assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = last.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    snap!("ingest_rate_limited", last.body);
    // A page of an enabled domain may read the 429 and its `Retry-After` (CORS headers on it).
    let r = app
        .client
        .post(format!("{}/api/i/v1/{}/events", app.base, org.public_key))
        .header("origin", "http://localhost:3000")
        .json(&batch)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://localhost:3000"
    );
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap();
    assert!(exposed.contains("Retry-After"), "{exposed}");
    // Errors carry the headers too.
    let r = app.ingest("pk_unknown", batch.clone()).await;
    assert!(r.headers.contains_key("x-ratelimit-limit"));
    // The allowance refills.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let r = app.ingest(&org.public_key, batch).await;
    assert_eq!(r.status, StatusCode::OK);
});

db_test!(
    cors_allows_exactly_enabled_domains,
    |app: TestApp| async move {
        let org = admin::create_org(
            &app.db,
            NewOrganization {
                name: "Web Co".into(),
                plan: Plan::Pro,
                api_call_limit: None,
                connection_limit: None,
                ingest_rate_limit: None,
                tracking_domains: vec!["www.acme.com".into(), "localhost".into()],
            },
        )
        .await
        .unwrap();
        let url = format!("{}/api/i/v1/{}/events", app.base, org.public_key);
        let preflight = |origin: &'static str| {
            app.client
                .request(Method::OPTIONS, url.clone())
                .header("origin", origin)
                .header("access-control-request-method", "POST")
                .header("access-control-request-headers", "content-type")
                .send()
        };
        for origin in [
            "https://www.acme.com",
            "http://www.acme.com:8080",
            "http://localhost:3000",
        ] {
            let r = preflight(origin).await.unwrap();
            assert_eq!(r.status(), StatusCode::NO_CONTENT, "{origin}");
            let h = r.headers();
            assert_eq!(h["access-control-allow-origin"], origin);
            assert_eq!(h["access-control-allow-methods"], "POST, OPTIONS");
            assert_eq!(h["access-control-allow-headers"], "Content-Type");
        }
        for origin in [
            "https://evil.example",
            "https://acme.com",
            "https://www.acme.com.evil.example",
            "null",
        ] {
            let r = preflight(origin).await.unwrap();
            assert_eq!(r.status(), StatusCode::FORBIDDEN, "{origin}");
            assert!(!r.headers().contains_key("access-control-allow-origin"));
        }
        let batch = json!({"visitorId": VISITOR, "events": [page("pageview", json!({}))]});
        let post = |origin: &'static str| {
            app.client
                .post(url.clone())
                .header("origin", origin)
                .json(&batch)
                .send()
        };
        let r = read(post("https://www.acme.com").await.unwrap()).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(
            r.headers["access-control-allow-origin"],
            "https://www.acme.com"
        );
        let r = read(post("https://evil.example").await.unwrap()).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        check_schema("post", ROUTE, 403, &r.body);
        assert!(!r.headers.contains_key("access-control-allow-origin"));
        snap!("ingest_origin_refused", r.body);
        // Without an Origin header the caller is a server: allowed.
        let r = app.ingest(&org.public_key, batch.clone()).await;
        assert_eq!(r.status, StatusCode::OK);
        assert!(!r.headers.contains_key("access-control-allow-origin"));
        assert_eq!(app.events_of(&org.organization_id).await.len(), 2);
        // An unknown key's preflight is refused.
        let r = app
            .client
            .request(
                Method::OPTIONS,
                format!("{}/api/i/v1/pk_nope/events", app.base),
            )
            .header("origin", "https://www.acme.com")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
    }
);

db_test!(message_ids_deduplicate, |app: TestApp| async move {
    let org = app.org("Acme").await;
    let other = app.org("Other").await;
    let e = |id: &str| page("pageview", json!({"messageId": id}));
    let r = app
        .ingest(
            &org.public_key,
            json!({"visitorId": VISITOR, "events": [e("m1"), e("m1"), e("m2")]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["processed"], json!(3));
    // A retry of the same batch stores nothing new but is acknowledged.
    let r = app
        .ingest(
            &org.public_key,
            json!({"visitorId": VISITOR, "events": [e("m1"), e("m2"), e("m3")]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["processed"], json!(3));
    let ids: Vec<Option<String>> = app
        .events_of(&org.organization_id)
        .await
        .into_iter()
        .map(|e| e.message_id)
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    // Another organization's messageIds are its own.
    let r = app
        .ingest(
            &other.public_key,
            json!({"visitorId": VISITOR, "events": [e("m1")]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(app.events_of(&other.organization_id).await.len(), 1);
    // Events without a messageId are never deduplicated.
    let plain = page("pageview", json!({}));
    app.ingest(
        &org.public_key,
        json!({"visitorId": VISITOR, "events": [plain.clone(), plain]}),
    )
    .await;
    assert_eq!(app.events_of(&org.organization_id).await.len(), 5);
});

db_test!(
    sensitive_form_fields_are_not_stored,
    |app: TestApp| async move {
        let org = app.org("Acme").await;
        let form = page(
            "form",
            json!({"formId": "checkout", "formFields": {
                "email": "ada@acme.com",
                "password": "hunter2",
                "confirm_password": "hunter2",
                "cardNumber": "4111 1111 1111 1111",
                "cc-cvc": "123",
                "ssn": "123-45-6789",
                "iban": "DE89370400440532013000",
                "pin": "1234",
                "api_token": "tok_abc",
                "notes": "4242424242424242",
                "shipping": "express",
                "address": {"city": "Paris", "secret": "x"},
            }}),
        );
        let r = app
            .ingest(
                &org.public_key,
                json!({"visitorId": VISITOR, "events": [form]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
        let rows = app.events_of(&org.organization_id).await;
        assert_eq!(
            rows[0].data,
            json!({"formId": "checkout", "formFields": {
                "email": "ada@acme.com",
                "shipping": "express",
                "address": {"city": "Paris"},
            }})
        );
        let text = rows[0].data.to_string();
        for secret in ["hunter2", "4111", "123-45-6789", "DE89", "tok_abc", "4242"] {
            assert!(!text.contains(secret), "{secret} stored: {text}");
        }
    }
);

db_test!(
    visitor_becomes_user_becomes_customer,
    |app: TestApp| async move {
        let org = app.org("Acme").await;
        let key = &org.public_key;
        let t0 = 1_790_000_000_000i64;
        // 1. An anonymous visitor browses.
        let r = app
        .ingest(key, json!({"visitorId": VISITOR, "events": [page("pageview", json!({"timestamp": t0}))]}))
        .await;
        assert_eq!(r.status, StatusCode::OK);
        // 2. It identifies: a user with an account.
        let r = app
        .ingest(
            key,
            json!({"visitorId": VISITOR, "events": [page("identify", json!({
                "timestamp": t0 + 1_000,
                "email": "ada@acme.com", "userId": "u_ada", "traits": {"name": "Ada", "plan": "pro"},
                "customerId": "acct_acme", "customerTraits": {"name": "Acme Inc", "domain": "Acme.com", "seats": 40},
            }))]}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let u = user::Entity::find()
            .filter(user::Column::OrganizationId.eq(org.organization_id.as_str()))
            .filter(user::Column::ExternalId.eq("u_ada"))
            .one(&app.db)
            .await
            .unwrap()
            .expect("user");
        assert_eq!(u.email.as_deref(), Some("ada@acme.com"));
        assert_eq!(u.name.as_deref(), Some("Ada"));
        assert_eq!(u.stage, "signed_up");
        assert_eq!(u.traits["plan"], json!("pro"));
        let c = customer::Entity::find()
            .filter(customer::Column::OrganizationId.eq(org.organization_id.as_str()))
            .filter(customer::Column::ExternalId.eq("acct_acme"))
            .one(&app.db)
            .await
            .unwrap()
            .expect("customer");
        assert_eq!(c.name, "Acme Inc");
        assert_eq!(c.domain.as_deref(), Some("acme.com"));
        assert_eq!(c.traits["seats"], json!(40));
        assert_eq!(u.customer_id.as_deref(), Some(c.id.as_str()));
        let v = visitor::Entity::find()
            .filter(visitor::Column::VisitorId.eq(VISITOR))
            .filter(visitor::Column::OrganizationId.eq(org.organization_id.as_str()))
            .one(&app.db)
            .await
            .unwrap()
            .expect("visitor");
        assert_eq!(v.user_id.as_deref(), Some(u.id.as_str()));

        // 3. Later batches of the visitor are the user's and the account's.
        let r = app
        .ingest(
            key,
            json!({"visitorId": VISITOR, "events": [
                page("custom", json!({"timestamp": t0 + 5_000, "eventName": "report_exported"})),
                page("stage", json!({"timestamp": t0 + 6_000, "stage": "activated"})),
                page("engagement", json!({"timestamp": t0 + 7_000, "activeTimeMs": 1000, "totalTimeMs": 2000, "sessionId": SESSION})),
                page("engagement", json!({"timestamp": t0 + 8_000, "activeTimeMs": 500, "totalTimeMs": 1000, "sessionId": SESSION})),
            ]}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
        let rows = app.events_of(&org.organization_id).await;
        assert_eq!(
            rows[0].user_id, None,
            "events before identify stay anonymous"
        );
        for e in &rows[1..] {
            assert_eq!(
                e.user_id.as_deref(),
                Some(u.id.as_str()),
                "{}",
                e.event_type
            );
            assert_eq!(
                e.customer_id.as_deref(),
                Some(c.id.as_str()),
                "{}",
                e.event_type
            );
        }
        let u = user::Entity::find_by_id(u.id.clone())
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(u.stage, "activated");
        let last = chrono::DateTime::from_timestamp_millis(t0 + 8_000).unwrap();
        assert_eq!(u.last_activity_at, Some(last));
        let sessions = engagement_session::Entity::find()
            .filter(engagement_session::Column::OrganizationId.eq(org.organization_id.as_str()))
            .all(&app.db)
            .await
            .unwrap();
        assert_eq!(sessions.len(), 1);
        assert_eq!(
            (sessions[0].active_time_ms, sessions[0].total_time_ms),
            (1500, 3000)
        );

        // 4. Engagement after 30 idle minutes starts a new session.
        let r = app
        .ingest(
            key,
            json!({"visitorId": VISITOR, "events": [
                page("engagement", json!({"timestamp": t0 + 8_000 + 31 * 60_000, "activeTimeMs": 10, "totalTimeMs": 20, "sessionId": SESSION})),
            ]}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
        let sessions = engagement_session::Entity::find()
            .filter(engagement_session::Column::OrganizationId.eq(org.organization_id.as_str()))
            .order_by_asc(engagement_session::Column::StartedAt)
            .all(&app.db)
            .await
            .unwrap();
        assert_eq!(sessions.len(), 2);
        assert_eq!(sessions[1].active_time_ms, 10);

        // 5. Billing moves the account; an older event does not move last activity back.
        let r = app
        .ingest(
            key,
            json!({"source": "server", "events": [
                page("billing", json!({"timestamp": t0 + 9_000, "status": "paid", "customerId": "acct_acme"})),
            ]}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
        let c = customer::Entity::find_by_id(c.id.clone())
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c.billing_status, BillingStatus::Paying);
        assert_eq!(
            c.last_activity_at,
            chrono::DateTime::from_timestamp_millis(t0 + 8_000 + 31 * 60_000)
        );
        let history = billing_change::Entity::find()
            .filter(billing_change::Column::CustomerId.eq(c.id.as_str()))
            .all(&app.db)
            .await
            .unwrap();
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].billing_status, BillingStatus::Paying);

        // 6. userIdentity attributes a whole batch of another device.
        let r = app
            .ingest(
                key,
                json!({"visitorId": "11111111-2222-4333-8444-555555555555",
                   "userIdentity": {"email": "ADA@acme.com"},
                   "events": [page("pageview", json!({}))]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
        let rows = app.events_of(&org.organization_id).await;
        let last_row = rows
            .iter()
            .find(|e| e.visitor_id.as_deref() == Some("11111111-2222-4333-8444-555555555555"))
            .unwrap();
        assert_eq!(last_row.user_id.as_deref(), Some(u.id.as_str()));
        assert_eq!(last_row.customer_id.as_deref(), Some(c.id.as_str()));

        // 7. customerIdentity attributes a batch to an account, created when unseen and named
        //    after its externalId without a name.
        let r = app
            .ingest(
                key,
                json!({"source": "server", "customerIdentity": {"customerId": "acct_new"},
                   "events": [page("custom", json!({"eventName": "seat_added"}))]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let n = customer::Entity::find()
            .filter(customer::Column::OrganizationId.eq(org.organization_id.as_str()))
            .filter(customer::Column::ExternalId.eq("acct_new"))
            .one(&app.db)
            .await
            .unwrap()
            .expect("customer from customerIdentity");
        assert_eq!(n.name, "acct_new");
    }
);

db_test!(
    email_only_identify_is_discovered,
    |app: TestApp| async move {
        let org = app.org("Acme").await;
        let r = app
        .ingest(
            &org.public_key,
            json!({"visitorId": VISITOR, "events": [page("identify", json!({"email": "lead@corp.io"}))]}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
        let u = user::Entity::find()
            .filter(user::Column::Email.eq("lead@corp.io"))
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(u.stage, "discovered");
        // Identified later with a userId: signed up, same user.
        app.ingest(
        &org.public_key,
        json!({"visitorId": VISITOR, "events": [page("identify", json!({"email": "lead@corp.io", "userId": "u_lead"}))]}),
    )
    .await;
        let users = user::Entity::find()
            .filter(user::Column::OrganizationId.eq(org.organization_id.as_str()))
            .all(&app.db)
            .await
            .unwrap();
        assert_eq!(users.len(), 1);
        assert_eq!(users[0].stage, "signed_up");
        assert_eq!(users[0].external_id.as_deref(), Some("u_lead"));
    }
);

db_test!(organizations_are_isolated, |app: TestApp| async move {
    let a = app.org("A").await;
    let b = app.org("B").await;
    let identify = json!({"visitorId": VISITOR, "events": [page("identify", json!({"userId": "u_1", "email": "x@a.com", "customerId": "acct_1"}))]});
    assert_eq!(
        app.ingest(&a.public_key, identify.clone()).await.status,
        StatusCode::OK
    );
    // B's same visitor id, user id and account id are B's own records.
    let later = json!({"visitorId": VISITOR, "events": [page("pageview", json!({}))]});
    assert_eq!(
        app.ingest(&b.public_key, later).await.status,
        StatusCode::OK
    );
    let b_rows = app.events_of(&b.organization_id).await;
    assert_eq!(b_rows.len(), 1);
    assert_eq!(
        b_rows[0].user_id, None,
        "B must not see A's identified visitor"
    );
    assert_eq!(
        app.ingest(&b.public_key, identify).await.status,
        StatusCode::OK
    );
    let users = user::Entity::find()
        .filter(user::Column::ExternalId.eq("u_1"))
        .all(&app.db)
        .await
        .unwrap();
    assert_eq!(users.len(), 2);
    assert_ne!(users[0].organization_id, users[1].organization_id);
    let customers = customer::Entity::find()
        .filter(customer::Column::ExternalId.eq("acct_1"))
        .all(&app.db)
        .await
        .unwrap();
    assert_eq!(customers.len(), 2);
    for e in app.events_of(&b.organization_id).await {
        if let Some(u) = e.user_id {
            let owner = users.iter().find(|x| x.id == u).unwrap();
            assert_eq!(owner.organization_id, b.organization_id);
        }
    }
});

db_test!(sent_at_corrects_client_clock, |app: TestApp| async move {
    let org = app.org("Acme").await;
    // The client's clock is one hour behind: its timestamps are shifted forward by it.
    let now = chrono::Utc::now().timestamp_millis();
    let client_now = now - 3_600_000;
    let r = app
        .ingest(
            &org.public_key,
            json!({"visitorId": VISITOR, "sentAt": client_now,
                   "events": [page("pageview", json!({"timestamp": client_now - 10_000}))]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let row = &app.events_of(&org.organization_id).await[0];
    let expected = row.received_at.timestamp_millis() - 10_000;
    assert!(
        (row.occurred_at.timestamp_millis() - expected).abs() < 2_000,
        "occurred {} expected about {expected}",
        row.occurred_at.timestamp_millis()
    );
});

/// Runs `svc_query` through the gateway (answering 200).
pub async fn query(app: &TestApp, key: &str, sql: &str) -> Value {
    let r = app
        .post(
            "/api/tools/call",
            "/api/tools/call",
            key,
            Some(json!({"tool": "svc_query", "input": {"sql": sql}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body
}

// Read-your-writes: an acknowledged event is in the `events` view as soon as the answer
// arrives, whether or not its effects have been applied yet.
db_test!(
    acknowledged_events_are_visible_at_once,
    |app: TestApp| async move {
        let org = app.org("Visible Co").await;
        let other = app.org("Other Co").await;
        for round in 0..5 {
            let ids: Vec<String> = (0..20).map(|i| format!("r{round}-m{i}")).collect();
            let events: Vec<Value> = ids
                .iter()
                .map(|id| {
                    page(
                        "custom",
                        json!({"eventName": "seat_added", "messageId": id}),
                    )
                })
                .collect();
            let resp = app
                .client
                .post(format!("{}/api/i/v1/{}/events", app.base, org.public_key))
                .json(&json!({"visitorId": VISITOR, "events": events}))
                .send()
                .await
                .expect("ingest");
            assert_eq!(resp.status().as_u16(), 200);
            let body = query(
                &app,
                &org.api_key,
                &format!("SELECT count(*) FROM events WHERE message_id LIKE 'r{round}-%'"),
            )
            .await;
            assert_eq!(body["rows"][0][0], 20, "round {round}: {body}");
        }
        // Another organization sees none of them, journaled or applied.
        let body = query(&app, &other.api_key, "SELECT count(*) FROM events").await;
        assert_eq!(body["rows"][0][0], 0, "{body}");
    }
);

// The journaled half of the `events` view on its own: with no applier running, a journaled
// batch shows in the view with every column (resolved ids still null), for its organization
// only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journaled_events_fill_every_view_column() {
    for backend in [
        crate::helpers::Backend::Sqlite,
        crate::helpers::Backend::Postgres,
    ] {
        let Some((state, _tmp)) = crate::helpers::state_without_server(backend).await else {
            continue;
        };
        let mut orgs = Vec::new();
        for name in ["Journal Co", "Bystander Co"] {
            orgs.push(crate::helpers::org_in(&state.db, name).await);
        }
        let body = json!({"visitorId": VISITOR, "events": [
            page("custom", json!({"eventName": "seat_added", "messageId": "j1",
                                  "timestamp": 1_790_000_000_123i64,
                                  "properties": {"seats": 3}})),
        ]});
        let (batch, errors) = custintel::ingest::validate::validate_batch(
            &orgs[0].organization_id,
            body.to_string().as_bytes(),
            chrono::Utc::now(),
        )
        .expect("valid batch");
        assert!(errors.is_empty());
        custintel::ingest::journal::append(&state.db, &[&batch])
            .await
            .expect("journal");
        let ctx = |org: &str| custintel::tools::ToolContext::new(state.clone(), org.to_string());
        let sql = "SELECT id, message_id, type, event_name, visitor_id, user_id, customer_id, \
                   url, path, occurred_at, received_at, data FROM events";
        let answer = custintel::tools::call(
            ctx(&orgs[0].organization_id),
            "svc_query",
            Some(json!({ "sql": sql })),
        )
        .await
        .expect("query");
        let row = &answer["rows"][0];
        assert_eq!(answer["rowCount"], 1, "{backend:?}: {answer}");
        assert_eq!(row[0], json!(batch.events[0].id));
        assert_eq!(row[1], "j1");
        assert_eq!(row[2], "custom");
        assert_eq!(row[3], "seat_added");
        assert_eq!(row[4], VISITOR);
        assert_eq!(row[5], Value::Null);
        assert_eq!(row[6], Value::Null);
        assert_eq!(row[7], "https://app.example.com/pricing");
        assert_eq!(row[8], "/pricing");
        assert_eq!(row[9], "2026-09-21T14:13:20.123Z", "{backend:?}");
        assert!(
            row[10]
                .as_str()
                .is_some_and(|t| t.ends_with('Z') && t.len() == 24),
            "{backend:?}: received_at {}",
            row[10]
        );
        let data: Value = serde_json::from_str(row[11].as_str().expect("data text")).expect("json");
        assert_eq!(data["properties"]["seats"], 3, "{backend:?}: {data}");
        let answer = custintel::tools::call(
            ctx(&orgs[1].organization_id),
            "svc_query",
            Some(json!({ "sql": "SELECT count(*) FROM events" })),
        )
        .await
        .expect("query");
        assert_eq!(answer["rows"][0][0], 0, "{backend:?}: {answer}");
    }
}

// PostgreSQL behind a load balancer: two instances on one database. Every batch is sent to
// both at once by concurrent clients; each event is stored once, with its effects, whichever
// instance acknowledged it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_store_each_event_once_postgres() {
    let Some(app) = crate::helpers::spawn(crate::helpers::Backend::Postgres).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let second = app.another_instance().await;
    let org = app.org("Two Instances Co").await;
    let bases = [app.base.clone(), second];
    let mut tasks = Vec::new();
    for client_no in 0..8 {
        let (client, bases, key) = (app.client.clone(), bases.clone(), org.public_key.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..10 {
                let events: Vec<Value> = (0..25)
                    .map(|i| {
                        json!({"type": "custom", "eventName": "seat_added",
                               "url": "server://app", "path": "/",
                               "userId": format!("u-{client_no}"),
                               "messageId": format!("c{client_no}-b{n}-e{i}")})
                    })
                    .collect();
                let body = json!({"source": "server", "events": events});
                let sends = bases.iter().map(|base| {
                    client
                        .post(format!("{base}/api/i/v1/{key}/events"))
                        .json(&body)
                        .send()
                });
                for r in futures::future::join_all(sends).await {
                    let r = r.expect("ingest");
                    assert_eq!(r.status().as_u16(), 200);
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    app.settle().await;
    let events = app.events_of(&org.organization_id).await;
    let mut seen = std::collections::HashSet::new();
    for e in &events {
        let id = e.message_id.clone().expect("message id");
        assert!(seen.insert(id.clone()), "{id} stored twice");
        assert!(e.user_id.is_some(), "{id} not linked to its user");
    }
    assert_eq!(seen.len(), 8 * 10 * 25);
    let users = user::Entity::find()
        .filter(user::Column::OrganizationId.eq(org.organization_id.as_str()))
        .all(&app.db)
        .await
        .expect("users");
    assert_eq!(users.len(), 8, "one user per client, not one per instance");
}

// One apply (one group) that identifies a user, moves their stage, bills their account and
// identifies them again with new traits: the second identify must see what the stage and
// billing events wrote (the group keeps the users and accounts it names in memory), not write
// the stage or billing status back as they were before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_group_sees_its_own_identity_writes() {
    for backend in [
        crate::helpers::Backend::Sqlite,
        crate::helpers::Backend::Postgres,
    ] {
        let Some((state, _tmp)) = crate::helpers::state_without_server(backend).await else {
            continue;
        };
        let org = crate::helpers::org_in(&state.db, "Group Co").await;
        let other = crate::helpers::org_in(&state.db, "Other Co").await;
        let batch = |org: &str, events: Value| {
            let body = json!({"visitorId": VISITOR, "events": events});
            let (batch, errors) = custintel::ingest::validate::validate_batch(
                org,
                body.to_string().as_bytes(),
                chrono::Utc::now(),
            )
            .expect("valid batch");
            assert!(errors.is_empty(), "{errors:?}");
            batch
        };
        let identify = |plan: &str, tier: &str| {
            page(
                "identify",
                json!({"userId": "u-1", "email": "ada@acme.com", "traits": {"plan": plan},
                       "customerId": "acct-1", "customerTraits": {"tier": tier}}),
            )
        };
        let batches = [
            // Another organization's user and account under the same keys stay apart.
            batch(&other.organization_id, json!([identify("other", "other")])),
            batch(&org.organization_id, json!([identify("free", "small")])),
            batch(
                &org.organization_id,
                json!([page("stage", json!({"stage": "activated"}))]),
            ),
            batch(
                &org.organization_id,
                json!([page(
                    "billing",
                    json!({"status": "paid", "customerId": "acct-1"})
                )]),
            ),
            batch(&org.organization_id, json!([identify("pro", "large")])),
        ];
        let refs: Vec<_> = batches.iter().collect();
        custintel::ingest::journal::append(&state.db, &refs)
            .await
            .expect("journal");
        let journal = custintel::ingest::journal::Journal::of(&state.db)
            .await
            .expect("journal");
        let mut rules = custintel::engine::evaluate::RulesCache::default();
        // SQLite applies the five in one group; PostgreSQL one organization's at a time (the
        // other's, then these four): either way this organization's four share a group.
        let mut groups = Vec::new();
        while let Some(applied) = custintel::ingest::applier::apply_next(&journal, &mut rules)
            .await
            .expect("apply")
        {
            groups.push(applied.batches);
        }
        let expected = match backend {
            crate::helpers::Backend::Sqlite => vec![5],
            crate::helpers::Backend::Postgres => vec![1, 4],
        };
        assert_eq!(groups, expected, "groups applied");

        let users = user::Entity::find()
            .filter(user::Column::OrganizationId.eq(org.organization_id.as_str()))
            .all(&state.db)
            .await
            .expect("users");
        assert_eq!(users.len(), 1, "{users:?}");
        assert_eq!(
            users[0].stage, "activated",
            "the stage event's write stands"
        );
        assert_eq!(users[0].traits["plan"], "pro");
        let customers = customer::Entity::find()
            .filter(customer::Column::OrganizationId.eq(org.organization_id.as_str()))
            .all(&state.db)
            .await
            .expect("customers");
        assert_eq!(customers.len(), 1, "{customers:?}");
        assert_eq!(customers[0].billing_status, BillingStatus::Paying);
        assert_eq!(customers[0].traits["tier"], "large");
        assert_eq!(
            users[0].customer_id.as_deref(),
            Some(customers[0].id.as_str())
        );

        let theirs = user::Entity::find()
            .filter(user::Column::OrganizationId.eq(other.organization_id.as_str()))
            .all(&state.db)
            .await
            .expect("users");
        assert_eq!(theirs.len(), 1);
        assert_ne!(theirs[0].id, users[0].id);
        assert_eq!(theirs[0].traits["plan"], "other");
        assert_eq!(theirs[0].stage, "signed_up");
    }
}

// The applier inserts events in its own transaction (on SQLite through the connection's raw
// handle, binding each value itself; on PostgreSQL with `COPY`, each value as escaped text):
// what it stores must be what binding each value through the ORM stores, text for text
// (COPY's delimiters and escapes included), nulls as NULL, timestamps in the same format (the
// timeline orders by their text) and to the same microsecond, data byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_rows_store_what_the_orm_stores() {
    use sea_orm::{ActiveModelTrait, ConnectionTrait, Set, Statement};
    for backend in [
        crate::helpers::Backend::Sqlite,
        crate::helpers::Backend::Postgres,
    ] {
        let Some((state, _tmp)) = crate::helpers::state_without_server(backend).await else {
            continue;
        };
        let org = crate::helpers::org_in(&state.db, "Rows Co").await;
        let occurred = chrono::DateTime::parse_from_rfc3339("2026-11-26T07:16:30.123456789Z")
            .expect("time")
            .with_timezone(&chrono::Utc);
        let received = chrono::DateTime::parse_from_rfc3339("2026-11-26T07:16:31Z")
            .expect("time")
            .with_timezone(&chrono::Utc);
        let data = json!({"title": "Caf\u{e9} \"quoted\" \\ back", "n": 1.5, "nested": {"b": [1, null, true]}, "a": ""});
        let row = |id: &str, message_id: Option<&str>, user_id: Option<&str>| {
            custintel::ingest::store::EventRow {
                id: id.into(),
                organization_id: org.organization_id.clone(),
                message_id: message_id.map(Into::into),
                event_type: "custom".into(),
                event_name: Some("plan \"changed\"\n\t\u{e9} \u{1f600}".into()),
                visitor_id: None,
                user_id: user_id.map(Into::into),
                customer_id: Some("acct-1".into()),
                url: "https://app.example.com/a?b=c&d=%20".into(),
                path: "/a\tb\\N\\c\r\n".into(),
                occurred_at: occurred,
                received_at: received,
                data: serde_json::value::to_raw_value(&data).expect("raw"),
            }
        };
        let pairs = [
            (
                "00000000-0000-7000-8000-00000000000a",
                "00000000-0000-7000-8000-00000000000b",
                Some("m-1"),
                Some("u-1"),
            ),
            (
                "00000000-0000-7000-8000-00000000000c",
                "00000000-0000-7000-8000-00000000000d",
                None,
                None,
            ),
        ];
        for (through_insert, through_orm, message_id, user_id) in pairs {
            let txn = custintel::ingest::apply_txn::ApplyTxn::begin(&state.db)
                .await
                .expect("begin");
            txn.insert_events(vec![row(through_insert, message_id, user_id)])
                .await
                .expect("insert_events");
            txn.commit().await.expect("commit");
            let r = row(through_orm, message_id, user_id);
            event::ActiveModel {
                id: Set(r.id),
                organization_id: Set(r.organization_id),
                message_id: Set(r.message_id),
                event_type: Set(r.event_type),
                event_name: Set(r.event_name),
                visitor_id: Set(r.visitor_id),
                user_id: Set(r.user_id),
                customer_id: Set(r.customer_id),
                url: Set(r.url),
                path: Set(r.path),
                occurred_at: Set(r.occurred_at),
                received_at: Set(r.received_at),
                data: Set(data.clone()),
            }
            .insert(&state.db)
            .await
            .expect("orm insert");
            let find = |id: &str| {
                let id = id.to_string();
                let db = state.db.clone();
                async move {
                    event::Entity::find_by_id(id)
                        .one(&db)
                        .await
                        .expect("find")
                        .expect("row")
                }
            };
            let (mut a, b) = (find(through_insert).await, find(through_orm).await);
            a.id = b.id.clone();
            assert_eq!(a, b, "{backend:?}");
            if matches!(backend, crate::helpers::Backend::Sqlite) {
                // SQLite keeps the texts themselves: compare them, with their storage classes.
                let columns = "message_id, event_type, event_name, visitor_id, user_id, \
                               customer_id, url, path, occurred_at, received_at, data";
                let texts = |id: &str| {
                    let sql = format!(
                        "SELECT {} FROM events WHERE id = '{id}'",
                        columns
                            .split(", ")
                            .map(|c| format!("typeof({c}) || ':' || coalesce({c}, '')"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    let db = state.db.clone();
                    async move {
                        let row = db
                            .query_one_raw(Statement::from_string(sea_orm::DbBackend::Sqlite, sql))
                            .await
                            .expect("select")
                            .expect("row");
                        (0..11)
                            .map(|i| row.try_get_by_index::<String>(i).expect("text"))
                            .collect::<Vec<_>>()
                    }
                };
                assert_eq!(texts(through_insert).await, texts(through_orm).await);
            }
        }
    }
}

// The applier's transaction writes a group whole or not at all: an insert that fails halfway
// (a repeated id) leaves none of the group's rows, nor the effects' writes before it, and the
// pooled connection it held comes back without a transaction open (the next group commits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_apply_leaves_nothing_of_its_group() {
    use custintel::ingest::apply_txn::ApplyTxn;
    use sea_orm::{ConnectionTrait, PaginatorTrait, Statement};
    for backend in [
        crate::helpers::Backend::Sqlite,
        crate::helpers::Backend::Postgres,
    ] {
        let Some((state, _tmp)) = crate::helpers::state_without_server(backend).await else {
            continue;
        };
        let org = crate::helpers::org_in(&state.db, "Half Co").await;
        let now = chrono::Utc::now();
        let row = |id: &str| custintel::ingest::store::EventRow {
            id: id.into(),
            organization_id: org.organization_id.clone(),
            message_id: None,
            event_type: "pageview".into(),
            event_name: None,
            visitor_id: None,
            user_id: None,
            customer_id: None,
            url: "https://app.example.com/".into(),
            path: "/".into(),
            occurred_at: now,
            received_at: now,
            data: serde_json::value::to_raw_value(&json!({})).expect("raw"),
        };
        let count = || {
            let db = state.db.clone();
            let org_id = org.organization_id.clone();
            async move {
                event::Entity::find()
                    .filter(event::Column::OrganizationId.eq(org_id))
                    .count(&db)
                    .await
                    .expect("count")
            }
        };
        let rename = |name: &str| {
            Statement::from_sql_and_values(
                state.db.get_database_backend(),
                custintel::db::placeholders(
                    state.db.get_database_backend(),
                    "UPDATE organizations SET name = ? WHERE id = ?",
                ),
                [name.into(), org.organization_id.clone().into()],
            )
        };

        for attempt in 0..3 {
            let txn = ApplyTxn::begin(&state.db).await.expect("begin");
            txn.execute_raw(rename("Renamed in a failed group"))
                .await
                .expect("update");
            let failed = txn
                .insert_events(vec![
                    row(&format!("00000000-0000-7000-8000-0000000001{attempt:02}")),
                    row("00000000-0000-7000-8000-000000000999"),
                    row("00000000-0000-7000-8000-000000000999"),
                ])
                .await;
            assert!(
                failed.is_err(),
                "{backend:?}: a repeated id fails the insert"
            );
            if attempt == 0 {
                txn.rollback().await.expect("rollback");
            } else {
                // Dropped as the applier drops it when a group fails: rolled back all the same.
                drop(txn);
            }
            assert_eq!(
                count().await,
                0,
                "{backend:?}: nothing of the group is stored"
            );
        }
        let name = entity::organization::Entity::find_by_id(org.organization_id.clone())
            .one(&state.db)
            .await
            .expect("find")
            .expect("org")
            .name;
        assert_eq!(
            name, "Half Co",
            "{backend:?}: the group's other writes are undone"
        );

        let txn = ApplyTxn::begin(&state.db).await.expect("begin");
        txn.insert_events(vec![
            row("00000000-0000-7000-8000-000000000a01"),
            row("00000000-0000-7000-8000-000000000a02"),
        ])
        .await
        .expect("insert");
        txn.commit().await.expect("commit");
        assert_eq!(count().await, 2, "{backend:?}: the next group commits");
    }
}

// PostgreSQL's text and jsonb cannot hold U+0000: an event carrying one was journaled nowhere
// and its request answered 500, which a client retries for ever. It is refused as the client's
// mistake, the same way on both databases; its neighbours go in.
db_test!(
    a_nul_character_is_refused_on_every_database,
    |app: TestApp| async move {
        let org = app.org("Nul Co").await;
        let r = app
            .ingest(
                &org.public_key,
                json!({"visitorId": VISITOR, "events": [
                    page("pageview", json!({"title": "a\u{0}b"})),
                    page("custom", json!({"eventName": "x", "properties": {"p\u{0}": 1}})),
                    // A backslash before `u0000` is not a NUL character.
                    page("custom", json!({"eventName": "ok", "properties": {"note": "a\\u0000b"}})),
                ]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::MULTI_STATUS, "{}", r.body);
        assert_eq!(r.body["processed"], json!(1));
        assert_eq!(
            r.body["errors"],
            json!([
                {"index": 0, "message": "`title` must not contain the NUL character (U+0000)"},
                {"index": 1, "message": "`properties` must not contain the NUL character (U+0000)"},
            ])
        );
        snap!("ingest_nul_in_events", r.body);
        let stored = app.events_of(&org.organization_id).await;
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].data["properties"]["note"], json!("a\\u0000b"));

        let r = app
            .ingest(
                &org.public_key,
                json!({"visitorId": VISITOR,
                       "userIdentity": {"email": "nul@example.com", "traits": {"name": "\u{0}"}},
                       "events": [page("pageview", json!({}))]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        assert_eq!(
            r.body["errors"][0]["message"],
            json!("`userIdentity` must not contain the NUL character (U+0000)")
        );
        snap!("ingest_nul_in_batch", r.body);
        assert_eq!(app.events_of(&org.organization_id).await.len(), 1);
    }
);
