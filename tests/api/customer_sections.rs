//! `svc_get_customer`'s `recentTimeline` beside the `revenue` and `sources` sections: the
//! timeline takes its latest billing changes and sources from what those sections read where
//! that is surely the window's latest (the unit tests of `timeline::Newest` cover when it is
//! not). It must be the timeline the customer gets with `recentTimeline` alone.

use chrono::{DateTime, Duration, Utc};
use entity::{billing_change, customer::BillingStatus, source};
use sea_orm::{EntityTrait, Set};
use serde_json::json;

use crate::db_test;
use crate::event_hours::customer_of;
use crate::helpers::TestApp;
use crate::tools::{assert_same_latest_timeline, import_all};

const TIMEFRAMES: [&str; 6] = ["1h", "1d", "10d", "30d", "60d", "200d"];

/// A source of the customer's at `at`.
fn source_at(
    org: &str,
    customer_id: &str,
    source_type: &str,
    n: i64,
    at: DateTime<Utc>,
) -> source::ActiveModel {
    source::ActiveModel {
        id: Set(uuid::Uuid::new_v4().to_string()),
        organization_id: Set(org.into()),
        source_type: Set(source_type.into()),
        source_id: Set(format!("{source_type}_{n}")),
        customer_id: Set(Some(customer_id.into())),
        title: Set(format!("{source_type} {n}")),
        body: Set("notes".into()),
        occurred_at: Set(at),
        permalink: Set(None),
        participants: Set(json!([])),
        change_seq: Set(1_000_000 + n),
        created_at: Set(at),
        updated_at: Set(at),
    }
}

fn billing_at(
    org: &str,
    customer_id: &str,
    n: i64,
    at: DateTime<Utc>,
) -> billing_change::ActiveModel {
    billing_change::ActiveModel {
        id: Set(uuid::Uuid::new_v4().to_string()),
        organization_id: Set(org.into()),
        customer_id: Set(customer_id.into()),
        at: Set(at),
        billing_status: Set(BillingStatus::Paying),
        mrr_cents: Set(n),
        origin: Set("test".into()),
    }
}

db_test!(
    recent_timeline_beside_the_sections_it_shares,
    |app: TestApp| async move {
        let org = app.org("Sections").await;
        let o = &org.organization_id;
        let k = &org.api_key;
        let customers = ["many.com", "few.com", "old.com"]
            .map(|d| json!({"kind": "customer", "domain": d, "billingStatus": "PAYING"}));
        import_all(&app, o, &customers).await;
        let app_ref = &app;
        let id_of = |domain: &'static str| async move { customer_of(app_ref, o, domain).await.id };
        let now = Utc::now();
        let mut billing = Vec::new();
        let mut sources = Vec::new();
        // More than either section reads, every 9 hours back from now: the sections' newest
        // rows hold the latest 50 of most windows.
        let many = id_of("many.com").await;
        for n in 0..130 {
            let at = now - Duration::hours(9 * n + 1);
            billing.push(billing_at(o, &many, n, at));
            sources.push(source_at(o, &many, "CALL", n, at));
        }
        // Fewer than the sections read: they hold every row.
        let few = id_of("few.com").await;
        for n in 0..7 {
            let at = now - Duration::days(5 * n + 1);
            billing.push(billing_at(o, &few, 200 + n, at));
            sources.push(source_at(o, &few, "EMAIL", 200 + n, at));
        }
        // Many, nearly all long ago: the sections' rows reach back past most windows' start.
        let old = id_of("old.com").await;
        for n in 0..150 {
            let days = if n < 3 { n + 2 } else { 100 + n };
            let at = now - Duration::days(days);
            billing.push(billing_at(o, &old, 300 + n, at));
            sources.push(source_at(o, &old, "SUPPORT_TICKET", 300 + n, at));
        }
        billing_change::Entity::insert_many(billing)
            .exec(&app.db)
            .await
            .expect("billing changes");
        source::Entity::insert_many(sources)
            .exec(&app.db)
            .await
            .expect("sources");

        for customer in ["many.com", "few.com", "old.com"] {
            for timeframe in TIMEFRAMES {
                assert_same_latest_timeline(&app, k, customer, timeframe).await;
            }
        }
        // The busy customer's latest 50 of 30 days, with the sections beside them.
        let r = crate::tools::tool(
            &app,
            k,
            "svc_get_customer",
            json!({"customer": "many.com", "include": ["revenue", "recentTimeline", "sources"]}),
        )
        .await;
        assert_eq!(r.body["recentTimeline"].as_array().unwrap().len(), 50);
        assert_eq!(r.body["revenue"]["history"].as_array().unwrap().len(), 100);
        assert_eq!(r.body["sources"].as_array().unwrap().len(), 20);
        // 80 sources and 80 billing changes in 30 days (every 9 hours from an hour ago).
        assert_eq!(r.body["includeTotals"]["recentTimeline"], 160);

        // Another organization does not see the customer at all.
        let other = app.org("Beside").await;
        let r = crate::tools::tool(
            &app,
            &other.api_key,
            "svc_get_customer",
            json!({"customer": "many.com", "include": ["revenue", "recentTimeline", "sources"]}),
        )
        .await;
        assert_eq!(r.status, reqwest::StatusCode::NOT_FOUND, "{}", r.body);
    }
);
