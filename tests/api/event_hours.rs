//! A busy customer's tracked events counted per hour: kept by the ingest applier from a
//! threshold on (or counted once from events stored otherwise), and read by the timeline's
//! totals, which must equal the events counted one by one.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use custintel::db::customer_event_hours::{self, KEPT_FROM};
use entity::{customer, customer_event_hour, event};
use reqwest::StatusCode;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, Set};
use serde_json::{json, Value};

use crate::db_test;
use crate::helpers::TestApp;
use crate::tools::tool;

const BUSY_VISITOR: &str = "5a0e3d1c-7b2f-4c8e-9a61-2f4b8c0d9e11";
const QUIET_VISITOR: &str = "c2b1f4e6-0d3a-4f7b-8e92-6a5c1b3d7f20";

fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

fn text(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A visitor's identify event, making it a user of the account `customer_id`.
fn identify(visitor: &str, customer_id: &str, at: DateTime<Utc>) -> Value {
    json!({"visitorId": visitor, "events": [{
        "type": "identify", "url": "https://app.example.com/", "path": "/",
        "timestamp": millis(at), "userId": format!("u_{customer_id}"),
        "email": format!("ada@{customer_id}.example.com"),
        "customerId": customer_id,
        "customerTraits": {"name": customer_id, "domain": format!("{customer_id}.example.com")},
    }]})
}

/// A batch of `n` events of the visitor's, the `k`th at `start - k * 97 s`; every 50th a
/// billing event (which the timeline shows as a billing change, not as an event).
fn batch(visitor: &str, customer_id: &str, start: DateTime<Utc>, first: i64, n: i64) -> Value {
    let events: Vec<Value> = (first..first + n)
        .map(|k| {
            let at = millis(start - Duration::seconds(k * 97)) - 1_234;
            if k % 50 == 7 {
                json!({"type": "billing", "url": "https://app.example.com/", "path": "/",
                    "timestamp": at, "status": "paid", "customerId": customer_id})
            } else {
                json!({"type": "pageview", "url": "https://app.example.com/a", "path": "/a",
                    "timestamp": at, "title": "A"})
            }
        })
        .collect();
    json!({"visitorId": visitor, "events": events})
}

/// Posts `batches` from `callers` clients at once, then waits until they are applied.
async fn post_concurrently(app: &TestApp, public_key: &str, batches: Vec<Value>, callers: usize) {
    let url = format!("{}/api/i/v1/{public_key}/events", app.base);
    let batches = std::sync::Arc::new(std::sync::Mutex::new(batches));
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (client, url, batches) = (app.client.clone(), url.clone(), batches.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let Some(body) = batches.lock().expect("batches").pop() else {
                    return;
                };
                let resp = client.post(&url).json(&body).send().await.expect("post");
                assert_eq!(resp.status(), StatusCode::OK);
            }
        }));
    }
    for task in tasks {
        task.await.expect("caller");
    }
    app.settle().await;
}

pub async fn customer_of(app: &TestApp, org: &str, domain: &str) -> customer::Model {
    customer::Entity::find()
        .filter(customer::Column::OrganizationId.eq(org))
        .filter(customer::Column::Domain.eq(domain))
        .one(&app.db)
        .await
        .expect("customer")
        .expect("stored")
}

/// The customer's tracked events (billing ones left out), as stored.
async fn tracked_times(app: &TestApp, org: &str, customer_id: &str) -> Vec<DateTime<Utc>> {
    event::Entity::find()
        .filter(customer_event_hours::tracked_events_of(org, customer_id))
        .all(&app.db)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.occurred_at)
        .collect()
}

/// The customer's kept hours, as stored.
async fn kept_hours(app: &TestApp, org: &str, customer_id: &str) -> BTreeMap<i64, i64> {
    customer_event_hour::Entity::find()
        .filter(customer_event_hour::Column::OrganizationId.eq(org))
        .filter(customer_event_hour::Column::CustomerId.eq(customer_id))
        .all(&app.db)
        .await
        .expect("hours")
        .into_iter()
        .map(|h| (h.hour, h.n))
        .collect()
}

/// The kept hours are the stored events grouped by hour, one by one.
async fn assert_hours_match_events(app: &TestApp, org: &str, customer_id: &str) {
    let mut expected: BTreeMap<i64, i64> = BTreeMap::new();
    for at in tracked_times(app, org, customer_id).await {
        *expected
            .entry(customer_event_hours::hour_of(at))
            .or_default() += 1;
    }
    assert_eq!(kept_hours(app, org, customer_id).await, expected);
}

/// The customer's counter is its tracked events, and its kept hours are them by hour.
async fn assert_counted_and_kept(app: &TestApp, org: &str, c: &customer::Model) {
    assert_eq!(
        c.events_counted,
        tracked_times(app, org, &c.id).await.len() as i64
    );
    assert_hours_match_events(app, org, &c.id).await;
}

