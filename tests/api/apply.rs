//! `custintel apply`: signals, destinations and automations declared as code.

use custintel::ops::apply::{self, ApplyError, ApplyReport};
use reqwest::StatusCode;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{json, Value};

use crate::{db_test, helpers::TestApp};

/// A file with both signal kinds, a webhook destination and an automation on them.
const FILE: &str = r#"
signals:
  - key: seat-limit
    kind: EVENT_MATCH
    name: Seat limit reached
    description: A Pro account tried to add a user beyond its seat limit.
    definition:
      grain: customer
      subjectResolver: customerId
      eventNames: [seat_limit_reached]
      propertyConditions:
        - {property: plan, operator: eq, value: pro}
      conditionMode: ALL
  - key: pricing-twice
    kind: EVENT_PATTERN
    name: Pricing page twice in a week
    definition:
      grain: user
      subjectResolver: email
      pattern:
        type: count
        eventNames: [$pageview]
        propertyConditions: [{property: path, operator: eq, value: /pricing}]
        conditionMode: ALL
        min: 2
        within: 7d
destinations:
  - key: crm
    type: WEBHOOK_ENDPOINT
    name: CRM webhook
    url: https://crm.example.com/hooks/custintel
automations:
  - key: expansion-alert
    name: Expansion alert
    triggerType: SIGNAL_OCCURRENCE
    triggerJson: {dedupe: day}
    audienceFilterJson: {billingStatus: [PAYING]}
    matchMode: ANY
    signals: [seat-limit, pricing-twice]
    destinations: [crm]
"#;

fn keys(items: &[apply::PlanItem]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|i| (i.kind.to_string(), i.key.clone()))
        .collect()
}

fn all_four() -> Vec<(String, String)> {
    [
        ("signal", "seat-limit"),
        ("signal", "pricing-twice"),
        ("destination", "crm"),
        ("automation", "expansion-alert"),
    ]
    .iter()
    .map(|(t, k)| (t.to_string(), k.to_string()))
    .collect()
}

async fn run(
    app: &TestApp,
    org: &str,
    text: &str,
    dry_run: bool,
) -> Result<ApplyReport, ApplyError> {
    apply::apply_text(&app.db, &app.state.secrets, org, text, dry_run).await
}

/// Rows of the organization in the three configuration tables.
async fn counts(app: &TestApp, org: &str) -> (u64, u64, u64) {
    (
        entity::signal::Entity::find()
            .filter(entity::signal::Column::OrganizationId.eq(org))
            .count(&app.db)
            .await
            .unwrap(),
        entity::destination::Entity::find()
            .filter(entity::destination::Column::OrganizationId.eq(org))
            .count(&app.db)
            .await
            .unwrap(),
        entity::automation::Entity::find()
            .filter(entity::automation::Column::OrganizationId.eq(org))
            .count(&app.db)
            .await
            .unwrap(),
    )
}

/// Every configuration row of the organization, to compare before and after.
async fn snapshot(app: &TestApp, org: &str) -> Value {
    let signals = entity::signal::Entity::find()
        .filter(entity::signal::Column::OrganizationId.eq(org))
        .all(&app.db)
        .await
        .unwrap();
    let destinations = entity::destination::Entity::find()
        .filter(entity::destination::Column::OrganizationId.eq(org))
        .all(&app.db)
        .await
        .unwrap();
    let automations = entity::automation::Entity::find()
        .filter(entity::automation::Column::OrganizationId.eq(org))
        .all(&app.db)
        .await
        .unwrap();
    let mut s: Vec<String> = signals.iter().map(|m| format!("{m:?}")).collect();
    let mut d: Vec<String> = destinations.iter().map(|m| format!("{m:?}")).collect();
    let mut a: Vec<String> = automations.iter().map(|m| format!("{m:?}")).collect();
    s.sort();
    d.sort();
    a.sort();
    let ids: Vec<String> = automations.iter().map(|m| m.id.clone()).collect();
    let mut links: Vec<String> = entity::automation_signal::Entity::find()
        .filter(entity::automation_signal::Column::AutomationId.is_in(ids.clone()))
        .all(&app.db)
        .await
        .unwrap()
        .iter()
        .map(|l| format!("{l:?}"))
        .chain(
            entity::automation_destination::Entity::find()
                .filter(entity::automation_destination::Column::AutomationId.is_in(ids))
                .all(&app.db)
                .await
                .unwrap()
                .iter()
                .map(|l| format!("{l:?}")),
        )
        .collect();
    links.sort();
    json!({ "signals": s, "destinations": d, "automations": a, "links": links })
}

