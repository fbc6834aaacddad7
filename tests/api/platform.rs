//! Platform actions over real HTTP: envelopes, bounds, state transitions, scopes, tenancy.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::{db_test, helpers::TestApp, snap};

async fn automation_id(app: &TestApp, key: &str, automation_key: &str) -> String {
    let r = app
        .get(
            "/api/automations",
            "/api/automations?includeArchived=true",
            key,
        )
        .await;
    r.body["result"]["data"]["automations"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["key"] == automation_key))
        .and_then(|x| x["id"].as_str())
        .unwrap_or_else(|| panic!("automation {automation_key} in demo"))
        .to_string()
}

fn issue_paths(body: &Value) -> Vec<Value> {
    body["error"]["details"]["issues"]
        .as_array()
        .map(|a| a.iter().map(|i| i["path"].clone()).collect())
        .unwrap_or_default()
}

db_test!(agents_list_get_update_disable, |app: TestApp| async move {
    let org = app.demo_org().await;
    let key = org.api_key.as_str();
    let r = app.get("/api/agents", "/api/agents", key).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["commandId"], "agent.list");
    assert_eq!(r.body["result"]["operationId"], "agent.list");
    let agents = r.body["result"]["data"]["agents"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(agents.len(), 3);
    assert!(
        r.body["result"].get("auditId").is_none(),
        "reads write no audit row"
    );
    let id = agents[0]["id"].as_str().unwrap().to_string();
    let agent_key = agents[0]["agentKey"].as_str().unwrap().to_string();

    let r = app
        .get("/api/agents/{id}", &format!("/api/agents/{id}"), key)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["commandId"], "agent.get");
    snap!("agent_get", r.body);
    // An agent may also be addressed by its key.
    let r = app
        .get("/api/agents/{id}", &format!("/api/agents/{agent_key}"), key)
        .await;
    assert_eq!(r.body["result"]["data"]["agent"]["id"], id.as_str());

    let r = app
        .patch(
            "/api/agents/{id}",
            &format!("/api/agents/{id}"),
            key,
            json!({"displayName": "Renamed agent", "instructions": "Watch renewals.", "actionKeys": ["notify", "summarize"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["commandId"], "agent.update");
    assert_eq!(
        r.body["result"]["data"]["agent"]["displayName"],
        "Renamed agent"
    );
    assert_eq!(
        r.body["result"]["data"]["agent"]["actionKeys"],
        json!(["notify", "summarize"])
    );
    assert!(r.body["result"]["data"]["agent"]
        .get("instructions")
        .is_none());
    assert_eq!(
        r.body["result"]["resources"],
        json!([{"type": "agent", "id": id}])
    );
    snap!("agent_update", r.body);

    // The audit row behind auditId exists and names the command.
    let audit_id = r.body["result"]["auditId"].as_str().unwrap().to_string();
    use sea_orm::EntityTrait;
    let row = entity::audit_entry::Entity::find_by_id(audit_id)
        .one(&app.db)
        .await
        .unwrap()
        .expect("audit row");
    assert_eq!(row.command_id, "agent.update");
    assert_eq!(row.organization_id, org.organization_id);

    for (body, path) in [
        (json!({"displayName": ""}), json!(["displayName"])),
        (
            json!({"displayName": "x".repeat(121)}),
            json!(["displayName"]),
        ),
        (json!({"instructions": ""}), json!(["instructions"])),
        (
            json!({"instructions": "x".repeat(10_001)}),
            json!(["instructions"]),
        ),
        (json!({"actionKeys": ["ok", ""]}), json!(["actionKeys", 1])),
        (json!({"actionKeys": "notify"}), json!(["actionKeys"])),
        (json!({"colour": "blue"}), json!(["colour"])),
    ] {
        let r = app
            .patch(
                "/api/agents/{id}",
                &format!("/api/agents/{id}"),
                key,
                body.clone(),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(r.body["error"]["code"], "validation_failed");
        assert_eq!(issue_paths(&r.body), vec![path], "{body}");
    }
    // Limits are inclusive.
    let r = app
        .patch(
            "/api/agents/{id}",
            &format!("/api/agents/{id}"),
            key,
            json!({"displayName": "x".repeat(120), "instructions": "y".repeat(10_000)}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = app
        .patch(
            "/api/agents/{id}",
            &format!("/api/agents/{id}"),
            key,
            json!({"displayName": ""}),
        )
        .await;
    snap!("agent_update_invalid", r.body);

    let r = app
        .post(
            "/api/agents/{id}/disable",
            &format!("/api/agents/{id}/disable"),
            key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["commandId"], "agent.disable");
    assert_eq!(
        r.body["result"]["data"]["agent"]["schedule"]["enabled"],
        false
    );
    assert_eq!(
        r.body["result"]["data"]["agent"]["schedule"]["nextRunAt"],
        Value::Null
    );
    snap!("agent_disable", r.body);

    let r = app
        .get("/api/agents/{id}", "/api/agents/no-such-agent", key)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body["error"]["code"], "not_found");
    assert_eq!(r.body["commandId"], "agent.get");
    snap!("agent_not_found", r.body);
});

db_test!(signals_create_validate_archive, |app: TestApp| async move {
    let org = app.demo_org().await;
    let key = org.api_key.as_str();
    let r = app.get("/api/signals", "/api/signals", key).await;
    assert_eq!(r.status, StatusCode::OK);
    let active = r.body["result"]["data"]["signals"]
        .as_array()
        .unwrap()
        .len();
    assert!(active >= 3);
    let r = app
        .get("/api/signals", "/api/signals?includeArchived=true", key)
        .await;
    assert_eq!(
        r.body["result"]["data"]["signals"]
            .as_array()
            .unwrap()
            .len(),
        active + 1
    );

    let definition = json!({
        "grain": "user",
        "subjectResolver": "email",
        "eventNames": ["report_exported"],
        "propertyConditions": [
            {"property": "format", "operator": "eq", "value": "csv"},
            {"property": "rows", "operator": "exists"}
        ],
        "conditionMode": "ALL"
    });
    let r = app
        .post(
            "/api/signals",
            "/api/signals",
            key,
            Some(json!({"kind": "EVENT_MATCH", "name": "Report exported", "definition": definition, "description": null})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["commandId"], "signal.create");
    let signal = r.body["result"]["data"]["signal"].clone();
    assert_eq!(signal["key"], "report-exported");
    assert_eq!(signal["kind"], "EVENT_MATCH");
    assert_eq!(signal["managedBy"], "UI");
    assert_eq!(signal["definition"], definition);
    assert_eq!(signal["description"], Value::Null);
    assert_eq!(signal["archivedAt"], Value::Null);
    snap!("signal_create", r.body);
    let id = signal["id"].as_str().unwrap().to_string();

    // Same name again: a distinct key.
    let r = app
        .post(
            "/api/signals",
            "/api/signals",
            key,
            Some(
                json!({"kind": "EVENT_MATCH", "name": "Report exported", "definition": definition}),
            ),
        )
        .await;
    assert_eq!(
        r.body["result"]["data"]["signal"]["key"],
        "report-exported-2"
    );

    let r = app
        .get("/api/signals/{id}", &format!("/api/signals/{id}"), key)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["commandId"], "signal.get");
    snap!("signal_get", r.body);

    let mut bad_grain = definition.clone();
    bad_grain["grain"] = json!("account");
    let mut no_events = definition.clone();
    no_events["eventNames"] = json!([]);
    let mut empty_event = definition.clone();
    empty_event["eventNames"] = json!(["ok", ""]);
    let mut bad_op = definition.clone();
    bad_op["propertyConditions"][0]["operator"] = json!("like");
    let mut extra = definition.clone();
    extra["window"] = json!("7d");
    let mut missing = definition.clone();
    missing.as_object_mut().unwrap().remove("conditionMode");
    let mut exists_with_value = definition.clone();
    exists_with_value["propertyConditions"][1]["value"] = json!(1);
    for (body, path) in [
        (
            json!({"kind": "EVENT_PATTERN", "name": "x", "definition": definition}),
            json!(["kind"]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "name": "", "definition": definition}),
            json!(["name"]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "name": "x".repeat(121), "definition": definition}),
            json!(["name"]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "name": "x", "definition": definition, "description": "d".repeat(1001)}),
            json!(["description"]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "definition": definition}),
            json!(["name"]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "name": "x", "definition": bad_grain}),
            json!(["definition", "grain"]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "name": "x", "definition": no_events}),
            json!(["definition", "eventNames"]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "name": "x", "definition": empty_event}),
            json!(["definition", "eventNames", 1]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "name": "x", "definition": bad_op}),
            json!(["definition", "propertyConditions", 0, "operator"]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "name": "x", "definition": extra}),
            json!(["definition", "window"]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "name": "x", "definition": missing}),
            json!(["definition", "conditionMode"]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "name": "x", "definition": exists_with_value}),
            json!(["definition", "propertyConditions", 1, "value"]),
        ),
        (
            json!({"kind": "EVENT_MATCH", "name": "x", "definition": "all"}),
            json!(["definition"]),
        ),
    ] {
        let r = app
            .post("/api/signals", "/api/signals", key, Some(body.clone()))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(r.body["commandId"], "signal.create");
        assert_eq!(issue_paths(&r.body), vec![path], "{body} -> {}", r.body);
    }

    let r = app
        .post(
            "/api/signals/{id}/archive",
            &format!("/api/signals/{id}/archive"),
            key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["commandId"], "signal.archive");
    let archived_at = r.body["result"]["data"]["signal"]["archivedAt"].clone();
    assert!(archived_at.is_string());
    assert_eq!(r.body["result"]["data"]["signal"]["id"], id.as_str());
    snap!("signal_archive", r.body);
    // Archiving again keeps the first time.
    let r = app
        .post(
            "/api/signals/{id}/archive",
            &format!("/api/signals/{id}/archive"),
            key,
            None,
        )
        .await;
    assert_eq!(
        r.body["result"]["data"]["signal"]["archivedAt"],
        archived_at
    );

    // Ids that are not UUIDs, or unknown UUIDs, are 404.
    for path in [
        "/api/signals/not-a-uuid",
        "/api/signals/00000000-0000-4000-8000-000000000000",
    ] {
        let r = app.get("/api/signals/{id}", path, key).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        assert_eq!(r.body["error"]["code"], "not_found");
    }
});