/// The product timeline's total within `[after, before)`, as the tool answers it, against the
/// events counted one by one; both must be exact.
async fn assert_window_total(
    app: &TestApp,
    key: &str,
    org: &str,
    c: &customer::Model,
    after: DateTime<Utc>,
    before: DateTime<Utc>,
) {
    let r = tool(
        app,
        key,
        "svc_get_timeline",
        json!({"customer": c.domain, "after": text(after), "before": text(before),
            "channels": ["product"], "limit": 1}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let expected = tracked_times(app, org, &c.id)
        .await
        .into_iter()
        .filter(|at| *at >= after && *at < before)
        .count();
    assert_eq!(
        r.body["pagination"]["total"],
        json!(expected),
        "{} to {}: {}",
        text(after),
        text(before),
        r.body["pagination"]
    );
    assert_eq!(r.body["pagination"]["totalExact"], true);
}

/// Windows starting and ending inside hours, on hour edges, within one hour, and open-ended.
async fn assert_totals(app: &TestApp, key: &str, org: &str, c: &customer::Model) {
    let now = Utc::now();
    let hour = customer_event_hours::hour_start(customer_event_hours::hour_of(now));
    for (after, before) in [
        (now - Duration::days(30), now + Duration::hours(1)),
        (now - Duration::minutes(1_357), now - Duration::minutes(61)),
        (hour - Duration::hours(20), hour - Duration::hours(3)),
        (hour - Duration::hours(20), now - Duration::minutes(7)),
        (
            hour - Duration::hours(5) + Duration::minutes(3),
            hour - Duration::hours(5) + Duration::minutes(51),
        ),
    ] {
        assert_window_total(app, key, org, c, after, before).await;
    }
    // The default 30 days, and `svc_get_customer`'s section over the same window.
    let events = tracked_times(app, org, &c.id).await.len();
    let r = tool(
        app,
        key,
        "svc_get_timeline",
        json!({"customer": c.domain, "channels": ["product"], "limit": 1}),
    )
    .await;
    assert_eq!(r.body["pagination"]["total"], json!(events), "{}", r.body);
    let all = tool(app, key, "svc_get_timeline", json!({"customer": c.domain})).await;
    let section = tool(
        app,
        key,
        "svc_get_customer",
        json!({"customer": c.domain, "include": ["recentTimeline"]}),
    )
    .await;
    assert_eq!(
        section.body["includeTotals"]["recentTimeline"], all.body["pagination"]["total"],
        "{}",
        section.body
    );
    assert!(all.body["pagination"]["total"].as_u64().unwrap() >= events as u64);
}

db_test!(
    busy_customer_events_are_counted_per_hour,
    |app: TestApp| async move {
        let org = app.org("Busy Events").await;
        let (org_id, public_key) = (org.organization_id.clone(), org.public_key.clone());
        let start = Utc::now() - Duration::minutes(3);
        for (visitor, name) in [(BUSY_VISITOR, "busy"), (QUIET_VISITOR, "quiet")] {
            let r = app
                .ingest(
                    &public_key,
                    identify(visitor, name, start - Duration::hours(40)),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        }
        // Twelve batches of 100 (a few quiet ones among them) from four callers at once: the
        // counter reaches the threshold within one of them.
        let mut batches: Vec<Value> = (0..12)
            .map(|b| batch(BUSY_VISITOR, "busy", start, b * 100, 100))
            .collect();
        batches.push(batch(QUIET_VISITOR, "quiet", start, 0, 30));
        post_concurrently(&app, &public_key, batches, 4).await;

        let busy = customer_of(&app, &org_id, "busy.example.com").await;
        let tracked = tracked_times(&app, &org_id, &busy.id).await.len() as i64;
        assert!(tracked > KEPT_FROM, "{tracked}");
        assert_eq!(busy.events_counted, tracked);
        assert_hours_match_events(&app, &org_id, &busy.id).await;
        assert_totals(&app, &org.api_key, &org_id, &busy).await;

        // Below the threshold nothing is kept; the totals are counted as before.
        let quiet = customer_of(&app, &org_id, "quiet.example.com").await;
        assert_eq!(
            quiet.events_counted,
            tracked_times(&app, &org_id, &quiet.id).await.len() as i64
        );
        assert!(quiet.events_counted < KEPT_FROM);
        assert!(kept_hours(&app, &org_id, &quiet.id).await.is_empty());
        assert_window_total(
            &app,
            &org.api_key,
            &org_id,
            &quiet,
            start - Duration::days(1),
            start + Duration::hours(1),
        )
        .await;

        // Past the threshold the applier adds to the hours, again from callers at once.
        let more: Vec<Value> = (12..16)
            .map(|b| batch(BUSY_VISITOR, "busy", start, b * 100, 100))
            .collect();
        post_concurrently(&app, &public_key, more, 4).await;
        let busy = customer_of(&app, &org_id, "busy.example.com").await;
        assert_counted_and_kept(&app, &org_id, &busy).await;
        assert_totals(&app, &org.api_key, &org_id, &busy).await;

        // Another organization asking for the same domain sees none of it.
        let other = app.org("Elsewhere").await;
        let r = tool(
            &app,
            &other.api_key,
            "svc_get_timeline",
            json!({"customer": "busy.example.com"}),
        )
        .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    }
);

db_test!(
    stored_events_are_counted_per_hour_once,
    |app: TestApp| async move {
        let org = app.org("Loaded Events").await;
        let org_id = org.organization_id.clone();
        let r = app
            .ingest(
                &org.public_key,
                identify(BUSY_VISITOR, "loaded", Utc::now() - Duration::hours(50)),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let loaded = customer_of(&app, &org_id, "loaded.example.com").await;
        // Written straight to the table, as the benchmark's load does.
        let now = Utc::now();
        let rows: Vec<event::ActiveModel> = (0..1_200i64)
            .map(|k| event::ActiveModel {
                id: Set(uuid::Uuid::new_v4().to_string()),
                organization_id: Set(org_id.clone()),
                message_id: Set(None),
                event_type: Set(if k % 40 == 3 { "billing" } else { "pageview" }.into()),
                event_name: Set(None),
                visitor_id: Set(None),
                user_id: Set(None),
                customer_id: Set(Some(loaded.id.clone())),
                url: Set("https://app.example.com/".into()),
                path: Set("/".into()),
                occurred_at: Set(now - Duration::seconds(k * 131 + 17)),
                received_at: Set(now),
                data: Set(json!({})),
            })
            .collect();
        for chunk in rows.chunks(300) {
            event::Entity::insert_many(chunk.to_vec())
                .exec(&app.db)
                .await
                .expect("events");
        }
        assert!(kept_hours(&app, &org_id, &loaded.id).await.is_empty());
        let counted = customer_event_hours::count_from_stored_events(&app.db, &org_id)
            .await
            .expect("count");
        assert_eq!(counted, 1);
        let loaded = customer_of(&app, &org_id, "loaded.example.com").await;
        assert_counted_and_kept(&app, &org_id, &loaded).await;
        assert_totals(&app, &org.api_key, &org_id, &loaded).await;

        // Events ingested after are added to the hours.
        let more: Vec<Value> = (0..3)
            .map(|b| batch(BUSY_VISITOR, "loaded", Utc::now(), b * 100, 100))
            .collect();
        post_concurrently(&app, &org.public_key, more, 3).await;
        assert_hours_match_events(&app, &org_id, &loaded.id).await;
        let loaded = customer_of(&app, &org_id, "loaded.example.com").await;
        assert_totals(&app, &org.api_key, &org_id, &loaded).await;
    }
);

db_test!(
    imports_beside_ingest_leave_the_counter_to_ingest,
    |app: TestApp| async move {
        let org = app.org("Imported Busy").await;
        let (org_id, public_key) = (org.organization_id.clone(), org.public_key.clone());
        let start = Utc::now() - Duration::minutes(3);
        let r = app
            .ingest(
                &public_key,
                identify(BUSY_VISITOR, "busy", start - Duration::hours(40)),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let first: Vec<Value> = (0..11)
            .map(|b| batch(BUSY_VISITOR, "busy", start, b * 100, 100))
            .collect();
        post_concurrently(&app, &public_key, first, 4).await;
        assert!(
            customer_of(&app, &org_id, "busy.example.com")
                .await
                .events_counted
                >= KEPT_FROM
        );

        // Imports that update the customer run while four callers post more of its events.
        let more: Vec<Value> = (11..15)
            .map(|b| batch(BUSY_VISITOR, "busy", start, b * 100, 100))
            .collect();
        let imports = async {
            for round in 0..5 {
                let line = json!({"kind": "customer", "domain": "busy.example.com",
                    "name": format!("Busy, round {round}"), "mrrCents": 100 * round})
                .to_string();
                let report = custintel::import::import_text(&app.db, &org_id, &line)
                    .await
                    .expect("import");
                assert!(report.rejected.is_empty(), "{:?}", report.rejected);
            }
        };
        tokio::join!(imports, post_concurrently(&app, &public_key, more, 4));

        let busy = customer_of(&app, &org_id, "busy.example.com").await;
        assert_eq!(busy.name, "Busy, round 4");
        assert_counted_and_kept(&app, &org_id, &busy).await;
        assert_totals(&app, &org.api_key, &org_id, &busy).await;
    }
);