fn issue_paths(err: &ApplyError) -> Vec<Value> {
    match err {
        ApplyError::Invalid { details, .. } => details
            .iter()
            .map(|i| serde_json::to_value(&i.path).unwrap())
            .collect(),
        other => panic!("expected a file error, got {other}"),
    }
}

db_test!(
    apply_create_unchanged_update_dry_run,
    |app: TestApp| async move {
        let org = app.org("Acme").await;
        let org_id = org.organization_id.as_str();
        let key = org.api_key.as_str();

        // A dry run on an empty organization: the plan, with null ids, and nothing written.
        let plan = run(&app, org_id, FILE, true).await.expect("dry run");
        assert_eq!(keys(&plan.created), all_four());
        assert!(plan.created.iter().all(|i| i.id.is_none()));
        assert_eq!(counts(&app, org_id).await, (0, 0, 0));

        let report = run(&app, org_id, FILE, false).await.expect("apply");
        assert_eq!(keys(&report.created), all_four());
        assert!(report.updated.is_empty() && report.unchanged.is_empty());
        assert!(report.created.iter().all(|i| i.id.is_some()));
        assert_eq!(counts(&app, org_id).await, (2, 1, 1));

        // What the routes show: CODE-managed, the automation disabled and linked by key.
        let r = app.get("/api/signals", "/api/signals", key).await;
        let signals = r.body["result"]["data"]["signals"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(signals.len(), 2);
        assert!(signals.iter().all(|s| s["managedBy"] == "CODE"));
        let pattern = signals
            .iter()
            .find(|s| s["key"] == "pricing-twice")
            .unwrap();
        assert_eq!(pattern["kind"], "EVENT_PATTERN");
        assert_eq!(pattern["definition"]["pattern"]["min"], 2);
        let automation_id = report.created[3].id.clone().unwrap();
        let r = app
            .get(
                "/api/automations/{id}",
                &format!("/api/automations/{automation_id}"),
                key,
            )
            .await;
        let automation = &r.body["result"]["data"]["automation"];
        assert_eq!(automation["managedBy"], "CODE");
        assert_eq!(automation["enabled"], false);
        assert_eq!(automation["signals"].as_array().unwrap().len(), 2);
        assert_eq!(automation["destinations"].as_array().unwrap().len(), 1);
        let r = app.get("/api/destinations", "/api/destinations", key).await;
        let dest = &r.body["result"]["data"]["destinations"][0];
        assert_eq!(dest["key"], "crm");
        assert_eq!(dest["enabled"], true);
        // A signing secret exists (masked), and no field of the Destination object changed.
        assert!(dest["maskedConfig"]["signingSecret"]
            .as_str()
            .unwrap()
            .starts_with("whsec_"));
        assert!(dest.get("managedBy").is_none());

        // Again: nothing created or updated, the same ids.
        let before = snapshot(&app, org_id).await;
        let again = run(&app, org_id, FILE, false).await.expect("re-apply");
        assert!(again.created.is_empty() && again.updated.is_empty());
        assert_eq!(keys(&again.unchanged), all_four());
        assert_eq!(again.unchanged, report.created);
        assert_eq!(snapshot(&app, org_id).await, before);

        // One field changed: exactly that item updated. The dry run says so and changes nothing.
        let changed = FILE.replace("name: CRM webhook", "name: CRM webhook (prod)");
        let plan = run(&app, org_id, &changed, true).await.expect("dry run");
        assert!(plan.created.is_empty());
        assert_eq!(
            keys(&plan.updated),
            vec![("destination".to_string(), "crm".to_string())]
        );
        assert_eq!(plan.updated[0].id, report.created[2].id);
        assert_eq!(plan.unchanged.len(), 3);
        assert_eq!(snapshot(&app, org_id).await, before);
        let updated = run(&app, org_id, &changed, false)
            .await
            .expect("apply change");
        assert_eq!(updated, plan);
        let r = app.get("/api/destinations", "/api/destinations", key).await;
        let dest = &r.body["result"]["data"]["destinations"][0];
        assert_eq!(dest["name"], "CRM webhook (prod)");
        assert_eq!(dest["id"], json!(report.created[2].id));

        // A changed pattern updates that signal only; its id stays.
        let changed2 = changed.replace("min: 2", "min: 3");
        let updated = run(&app, org_id, &changed2, false).await.expect("apply");
        assert_eq!(
            keys(&updated.updated),
            vec![("signal".to_string(), "pricing-twice".to_string())]
        );
        assert_eq!(updated.updated[0].id, report.created[1].id);

        // Links replaced by the file's: the automation now has one signal.
        let one_signal = changed2.replace(
            "signals: [seat-limit, pricing-twice]",
            "signals: [seat-limit]",
        );
        let updated = run(&app, org_id, &one_signal, false).await.expect("apply");
        assert_eq!(
            keys(&updated.updated),
            vec![("automation".to_string(), "expansion-alert".to_string())]
        );
        let r = app
            .get(
                "/api/automations/{id}",
                &format!("/api/automations/{automation_id}"),
                key,
            )
            .await;
        let signals = r.body["result"]["data"]["automation"]["signals"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(signals.len(), 1);
        assert_eq!(signals[0]["key"], "seat-limit");
        // The signal left out of the automation is kept (nothing outside the file is archived,
        // and it is still in the file).
        assert_eq!(counts(&app, org_id).await, (2, 1, 1));
    }
);

db_test!(apply_bad_file_changes_nothing, |app: TestApp| async move {
    let org = app.org("Acme").await;
    let org_id = org.organization_id.as_str();
    run(&app, org_id, FILE, false).await.expect("apply");
    let before = snapshot(&app, org_id).await;

    // A good change next to bad items: nothing is applied.
    let bad = FILE
        .replace("name: CRM webhook", "name: CRM webhook (prod)")
        .replace(
            "triggerJson: {dedupe: day}",
            "triggerJson: {dedupe: fortnight}",
        )
        .replace(
            "signals: [seat-limit, pricing-twice]",
            "signals: [seat-limit, nope]",
        )
        + r#"
  - key: weekly
    name: Weekly digest
    triggerType: SCHEDULE
    triggerJson: {cron: "61 9 * * 1"}
    matchMode: ANY
    destinationIds: []
  - key: weekly-2
    name: Weekly digest
    triggerType: SCHEDULE
    triggerJson: {cron: "61 9 * * 1", timezone: Europe/Berlin}
    matchMode: ANY
"#;
    let err = run(&app, org_id, &bad, false).await.expect_err("bad file");
    let paths = issue_paths(&err);
    for expected in [
        json!(["automations", 0, "signals", 1]),
        json!(["automations", 0, "triggerJson", "dedupe"]),
        json!(["automations", 1, "destinationIds"]),
        json!(["automations", 2, "triggerJson", "cron"]),
    ] {
        assert!(paths.contains(&expected), "{expected} in {paths:?}");
    }
    let body = serde_json::to_value(err.body()).unwrap();
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("nothing was applied"));
    assert_eq!(snapshot(&app, org_id).await, before);

    // Bad signal definitions of both kinds, a bad destination, a duplicate key.
    let bad = r#"
signals:
  - key: a
    kind: EVENT_MATCH
    name: A
    definition: {grain: account, subjectResolver: customerId, eventNames: [x], propertyConditions: [], conditionMode: ALL}
  - key: a
    kind: EVENT_PATTERN
    name: B
    definition: {grain: user, subjectResolver: email, pattern: {type: sequence, steps: [], within: 3x}}
  - key: c
    kind: WHATEVER
    name: C
    definition: {}
destinations:
  - key: d
    type: WEBHOOK_ENDPOINT
    name: D
    url: http://example.com/hook
"#;
    let err = run(&app, org_id, bad, false).await.expect_err("bad file");
    let paths = issue_paths(&err);
    for expected in [
        json!(["signals", 0, "definition", "grain"]),
        json!(["signals", 1, "key"]),
        json!(["signals", 1, "definition", "pattern", "within"]),
        json!(["signals", 2, "kind"]),
        json!(["destinations", 0, "url"]),
    ] {
        assert!(paths.contains(&expected), "{expected} in {paths:?}");
    }
    assert_eq!(snapshot(&app, org_id).await, before);

    // Not a file at all.
    let err = run(&app, org_id, "signals: [\n  - {", false)
        .await
        .expect_err("syntax");
    assert_eq!(issue_paths(&err), vec![json!([])]);
    let err = run(&app, org_id, "{\"signals\": {}}", false)
        .await
        .expect_err("not a list");
    assert_eq!(issue_paths(&err), vec![json!(["signals"])]);
});

db_test!(
    apply_code_resources_belong_to_the_file,
    |app: TestApp| async move {
        let org = app.org("Acme").await;
        let org_id = org.organization_id.as_str();
        let key = org.api_key.as_str();
        let report = run(&app, org_id, FILE, false).await.expect("apply");
        let signal_id = report.created[0].id.clone().unwrap();
        let dest_id = report.created[2].id.clone().unwrap();
        let automation_id = report.created[3].id.clone().unwrap();

        let r = app
            .patch(
                "/api/destinations/{id}",
                &format!("/api/destinations/{dest_id}"),
                key,
                json!({"type": "WEBHOOK_ENDPOINT", "url": "https://elsewhere.example.com/hook"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
        assert_eq!(r.body["error"]["code"], "conflict");
        assert!(r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("managed by code"));
        let r = app
            .post(
                "/api/signals/{id}/archive",
                &format!("/api/signals/{signal_id}/archive"),
                key,
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
        assert!(r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("custintel apply"));

        // Enabling and disabling a CODE destination stay platform actions.
        let r = app
            .post(
                "/api/destinations/{id}/disable",
                &format!("/api/destinations/{dest_id}/disable"),
                key,
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let r = app
            .patch(
                "/api/destinations/{id}",
                &format!("/api/destinations/{dest_id}"),
                key,
                json!({"type": "WEBHOOK_ENDPOINT", "enabled": true}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body["result"]["data"]["destination"]["enabled"], true);

        // Enabling stays a platform action, and applying again leaves it enabled.
        let r = app
            .post(
                "/api/automations/{id}/enable",
                &format!("/api/automations/{automation_id}/enable"),
                key,
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body["result"]["data"]["automation"]["enabled"], true);
        let again = run(&app, org_id, FILE, false).await.expect("re-apply");
        assert_eq!(keys(&again.unchanged), all_four());
        let changed = FILE.replace("name: Expansion alert", "name: Expansion alert!");
        let again = run(&app, org_id, &changed, false).await.expect("apply");
        assert_eq!(again.updated.len(), 1);
        let stored = entity::automation::Entity::find_by_id(automation_id.clone())
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        assert!(stored.enabled);
        assert_eq!(stored.name, "Expansion alert!");
        // An enabled automation cannot be left without what it needs.
        let stripped = changed.replace("destinations: [crm]\n", "destinations: []\n");
        let err = run(&app, org_id, &stripped, false)
            .await
            .expect_err("enabled without destination");
        assert!(issue_paths(&err).contains(&json!(["automations", 0, "destinations"])));
    }
);

db_test!(
    apply_takes_over_ui_and_stays_in_its_org,
    |app: TestApp| async move {
        let acme = app.org("Acme").await;
        let other = app.org("Other").await;
        let key = acme.api_key.as_str();

        // A signal made in the UI with the file's key is taken over.
        let r = app
            .post(
                "/api/signals",
                "/api/signals",
                key,
                Some(
                    json!({"kind": "EVENT_MATCH", "name": "Seat limit", "definition": {
                "grain": "customer", "subjectResolver": "customerId",
                "eventNames": ["seat_limit_reached"], "propertyConditions": [],
                "conditionMode": "ALL"}}),
                ),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body["result"]["data"]["signal"]["key"], "seat-limit");
        let ui_id = r.body["result"]["data"]["signal"]["id"]
            .as_str()
            .unwrap()
            .to_string();

        // The other organization applies the same file first.
        let theirs = run(&app, &other.organization_id, FILE, false)
            .await
            .expect("apply");
        assert_eq!(theirs.created.len(), 4);
        let their_rows = snapshot(&app, &other.organization_id).await;

        let ours = run(&app, &acme.organization_id, FILE, false)
            .await
            .expect("apply");
        assert_eq!(
            keys(&ours.updated),
            vec![("signal".to_string(), "seat-limit".to_string())]
        );
        assert_eq!(ours.updated[0].id.as_deref(), Some(ui_id.as_str()));
        assert_eq!(ours.created.len(), 3);
        for item in &ours.created {
            assert!(!theirs.created.iter().any(|t| t.id == item.id));
        }
        let r = app
            .get("/api/signals/{id}", &format!("/api/signals/{ui_id}"), key)
            .await;
        assert_eq!(r.body["result"]["data"]["signal"]["managedBy"], "CODE");
        // The other organization's rows are untouched, and its keys do not resolve here.
        assert_eq!(snapshot(&app, &other.organization_id).await, their_rows);
        let only_theirs = r#"
automations:
  - key: x
    name: X
    triggerType: SIGNAL_OCCURRENCE
    triggerJson: {}
    matchMode: ANY
    signals: [their-signal]
"#;
        let their_signal = r#"
signals:
  - key: their-signal
    kind: EVENT_MATCH
    name: Theirs
    definition: {grain: user, subjectResolver: email, eventNames: [x], propertyConditions: [], conditionMode: ANY}
"#;
        run(&app, &other.organization_id, their_signal, false)
            .await
            .expect("theirs");
        let err = run(&app, &acme.organization_id, only_theirs, false)
            .await
            .expect_err("unknown key here");
        assert_eq!(
            issue_paths(&err),
            vec![json!(["automations", 0, "signals", 0])]
        );
        // An organization that does not exist.
        assert!(run(&app, "no-such-org", FILE, false).await.is_err());
    }
);

// The binary: one JSON object on stdout, exit codes, `-` for stdin, JSON files.

fn apply_cmd(db_url: &str, args: &[&str], stdin: Option<&str>) -> (i32, Value) {
    let args: Vec<&str> = std::iter::once("apply")
        .chain(args.iter().copied())
        .collect();
    crate::helpers::run_cli_json(db_url, &args, stdin)
}

#[tokio::test]
async fn apply_command() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/apply.db?mode=rwc", tmp.path().display());
    let out = crate::helpers::custintel_bin()
        .args(["admin", "create-org", "--name", "Acme"])
        .env("DATABASE_URL", &url)
        .output()
        .expect("create-org");
    let org: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let org = org["organizationId"].as_str().unwrap().to_string();
    let path = tmp.path().join("custintel.yaml");
    std::fs::write(&path, FILE).unwrap();
    let file = path.to_str().unwrap();

    let (code, plan) = apply_cmd(&url, &["--org", &org, "--dry-run", file], None);
    assert_eq!(code, 0, "{plan}");
    assert_eq!(plan["created"].as_array().unwrap().len(), 4);
    assert_eq!(
        plan["created"][0],
        json!({"type": "signal", "key": "seat-limit", "id": null})
    );

    let (code, created) = apply_cmd(&url, &["--org", &org, file], None);
    assert_eq!(code, 0, "{created}");
    assert_eq!(created["created"].as_array().unwrap().len(), 4);
    assert!(created["created"][3]["id"].is_string());
    assert_eq!(created["created"][3]["type"], "automation");
    assert_eq!(created["updated"], json!([]));
    assert_eq!(created["unchanged"], json!([]));

    // The same declaration as JSON on standard input: all unchanged.
    let as_json: Value = serde_yaml::from_str(FILE).unwrap();
    let (code, again) = apply_cmd(&url, &["--org", &org, "-"], Some(&as_json.to_string()));
    assert_eq!(code, 0, "{again}");
    assert_eq!(again["created"], json!([]));
    assert_eq!(again["updated"], json!([]));
    assert_eq!(again["unchanged"], created["created"]);

    // A bad file: exit 1, `{error, details}` on stdout.
    let bad = FILE.replace(
        "triggerJson: {dedupe: day}",
        "triggerJson: {cron: \"0 9 * *\"}",
    );
    let (code, err) = apply_cmd(&url, &["--org", &org, "-"], Some(&bad));
    assert_eq!(code, 1);
    assert!(err["error"].is_string());
    assert!(err["details"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["path"] == json!(["automations", 0, "triggerJson", "cron"])));
    let (code, err) = apply_cmd(&url, &["--org", "nope", file], None);
    assert_eq!(code, 1);
    assert!(err["error"].as_str().unwrap().contains("nope"), "{err}");
    let (code, err) = apply_cmd(&url, &["--org", &org, "/no/such/file.yaml"], None);
    assert_eq!(code, 1);
    assert!(
        err["error"].as_str().unwrap().contains("cannot read"),
        "{err}"
    );
}

// Several applies of one organization at once (operators, or a pipeline that retries), with
// API creates of the same names beside them: every call succeeds, each of the file's
// resources exists once, one apply created them, and every API create got a key of its own.
db_test!(
    concurrent_applies_and_creates_take_turns,
    |app: TestApp| async move {
        let org = app.org("Race Co").await;
        let org_id = org.organization_id.as_str();
        let renamed = FILE.replace("name: Expansion alert", "name: Expansion alert, renamed");
        let applies = (0..8).map(|i| {
            let text = if i % 2 == 0 { FILE } else { renamed.as_str() };
            run(&app, org_id, text, false)
        });
        let creates = (0..8).map(|_| {
            app.post(
                "/api/signals",
                "/api/signals",
                &org.api_key,
                Some(json!({"kind": "EVENT_MATCH", "name": "Seat limit reached",
                    "definition": {"grain": "user", "subjectResolver": "email",
                        "eventNames": ["seat_limit_reached"], "propertyConditions": [],
                        "conditionMode": "ALL"}})),
            )
        });
        let (applied, created) = tokio::join!(
            futures::future::join_all(applies),
            futures::future::join_all(creates)
        );
        let reports: Vec<ApplyReport> = applied
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| panic!("an apply failed: {e}")))
            .collect();
        let creators: Vec<&ApplyReport> =
            reports.iter().filter(|r| !r.created.is_empty()).collect();
        assert_eq!(creators.len(), 1, "{reports:?}");
        assert_eq!(keys(&creators[0].created), all_four());
        let mut api_keys: Vec<String> = created
            .iter()
            .map(|r| {
                assert_eq!(r.status, StatusCode::OK, "{}", r.body);
                r.body["result"]["data"]["signal"]["key"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        api_keys.sort();
        api_keys.dedup();
        assert_eq!(api_keys.len(), 8, "{api_keys:?}");
        // The file's two signals and the API's eight; one destination; one automation.
        assert_eq!(counts(&app, org_id).await, (10, 1, 1));
        // The file applied last decides the automation's name; it is one of the two.
        let automation = entity::automation::Entity::find()
            .filter(entity::automation::Column::OrganizationId.eq(org_id))
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        assert!(
            ["Expansion alert", "Expansion alert, renamed"].contains(&automation.name.as_str()),
            "{}",
            automation.name
        );
    }
);
