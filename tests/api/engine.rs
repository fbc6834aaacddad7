//! The automation engine end to end: events through the Ingest API start runs that reach
//! webhook receivers on 127.0.0.1; dedupe, match modes, audiences, retries and failures,
//! patterns, schedules, the dry run, validation, two instances, and tenancy.

use std::time::Duration;

use custintel::engine;
use entity::{
    automation,
    automation_run::{self, AutomationRunStatus},
    customer::{self, BillingStatus},
    destination, signal, user,
};
use reqwest::StatusCode;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, IntoActiveModel, PaginatorTrait, QueryFilter, Set,
};
use serde_json::{json, Value};

use crate::{
    db_test,
    helpers::TestApp,
    receiver::{start_receiver, verify, Receiver},
    snap,
};

const RUNS: &str = "/api/automations/{id}/runs";

pub struct Org {
    pub id: String,
    pub key: String,
    pub pk: String,
}

async fn org(app: &TestApp, name: &str) -> Org {
    let o = app.org(name).await;
    Org {
        id: o.organization_id,
        key: o.api_key,
        pk: o.public_key,
    }
}

async fn match_signal(app: &TestApp, o: &Org, name: &str, definition: Value) -> String {
    let r = app
        .post(
            "/api/signals",
            "/api/signals",
            &o.key,
            Some(json!({"kind": "EVENT_MATCH", "name": name, "definition": definition})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body["result"]["data"]["signal"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn on_event(name: &str, conditions: Value) -> Value {
    json!({"grain": "user", "subjectResolver": "email", "eventNames": [name],
           "propertyConditions": conditions, "conditionMode": "ALL"})
}

/// `EVENT_PATTERN` signals are managed by code (`custintel apply`): stored directly here.
async fn pattern_signal(app: &TestApp, o: &Org, definition: Value) -> String {
    let id = uuid::Uuid::new_v4().to_string();
    let now = chrono::Utc::now();
    signal::ActiveModel {
        id: Set(id.clone()),
        organization_id: Set(o.id.clone()),
        key: Set(format!("pattern-{}", &id[..8])),
        managed_by: Set("CODE".into()),
        name: Set("Pattern".into()),
        description: Set(None),
        kind: Set(entity::signal::SignalKind::EventPattern),
        definition: Set(definition),
        schema_version: Set("1".into()),
        config_hash: Set(None),
        archived_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&app.db)
    .await
    .unwrap();
    id
}

async fn webhook(app: &TestApp, o: &Org, url: &str) -> (String, String) {
    let r = app
        .post(
            "/api/destinations",
            "/api/destinations",
            &o.key,
            Some(json!({"type": "WEBHOOK_ENDPOINT", "name": format!("Hook {url}"), "url": url})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let data = &r.body["result"]["data"];
    (
        data["destination"]["id"].as_str().unwrap().to_string(),
        data["signingSecret"].as_str().unwrap().to_string(),
    )
}

/// Creates an automation (disabled).
async fn create_automation(app: &TestApp, o: &Org, body: Value) -> String {
    let r = app
        .post("/api/automations", "/api/automations", &o.key, Some(body))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body["result"]["data"]["automation"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn enable(app: &TestApp, o: &Org, id: &str) -> crate::helpers::Reply {
    app.post(
        "/api/automations/{id}/enable",
        &format!("/api/automations/{id}/enable"),
        &o.key,
        None,
    )
    .await
}

/// Creates and enables an automation.
async fn automation(app: &TestApp, o: &Org, body: Value) -> String {
    let id = create_automation(app, o, body).await;
    let r = enable(app, o, &id).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    id
}

fn on_signals(signals: &[&str], destinations: &[&str], mode: &str, trigger: Value) -> Value {
    json!({"name": format!("On {} signal(s), {mode}", signals.len()), "triggerType": "SIGNAL_OCCURRENCE",
           "triggerJson": trigger, "matchMode": mode, "signalIds": signals,
           "destinationIds": destinations})
}

/// A user of a customer (identify), so audiences have a customer to check.
async fn identify(app: &TestApp, o: &Org, email: &str, account: &str) {
    let r = app
        .ingest(
            &o.pk,
            json!({"source": "server", "events": [{"type": "identify", "url": "https://app.x.com/",
                "path": "/", "email": email, "userId": format!("u_{email}"), "customerId": account,
                "customerTraits": {"name": account}}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

pub async fn custom(app: &TestApp, o: &Org, email: &str, name: &str, properties: Value) {
    let r = app
        .ingest(
            &o.pk,
            json!({"source": "server", "events": [{"type": "custom", "eventName": name,
                "url": "https://app.x.com/reports", "path": "/reports", "email": email,
                "properties": properties, "messageId": uuid::Uuid::new_v4().to_string()}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

async fn runs(app: &TestApp, o: &Org, automation_id: &str) -> Vec<Value> {
    let r = app
        .get(
            RUNS,
            &format!("/api/automations/{automation_id}/runs"),
            &o.key,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body["result"]["data"]["runs"].as_array().unwrap().clone()
}

/// Waits until every run of the automation has a resting status and there are `count`.
pub async fn settled_runs(app: &TestApp, o: &Org, automation_id: &str, count: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let list = runs(app, o, automation_id).await;
        let resting = list.iter().all(|r| {
            ["SKIPPED", "DELIVERED", "PARTIAL_FAILURE", "FAILED"]
                .contains(&r["status"].as_str().unwrap_or(""))
        });
        if list.len() >= count && resting {
            return list;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "runs did not settle: {list:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn automation_json(app: &TestApp, o: &Org, id: &str) -> Value {
    let r = app
        .get(
            "/api/automations/{id}",
            &format!("/api/automations/{id}"),
            &o.key,
        )
        .await;
    r.body["result"]["data"]["automation"].clone()
}

/// The demo organization with its `churn-risk-alert` enabled, its webhook destination pointed at
/// a receiver on 127.0.0.1, and the email of a user its audience admits.
pub struct DemoAlert {
    pub org: Org,
    pub automation: String,
    pub destination: String,
    pub receiver: Receiver,
    pub email: String,
}

pub async fn arm_demo_churn_alert(app: &TestApp) -> DemoAlert {
    let demo = app.demo_org().await;
    let o = Org {
        id: demo.organization_id.clone(),
        key: demo.api_key.clone(),
        pk: demo.public_key.clone(),
    };
    let list = app
        .get("/api/automations", "/api/automations", &o.key)
        .await;
    let churn = list.body["result"]["data"]["automations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "churn-risk-alert")
        .unwrap()
        .clone();
    let auto_id = churn["id"].as_str().unwrap().to_string();
    let dest_id = churn["destinations"][0]["id"].as_str().unwrap().to_string();
    let (url, rx) = start_receiver(&[]).await;
    let r = app
        .patch(
            "/api/destinations/{id}",
            &format!("/api/destinations/{dest_id}"),
            &o.key,
            json!({"type": "WEBHOOK_ENDPOINT", "url": format!("{url}/crm")}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = app
        .post(
            "/api/automations/{id}/enable",
            &format!("/api/automations/{auto_id}/enable"),
            &o.key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // A user of a paying account above the audience's MRR floor.
    let paying: Vec<String> = customer::Entity::find()
        .filter(customer::Column::OrganizationId.eq(&o.id))
        .filter(customer::Column::BillingStatus.eq(BillingStatus::Paying))
        .filter(customer::Column::MrrCents.gte(49_900))
        .all(&app.db)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    let mut users = user::Entity::find()
        .filter(user::Column::OrganizationId.eq(&o.id))
        .filter(user::Column::CustomerId.is_in(paying))
        .filter(user::Column::Email.is_not_null())
        .all(&app.db)
        .await
        .unwrap();
    users.sort_by(|a, b| a.email.cmp(&b.email));
    DemoAlert {
        email: users[0].email.clone().unwrap(),
        org: o,
        automation: auto_id,
        destination: dest_id,
        receiver: rx,
    }
}

db_test!(
    demo_automation_delivers_a_signed_run,
    |app: TestApp| async move {
        // The issue's "done when", as a user would do it on the demo organization.
        let DemoAlert {
            org: o,
            automation: auto_id,
            destination: dest_id,
            receiver: rx,
            email,
        } = arm_demo_churn_alert(&app).await;
        let sent = std::time::Instant::now();
        custom(
            &app,
            &o,
            &email,
            "export_failed",
            json!({"errorCode": "E_TIMEOUT"}),
        )
        .await;
        let deadline = sent + Duration::from_secs(10);
        while rx.seen.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "no delivery");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (headers, body) = rx.seen.lock().unwrap()[0].clone();
        let dest = destination::Entity::find_by_id(dest_id.clone())
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        let secret = app
            .state
            .secrets
            .decrypt(dest.secret_ciphertext.as_deref().unwrap())
            .unwrap();
        verify(&secret, &headers, &body);
        let payload: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(payload["type"], "automation.run");
        assert_eq!(payload["automation"]["key"], "churn-risk-alert");
        assert_eq!(payload["subject"]["grain"], "user");
        assert_eq!(payload["subject"]["key"], json!(email));
        assert_eq!(payload["signals"][0]["key"], "export-failures");
        assert_eq!(payload["events"][0]["eventName"], "export_failed");
        assert_eq!(payload["customer"]["billingStatus"], "PAYING");
        assert!(payload["customer"]["users"].is_array());

        let list = settled_runs(&app, &o, &auto_id, 1).await;
        assert_eq!(list[0]["status"], "DELIVERED");
        assert_eq!(list[0]["deliveries"][0]["status"], "delivered");
        // The demo's automation names an agent and no model is configured: template + warning.
        assert!(
            list[0]["warnings"][0]
                .as_str()
                .unwrap_or("")
                .contains("model"),
            "{:#}",
            list[0]
        );
        let auto = automation_json(&app, &o, &auto_id).await;
        assert_eq!(auto["lastRunStatus"], "DELIVERED");
        assert!(auto["lastRunAt"].is_string());
    }
);

db_test!(matching_dedupe_and_run_routes, |app: TestApp| async move {
    let o = org(&app, "Match Co").await;
    let (url, rx) = start_receiver(&[]).await;
    let (dest, _) = webhook(&app, &o, &format!("{url}/a")).await;
    let sig = match_signal(
        &app,
        &o,
        "Big export failed",
        on_event(
            "export_failed",
            json!([{"property": "rows", "operator": "gte", "value": 1000}]),
        ),
    )
    .await;
    let auto = automation(&app, &o, on_signals(&[&sig], &[&dest], "ANY", json!({}))).await;
    let email = "ada@match.co";
    identify(&app, &o, email, "acct_match").await;
    // Wrong name, then a failed condition: no run.
    custom(&app, &o, email, "export_done", json!({"rows": 5000})).await;
    custom(&app, &o, email, "export_failed", json!({"rows": 10})).await;
    // A match, then a second one in the same day: one run (dedupe `day`).
    custom(&app, &o, email, "export_failed", json!({"rows": 5000})).await;
    custom(&app, &o, email, "export_failed", json!({"rows": "2000"})).await;
    let list = settled_runs(&app, &o, &auto, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let list2 = runs(&app, &o, &auto).await;
    assert_eq!(list2.len(), 1, "{list2:#?}");
    assert_eq!(list[0]["status"], "DELIVERED");
    assert_eq!(rx.bodies().len(), 1);
    assert_eq!(list[0]["events"][0]["data"]["properties"]["rows"], 5000);
    let listed = app
        .get(RUNS, &format!("/api/automations/{auto}/runs"), &o.key)
        .await;
    snap!("automation_run_list", listed.body);

    // The routes: list (status filter, paging), get, tenancy.
    let run_id = list[0]["id"].as_str().unwrap();
    let got = app
        .get(
            "/api/automations/{id}/runs/{run_id}",
            &format!("/api/automations/{auto}/runs/{run_id}"),
            &o.key,
        )
        .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    assert_eq!(
        got.body["result"]["data"]["run"]["deliveries"][0]["attempts"][0]["httpStatus"],
        200
    );
    snap!("automation_run_get", got.body);
    let filtered = app
        .get(
            RUNS,
            &format!("/api/automations/{auto}/runs?status=FAILED&limit=5"),
            &o.key,
        )
        .await;
    assert_eq!(filtered.body["result"]["data"]["runs"], json!([]));
    snap!("automation_run_list_empty", filtered.body);
    let bad = app
        .get(
            RUNS,
            &format!("/api/automations/{auto}/runs?status=NOPE"),
            &o.key,
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    snap!("automation_run_list_bad_status", bad.body);
    let other = org(&app, "Other Co").await;
    let r = app
        .get(RUNS, &format!("/api/automations/{auto}/runs"), &other.key)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = app
        .get(
            "/api/automations/{id}/runs/{run_id}",
            &format!("/api/automations/{auto}/runs/{run_id}"),
            &other.key,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Events of another organization never start this organization's runs.
    identify(&app, &other, email, "acct_match").await;
    custom(&app, &other, email, "export_failed", json!({"rows": 5000})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(runs(&app, &o, &auto).await.len(), 1);
});

db_test!(dedupe_none_all_and_at_least, |app: TestApp| async move {
    let o = org(&app, "Modes Co").await;
    let (url, _rx) = start_receiver(&[]).await;
    let (dest, _) = webhook(&app, &o, &format!("{url}/m")).await;
    let a = match_signal(&app, &o, "A", on_event("a", json!([]))).await;
    let b = match_signal(&app, &o, "B", on_event("b", json!([]))).await;
    let c = match_signal(&app, &o, "C", on_event("c", json!([]))).await;
    let every = automation(
        &app,
        &o,
        on_signals(&[&a], &[&dest], "ANY", json!({"dedupe": "none"})),
    )
    .await;
    let all = automation(
        &app,
        &o,
        on_signals(&[&a, &b], &[&dest], "ALL", json!({"window": "1d"})),
    )
    .await;
    let two = automation(
        &app,
        &o,
        on_signals(&[&a, &b, &c], &[&dest], "AT_LEAST", json!({"atLeast": 2})),
    )
    .await;
    let email = "bo@modes.co";
    identify(&app, &o, email, "acct_modes").await;
    custom(&app, &o, email, "a", json!({})).await;
    custom(&app, &o, email, "a", json!({})).await;
    assert_eq!(settled_runs(&app, &o, &every, 2).await.len(), 2);
    assert!(runs(&app, &o, &all).await.is_empty());
    assert!(runs(&app, &o, &two).await.is_empty());
    custom(&app, &o, email, "c", json!({})).await;
    let at_least = settled_runs(&app, &o, &two, 1).await;
    assert_eq!(at_least[0]["signals"].as_array().unwrap().len(), 2);
    assert!(runs(&app, &o, &all).await.is_empty());
    custom(&app, &o, email, "b", json!({})).await;
    let both = settled_runs(&app, &o, &all, 1).await;
    assert_eq!(both[0]["signals"].as_array().unwrap().len(), 2);
    assert_eq!(runs(&app, &o, &every).await.len(), 2);
});

db_test!(
    audience_skip_and_delivery_outcomes,
    |app: TestApp| async move {
        let o = org(&app, "Outcomes Co").await;
        // 500, 500, then 200: delivered on the third attempt.
        let (flaky_url, _flaky) = start_receiver(&[500, 500]).await;
        let (flaky, _) = webhook(&app, &o, &format!("{flaky_url}/f")).await;
        let (gone_url, _gone) = start_receiver(&[410, 410, 410]).await;
        let (gone, _) = webhook(&app, &o, &format!("{gone_url}/g")).await;
        let sig = match_signal(&app, &o, "Hit", on_event("hit", json!([]))).await;
        let retried = automation(&app, &o, on_signals(&[&sig], &[&flaky], "ANY", json!({}))).await;
        let (ok_url, _ok) = start_receiver(&[]).await;
        let (ok, _) = webhook(&app, &o, &format!("{ok_url}/ok")).await;
        let partial = automation(
            &app,
            &o,
            on_signals(&[&sig], &[&ok, &gone], "ANY", json!({})),
        )
        .await;
        let failed = automation(&app, &o, on_signals(&[&sig], &[&gone], "ANY", json!({}))).await;
        let mut body = on_signals(&[&sig], &[&flaky], "ANY", json!({}));
        body["audienceFilterJson"] = json!({"billingStatus": ["PAYING"]});
        body["destinationIds"] = json!([ok]);
        let paying_only = automation(&app, &o, body).await;
        identify(&app, &o, "cy@outcomes.co", "acct_outcomes").await;
        custom(&app, &o, "cy@outcomes.co", "hit", json!({})).await;

        let r = settled_runs(&app, &o, &retried, 1).await;
        let attempts = r[0]["deliveries"][0]["attempts"].as_array().unwrap();
        assert_eq!(r[0]["status"], "DELIVERED", "{:#}", r[0]);
        assert_eq!(attempts.len(), 3, "{attempts:#?}");
        assert_eq!(attempts[0]["httpStatus"], 500);
        assert_eq!(attempts[2]["httpStatus"], 200);
        let p = settled_runs(&app, &o, &partial, 1).await;
        assert_eq!(p[0]["status"], "PARTIAL_FAILURE", "{:#}", p[0]);
        let f = settled_runs(&app, &o, &failed, 1).await;
        assert_eq!(f[0]["status"], "FAILED", "{:#}", f[0]);
        let s = settled_runs(&app, &o, &paying_only, 1).await;
        assert_eq!(s[0]["status"], "SKIPPED");
        assert!(s[0]["skipReason"]
            .as_str()
            .unwrap()
            .contains("billingStatus"));
        assert_eq!(s[0]["deliveries"], json!([]));
        assert_eq!(
            automation_json(&app, &o, &failed).await["lastRunStatus"],
            "FAILED"
        );
        assert_eq!(
            automation_json(&app, &o, &paying_only).await["lastRunStatus"],
            "SKIPPED"
        );
    }
);

db_test!(patterns_count_and_sequence, |app: TestApp| async move {
    let o = org(&app, "Patterns Co").await;
    let (url, _rx) = start_receiver(&[]).await;
    let (dest, _) = webhook(&app, &o, &format!("{url}/p")).await;
    let count = pattern_signal(
        &app,
        &o,
        json!({"grain": "user", "subjectResolver": "email", "pattern": {"type": "count",
            "eventNames": ["retry"], "propertyConditions": [], "conditionMode": "ALL",
            "min": 3, "within": "1h"}}),
    )
    .await;
    let sequence = pattern_signal(
        &app,
        &o,
        json!({"grain": "customer", "subjectResolver": "customerId", "pattern": {"type": "sequence",
            "within": "1d", "steps": [{"eventNames": ["trial_started"]}, {"eventNames": ["$pageview"],
            "propertyConditions": [{"property": "path", "operator": "contains", "value": "/pricing"}]}]}}),
    )
    .await;
    let on_count = automation(&app, &o, on_signals(&[&count], &[&dest], "ANY", json!({}))).await;
    let on_seq = automation(
        &app,
        &o,
        on_signals(&[&sequence], &[&dest], "ANY", json!({})),
    )
    .await;
    let email = "di@patterns.co";
    identify(&app, &o, email, "acct_patterns").await;
    custom(&app, &o, email, "retry", json!({})).await;
    custom(&app, &o, email, "retry", json!({})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(runs(&app, &o, &on_count).await.is_empty());
    custom(&app, &o, email, "retry", json!({})).await;
    settled_runs(&app, &o, &on_count, 1).await;

    // The pricing page before the trial does not complete the sequence; after it, it does.
    let pageview = |path: &str| {
        json!({"source": "server", "events": [{"type": "pageview", "url": format!("https://app.x.com{path}"),
            "path": path}], "userIdentity": {"email": email},
            "customerIdentity": {"customerId": "acct_patterns"}})
    };
    assert_eq!(
        app.ingest(&o.pk, pageview("/pricing")).await.status,
        StatusCode::OK
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(runs(&app, &o, &on_seq).await.is_empty());
    custom(&app, &o, email, "trial_started", json!({})).await;
    let r = app.ingest(&o.pk, pageview("/pricing/compare")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let seq = settled_runs(&app, &o, &on_seq, 1).await;
    assert_eq!(seq[0]["subject"]["grain"], "customer");
    assert_eq!(seq[0]["subject"]["key"], "acct_patterns");
});

db_test!(
    schedules_missed_ticks_and_digests,
    |app: TestApp| async move {
        let o = org(&app, "Schedule Co").await;
        let (url, rx) = start_receiver(&[]).await;
        let (dest, _) = webhook(&app, &o, &format!("{url}/s")).await;
        let id = create_automation(
            &app,
            &o,
            json!({"name": "Monday digest", "triggerType": "SCHEDULE",
                "triggerJson": {"cron": "0 9 * * 1", "timezone": "America/New_York"},
                "matchMode": "ANY", "destinationIds": [dest]}),
        )
        .await;
        let r = enable(&app, &o, &id).await;
        let next: chrono::DateTime<chrono::Utc> = r.body["result"]["data"]["automation"]
            ["nextRunAt"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        // Mondays 09:00 in New York are 13:00 or 14:00 UTC (daylight saving).
        use chrono::{Datelike, Timelike};
        assert_eq!(next.weekday(), chrono::Weekday::Mon);
        assert!([13, 14].contains(&next.hour()), "{next}");

        // Three ticks missed while no instance ran make one run, and the next tick is in the future.
        identify(&app, &o, "ed@schedule.co", "acct_schedule").await;
        let row = automation::Entity::find_by_id(id.clone())
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        let mut m = row.into_active_model();
        m.next_run_at = Set(Some(chrono::Utc::now() - chrono::Duration::weeks(3)));
        m.update(&app.db).await.unwrap();
        let (a, b) = tokio::join!(
            engine::schedules::tick(&app.db),
            engine::schedules::tick(&app.db)
        );
        let started = a.unwrap_or(0) + b.unwrap_or(0);
        assert!(started <= 1, "one tick, one run");
        let list = settled_runs(&app, &o, &id, 1).await;
        assert_eq!(list.len(), 1);
        assert_eq!(list[0]["status"], "DELIVERED", "{:#}", list[0]);
        assert_eq!(list[0]["subject"], Value::Null);
        let digest = rx.bodies()[0].clone();
        assert_eq!(digest["subjects"][0]["key"], "acct_schedule");
        let auto = automation_json(&app, &o, &id).await;
        let next: chrono::DateTime<chrono::Utc> =
            auto["nextRunAt"].as_str().unwrap().parse().unwrap();
        assert!(next > chrono::Utc::now());
    }
);

db_test!(
    dry_run_stores_and_sends_nothing,
    |app: TestApp| async move {
        let o = org(&app, "Dry Co").await;
        let (url, rx) = start_receiver(&[]).await;
        let (dest, _) = webhook(&app, &o, &format!("{url}/d")).await;
        let sig = match_signal(&app, &o, "Dry", on_event("dry", json!([]))).await;
        let id = create_automation(&app, &o, on_signals(&[&sig], &[&dest], "ANY", json!({}))).await;
        identify(&app, &o, "fa@dry.co", "acct_dry").await;
        custom(&app, &o, "fa@dry.co", "dry", json!({"n": 1})).await;
        let event_id = app.events_of(&o.id).await.last().unwrap().id.clone();
        let route = "/api/automations/{id}/test";
        let path = format!("/api/automations/{id}/test");
        let by_event = app
            .post(route, &path, &o.key, Some(json!({"eventId": event_id})))
            .await;
        assert_eq!(by_event.status, StatusCode::OK, "{}", by_event.body);
        let data = &by_event.body["result"]["data"];
        assert_eq!(data["run"]["status"], "PENDING");
        assert_eq!(data["payload"]["type"], "automation.run");
        assert_eq!(data["payload"]["subject"]["key"], "fa@dry.co");
        snap!("automation_test", by_event.body);
        let by_subject = app
            .post(
                route,
                &path,
                &o.key,
                Some(json!({"subject": {"grain": "customer", "key": "acct_dry"}})),
            )
            .await;
        assert_eq!(by_subject.status, StatusCode::OK, "{}", by_subject.body);
        let neither = app.post(route, &path, &o.key, Some(json!({}))).await;
        assert_eq!(neither.status, StatusCode::BAD_REQUEST);
        snap!("automation_test_neither", neither.body);
        let unknown = app
            .post(route, &path, &o.key, Some(json!({"eventId": "nope"})))
            .await;
        assert_eq!(unknown.status, StatusCode::NOT_FOUND);
        snap!("automation_test_unknown_event", unknown.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(rx.seen.lock().unwrap().is_empty());
        let stored = automation_run::Entity::find()
            .filter(automation_run::Column::AutomationId.eq(&id))
            .count(&app.db)
            .await
            .unwrap();
        assert_eq!(stored, 0);
    }
);

// An event acknowledged a moment ago is in the `events` view before its effects are applied;
// the dry run answers for it then too, attributed to the user and account already stored.
db_test!(
    dry_run_answers_for_an_event_not_yet_applied,
    |app: TestApp| async move {
        let o = org(&app, "Pending Co").await;
        let (dest, _) = webhook(&app, &o, "https://hooks.example.com/p").await;
        let sig = match_signal(&app, &o, "Pending", on_event("pending", json!([]))).await;
        let id = create_automation(&app, &o, on_signals(&[&sig], &[&dest], "ANY", json!({}))).await;
        identify(&app, &o, "ga@pending.co", "acct_pending").await;
        app.settle().await;
        let account = customer::Entity::find()
            .filter(customer::Column::ExternalId.eq("acct_pending"))
            .one(&app.db)
            .await
            .unwrap()
            .expect("the identified account");

        // Another organization, with an automation of its own.
        let other = org(&app, "Bystander Co").await;
        let (their_dest, _) = webhook(&app, &other, "https://hooks.example.com/b").await;
        let their_sig = match_signal(&app, &other, "Pending", on_event("pending", json!([]))).await;
        let theirs = create_automation(
            &app,
            &other,
            on_signals(&[&their_sig], &[&their_dest], "ANY", json!({})),
        )
        .await;

        let held = app.hold_applier().await;
        let r = app
            .ingest_unapplied(
                &o.pk,
                json!({"source": "server", "events": [{"type": "custom", "eventName": "pending",
                    "url": "https://app.x.com/reports", "path": "/reports",
                    "email": "ga@pending.co", "properties": {"n": 2}}]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let view = crate::ingest::query(
            &app,
            &o.key,
            "SELECT id, customer_id FROM events WHERE event_name = 'pending'",
        )
        .await;
        let rows = view["rows"].clone();
        assert_eq!(rows.as_array().map(Vec::len), Some(1), "{view}");
        assert_eq!(rows[0][1], Value::Null, "not applied yet: {view}");
        let event_id = rows[0][0].as_str().unwrap().to_string();

        let route = "/api/automations/{id}/test";
        let path = format!("/api/automations/{id}/test");
        let dry_run = || app.post(route, &path, &o.key, Some(json!({"eventId": event_id})));
        let pending = dry_run().await;
        assert_eq!(pending.status, StatusCode::OK, "{}", pending.body);
        let data = &pending.body["result"]["data"];
        assert_eq!(data["run"]["status"], "PENDING", "{}", pending.body);
        assert_eq!(data["payload"]["subject"]["key"], "ga@pending.co");
        assert_eq!(data["run"]["events"][0]["id"], event_id.as_str());
        assert_eq!(data["run"]["events"][0]["customerId"], account.id.as_str());
        assert_eq!(data["run"]["events"][0]["data"]["properties"]["n"], 2);
        // Another organization's key finds no such event.
        let r = app
            .post(
                route,
                &format!("/api/automations/{theirs}/test"),
                &other.key,
                Some(json!({"eventId": event_id})),
            )
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
        held.rollback().await.unwrap();

        // Applied, the same event makes the same run.
        app.settle().await;
        let applied = dry_run().await;
        assert_eq!(applied.status, StatusCode::OK, "{}", applied.body);
        let after = &applied.body["result"]["data"];
        assert_eq!(after["run"]["subject"], data["run"]["subject"]);
        assert_eq!(after["run"]["events"], data["run"]["events"]);
        assert_eq!(after["run"]["status"], data["run"]["status"]);
    }
);

db_test!(
    trigger_and_audience_are_validated,
    |app: TestApp| async move {
        let o = org(&app, "Valid Co").await;
        let (dest, _) = webhook(&app, &o, "https://hooks.example.com/v").await;
        let sig = match_signal(&app, &o, "V", on_event("v", json!([]))).await;
        let mut body = on_signals(
            &[&sig],
            &[&dest],
            "AT_LEAST",
            json!({"atLeast": 2, "window": "soon"}),
        );
        body["audienceFilterJson"] = json!({"plans": ["pro"]});
        let r = app
            .post("/api/automations", "/api/automations", &o.key, Some(body))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        snap!("automation_create_bad_trigger", r.body);
        let r = app
            .post(
                "/api/automations",
                "/api/automations",
                &o.key,
                Some(json!({"name": "Bad cron", "triggerType": "SCHEDULE",
                "triggerJson": {"cron": "0 9 * *"}, "matchMode": "ANY", "destinationIds": [dest]})),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            r.body["error"]["details"]["issues"][0]["path"],
            json!(["triggerJson", "cron"])
        );
        // `AT_LEAST` takes its own `triggerJson`, where `atLeast` is required; `ANY` and `ALL`
        // leave it unread.
        let body = on_signals(&[&sig], &[&dest], "AT_LEAST", json!({"window": "2d"}));
        let r = app
            .post("/api/automations", "/api/automations", &o.key, Some(body))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        assert_eq!(
            r.body["error"]["details"]["issues"][0]["path"],
            json!(["triggerJson", "atLeast"]),
            "{}",
            r.body
        );
        snap!("automation_create_at_least_without_at_least", r.body);
        let body = on_signals(&[&sig], &[&dest], "ALL", json!({"atLeast": 1}));
        let r = app
            .post("/api/automations", "/api/automations", &o.key, Some(body))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        // Stored JSON that does not fit: 409 on enable, naming the field.
        let id = create_automation(&app, &o, on_signals(&[&sig], &[&dest], "ANY", json!({}))).await;
        let row = automation::Entity::find_by_id(id.clone())
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        let mut m = row.into_active_model();
        m.trigger_json = Set(json!({"signalKeys": ["v"]}));
        m.update(&app.db).await.unwrap();
        let r = enable(&app, &o, &id).await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
        snap!("automation_enable_stored_json_does_not_fit", r.body);
        assert!(
            r.body.to_string().contains("triggerJson.signalKeys"),
            "{}",
            r.body
        );
    }
);

db_test!(
    two_instances_claim_each_run_once,
    |app: TestApp| async move {
        let o = org(&app, "Race Co").await;
        let (url, rx) = start_receiver(&[]).await;
        let (dest, _) = webhook(&app, &o, &format!("{url}/r")).await;
        let sig = match_signal(&app, &o, "Race", on_event("race", json!([]))).await;
        let auto = automation(
            &app,
            &o,
            on_signals(&[&sig], &[&dest], "ANY", json!({"dedupe": "none"})),
        )
        .await;
        // A second serving instance on the same database: both processors race for the runs.
        let second = app.another_instance().await;
        identify(&app, &o, "gi@race.co", "acct_race").await;
        let events: Vec<Value> = (0..20)
            .map(|i| {
                json!({"type": "custom", "eventName": "race", "url": "https://x.co/", "path": "/",
                        "email": "gi@race.co", "properties": {"i": i}})
            })
            .collect();
        let resp = app
            .client
            .post(format!("{second}/api/i/v1/{}/events", o.pk))
            .json(&json!({"source": "server", "events": events}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let list = settled_runs(&app, &o, &auto, 20).await;
        assert_eq!(list.len(), 20);
        assert!(list.iter().all(|r| r["status"] == "DELIVERED"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let bodies = rx.bodies();
        let mut ids: Vec<String> = bodies
            .iter()
            .map(|b| b["run"]["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 20);
        assert_eq!(bodies.len(), 20, "no run delivered twice");
    }
);

db_test!(
    a_stopped_instances_run_is_picked_up,
    |app: TestApp| async move {
        // A run claimed by an instance that stopped mid-way (its lease lapsed) is processed by
        // another, once.
        let o = org(&app, "Lease Co").await;
        let (url, rx) = start_receiver(&[]).await;
        let (dest, _) = webhook(&app, &o, &format!("{url}/l")).await;
        let sig = match_signal(&app, &o, "Lease", on_event("lease", json!([]))).await;
        let auto = automation(&app, &o, on_signals(&[&sig], &[&dest], "ANY", json!({}))).await;
        identify(&app, &o, "hu@lease.co", "acct_lease").await;
        let subject = user::Entity::find()
            .filter(user::Column::OrganizationId.eq(&o.id))
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        let row = automation::Entity::find_by_id(auto.clone())
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        let now = chrono::Utc::now();
        let mut run = engine::runs::new_run(
            &row,
            "user:lapsed:1".into(),
            Some(
                json!({"grain": "user", "id": subject.id, "key": "hu@lease.co",
                    "name": null, "customerId": subject.customer_id}),
            ),
            vec![],
            vec![],
            now,
        );
        run.status = Set(AutomationRunStatus::RunningProcessor);
        run.started_at = Set(Some(now - chrono::Duration::minutes(5)));
        run.processor_attempts = Set(1);
        run.lease_until = Set(Some(now - chrono::Duration::seconds(1)));
        automation_run::Entity::insert(run)
            .exec_without_returning(&app.db)
            .await
            .unwrap();
        let list = settled_runs(&app, &o, &auto, 1).await;
        assert_eq!(list[0]["status"], "DELIVERED", "{:#}", list[0]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(rx.bodies().len(), 1);
    }
);

db_test!(
    background_retries_settle_a_pending_delivery_run,
    |app: TestApp| async move {
        // Four failed attempts leave the delivery to the notifier's background retries and the run
        // PENDING_DELIVERY; when a retry succeeds the run becomes DELIVERED.
        let o = org(&app, "Retry Co").await;
        let (url, rx) = start_receiver(&[503, 503, 503, 503]).await;
        let (dest, _) = webhook(&app, &o, &format!("{url}/r")).await;
        let sig = match_signal(&app, &o, "Retry", on_event("retry_me", json!([]))).await;
        let auto = automation(&app, &o, on_signals(&[&sig], &[&dest], "ANY", json!({}))).await;
        identify(&app, &o, "iv@retry.co", "acct_retry").await;
        custom(&app, &o, "iv@retry.co", "retry_me", json!({})).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let pending = loop {
            let list = runs(&app, &o, &auto).await;
            if list
                .first()
                .is_some_and(|r| r["status"] == "PENDING_DELIVERY")
            {
                break list[0].clone();
            }
            assert!(std::time::Instant::now() < deadline, "{list:#?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(pending["deliveries"][0]["status"], "retrying");
        assert_eq!(
            pending["deliveries"][0]["attempts"]
                .as_array()
                .unwrap()
                .len(),
            4
        );
        // The retry is due now (instead of in 30 s); the worker sends it, the run settles.
        entity::notification_delivery::Entity::update_many()
            .col_expr(
                entity::notification_delivery::Column::NextAttemptAt,
                sea_orm::sea_query::Expr::value(Some(
                    chrono::Utc::now() - chrono::Duration::seconds(1),
                )),
            )
            .filter(entity::notification_delivery::Column::OrganizationId.eq(&o.id))
            .exec(&app.db)
            .await
            .unwrap();
        custintel::notify::worker::run_due(&app.db, &app.state.secrets)
            .await
            .unwrap();
        let list = settled_runs(&app, &o, &auto, 1).await;
        assert_eq!(list[0]["status"], "DELIVERED", "{:#}", list[0]);
        assert_eq!(
            list[0]["deliveries"][0]["attempts"]
                .as_array()
                .unwrap()
                .len(),
            5
        );
        assert_eq!(rx.seen.lock().unwrap().len(), 5);
        let auto_json = automation_json(&app, &o, &auto).await;
        assert_eq!(auto_json["lastRunStatus"], "DELIVERED");
    }
);

db_test!(old_signal_hits_are_swept, |app: TestApp| async move {
    let o = org(&app, "Sweep Co").await;
    let now = chrono::Utc::now();
    let hit = |days: i64| entity::signal_hit::ActiveModel {
        id: Set(uuid::Uuid::new_v4().to_string()),
        organization_id: Set(o.id.clone()),
        signal_id: Set("s".into()),
        subject_id: Set("u".into()),
        step: Set(-1),
        at: Set(now - chrono::Duration::days(days)),
        event_id: Set("e".into()),
    };
    for days in [1, 100, 200] {
        entity::signal_hit::Entity::insert(hit(days))
            .exec_without_returning(&app.db)
            .await
            .unwrap();
    }
    let count = || async {
        entity::signal_hit::Entity::find()
            .filter(entity::signal_hit::Column::OrganizationId.eq(&o.id))
            .count(&app.db)
            .await
            .unwrap()
    };
    // A pattern reading 30 weeks back keeps all three; without it, 90 days are kept.
    let long = pattern_signal(
        &app,
        &o,
        json!({"grain": "user", "subjectResolver": "email", "pattern": {"type": "count",
            "eventNames": ["x"], "min": 2, "within": "30w"}}),
    )
    .await;
    assert_eq!(engine::retention::sweep(&app.db).await.unwrap(), 0);
    assert_eq!(count().await, 3);
    signal::Entity::delete_by_id(long)
        .exec(&app.db)
        .await
        .unwrap();
    assert_eq!(engine::retention::sweep(&app.db).await.unwrap(), 2);
    assert_eq!(count().await, 1);
});

db_test!(
    concurrent_clients_and_two_instances,
    |app: TestApp| async move {
        // 16 clients at once, through two serving instances: matching events for three subjects
        // (dedupe `day`: one run each) and for an every-event automation (dedupe `none`: one run per
        // acknowledged event), while they also enable both automations again and make dry runs.
        // No 5xx, every run made once and delivered once.
        const CLIENTS: usize = 16;
        const EVENTS: usize = 5;
        let o = org(&app, "Busy Co").await;
        let (url, rx) = start_receiver(&[]).await;
        let (dest, _) = webhook(&app, &o, &format!("{url}/b")).await;
        let sig = match_signal(&app, &o, "Busy", on_event("busy", json!([]))).await;
        let daily = automation(&app, &o, on_signals(&[&sig], &[&dest], "ANY", json!({}))).await;
        let every = automation(
            &app,
            &o,
            on_signals(&[&sig], &[&dest], "ANY", json!({"dedupe": "none"})),
        )
        .await;
        for i in 0..3 {
            identify(&app, &o, &format!("u{i}@busy.co"), "acct_busy").await;
        }
        let second = app.another_instance().await;
        let bases = [app.base.clone(), second];
        let tasks: Vec<_> =
            (0..CLIENTS)
                .map(|c| {
                    let (client, base, key, pk) = (
                        app.client.clone(),
                        bases[c % 2].clone(),
                        o.key.clone(),
                        o.pk.clone(),
                    );
                    let (daily, every) = (daily.clone(), every.clone());
                    tokio::spawn(async move {
                        let mut statuses = Vec::new();
                        let events: Vec<Value> = (0..EVENTS)
                    .map(|e| json!({"type": "custom", "eventName": "busy", "url": "https://x.co/",
                        "path": "/", "email": format!("u{}@busy.co", (c + e) % 3),
                        "messageId": uuid::Uuid::new_v4().to_string()}))
                    .collect();
                        let r = client
                            .post(format!("{base}/api/i/v1/{pk}/events"))
                            .json(&json!({"source": "server", "events": events}))
                            .send()
                            .await
                            .unwrap();
                        statuses.push(r.status().as_u16());
                        for id in [&daily, &every] {
                            let r = client
                                .post(format!("{base}/api/automations/{id}/enable"))
                                .bearer_auth(&key)
                                .send()
                                .await
                                .unwrap();
                            statuses.push(r.status().as_u16());
                        }
                        let r = client
                            .post(format!("{base}/api/automations/{daily}/test"))
                            .bearer_auth(&key)
                            .json(&json!({"subject": {"grain": "user", "key": "u0@busy.co"}}))
                            .send()
                            .await
                            .unwrap();
                        statuses.push(r.status().as_u16());
                        statuses
                    })
                })
                .collect();
        for t in tasks {
            let statuses = t.await.unwrap();
            assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
        }
        app.settle().await;
        let daily_runs = settled_runs(&app, &o, &daily, 3).await;
        assert_eq!(daily_runs.len(), 3, "{daily_runs:#?}");
        let expected = CLIENTS * EVENTS;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let delivered = automation_run::Entity::find()
                .filter(automation_run::Column::OrganizationId.eq(&o.id))
                .filter(automation_run::Column::Status.eq(AutomationRunStatus::Delivered))
                .count(&app.db)
                .await
                .unwrap() as usize;
            if delivered >= expected + 3 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{delivered} delivered"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let every_runs = automation_run::Entity::find()
            .filter(automation_run::Column::AutomationId.eq(&every))
            .count(&app.db)
            .await
            .unwrap() as usize;
        assert_eq!(every_runs, expected);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(rx.bodies().len(), expected + 3, "each run delivered once");
    }
);