db_test!(automations_enable_rules, |app: TestApp| async move {
    let org = app.demo_org().await;
    let key = org.api_key.as_str();
    let r = app.get("/api/automations", "/api/automations", key).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["commandId"], "automation.list");
    assert_eq!(
        r.body["result"]["data"]["automations"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    snap!("automation_list", r.body);

    let ok_id = automation_id(&app, key, "churn-risk-alert").await;
    let r = app
        .post(
            "/api/automations/{id}/enable",
            &format!("/api/automations/{ok_id}/enable"),
            key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["commandId"], "automation.enable");
    assert_eq!(r.body["commandVersion"], 1);
    assert_eq!(r.body["result"]["status"], "completed");
    assert_eq!(r.body["result"]["data"]["automation"]["enabled"], true);
    assert_eq!(r.body["result"]["resources"][0]["type"], "automation");
    assert!(r.body["result"]["auditId"].is_string());
    snap!("automation_enable", r.body);
    // Already enabled: 200, unchanged.
    let r = app
        .post(
            "/api/automations/{id}/enable",
            &format!("/api/automations/{ok_id}/enable"),
            key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["result"]["data"]["automation"]["enabled"], true);

    let r = app
        .post(
            "/api/automations/{id}/disable",
            &format!("/api/automations/{ok_id}/disable"),
            key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["commandId"], "automation.disable");
    assert_eq!(r.body["result"]["data"]["automation"]["enabled"], false);
    assert_eq!(
        r.body["result"]["data"]["automation"]["nextRunAt"],
        Value::Null
    );
    snap!("automation_disable", r.body);

    let archived = automation_id(&app, key, "legacy-trial-nudge").await;
    let r = app
        .post(
            "/api/automations/{id}/enable",
            &format!("/api/automations/{archived}/enable"),
            key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.body["error"]["code"], "conflict");
    assert_eq!(r.body["error"]["retryable"], false);
    snap!("automation_enable_conflict_archived", r.body);

    let no_dest = automation_id(&app, key, "expansion-digest").await;
    let r = app
        .post(
            "/api/automations/{id}/enable",
            &format!("/api/automations/{no_dest}/enable"),
            key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    let unmet = r.body["error"]["details"]["unmet"].as_array().unwrap();
    assert_eq!(unmet.len(), 1);
    assert!(unmet[0].as_str().unwrap().contains("destination"));

    // Archive the only signal of the enable-able automation: now it conflicts too.
    let r = app
        .get(
            "/api/automations/{id}",
            &format!("/api/automations/{ok_id}"),
            key,
        )
        .await;
    assert_eq!(r.body["commandId"], "automation.get");
    for s in r.body["result"]["data"]["automation"]["signals"]
        .as_array()
        .unwrap()
    {
        let sid = s["id"].as_str().unwrap();
        app.post(
            "/api/signals/{id}/archive",
            &format!("/api/signals/{sid}/archive"),
            key,
            None,
        )
        .await;
    }
    let r = app
        .post(
            "/api/automations/{id}/enable",
            &format!("/api/automations/{ok_id}/enable"),
            key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert!(r.body["error"]["details"]["unmet"][0]
        .as_str()
        .unwrap()
        .contains("signal"));

    for path in [
        "/api/automations/nope/enable",
        "/api/automations/7f0b3c52-5d1e-4b61-a7c4-2a1b2c3d4e5f/enable",
    ] {
        let r = app
            .post("/api/automations/{id}/enable", path, key, None)
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        assert_eq!(r.body["commandId"], "automation.enable");
    }
    let r = app
        .post(
            "/api/automations/{id}/enable",
            "/api/automations/nope/enable",
            key,
            None,
        )
        .await;
    snap!("automation_enable_not_found", r.body);
});

db_test!(automation_create, |app: TestApp| async move {
    let org = app.demo_org().await;
    let key = org.api_key.as_str();
    let signals = app.get("/api/signals", "/api/signals", key).await.body["result"]["data"]
        ["signals"]
        .clone();
    let dests = app
        .get("/api/destinations", "/api/destinations", key)
        .await
        .body["result"]["data"]["destinations"]
        .clone();
    let sid = signals[0]["id"].as_str().unwrap();
    let enabled_dest = dests
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["enabled"] == true)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let body = json!({
        "name": "Upsell ping",
        "triggerType": "SIGNAL_OCCURRENCE",
        "triggerJson": {"window": "1d"},
        "matchMode": "ANY",
        "signalIds": [sid],
        "destinationIds": [enabled_dest],
    });
    let r = app
        .post(
            "/api/automations",
            "/api/automations",
            key,
            Some(body.clone()),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["commandId"], "automation.create");
    let a = &r.body["result"]["data"]["automation"];
    assert_eq!(a["enabled"], false);
    assert_eq!(a["managedBy"], "UI");
    assert_eq!(a["key"], "upsell-ping");
    assert_eq!(a["audienceFilterJson"], json!({}));
    assert_eq!(a["activeSignalCount"], 1);
    assert_eq!(a["activeDestinationCount"], 1);
    assert_eq!(a["agentId"], Value::Null);
    snap!("automation_create", r.body);
    let id = a["id"].as_str().unwrap().to_string();
    let r = app
        .post(
            "/api/automations/{id}/enable",
            &format!("/api/automations/{id}/enable"),
            key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);

    let r = app.post("/api/automations", "/api/automations", key, Some(json!({
        "name": "Bad", "triggerType": "SIGNAL_OCCURRENCE", "triggerJson": {}, "matchMode": "ANY",
        "signalIds": ["00000000-0000-4000-8000-000000000000"], "destinationIds": [],
    }))).await;
    // An id that names nothing in the organization: 404, as in a path.
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "not_found");
    snap!("automation_create_unknown_signal", r.body);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("00000000-0000-4000-8000-000000000000"));
    let r = app
        .post(
            "/api/automations",
            "/api/automations",
            key,
            Some(json!({
                "name": "Bad", "triggerType": "EVERY_MINUTE", "triggerJson": {}, "matchMode": "ANY",
            })),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(issue_paths(&r.body), vec![json!(["triggerType"])]);
    // `atLeast` beyond the linked active signals: a requirement of enabling (409), not of the
    // body.
    let r = app.post("/api/automations", "/api/automations", key, Some(json!({
        "name": "Three of one", "triggerType": "SIGNAL_OCCURRENCE", "triggerJson": {"atLeast": 3},
        "matchMode": "AT_LEAST", "signalIds": [sid], "destinationIds": [enabled_dest],
    }))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let three = r.body["result"]["data"]["automation"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = app
        .post(
            "/api/automations/{id}/enable",
            &format!("/api/automations/{three}/enable"),
            key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("atLeast"),
        "{}",
        r.body
    );
    let r = app.post("/api/automations", "/api/automations", key, Some(json!({
        "name": "Dup", "key": "upsell-ping", "triggerType": "SCHEDULE", "triggerJson": {"cron": "0 9 * * 1"}, "matchMode": "ALL",
    }))).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
});

db_test!(destinations_crud_and_url_rule, |app: TestApp| async move {
    let org = app.demo_org().await;
    let key = org.api_key.as_str();
    let r = app.get("/api/destinations", "/api/destinations", key).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["commandId"], "destination.list");
    let list = r.body["result"]["data"]["destinations"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(list.len(), 3);
    assert_eq!(
        list.iter().filter(|d| d["kind"] == "SLACK_CHANNEL").count(),
        1
    );
    for d in &list {
        let text = d["maskedConfig"].to_string();
        assert!(
            !text.contains("hooks.slack.com/services/T000/B000/"),
            "slack URL masked: {text}"
        );
        assert!(text.contains("****"), "secrets masked: {text}");
    }

    let r = app
        .post(
            "/api/destinations",
            "/api/destinations",
            key,
            Some(json!({"type": "WEBHOOK_ENDPOINT", "name": "Ops hook", "url": "https://ops.example.com/hook", "isDefault": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["commandId"], "destination.create");
    let secret = r.body["result"]["data"]["signingSecret"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(secret.starts_with("whsec_"));
    let d = r.body["result"]["data"]["destination"].clone();
    assert_eq!(d["provider"], "WEBHOOK");
    assert_eq!(d["isDefault"], true);
    assert!(!d["maskedConfig"].to_string().contains(&secret));
    snap!("destination_create", r.body);
    let id = d["id"].as_str().unwrap().to_string();
    // Only one default.
    let r = app.get("/api/destinations", "/api/destinations", key).await;
    let defaults = r.body["result"]["data"]["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["isDefault"] == true)
        .count();
    assert_eq!(defaults, 1);

    let r = app
        .post(
            "/api/destinations",
            "/api/destinations",
            key,
            Some(json!({"type": "SLACK_CHANNEL", "name": "CS alerts 2", "webhookUrl": "https://hooks.slack.com/services/T1/B2/abcdefghijklmnop"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body["result"]["data"].get("signingSecret").is_none());
    assert_eq!(r.body["result"]["data"]["destination"]["provider"], "SLACK");
    // A valid change for a webhook, sent to a Slack channel: its state conflicts, 409.
    let slack = r.body["result"]["data"]["destination"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = app
        .patch(
            "/api/destinations/{id}",
            &format!("/api/destinations/{slack}"),
            key,
            json!({"type": "WEBHOOK_ENDPOINT", "name": "renamed"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "conflict");
    snap!("destination_update_other_kind", r.body);

    let accepted = [
        "https://example.com",
        "https://example.com/hook?x=1",
        "http://localhost",
        "http://localhost:8080/hook",
        "http://localhost/hook",
        "http://127.0.0.1:9000",
        "http://[::1]:9000/x",
        "http://::1",
    ];
    for url in accepted {
        let r = app
            .patch(
                "/api/destinations/{id}",
                &format!("/api/destinations/{id}"),
                key,
                json!({"type": "WEBHOOK_ENDPOINT", "url": url}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{url}: {}", r.body);
        assert_eq!(
            r.body["result"]["data"]["destination"]["maskedConfig"]["url"],
            url
        );
    }
    let rejected = [
        "http://example.com",
        "http://localhost.evil.com",
        "http://127.0.0.1.nip.io",
        "ftp://localhost",
        "localhost:8080",
        "https://",
        "",
    ];
    for url in rejected {
        let r = app
            .patch(
                "/api/destinations/{id}",
                &format!("/api/destinations/{id}"),
                key,
                json!({"type": "WEBHOOK_ENDPOINT", "url": url}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{url}");
        assert_eq!(issue_paths(&r.body), vec![json!(["url"])]);
    }

    let r = app
        .patch(
            "/api/destinations/{id}",
            &format!("/api/destinations/{id}"),
            key,
            json!({"type": "WEBHOOK_ENDPOINT", "name": "Ops webhook", "description": "Pages the on-call", "enabled": false}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["commandId"], "destination.update");
    let d = &r.body["result"]["data"]["destination"];
    assert_eq!(d["name"], "Ops webhook");
    assert_eq!(d["description"], "Pages the on-call");
    assert_eq!(d["enabled"], false);
    snap!("destination_update", r.body);
    let r = app
        .patch(
            "/api/destinations/{id}",
            &format!("/api/destinations/{id}"),
            key,
            json!({"type": "WEBHOOK_ENDPOINT", "description": null, "enabled": true}),
        )
        .await;
    assert_eq!(
        r.body["result"]["data"]["destination"]["description"],
        Value::Null
    );
    assert_eq!(r.body["result"]["data"]["destination"]["enabled"], true);
    for (body, path) in [
        (json!({"type": "SLACK_CHANNEL"}), json!(["type"])),
        (json!({"name": "x"}), json!(["type"])),
        (
            json!({"type": "WEBHOOK_ENDPOINT", "name": ""}),
            json!(["name"]),
        ),
        (
            json!({"type": "WEBHOOK_ENDPOINT", "description": "d".repeat(1001)}),
            json!(["description"]),
        ),
        (
            json!({"type": "WEBHOOK_ENDPOINT", "enabled": "yes"}),
            json!(["enabled"]),
        ),
    ] {
        let r = app
            .patch(
                "/api/destinations/{id}",
                &format!("/api/destinations/{id}"),
                key,
                body.clone(),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(issue_paths(&r.body), vec![path], "{body}");
    }

    let r = app
        .post(
            "/api/destinations/{id}/disable",
            &format!("/api/destinations/{id}/disable"),
            key,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["commandId"], "destination.disable");
    assert_eq!(r.body["result"]["data"]["destination"]["enabled"], false);
    snap!("destination_disable", r.body);
    let r = app
        .get(
            "/api/destinations/{id}",
            &format!("/api/destinations/{id}"),
            key,
        )
        .await;
    assert_eq!(r.body["commandId"], "destination.get");
    assert_eq!(r.body["result"]["data"]["destination"]["enabled"], false);
});

db_test!(
    scopes_auth_and_malformed_requests,
    |app: TestApp| async move {
        let org = app.demo_org().await;
        let key = org.api_key.as_str();
        let ro = custintel::ops::admin::create_key(&app.db, &org.organization_id, None, true)
            .await
            .unwrap();
        let auto = automation_id(&app, key, "churn-risk-alert").await;
        let agent = app.get("/api/agents", "/api/agents", key).await.body["result"]["data"]
            ["agents"][0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let dest = app
            .get("/api/destinations", "/api/destinations", key)
            .await
            .body["result"]["data"]["destinations"][0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let sig = app.get("/api/signals", "/api/signals", key).await.body["result"]["data"]
            ["signals"][0]["id"]
            .as_str()
            .unwrap()
            .to_string();

        // Reads work with a read-only key; every write answers 403 authorization_denied.
        let r = app
            .get("/api/automations", "/api/automations", &ro.api_key)
            .await;
        assert_eq!(r.status, StatusCode::OK);
        let writes: Vec<(Method, &str, String, Option<Value>)> = vec![
            (
                Method::POST,
                "/api/automations/{id}/enable",
                format!("/api/automations/{auto}/enable"),
                None,
            ),
            (
                Method::POST,
                "/api/automations/{id}/disable",
                format!("/api/automations/{auto}/disable"),
                None,
            ),
            (
                Method::PATCH,
                "/api/agents/{id}",
                format!("/api/agents/{agent}"),
                Some(json!({"displayName": "x"})),
            ),
            (
                Method::POST,
                "/api/agents/{id}/disable",
                format!("/api/agents/{agent}/disable"),
                None,
            ),
            (
                Method::POST,
                "/api/signals/{id}/archive",
                format!("/api/signals/{sig}/archive"),
                None,
            ),
            (
                Method::POST,
                "/api/signals",
                "/api/signals".to_string(),
                Some(
                    json!({"kind": "EVENT_MATCH", "name": "n", "definition": {"grain": "user", "subjectResolver": "email", "eventNames": ["a"], "propertyConditions": [], "conditionMode": "ANY"}}),
                ),
            ),
            (
                Method::PATCH,
                "/api/destinations/{id}",
                format!("/api/destinations/{dest}"),
                Some(json!({"type": "WEBHOOK_ENDPOINT"})),
            ),
            (
                Method::POST,
                "/api/destinations/{id}/disable",
                format!("/api/destinations/{dest}/disable"),
                None,
            ),
            (
                Method::POST,
                "/api/destinations",
                "/api/destinations".to_string(),
                Some(
                    json!({"type": "WEBHOOK_ENDPOINT", "name": "n", "url": "https://x.example.com"}),
                ),
            ),
            (
                Method::POST,
                "/api/automations",
                "/api/automations".to_string(),
                Some(
                    json!({"name": "n", "triggerType": "SCHEDULE", "triggerJson": {"every": "1d"}, "matchMode": "ANY"}),
                ),
            ),
        ];
        for (method, route, path, body) in writes {
            let r = app
                .call(method.clone(), route, &path, Some(&ro.api_key), body)
                .await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{method} {path}");
            assert_eq!(r.body["error"]["code"], "authorization_denied");
        }
        let r = app
            .post(
                "/api/automations/{id}/enable",
                &format!("/api/automations/{auto}/enable"),
                &ro.api_key,
                None,
            )
            .await;
        snap!("automation_enable_forbidden", r.body);

        // 401: missing, unknown, malformed and disabled keys.
        let r = app
            .call(
                Method::POST,
                "/api/automations/{id}/enable",
                &format!("/api/automations/{auto}/enable"),
                None,
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        snap!("unauthorized_missing_key", r.body);
        for bad in ["ok_doesnotexist", "sk_live_123", ""] {
            let r = app.get("/api/agents", "/api/agents", bad).await;
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{bad:?}");
            assert!(r.body["error"].is_string());
        }
        custintel::ops::admin::disable_key(&app.db, &ro.key_id)
            .await
            .unwrap();
        let r = app.get("/api/agents", "/api/agents", &ro.api_key).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        snap!("unauthorized_disabled_key", r.body);

        // Malformed JSON, wrong or missing content type: the spec's 400 envelope, not plain text.
        let path = format!("/api/agents/{agent}");
        let r = app
            .raw(
                Method::PATCH,
                &path,
                key,
                Some("application/json"),
                "{\"displayName\": ",
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.body["error"]["code"], "validation_failed");
        assert_eq!(r.body["commandId"], "agent.update");
        crate::helpers::check_schema("PATCH", "/api/agents/{id}", 400, &r.body);
        snap!("malformed_json", r.body);
        let r = app
            .raw(Method::PATCH, &path, key, Some("text/plain"), "{}")
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.body["error"]["code"], "validation_failed");
        let r = app.raw(Method::PATCH, &path, key, None, "{}").await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let r = app
            .raw(Method::PATCH, &path, key, Some("application/json"), "")
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let r = app
            .raw(Method::PATCH, &path, key, Some("application/json"), "[1,2]")
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);

        // Correlation ids: the caller's when sent, echoed in body and header.
        let resp = app
            .client
            .get(format!("{}/api/agents", app.base))
            .bearer_auth(key)
            .header("X-Correlation-Id", "trace-123")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.headers()["x-correlation-id"], "trace-123");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["correlationId"], "trace-123");
        let r = app.get("/api/agents", "/api/agents", key).await;
        let generated = r.body["correlationId"].as_str().unwrap();
        assert!(uuid::Uuid::parse_str(generated).is_ok());
        assert_eq!(r.headers["x-correlation-id"], generated);

        // Unknown routes answer JSON too.
        let r = app
            .raw(Method::GET, "/api/nothing-here", key, None, "")
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        assert!(r.body["error"].is_string());
    }
);

db_test!(organizations_are_isolated, |app: TestApp| async move {
    let a = app.demo_org().await;
    let b = app.demo_org().await;
    let a_auto = automation_id(&app, &a.api_key, "churn-risk-alert").await;
    let a_agents = app.get("/api/agents", "/api/agents", &a.api_key).await.body["result"]["data"]
        ["agents"]
        .clone();
    let a_agent = a_agents[0]["id"].as_str().unwrap();
    let a_sig = app
        .get("/api/signals", "/api/signals", &a.api_key)
        .await
        .body["result"]["data"]["signals"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let a_dest = app
        .get("/api/destinations", "/api/destinations", &a.api_key)
        .await
        .body["result"]["data"]["destinations"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    // B sees only its own resources...
    let b_autos = app
        .get(
            "/api/automations",
            "/api/automations?includeArchived=true",
            &b.api_key,
        )
        .await;
    assert!(b_autos.body["result"]["data"]["automations"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["id"] != a_auto.as_str()));
    // ...and every id of A is a 404 for B, reads and writes alike.
    let probes: Vec<(Method, &str, String, Option<Value>)> = vec![
        (
            Method::GET,
            "/api/automations/{id}",
            format!("/api/automations/{a_auto}"),
            None,
        ),
        (
            Method::POST,
            "/api/automations/{id}/enable",
            format!("/api/automations/{a_auto}/enable"),
            None,
        ),
        (
            Method::POST,
            "/api/automations/{id}/disable",
            format!("/api/automations/{a_auto}/disable"),
            None,
        ),
        (
            Method::GET,
            "/api/agents/{id}",
            format!("/api/agents/{a_agent}"),
            None,
        ),
        (
            Method::PATCH,
            "/api/agents/{id}",
            format!("/api/agents/{a_agent}"),
            Some(json!({"displayName": "pwned"})),
        ),
        (
            Method::POST,
            "/api/agents/{id}/disable",
            format!("/api/agents/{a_agent}/disable"),
            None,
        ),
        (
            Method::GET,
            "/api/signals/{id}",
            format!("/api/signals/{a_sig}"),
            None,
        ),
        (
            Method::POST,
            "/api/signals/{id}/archive",
            format!("/api/signals/{a_sig}/archive"),
            None,
        ),
        (
            Method::GET,
            "/api/destinations/{id}",
            format!("/api/destinations/{a_dest}"),
            None,
        ),
        (
            Method::PATCH,
            "/api/destinations/{id}",
            format!("/api/destinations/{a_dest}"),
            Some(json!({"type": "WEBHOOK_ENDPOINT", "name": "pwned"})),
        ),
        (
            Method::POST,
            "/api/destinations/{id}/disable",
            format!("/api/destinations/{a_dest}/disable"),
            None,
        ),
    ];
    for (method, route, path, body) in probes {
        let r = app
            .call(method.clone(), route, &path, Some(&b.api_key), body)
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{method} {path}");
    }
    // B cannot link A's resources into its own automation.
    let r = app.post("/api/automations", "/api/automations", &b.api_key, Some(json!({
        "name": "x", "triggerType": "SIGNAL_OCCURRENCE", "triggerJson": {}, "matchMode": "ANY",
        "signalIds": [a_sig], "destinationIds": [a_dest],
    }))).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // A's data is unchanged.
    let r = app
        .get(
            "/api/agents/{id}",
            &format!("/api/agents/{a_agent}"),
            &a.api_key,
        )
        .await;
    assert_ne!(r.body["result"]["data"]["agent"]["displayName"], "pwned");
    let r = app
        .get(
            "/api/signals/{id}",
            &format!("/api/signals/{a_sig}"),
            &a.api_key,
        )
        .await;
    assert_eq!(
        r.body["result"]["data"]["signal"]["archivedAt"],
        Value::Null
    );
});

// PostgreSQL cannot hold U+0000 in text or jsonb: a write or a look-up carrying one failed
// there as a 500. It is the request's fault: PostgreSQL answers 400 in the route's own shape;
// SQLite stores it.
db_test!(
    a_nul_character_is_never_a_server_error,
    |app: TestApp| async move {
        let org = app.org("Nul Platform Co").await;
        let postgres = app.db.get_database_backend() == sea_orm::DbBackend::Postgres;
        let r = app
            .post(
                "/api/signals",
                "/api/signals",
                &org.api_key,
                Some(
                    json!({"kind": "EVENT_MATCH", "name": "Sig\u{0}nal", "definition": {
                    "grain": "user", "subjectResolver": "email", "eventNames": ["ev"],
                    "propertyConditions": [], "conditionMode": "ALL"}}),
                ),
            )
            .await;
        if postgres {
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
            assert_eq!(r.body["ok"], json!(false), "{}", r.body);
            assert!(r.body.to_string().contains("NUL character"), "{}", r.body);
            snap!("platform_nul_refused_postgres", r.body);
        } else {
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        }

        let r = app
            .post(
                "/api/tools/call",
                "/api/tools/call",
                &org.api_key,
                Some(json!({"tool": "svc_list_customers", "input": {"name": "Ac\u{0}me"}})),
            )
            .await;
        if postgres {
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
            assert!(r.body.to_string().contains("NUL character"), "{}", r.body);
            snap!("tool_nul_refused_postgres", r.body);
        } else {
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        }
    }
);

// A method a route does not have answers 405 with the `Allow` header RFC 9110 requires,
// listing the route's methods.
db_test!(
    method_not_allowed_lists_the_allowed_methods,
    |app: TestApp| async move {
        let cases = [
            ("/api/agents", "GET, HEAD"),
            ("/api/automations", "GET, POST, HEAD"),
            (
                "/api/destinations/0b7e3f8e-7d1c-4c52-9d0e-1f2a3b4c5d6e",
                "GET, PATCH, HEAD",
            ),
            ("/healthz", "GET, HEAD"),
        ];
        for (path, allowed) in cases {
            let r = app
                .client
                .request(
                    Method::from_bytes(b"TRACE").unwrap(),
                    format!("{}{path}", app.base),
                )
                .send()
                .await
                .expect("request");
            assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED, "{path}");
            let allow = r.headers().get("allow").cloned();
            let body: Value = r.json().await.expect("a JSON body");
            // The Platform API's `{error}` shape, as every unknown route and method answers.
            assert_eq!(body, json!({"error": "method not allowed on this route"}));
            if path == "/api/agents" {
                snap!("method_not_allowed", body);
            }
            let allow = allow.map(|v| v.to_str().unwrap_or_default().to_string());
            let mut got: Vec<String> = allow
                .unwrap_or_default()
                .split(", ")
                .map(str::to_string)
                .collect();
            got.sort();
            let mut want: Vec<String> = allowed.split(", ").map(str::to_string).collect();
            want.sort();
            assert_eq!(got, want, "{path}");
        }
    }
);
