//! `svc_send_notification` against receivers on 127.0.0.1: signatures, Slack messages, retries
//! now and in the background, default destination, refusals, tenancy.

use custintel::tools::{send_notification, ToolContext, ToolError};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::{
    db_test,
    helpers::TestApp,
    receiver::{start_receiver, verify},
    snap,
};

async fn webhook(
    app: &TestApp,
    key: &str,
    name: &str,
    url: &str,
    is_default: bool,
) -> (String, String) {
    let r = app
        .post(
            "/api/destinations",
            "/api/destinations",
            key,
            Some(json!({"type": "WEBHOOK_ENDPOINT", "name": name, "url": url, "isDefault": is_default})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    (
        r.body["result"]["data"]["destination"]["id"]
            .as_str()
            .unwrap()
            .to_string(),
        r.body["result"]["data"]["signingSecret"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

fn ctx(app: &TestApp, org: &str) -> ToolContext {
    ToolContext::new(app.state.clone(), org.to_string())
}

fn input(v: Value) -> send_notification::Input {
    serde_json::from_value(v).expect("input parses")
}

db_test!(webhook_delivery_is_signed, |app: TestApp| async move {
    let org = app.org("Notify Co").await;
    let (url, rx) = start_receiver(&[]).await;
    let (id, secret) = webhook(&app, &org.api_key, "Ops", &format!("{url}/hook"), false).await;
    let out = send_notification::run(
        &ctx(&app, &org.organization_id),
        input(json!({
            "title": "Churn risk: Acme", "message": "Usage fell 40% this week.", "severity": "warning",
            "source": "churn-watch", "subject": "acme.com", "payload": {"customer": "acme.com", "drop": 0.4},
            "markdown": "*Usage* fell **40%**", "destinations": [id]
        })),
    )
    .await
    .unwrap();
    assert_eq!(out["deliveries"][0]["status"], "delivered");
    assert_eq!(out["deliveries"][0]["attempts"], 1);
    assert_eq!(out["deliveries"][0]["httpStatus"], 200);
    snap!("notification_delivered", out);
    let seen = rx.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let (headers, body) = &seen[0];
    verify(&secret, headers, body);
    let sent: Value = serde_json::from_str(body).unwrap();
    assert_eq!(sent["type"], "notification");
    assert_eq!(sent["title"], "Churn risk: Acme");
    assert_eq!(sent["severity"], "warning");
    assert_eq!(sent["payload"]["drop"], 0.4);
    assert!(sent["sentAt"].is_string());

    // The destination's key works as well as its id; the delivery is recorded.
    let key = app
        .get(
            "/api/destinations/{id}",
            &format!("/api/destinations/{id}"),
            &org.api_key,
        )
        .await
        .body["result"]["data"]["destination"]["key"]
        .as_str()
        .unwrap()
        .to_string();
    let out = send_notification::run(
        &ctx(&app, &org.organization_id),
        input(json!({"title": "t", "message": "m", "destinations": [key]})),
    )
    .await
    .unwrap();
    assert_eq!(out["deliveries"][0]["destinationId"], id.as_str());
    use sea_orm::{EntityTrait, PaginatorTrait};
    assert_eq!(
        entity::notification_delivery::Entity::find()
            .count(&app.db)
            .await
            .unwrap(),
        2
    );
});

db_test!(
    retries_now_then_in_the_background,
    |app: TestApp| async move {
        let org = app.org("Retry Co").await;
        let c = ctx(&app, &org.organization_id);
        // Two failures, then success: delivered on the third attempt.
        let (url, rx) = start_receiver(&[503, 429]).await;
        let (id, _) = webhook(&app, &org.api_key, "Flaky", &format!("{url}/a"), false).await;
        let out = send_notification::run(
            &c,
            input(json!({"title": "t", "message": "m", "destinations": [id]})),
        )
        .await
        .unwrap();
        assert_eq!(out["deliveries"][0]["status"], "delivered");
        assert_eq!(out["deliveries"][0]["attempts"], 3);
        // The same message id on every attempt, so receivers can drop duplicates.
        let ids: Vec<String> = rx
            .seen
            .lock()
            .unwrap()
            .iter()
            .map(|(h, _)| h["webhook-id"].to_str().unwrap().to_string())
            .collect();
        assert_eq!(ids.len(), 3);
        assert!(ids.iter().all(|i| i == &ids[0]));

        // A 4xx other than 429 fails at once.
        let (url, _) = start_receiver(&[404]).await;
        let (id, _) = webhook(&app, &org.api_key, "Gone", &format!("{url}/b"), false).await;
        let out = send_notification::run(
            &c,
            input(json!({"title": "t", "message": "m", "destinations": [id]})),
        )
        .await
        .unwrap();
        assert_eq!(out["deliveries"][0]["status"], "failed");
        assert_eq!(out["deliveries"][0]["attempts"], 1);
        assert_eq!(out["deliveries"][0]["httpStatus"], 404);

        // Four 5xx: `retrying`, then the background worker delivers it once due.
        let (url, rx) = start_receiver(&[500, 500, 500, 500]).await;
        let (id, _) = webhook(&app, &org.api_key, "Down", &format!("{url}/c"), false).await;
        let out = send_notification::run(
            &c,
            input(json!({"title": "t", "message": "m", "destinations": [id]})),
        )
        .await
        .unwrap();
        assert_eq!(out["deliveries"][0]["status"], "retrying");
        assert_eq!(out["deliveries"][0]["attempts"], 4);
        assert_eq!(out["deliveries"][0]["httpStatus"], 500);
        snap!("notification_retrying", out);
        use entity::notification_delivery as nd;
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        // Not due yet: nothing is attempted.
        assert_eq!(
            custintel::notify::worker::run_due(&app.db, &app.state.secrets)
                .await
                .unwrap(),
            0
        );
        nd::Entity::update_many()
            .col_expr(
                nd::Column::NextAttemptAt,
                sea_orm::sea_query::Expr::value(Some(
                    chrono::Utc::now() - chrono::Duration::seconds(1),
                )),
            )
            .filter(nd::Column::DestinationId.eq(id.clone()))
            .exec(&app.db)
            .await
            .unwrap();
        assert_eq!(
            custintel::notify::worker::run_due(&app.db, &app.state.secrets)
                .await
                .unwrap(),
            1
        );
        let row = nd::Entity::find()
            .filter(nd::Column::DestinationId.eq(id.clone()))
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            row.status,
            entity::notification_delivery::DeliveryStatus::Delivered
        );
        assert_eq!(row.attempts, 5);
        assert_eq!(rx.seen.lock().unwrap().len(), 5);
        // Delivered rows are never attempted again.
        assert_eq!(
            custintel::notify::worker::run_due(&app.db, &app.state.secrets)
                .await
                .unwrap(),
            0
        );
    }
);

db_test!(
    default_destination_slack_and_refusals,
    |app: TestApp| async move {
        let org = app.org("Default Co").await;
        let c = ctx(&app, &org.organization_id);
        // No destination at all: refused.
        let err = send_notification::run(&c, input(json!({"title": "t", "message": "m"})))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Refused(_)), "{err:?}");

        // A Slack default destination gets a message built from the markdown.
        let (url, rx) = start_receiver(&[]).await;
        let r = app
        .post(
            "/api/destinations",
            "/api/destinations",
            &org.api_key,
            Some(json!({"type": "SLACK_CHANNEL", "name": "CS alerts", "webhookUrl": format!("{url}/services/T1/B2/secret"), "isDefault": true})),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let out = send_notification::run(
        &c,
        input(json!({"title": "Renewal due", "markdown": "Acme renews in *7 days*", "severity": "critical"})),
    )
    .await
    .unwrap();
        assert_eq!(out["deliveries"][0]["status"], "delivered");
        let (_, body) = rx.seen.lock().unwrap()[0].clone();
        let msg: Value = serde_json::from_str(&body).unwrap();
        assert!(msg["text"]
            .as_str()
            .unwrap()
            .contains("Acme renews in *7 days*"));
        assert!(msg["text"].as_str().unwrap().contains("Renewal due"));

        // Unknown names point at the offending entry; bad input names its field.
        match send_notification::run(
            &c,
            input(json!({"title": "t", "message": "m", "destinations": ["nope"]})),
        )
        .await
        {
            Err(ToolError::Invalid(issues)) => assert_eq!(
                serde_json::to_value(&issues[0].path).unwrap(),
                json!(["destinations", 0])
            ),
            other => panic!("{other:?}"),
        }
        match send_notification::run(&c, input(json!({"title": ""}))).await {
            Err(ToolError::Invalid(issues)) => {
                let paths: Vec<Value> = issues
                    .iter()
                    .map(|i| serde_json::to_value(&i.path).unwrap())
                    .collect();
                assert!(paths.contains(&json!(["title"])));
                assert!(paths.contains(&json!(["message"])));
            }
            other => panic!("{other:?}"),
        }
        assert!(serde_json::from_value::<send_notification::Input>(
            json!({"title": "t", "message": "m", "cc": "x"})
        )
        .is_err());

        // Disabled destinations are skipped; naming only disabled ones is refused.
        let (url, _) = start_receiver(&[]).await;
        let (id, _) = webhook(&app, &org.api_key, "Off", &format!("{url}/x"), false).await;
        app.post(
            "/api/destinations/{id}/disable",
            &format!("/api/destinations/{id}/disable"),
            &org.api_key,
            None,
        )
        .await;
        let err = send_notification::run(
            &c,
            input(json!({"title": "t", "message": "m", "destinations": [id]})),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ToolError::Refused(_)), "{err:?}");
    }
);

db_test!(
    other_organizations_destinations_are_unknown,
    |app: TestApp| async move {
        let a = app.org("A").await;
        let b = app.org("B").await;
        let (url, rx) = start_receiver(&[]).await;
        let (a_dest, _) = webhook(&app, &a.api_key, "A hook", &format!("{url}/a"), true).await;
        match send_notification::run(
            &ctx(&app, &b.organization_id),
            input(json!({"title": "t", "message": "m", "destinations": [a_dest]})),
        )
        .await
        {
            Err(ToolError::Invalid(_)) => {}
            other => panic!("{other:?}"),
        }
        // B has no default of its own; A's default is not B's.
        let err = send_notification::run(
            &ctx(&app, &b.organization_id),
            input(json!({"title": "t", "message": "m"})),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ToolError::Refused(_)));
        assert!(rx.seen.lock().unwrap().is_empty());
    }
);

db_test!(
    concurrent_notifications_are_each_delivered_once,
    |app: TestApp| async move {
        let org = app.org("Busy Notify Co").await;
        let (url, rx) = start_receiver(&[]).await;
        let (a, _) = webhook(&app, &org.api_key, "A", &format!("{url}/a"), false).await;
        let (b, _) = webhook(&app, &org.api_key, "B", &format!("{url}/b"), false).await;
        const CALLERS: usize = 16;
        let calls = (0..CALLERS).map(|i| {
            let ctx = ctx(&app, &org.organization_id);
            let input = input(json!({
                "title": format!("call {i}"), "message": "m", "destinations": [a, b]
            }));
            async move { send_notification::run(&ctx, input).await }
        });
        for out in futures::future::join_all(calls).await {
            let out = out.expect("each call answers");
            for delivery in out["deliveries"].as_array().unwrap() {
                assert_eq!(delivery["status"], "delivered", "{out}");
            }
        }
        // Every call reached both receivers once, and each delivery is one row.
        let seen = rx.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), CALLERS * 2);
        let mut titles: Vec<String> = seen
            .iter()
            .map(|(_, body)| serde_json::from_str::<Value>(body).unwrap()["title"].to_string())
            .collect();
        titles.sort();
        titles.dedup();
        assert_eq!(titles.len(), CALLERS);
        use sea_orm::{EntityTrait, PaginatorTrait};
        assert_eq!(
            entity::notification_delivery::Entity::find()
                .count(&app.db)
                .await
                .unwrap(),
            (CALLERS * 2) as u64
        );
    }
);
