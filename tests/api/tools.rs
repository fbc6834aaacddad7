//! The tool gateway: `POST /api/tools/call` with each tool of this branch, `GET /api/tools`,
//! input validation, tenant isolation and the plan allowance.

use chrono::{Duration, DurationRound, Utc};
use custintel::ops::import;
use entity::customer::BillingStatus;
use reqwest::{Method, StatusCode};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, Set};
use serde_json::{json, Value};

use crate::{
    db_test,
    helpers::{Reply, TestApp},
    snap,
};

const CALL: &str = "/api/tools/call";

pub async fn tool(app: &TestApp, key: &str, name: &str, input: Value) -> Reply {
    app.post(
        CALL,
        CALL,
        key,
        Some(json!({ "tool": name, "input": input })),
    )
    .await
}

/// The `field` of every item of a list result.
pub fn field(r: &Reply, name: &str) -> Vec<String> {
    r.body["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {}", r.body))
        .iter()
        .map(|i| match &i[name] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

fn ago(days: i64) -> String {
    (Utc::now() - Duration::days(days)).to_rfc3339()
}

/// A small book of business, loaded through the import path.
pub fn seed_lines() -> String {
    let long_body = format!(
        "Ada: we want forty more seats before the new quarter. {}",
        "Sam walked through the rollout plan, the security review and the pricing. ".repeat(6)
    );
    let lines = vec![
        json!({"kind":"customer","name":"Acme","domain":"acme.com","externalId":"cus_1","billingStatus":"PAYING","mrrCents":49900,"traits":{"plan":"pro","region":"EU"},"lastActivityAt":ago(1)}),
        json!({"kind":"customer","name":"Globex","domain":"globex.com","externalId":"cus_2","billingStatus":"TRIALING","mrrCents":0,"traits":{"plan":"trial","region":"NA"},"lastActivityAt":ago(5)}),
        json!({"kind":"customer","name":"Initech","domain":"initech.com","externalId":"cus_3","billingStatus":"CHURNED","mrrCents":0,"traits":{"plan":"pro","region":"NA"},"lastActivityAt":ago(90)}),
        json!({"kind":"customer","name":"Umbrella Corp","domain":"umbrella.io","externalId":"cus_4","billingStatus":"PAYING","mrrCents":150000,"traits":{"plan":"enterprise","region":"EU"}}),
        json!({"kind":"user","customer":"acme.com","email":"ada@acme.com","externalId":"u_1","name":"Ada Lovelace","stage":"activated","traits":{"role":"admin"},"lastActivityAt":ago(1)}),
        json!({"kind":"user","customer":"cus_1","email":"bob@acme.com","externalId":"u_2","name":"Bob Stone","stage":"engaged","traits":{"role":"member"},"lastActivityAt":ago(3)}),
        json!({"kind":"user","customer":"globex.com","email":"cy@globex.com","externalId":"u_3","name":"Cy Young","stage":"signed_up","traits":{},"lastActivityAt":ago(5)}),
        json!({"kind":"user","customer":"initech.com","email":"dee@initech.com","externalId":"u_4","name":"Dee Park","stage":"inactive","traits":{"role":"admin"},"lastActivityAt":ago(95)}),
        json!({"kind":"workspace_user","name":"Sam Lee","email":"sam@ourco.com","role":"CSM"}),
        json!({"kind":"workspace_user","name":"Mia Park","email":"mia@ourco.com","role":"MANAGER"}),
        json!({"kind":"workspace_user","name":"Owen Hart","email":"owen@ourco.com","role":"ACCOUNT_OWNER"}),
        json!({"kind":"workspace_user","name":"Ana Ruiz","email":"ana@ourco.com","role":"ADMIN"}),
        json!({"kind":"source","sourceType":"CALL","sourceId":"call_1","customer":"acme.com","title":"QBR with Acme","body":long_body,"occurredAt":ago(2),"permalink":"https://crm.example.com/calls/1","participants":["ada@acme.com","sam@ourco.com"]}),
        json!({"kind":"source","sourceType":"EMAIL","sourceId":"email_1","customer":"acme.com","title":"Renewal question","body":"Our renewal is in March.","occurredAt":ago(10),"permalink":null,"participants":["bob@acme.com"]}),
        json!({"kind":"source","sourceType":"SUPPORT_TICKET","sourceId":"ticket_1","customer":"acme.com","title":"Export fails","body":"Exports time out above 400k rows.","occurredAt":ago(4),"participants":[]}),
        json!({"kind":"source","sourceType":"crm","sourceId":"opp_1","customer":"acme.com","title":"Expansion: 40 seats","body":"Stage: proposal.","occurredAt":ago(6)}),
        json!({"kind":"source","sourceType":"CALL","sourceId":"call_2","customer":"globex.com","title":"Kickoff with Globex","body":"They compare us with a competitor.","occurredAt":ago(20)}),
        json!({"kind":"fact","customer":"acme.com","text":"Acme plans to add 40 seats in Q1","status":"ACTIVE","sourceType":"CALL","sourceId":"call_1","sourceQuote":"we want forty more seats"}),
        json!({"kind":"fact","customer":"acme.com","text":"Acme renews in March","status":"SUPERSEDED","sourceType":"EMAIL","sourceId":"email_1","sourceQuote":"Our renewal is in March."}),
        json!({"kind":"fact","customer":"cus_1","text":"Exports time out above 400k rows","sourceType":"SUPPORT_TICKET","sourceId":"ticket_1","sourceQuote":"Exports time out above 400k rows."}),
        json!({"kind":"fact","customer":"globex.com","text":"Globex evaluates a competitor","status":"ACTIVE","sourceType":"CALL","sourceId":"call_2","sourceQuote":"They compare us with a competitor."}),
    ];
    lines
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Seeds an organization through the import path and adds the tracked events and billing
/// changes the timeline reads (rows the import format does not carry).
pub async fn seed(app: &TestApp, org_id: &str) {
    let report = import::import_text(&app.db, org_id, &seed_lines())
        .await
        .expect("import");
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    let acme = entity::customer::Entity::find()
        .filter(entity::customer::Column::OrganizationId.eq(org_id))
        .filter(entity::customer::Column::Domain.eq("acme.com"))
        .one(&app.db)
        .await
        .unwrap()
        .expect("acme");
    let now = Utc::now();
    for (days, status, mrr) in [
        (40, BillingStatus::Trialing, 0),
        (25, BillingStatus::Paying, 49900),
    ] {
        entity::billing_change::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org_id.to_string()),
            customer_id: Set(acme.id.clone()),
            at: Set(now - Duration::days(days)),
            billing_status: Set(status),
            mrr_cents: Set(mrr),
            origin: Set("ingest".into()),
        }
        .insert(&app.db)
        .await
        .unwrap();
    }
    for (hours, event_type, name) in [
        (30, "pageview", None),
        (50, "custom", Some("report_created")),
        (70, "billing", None),
    ] {
        entity::event::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org_id.to_string()),
            message_id: Set(None),
            event_type: Set(event_type.into()),
            event_name: Set(name.map(str::to_string)),
            visitor_id: Set(None),
            user_id: Set(None),
            customer_id: Set(Some(acme.id.clone())),
            url: Set("https://app.example.com/reports".into()),
            path: Set("/reports".into()),
            occurred_at: Set(now - Duration::hours(hours)),
            received_at: Set(now - Duration::hours(hours)),
            data: Set(json!({ "title": "Reports" })),
        }
        .insert(&app.db)
        .await
        .unwrap();
    }
}

db_test!(tool_list, |app: TestApp| async move {
    let org = app.org("Tools Inc").await;
    let r = app.get("/api/tools", "/api/tools", &org.api_key).await;
    assert_eq!(r.status, StatusCode::OK);
    let names: Vec<&str> = r.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for name in [
        "svc_list_customers",
        "svc_list_users",
        "svc_list_workspace_users",
        "svc_get_customer",
        "svc_get_timeline",
        "svc_list_facts",
        "svc_get_fact",
        "svc_get_source",
        "svc_list_sources",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    for t in r.body["tools"].as_array().unwrap() {
        assert_eq!(t["inputSchema"]["type"], "object");
        assert_eq!(t["inputSchema"]["additionalProperties"], false);
    }
    snap!("tools_list", r.body);

    let r = app
        .call(Method::GET, "/api/tools", "/api/tools", None, None)
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
});

db_test!(list_customers, |app: TestApp| async move {
    let org = app.org("Acme Seller").await;
    seed(&app, &org.organization_id).await;
    let k = &org.api_key;

    let r = tool(&app, k, "svc_list_customers", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // Most recently active first; never-active last.
    assert_eq!(
        field(&r, "name"),
        ["Acme", "Globex", "Initech", "Umbrella Corp"]
    );
    assert_eq!(r.body["pagination"]["total"], 4);
    assert_eq!(r.body["pagination"]["hasMore"], false);
    assert_eq!(r.body["pagination"]["nextCursor"], "");
    assert!(r.body["items"][3]["lastActivityAt"].is_null());
    snap!("list_customers", r.body);

    let cases = [
        (
            json!({"billingStatus": "PAYING"}),
            vec!["Acme", "Umbrella Corp"],
        ),
        (json!({"activeWithin": "7d"}), vec!["Acme", "Globex"]),
        (
            json!({"inactiveFor": "30d"}),
            vec!["Initech", "Umbrella Corp"],
        ),
        (json!({"minMrrCents": 50000}), vec!["Umbrella Corp"]),
        (
            json!({"maxMrrCents": 49900}),
            vec!["Acme", "Globex", "Initech"],
        ),
        (json!({"traits": {"plan": "pro"}}), vec!["Acme", "Initech"]),
        (
            json!({"traits": {"plan": "pro", "region": "EU"}}),
            vec!["Acme"],
        ),
        (json!({"name": "CORP"}), vec!["Umbrella Corp"]),
        (json!({"name": "100%"}), vec![]),
    ];
    for (input, expected) in cases {
        let r = tool(&app, k, "svc_list_customers", input.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "{input}: {}", r.body);
        assert_eq!(field(&r, "name"), expected, "{input}");
        assert_eq!(r.body["pagination"]["total"], expected.len(), "{input}");
    }

    // A renamed customer is found by its new name only (on SQLite the name goes through the
    // trigram index, which keeps the old name as a stale candidate); short needles scan.
    // Renamed the way users rename: an import line naming the customer by its external id.
    let rename = |to: &'static str| {
        let line = json!({"kind": "customer", "externalId": "cus_4", "name": to}).to_string();
        let db = app.db.clone();
        let org = org.organization_id.clone();
        async move {
            let report = import::import_text(&db, &org, &line).await.expect("import");
            assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        }
    };
    rename("Umbrella Holdings").await;
    for (input, expected) in [
        (json!({"name": "corp"}), vec![]),
        (json!({"name": " holdings "}), vec!["Umbrella Holdings"]),
        (json!({"name": "me"}), vec!["Acme"]),
        (json!({"name": "ni"}), vec!["Initech"]),
    ] {
        let r = tool(&app, k, "svc_list_customers", input.clone()).await;
        assert_eq!(field(&r, "name"), expected, "{input}");
        assert_eq!(r.body["pagination"]["total"], expected.len(), "{input}");
    }
    rename("Umbrella Corp").await;

    // Pages of one, with opaque cursors, cover every customer once; `total` stays.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let r = tool(
            &app,
            k,
            "svc_list_customers",
            json!({"limit": 1, "cursor": cursor}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body["pagination"]["total"], 4);
        seen.extend(field(&r, "name"));
        if r.body["pagination"]["hasMore"] == false {
            assert_eq!(r.body["pagination"]["nextCursor"], "");
            break;
        }
        cursor = r.body["pagination"]["nextCursor"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(!cursor.is_empty());
    }
    assert_eq!(seen, ["Acme", "Globex", "Initech", "Umbrella Corp"]);

    // `fields` keeps the asked fields and the identifier.
    let r = tool(
        &app,
        k,
        "svc_list_customers",
        json!({"fields": ["name", "mrrCents"], "limit": 2}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let mut keys: Vec<&String> = r.body["items"][0].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["id", "mrrCents", "name"]);
    snap!("list_customers_fields", r.body);

    // Errors name the offending field.
    let errors = [
        (json!({"limit": 1001}), json!(["limit"])),
        (json!({"limit": 0}), json!(["limit"])),
        (json!({"limit": "ten"}), json!(["limit"])),
        (json!({"billingStatus": "RICH"}), json!(["billingStatus"])),
        (json!({"activeWithin": "a month"}), json!(["activeWithin"])),
        (json!({"cursor": "not-a-cursor"}), json!(["cursor"])),
        (json!({"fields": ["name", "secret"]}), json!(["fields", 1])),
        (json!({"traits": "pro"}), json!(["traits"])),
        (json!({"colour": "red"}), json!(["colour"])),
    ];
    for (input, path) in errors {
        let r = tool(&app, k, "svc_list_customers", input.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{input}: {}", r.body);
        assert_eq!(r.body["details"][0]["path"], path, "{input}: {}", r.body);
    }
    let r = tool(&app, k, "svc_list_customers", json!({"limit": 1001})).await;
    snap!("error_limit", r.body);
    let r = tool(&app, k, "svc_list_customers", json!({"colour": "red"})).await;
    snap!("error_unknown_property", r.body);
});

/// `pagination.total` of a list.
async fn list_total(app: &TestApp, key: &str, name: &str, input: Value) -> Value {
    let r = tool(app, key, name, input.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{name} {input}: {}", r.body);
    r.body["pagination"]["total"].clone()
}

/// `svc_get_customer`'s `recentTimeline` with every include is the one it reads alone, and so
/// is its total.
pub async fn assert_same_latest_timeline(
    app: &TestApp,
    key: &str,
    customer: &str,
    timeframe: &str,
) {
    let every = ["users", "revenue", "recentTimeline", "facts", "sources"];
    let mut sections = Vec::new();
    for include in [json!(every), json!(["recentTimeline"])] {
        let input = json!({"customer": customer, "timeframe": timeframe, "include": include});
        let r = tool(app, key, "svc_get_customer", input).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        sections.push(json!([
            r.body["recentTimeline"],
            r.body["includeTotals"]["recentTimeline"],
            r.body["includeTotalsExact"]["recentTimeline"]
        ]));
    }
    assert_eq!(sections[0], sections[1], "{customer}, {timeframe}");
}

/// Imports `lines` through the import path; none may be rejected.
pub async fn import_all(app: &TestApp, org: &str, lines: &[Value]) {
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    let report = import::import_text(&app.db, org, &text.join("\n"))
        .await
        .expect("import");
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
}

/// A customer's `includeTotals` of users, sources and facts, checked against the totals of its
/// users', sources' and facts' lists.
async fn customer_totals(app: &TestApp, key: &str, customer: &str) -> Value {
    let include = json!({"customer": customer, "include": ["users", "sources", "facts"]});
    let r = tool(app, key, "svc_get_customer", include).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let of = json!({"customer": customer});
    let lists = json!({
        "users": list_total(app, key, "svc_list_users", of.clone()).await,
        "sources": list_total(app, key, "svc_list_sources", of.clone()).await,
        "facts": list_total(app, key, "svc_list_facts", of).await,
    });
    assert_eq!(
        r.body["includeTotals"], lists,
        "{customer}: sections against lists"
    );
    assert_eq!(
        r.body["includeTotalsExact"],
        json!({"users": true, "sources": true, "facts": true})
    );
    lists
}

// Totals of lists filtered by stage or billing status alone come from counts kept by triggers:
// they follow inserts, changes and deletes, and never mix organizations.
db_test!(list_totals_follow_changes, |app: TestApp| async move {
    let org = app.org("Totals Co").await;
    seed(&app, &org.organization_id).await;
    let other = app.org("Other Co").await;
    seed(&app, &other.organization_id).await;
    let k = &org.api_key;
    assert_eq!(list_total(&app, k, "svc_list_users", json!({})).await, 4);
    let engaged = json!({"stage": "engaged"});
    assert_eq!(
        list_total(&app, k, "svc_list_users", engaged.clone()).await,
        1
    );

    // A new user and a stage change, both through the import path.
    import_all(&app, &org.organization_id, &[
        json!({"kind":"user","customer":"acme.com","email":"eve@acme.com","externalId":"u_5","name":"Eve","stage":"engaged"}),
        json!({"kind":"user","customer":"acme.com","email":"ada@acme.com","externalId":"u_1","name":"Ada Lovelace","stage":"engaged","traits":{"role":"admin"},"lastActivityAt":ago(1)}),
    ])
    .await;
    assert_eq!(list_total(&app, k, "svc_list_users", json!({})).await, 5);
    assert_eq!(
        list_total(&app, k, "svc_list_users", engaged.clone()).await,
        3
    );
    let activated = json!({"stage": "activated"});
    assert_eq!(list_total(&app, k, "svc_list_users", activated).await, 0);

    use entity::customer::{Column, Entity};
    let paying = json!({"billingStatus": "PAYING"});
    assert_eq!(
        list_total(&app, k, "svc_list_customers", paying.clone()).await,
        2
    );
    Entity::update_many()
        .col_expr(
            Column::BillingStatus,
            sea_orm::sea_query::Expr::value("PAYING"),
        )
        .filter(Column::OrganizationId.eq(&org.organization_id))
        .filter(Column::Domain.eq("globex.com"))
        .exec(&app.db)
        .await
        .unwrap();
    assert_eq!(
        list_total(&app, k, "svc_list_customers", paying.clone()).await,
        3
    );
    let trialing = json!({"billingStatus": "TRIALING"});
    assert_eq!(list_total(&app, k, "svc_list_customers", trialing).await, 0);
    Entity::delete_many()
        .filter(Column::OrganizationId.eq(&org.organization_id))
        .filter(Column::Domain.eq("umbrella.io"))
        .exec(&app.db)
        .await
        .unwrap();
    assert_eq!(
        list_total(&app, k, "svc_list_customers", paying.clone()).await,
        2
    );
    assert_eq!(
        list_total(&app, k, "svc_list_customers", json!({})).await,
        3
    );
    // Each total equals the number of items listed.
    let r = tool(&app, k, "svc_list_customers", json!({"limit": 1000})).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 3);

    // The other organization's totals did not move.
    let k2 = &other.api_key;
    assert_eq!(list_total(&app, k2, "svc_list_users", json!({})).await, 4);
    assert_eq!(list_total(&app, k2, "svc_list_users", engaged).await, 1);
    assert_eq!(list_total(&app, k2, "svc_list_customers", paying).await, 2);
    assert_eq!(
        list_total(&app, k2, "svc_list_customers", json!({})).await,
        4
    );

    // Pages of one across the end of the active customers into the never-active ones, with a
    // time bound that keeps never-active rows (`inactiveFor`).
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let input = json!({"inactiveFor": "2d", "limit": 1, "cursor": cursor});
        let r = tool(&app, k2, "svc_list_customers", input).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body["pagination"]["total"], 3);
        seen.extend(field(&r, "name"));
        if r.body["pagination"]["hasMore"] == false {
            break;
        }
        cursor = r.body["pagination"]["nextCursor"]
            .as_str()
            .unwrap()
            .to_string();
    }
    assert_eq!(seen, ["Globex", "Initech", "Umbrella Corp"]);

    // One customer's users, sources and facts are counted per customer too: they follow a
    // user and a source moving to another customer, and a fact's status.
    let acme = json!({"users": 3, "sources": 4, "facts": 2});
    assert_eq!(customer_totals(&app, k, "acme.com").await, acme);
    let globex = json!({"users": 1, "sources": 1, "facts": 1});
    assert_eq!(customer_totals(&app, k, "globex.com").await, globex);
    import_all(&app, &org.organization_id, &[
        json!({"kind":"user","customer":"globex.com","email":"bob@acme.com","externalId":"u_2"}),
        json!({"kind":"source","sourceType":"EMAIL","sourceId":"email_1","customer":"globex.com","title":"Renewal question","body":"Our renewal is in March.","occurredAt":ago(10)}),
        json!({"kind":"fact","customer":"acme.com","text":"Acme plans to add 40 seats in Q1","status":"SUPERSEDED","sourceType":"CALL","sourceId":"call_1","sourceQuote":"we want forty more seats"}),
    ])
    .await;
    let acme = json!({"users": 2, "sources": 3, "facts": 1});
    assert_eq!(customer_totals(&app, k, "acme.com").await, acme);
    let globex = json!({"users": 2, "sources": 2, "facts": 1});
    assert_eq!(customer_totals(&app, k, "globex.com").await, globex);
    let superseded = json!({"customer": "acme.com", "status": ["ACTIVE", "SUPERSEDED"]});
    assert_eq!(list_total(&app, k, "svc_list_facts", superseded).await, 3);
    // The other organization's customers of the same domains did not move.
    let unmoved = json!({"users": 2, "sources": 4, "facts": 2});
    assert_eq!(customer_totals(&app, k2, "acme.com").await, unmoved);
    crate::import::assert_counts_per_customer(&app, &org.organization_id).await;
});

// A name list finds exactly the records whose names hold the needle where the lookup asks the
// index for the needle's rare parts only (PostgreSQL: here "com" and "use" are in every name,
// three-digit numbers in few), and never another organization's.
db_test!(
    names_found_through_their_rare_parts,
    |app: TestApp| async move {
        use custintel::db::name_search::NamesOf;
        let words = ["blue", "green", "red"];
        let customer = |i: usize| format!("Company {i} {}", words[i % 3]);
        let user = |i: usize| format!("User {i}");
        let mut lines = Vec::new();
        for i in 100..160 {
            lines.push(
                json!({"kind": "customer", "name": customer(i), "domain": format!("c{i}.example")}),
            );
            lines.push(json!({"kind": "user", "customer": format!("c{i}.example"),
            "email": format!("u{i}@c{i}.example"), "name": user(i)}));
        }
        let book = lines
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        let org = app.org("Names").await;
        let other = app.org("Other names").await;
        for o in [&org, &other] {
            let report = import::import_text(&app.db, &o.organization_id, &book)
                .await
                .expect("import");
            assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        }
        // Sampled now (a lookup samples in the background), so the lookups below go by it.
        for names in [NamesOf::Customers, NamesOf::Users] {
            app.state.name_trigrams.resample(&app.db, names).await;
        }
        for (tool_name, needles, name_of) in [
            (
                "svc_list_customers",
                [
                    "company 117",
                    "company 117 red",
                    "ompany 12",
                    "company 15",
                    "any 133 gre",
                    "13",
                    "company 9",
                ],
                &customer as &dyn Fn(usize) -> String,
            ),
            (
                "svc_list_users",
                [
                    "user 117",
                    "users 117",
                    "ser 12",
                    "user 15",
                    "user 1",
                    "r 133",
                    "user 9",
                ],
                &user,
            ),
        ] {
            for needle in needles {
                let mut expected: Vec<String> = (100..160)
                    .map(name_of)
                    .filter(|n| n.to_lowercase().contains(needle))
                    .collect();
                expected.sort();
                let r = tool(
                    &app,
                    &org.api_key,
                    tool_name,
                    json!({"name": needle, "limit": 100}),
                )
                .await;
                assert_eq!(r.status, StatusCode::OK, "{needle}: {}", r.body);
                let mut found = field(&r, "name");
                found.sort();
                assert_eq!(found, expected, "{tool_name} {needle}");
                assert_eq!(r.body["pagination"]["total"], expected.len(), "{needle}");
            }
        }

        // On PostgreSQL the sample of names says which trigrams are common, and the lookup of
        // "company 117" asks the index for "117" alone.
        if sea_orm::ConnectionTrait::get_database_backend(&app.db) == sea_orm::DbBackend::Postgres {
            use custintel::db::name_trigrams::rare_parts;
            let common = app.state.name_trigrams.of(&app.db, NamesOf::Customers);
            assert!(
                common.contains("com") && !common.contains("117"),
                "{common:?}"
            );
            assert_eq!(rare_parts("company 117", &common).as_deref(), Some("%117%"));
        }
    }
);

db_test!(list_users_and_workspace_users, |app: TestApp| async move {
    let org = app.org("Users Inc").await;
    seed(&app, &org.organization_id).await;
    let k = &org.api_key;

    let r = tool(&app, k, "svc_list_users", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        field(&r, "email"),
        [
            "ada@acme.com",
            "bob@acme.com",
            "cy@globex.com",
            "dee@initech.com"
        ]
    );
    snap!("list_users", r.body);
    let cases = [
        (json!({"stage": "engaged"}), vec!["bob@acme.com"]),
        (
            json!({"customer": "acme.com"}),
            vec!["ada@acme.com", "bob@acme.com"],
        ),
        (json!({"customer": "cus_2"}), vec!["cy@globex.com"]),
        (json!({"email": "ADA@Acme.com"}), vec!["ada@acme.com"]),
        (json!({"name": "stone"}), vec!["bob@acme.com"]),
        (
            json!({"traits": {"role": "admin"}}),
            vec!["ada@acme.com", "dee@initech.com"],
        ),
        (json!({"activeWithin": "2d"}), vec!["ada@acme.com"]),
        (json!({"inactiveFor": "4w"}), vec!["dee@initech.com"]),
    ];
    for (input, expected) in cases {
        let r = tool(&app, k, "svc_list_users", input.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "{input}: {}", r.body);
        assert_eq!(field(&r, "email"), expected, "{input}");
    }
    let r = tool(
        &app,
        k,
        "svc_list_users",
        json!({"customer": "nowhere.com"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    snap!("error_customer_not_found", r.body);
    let r = tool(&app, k, "svc_list_users", json!({"stage": "happy"})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["details"][0]["path"], json!(["stage"]));

    let r = tool(&app, k, "svc_list_workspace_users", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        field(&r, "name"),
        ["Ana Ruiz", "Mia Park", "Owen Hart", "Sam Lee"]
    );
    snap!("list_workspace_users", r.body);
    let r = tool(&app, k, "svc_list_workspace_users", json!({"role": "CSM"})).await;
    assert_eq!(field(&r, "name"), ["Sam Lee"]);
    let r = tool(
        &app,
        k,
        "svc_list_workspace_users",
        json!({"email": "MIA@ourco.com"}),
    )
    .await;
    assert_eq!(field(&r, "name"), ["Mia Park"]);
    let r = tool(&app, k, "svc_list_workspace_users", json!({"name": "ar"})).await;
    assert_eq!(field(&r, "name"), ["Mia Park", "Owen Hart"]);
    let r = tool(&app, k, "svc_list_workspace_users", json!({"limit": 3})).await;
    assert_eq!(r.body["pagination"]["hasMore"], true);
    let cursor = r.body["pagination"]["nextCursor"].clone();
    let r = tool(
        &app,
        k,
        "svc_list_workspace_users",
        json!({"limit": 3, "cursor": cursor}),
    )
    .await;
    assert_eq!(field(&r, "name"), ["Sam Lee"]);
    assert_eq!(r.body["pagination"]["total"], 4);
    let r = tool(&app, k, "svc_list_workspace_users", json!({"role": "CEO"})).await;
    assert_eq!(r.body["details"][0]["path"], json!(["role"]));
});

db_test!(get_customer, |app: TestApp| async move {
    let org = app.org("Detail Inc").await;
    seed(&app, &org.organization_id).await;
    let k = &org.api_key;

    let r = tool(&app, k, "svc_get_customer", json!({"customer": "acme.com"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["name"], "Acme");
    assert!(r.body.get("users").is_none());
    let id = r.body["id"].as_str().unwrap().to_string();
    snap!("get_customer", r.body);
    for reference in [id.as_str(), "cus_1", "ACME.com"] {
        let r = tool(&app, k, "svc_get_customer", json!({"customer": reference})).await;
        assert_eq!(r.body["id"], id.as_str(), "{reference}");
    }

    let r = tool(
        &app,
        k,
        "svc_get_customer",
        json!({"customer": "acme.com", "include": ["users", "revenue", "recentTimeline", "facts", "sources"]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["users"].as_array().unwrap().len(), 2);
    assert_eq!(r.body["revenue"]["mrrCents"], 49900);
    assert_eq!(r.body["revenue"]["history"].as_array().unwrap().len(), 2);
    assert_eq!(
        r.body["facts"].as_array().unwrap().len(),
        2,
        "active facts only"
    );
    assert_eq!(r.body["sources"].as_array().unwrap().len(), 4);
    let timeline = r.body["recentTimeline"].as_array().unwrap();
    let ats: Vec<&str> = timeline.iter().map(|e| e["at"].as_str().unwrap()).collect();
    let mut sorted = ats.clone();
    sorted.sort();
    assert_eq!(ats, sorted, "oldest first");
    // 30 days: both billing changes older than 30 days? one (25 days) is in.
    assert!(timeline.iter().any(|e| e["channel"] == "billing"));
    snap!("get_customer_all_includes", r.body);
    for timeframe in ["1d", "3d", "5d", "30d", "60d"] {
        assert_same_latest_timeline(&app, k, "acme.com", timeframe).await;
    }

    let r = tool(
        &app,
        k,
        "svc_get_customer",
        json!({"customer": "nowhere.com"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = tool(&app, k, "svc_get_customer", json!({})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["details"][0]["path"], json!(["customer"]));
    snap!("error_required", r.body);
    let r = tool(
        &app,
        k,
        "svc_get_customer",
        json!({"customer": "acme.com", "include": ["users", "invoices"]}),
    )
    .await;
    assert_eq!(r.body["details"][0]["path"], json!(["include", 1]));
    let r = tool(
        &app,
        k,
        "svc_get_customer",
        json!({"customer": "acme.com", "timeframe": "30 days"}),
    )
    .await;
    assert_eq!(r.body["details"][0]["path"], json!(["timeframe"]));
});

// Each section of a customer holds at most its bound and says how many there are in all; a
// list whose filter matches more than 10,000 rows says its total is a lower bound, unless a
// kept count knows it.
db_test!(
    sections_are_bounded_and_totals_capped,
    |app: TestApp| async move {
        let org = app.org("Big Book").await;
        let other = app.org("Beside").await;
        let mut lines = vec![
            json!({"kind": "customer", "name": "Whale", "domain": "whale.com",
        "billingStatus": "PAYING", "mrrCents": 100, "traits": {"tier": "gold"}})
            .to_string(),
        ];
        // More users than counted totals reach: the customer's total is kept, so exact.
        for u in 0..10_020 {
            lines.push(
                json!({"kind": "user", "customer": "whale.com",
            "email": format!("u{u}@whale.com"), "lastActivityAt": ago(u % 40)})
                .to_string(),
            );
        }
        for c in 0..10_050 {
            lines.push(
                json!({"kind": "customer", "domain": format!("c{c}.example.com"),
            "billingStatus": "PAYING", "mrrCents": 1000 + c, "traits": {"tier": "gold"},
            "lastActivityAt": ago(c % 20)})
                .to_string(),
            );
        }
        let report = import::import_text(&app.db, &org.organization_id, &lines.join("\n"))
            .await
            .expect("import");
        assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        seed(&app, &other.organization_id).await;
        let whale = entity::customer::Entity::find()
            .filter(entity::customer::Column::Domain.eq("whale.com"))
            .one(&app.db)
            .await
            .unwrap()
            .expect("whale");
        let now = Utc::now();
        for d in 0..120 {
            entity::billing_change::ActiveModel {
                id: Set(uuid::Uuid::new_v4().to_string()),
                organization_id: Set(org.organization_id.clone()),
                customer_id: Set(whale.id.clone()),
                at: Set(now - Duration::days(200 - d)),
                billing_status: Set(BillingStatus::Paying),
                mrr_cents: Set(d),
                origin: Set("ingest".into()),
            }
            .insert(&app.db)
            .await
            .unwrap();
        }
        let k = &org.api_key;
        let r = tool(
            &app,
            k,
            "svc_get_customer",
            json!({"customer": "whale.com", "include": ["users", "revenue", "facts"]}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body["users"].as_array().unwrap().len(), 100);
        let history = r.body["revenue"]["history"].as_array().unwrap();
        assert_eq!(history.len(), 100);
        assert_eq!(
            history[0]["mrrCents"], 20,
            "the latest 100 changes, oldest first"
        );
        assert_eq!(history[99]["mrrCents"], 119);
        assert_eq!(
            r.body["includeTotals"],
            json!({"users": 10_020, "revenue": 120, "facts": 0})
        );
        assert_eq!(
            r.body["includeTotalsExact"],
            json!({"users": true, "revenue": true, "facts": true})
        );
        let actives: Vec<&str> = r.body["users"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["lastActivityAt"].as_str().unwrap())
            .collect();
        let mut sorted = actives.clone();
        sorted.sort_by(|a, b| b.cmp(a));
        assert_eq!(actives, sorted, "most recently active first");
        let plain = tool(
            &app,
            k,
            "svc_get_customer",
            json!({"customer": "whale.com"}),
        )
        .await;
        assert!(plain.body.get("includeTotals").is_none());
        let users = tool(&app, k, "svc_list_users", json!({"customer": "whale.com"})).await;
        assert_eq!(users.body["pagination"]["total"], 10_020);
        assert_eq!(users.body["pagination"]["totalExact"], true);

        // 10,051 PAYING customers: the kept count is exact; a filter that counts stops at 10,000.
        let r = tool(
            &app,
            k,
            "svc_list_customers",
            json!({"billingStatus": "PAYING"}),
        )
        .await;
        assert_eq!(r.body["pagination"]["total"], 10_051);
        assert_eq!(r.body["pagination"]["totalExact"], true);
        // A revenue range on the kept revenue bands' edges (two first digits and zeros: 1, ...,
        // 9, 10, 11, ..., 99, 100, 110, ... cents) is counted exactly by them, however large.
        let r = tool(&app, k, "svc_list_customers", json!({"minMrrCents": 1})).await;
        assert_eq!(r.body["pagination"]["total"], 10_051);
        assert_eq!(r.body["pagination"]["totalExact"], true);
        let r = tool(
            &app,
            k,
            "svc_list_customers",
            json!({"minMrrCents": 1_000, "maxMrrCents": 9_999, "billingStatus": "PAYING"}),
        )
        .await;
        assert_eq!(r.body["pagination"]["total"], 9_000);
        assert_eq!(r.body["pagination"]["totalExact"], true);
        // Off their edges, the bands wholly within the range are a lower bound: past 10,000
        // it is the total, not exact; within it, the matches are counted to 10,001.
        let r = tool(&app, k, "svc_list_customers", json!({"minMrrCents": 155})).await;
        assert_eq!(
            r.body["pagination"]["total"], 10_050,
            "{}",
            r.body["pagination"]
        );
        assert_eq!(r.body["pagination"]["totalExact"], false);
        let next = r.body["pagination"]["nextCursor"]
            .as_str()
            .unwrap()
            .to_string();
        let r = tool(
            &app,
            k,
            "svc_list_customers",
            json!({"minMrrCents": 155, "cursor": next}),
        )
        .await;
        assert_eq!(
            r.body["pagination"]["totalExact"], false,
            "the first page's total travels on"
        );
        let r = tool(&app, k, "svc_list_customers", json!({"minMrrCents": 1_001})).await;
        assert_eq!(
            r.body["pagination"]["total"], 10_000,
            "{}",
            r.body["pagination"]
        );
        assert_eq!(r.body["pagination"]["totalExact"], false);
        let r = tool(
            &app,
            k,
            "svc_list_customers",
            json!({"minMrrCents": 11_000}),
        )
        .await;
        assert_eq!(r.body["pagination"]["total"], 50);
        assert_eq!(r.body["pagination"]["totalExact"], true);
        // Within the limit, a range off the bands' edges on both sides: the bands within it
        // (2,000 to 9,999 cents: 8,000 customers) and its edges counted (500 below, 500 above).
        for status in [None, Some("PAYING")] {
            let mut input = json!({"minMrrCents": 1_500, "maxMrrCents": 10_499});
            if let Some(status) = status {
                input["billingStatus"] = json!(status);
            }
            let r = tool(&app, k, "svc_list_customers", input).await;
            assert_eq!(
                r.body["pagination"]["total"], 9_000,
                "{status:?}: {}",
                r.body["pagination"]
            );
            assert_eq!(r.body["pagination"]["totalExact"], true);
        }
        // A trait value alone takes its exact total from the kept trait value counts.
        let r = tool(
            &app,
            k,
            "svc_list_customers",
            json!({"traits": {"tier": "gold"}}),
        )
        .await;
        assert_eq!(
            r.body["pagination"]["total"], 10_051,
            "{}",
            r.body["pagination"]
        );
        assert_eq!(r.body["pagination"]["totalExact"], true);
        assert_eq!(r.body["items"].as_array().unwrap().len(), 50);
        // With another filter, the trait is checked candidate by candidate: past 5,000
        // candidates, the total counts the matches among the first 1,000.
        let r = tool(
            &app,
            k,
            "svc_list_customers",
            json!({"traits": {"tier": "gold"}, "billingStatus": "PAYING"}),
        )
        .await;
        assert_eq!(
            r.body["pagination"]["total"], 1_000,
            "{}",
            r.body["pagination"]
        );
        assert_eq!(r.body["pagination"]["totalExact"], false);
        let r = tool(
            &app,
            k,
            "svc_list_users",
            json!({"customer": "whale.com", "limit": 1}),
        )
        .await;
        assert_eq!(
            r.body["pagination"],
            json!({"hasMore": true,
        "nextCursor": r.body["pagination"]["nextCursor"], "total": 10_020, "totalExact": true})
        );
        // The other organization's book counts nothing here.
        let r = tool(
            &app,
            &other.api_key,
            "svc_list_customers",
            json!({"minMrrCents": 1}),
        )
        .await;
        assert_eq!(r.body["pagination"]["total"], 2);

        // Not active for a day: the active rows before then and the never-active ones, counted
        // together.
        let inactive = entity::customer::Entity::find()
            .filter(entity::customer::Column::OrganizationId.eq(&org.organization_id))
            .filter(
                sea_orm::Condition::any()
                    .add(
                        entity::customer::Column::LastActivityAt.lt(Utc::now() - Duration::days(1)),
                    )
                    .add(entity::customer::Column::LastActivityAt.is_null()),
            )
            .count(&app.db)
            .await
            .unwrap();
        let r = tool(&app, k, "svc_list_customers", json!({"inactiveFor": "1d"})).await;
        assert_eq!(
            r.body["pagination"]["total"], inactive,
            "{}",
            r.body["pagination"]
        );
        assert_eq!(r.body["pagination"]["totalExact"], true);
        assert!(inactive > 9_000);

        // The timeline counts its channels together up to 10,000: 6,000 events and 3,000
        // sources are 9,000 exactly, 2,500 sources more make it a lower bound.
        for chunk in 0..6 {
            let events = (0..1_000).map(|i| entity::event::ActiveModel {
                id: Set(uuid::Uuid::new_v4().to_string()),
                organization_id: Set(org.organization_id.clone()),
                message_id: Set(None),
                event_type: Set("pageview".into()),
                event_name: Set(None),
                visitor_id: Set(None),
                user_id: Set(None),
                customer_id: Set(Some(whale.id.clone())),
                url: Set("https://app.example.com/".into()),
                path: Set("/".into()),
                occurred_at: Set(now - Duration::minutes(chunk * 1_000 + i)),
                received_at: Set(now),
                data: Set(json!({})),
            });
            entity::event::Entity::insert_many(events)
                .exec(&app.db)
                .await
                .expect("events");
        }
        let sources = |from: usize, to: usize| {
            (from..to)
                .map(|s| {
                    json!({"kind": "source", "sourceType": "CALL", "sourceId": format!("call_{s}"),
                        "customer": "whale.com", "title": "Call", "body": "notes",
                        "occurredAt": ago((s % 20) as i64)})
                    .to_string()
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let timeline_total = || async {
            let r = tool(
                &app,
                k,
                "svc_get_timeline",
                json!({"customer": "whale.com"}),
            )
            .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
            let customer = tool(
                &app,
                k,
                "svc_get_customer",
                json!({"customer": "whale.com", "include": ["recentTimeline"]}),
            )
            .await;
            assert_eq!(
                customer.body["includeTotals"]["recentTimeline"],
                r.body["pagination"]["total"]
            );
            assert_eq!(
                customer.body["includeTotalsExact"]["recentTimeline"],
                r.body["pagination"]["totalExact"]
            );
            assert_same_latest_timeline(&app, k, "whale.com", "30d").await;
            r.body["pagination"].clone()
        };
        import::import_text(&app.db, &org.organization_id, &sources(0, 3_000))
            .await
            .expect("import");
        let pagination = timeline_total().await;
        assert_eq!(pagination["total"], 9_000, "{pagination}");
        assert_eq!(pagination["totalExact"], true);
        import::import_text(&app.db, &org.organization_id, &sources(3_000, 5_500))
            .await
            .expect("import");
        let pagination = timeline_total().await;
        assert_eq!(pagination["total"], 10_000, "{pagination}");
        assert_eq!(pagination["totalExact"], false);
    }
);

// A rare trait value is read through the trait index, which triggers keep current as traits
// change; common values, numbers and other organizations' records answer as before.
db_test!(
    rare_trait_values_follow_changes,
    |app: TestApp| async move {
        let org = app.org("Segments").await;
        let other = app.org("Other Segments").await;
        let book = |n: usize, strategic: &[usize]| {
            (0..n)
                .map(|c| {
                    let segment = if strategic.contains(&c) {
                        "strategic"
                    } else {
                        "smb"
                    };
                    json!({"kind": "customer", "domain": format!("s{c}.example.com"),
                    "traits": {"segment": segment, "seats": c % 7, "beta": c == 5},
                    "lastActivityAt": ago((c % 30) as i64)})
                    .to_string()
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        for (o, strategic) in [(&org, vec![3, 50, 2_500]), (&other, vec![1, 2])] {
            let report = import::import_text(&app.db, &o.organization_id, &book(3_000, &strategic))
                .await
                .expect("import");
            assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        }
        let k = &org.api_key;
        let domains = |r: &Reply| {
            let mut d = field(r, "domain");
            d.sort();
            d
        };
        let strategic = json!({"traits": {"segment": "strategic"}});
        let r = tool(&app, k, "svc_list_customers", strategic.clone()).await;
        assert_eq!(
            domains(&r),
            ["s2500.example.com", "s3.example.com", "s50.example.com"]
        );
        assert_eq!(r.body["pagination"]["total"], 3);
        assert_eq!(r.body["pagination"]["totalExact"], true);
        let r = tool(
            &app,
            k,
            "svc_list_customers",
            json!({"traits": {"beta": true}}),
        )
        .await;
        assert_eq!(domains(&r), ["s5.example.com"]);
        let r = tool(
            &app,
            k,
            "svc_list_customers",
            json!({"traits": {"segment": "strategic", "seats": 3}}),
        )
        .await;
        assert_eq!(
            domains(&r),
            ["s3.example.com"],
            "a number is checked row by row"
        );
        // Traits change: the index follows.
        let change = json!({"kind": "customer", "domain": "s50.example.com",
        "traits": {"segment": "smb"}})
        .to_string()
            + "\n"
            + &json!({"kind": "customer", "domain": "s7.example.com",
            "traits": {"segment": "strategic"}})
            .to_string();
        import::import_text(&app.db, &org.organization_id, &change)
            .await
            .expect("import");
        let r = tool(&app, k, "svc_list_customers", strategic.clone()).await;
        assert_eq!(
            domains(&r),
            ["s2500.example.com", "s3.example.com", "s7.example.com"]
        );
        let r = tool(&app, &other.api_key, "svc_list_customers", strategic).await;
        assert_eq!(domains(&r), ["s1.example.com", "s2.example.com"]);
        // Users too.
        let users = (0..2_100)
            .map(|u| {
                json!({"kind": "user", "customer": "s1.example.com",
            "email": format!("u{u}@s1.example.com"),
            "traits": {"team": if u == 42 { "platform" } else { "sales" }}})
                .to_string()
            })
            .collect::<Vec<_>>()
            .join("\n");
        import::import_text(&app.db, &org.organization_id, &users)
            .await
            .expect("import");
        let r = tool(
            &app,
            k,
            "svc_list_users",
            json!({"traits": {"team": "platform"}}),
        )
        .await;
        assert_eq!(field(&r, "email"), ["u42@s1.example.com"]);
        assert_eq!(r.body["pagination"]["total"], 1);
        let r = tool(
            &app,
            k,
            "svc_list_users",
            json!({"traits": {"team": "sales"}, "limit": 5}),
        )
        .await;
        assert_eq!(r.body["items"].as_array().unwrap().len(), 5);
    }
);

/// Every page of a list tool, following `nextCursor`, and the first page's pagination.
async fn all_pages(app: &TestApp, key: &str, list: &str, input: &Value) -> (Vec<String>, Value) {
    let mut ids = Vec::new();
    let mut input = input.clone();
    input["limit"] = json!(400);
    let mut first = None;
    loop {
        let r = tool(app, key, list, input.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "{input}: {}", r.body);
        ids.extend(field(&r, "id"));
        first.get_or_insert_with(|| r.body["pagination"].clone());
        if r.body["pagination"]["hasMore"] != true {
            break;
        }
        input["cursor"] = r.body["pagination"]["nextCursor"].clone();
    }
    (ids, first.unwrap_or_default())
}

db_test!(
    lists_agree_whichever_way_they_are_read,
    |app: TestApp| async move {
        // More customers than a list with few matches may have, so that wide revenue ranges
        // walk the activity index and narrow ones read their matches and order them; both must
        // give the same lists, in the same order, page after page.
        let org = app.org("Revenue Book").await;
        let other = app.org("Beside").await;
        let times: Vec<String> = (0..40).map(ago).collect();
        let book = |n: usize| {
            (0..n)
                .map(|c| {
                    let status = if c % 2 == 0 { "PAYING" } else { "TRIALING" };
                    let segment = if c % 1_000 == 7 { "rare" } else { "common" };
                    let active = (c % 7 != 0).then(|| times[c % 40].clone());
                    let region = ["EU", "NA", "APAC"][c % 3];
                    json!({"kind": "customer", "domain": format!("r{c}.example.com"),
                    "name": format!("Company {c}"),
                    "billingStatus": status, "mrrCents": c * 10,
                    "traits": {"segment": segment, "region": region, "seats": c % 5},
                    "lastActivityAt": active})
                    .to_string()
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        for (o, n) in [(&org, 6_000), (&other, 300)] {
            let report = import::import_text(&app.db, &o.organization_id, &book(n))
                .await
                .expect("import");
            assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        }
        let rows = entity::customer::Entity::find()
            .filter(entity::customer::Column::OrganizationId.eq(&org.organization_id))
            .all(&app.db)
            .await
            .unwrap();
        let now = Utc::now();
        let cases: Vec<(Value, Box<dyn Fn(&entity::customer::Model) -> bool>)> = vec![
            // Wide: 5,900 matches.
            (
                json!({"minMrrCents": 1_000}),
                Box::new(|c| c.mrr_cents >= 1_000),
            ),
            // Narrow: 1,901 matches.
            (
                json!({"minMrrCents": 1_000, "maxMrrCents": 20_000}),
                Box::new(|c| (1_000..=20_000).contains(&c.mrr_cents)),
            ),
            (
                json!({"billingStatus": "PAYING", "minMrrCents": 1_000}),
                Box::new(|c| c.billing_status == BillingStatus::Paying && c.mrr_cents >= 1_000),
            ),
            (
                json!({"traits": {"segment": "rare"}}),
                Box::new(|c| c.traits["segment"] == "rare"),
            ),
            // One common trait value alone: its total comes from the trait index.
            (
                json!({"traits": {"segment": "common"}}),
                Box::new(|c| c.traits["segment"] == "common"),
            ),
            (
                json!({"traits": {"segment": "rare"}, "minMrrCents": 30_000}),
                Box::new(|c| c.traits["segment"] == "rare" && c.mrr_cents >= 30_000),
            ),
            (
                json!({"minMrrCents": 1_000, "traits": {"region": "EU"}}),
                Box::new(|c| c.mrr_cents >= 1_000 && c.traits["region"] == "EU"),
            ),
            (
                json!({"maxMrrCents": 20_000, "inactiveFor": "10d"}),
                Box::new(move |c| {
                    c.mrr_cents <= 20_000
                        && c.last_activity_at
                            .is_none_or(|t| t < now - Duration::days(10))
                }),
            ),
            (
                json!({"minMrrCents": 1_000, "inactiveFor": "10d", "traits": {"region": "NA"}}),
                Box::new(move |c| {
                    c.mrr_cents >= 1_000
                        && c.traits["region"] == "NA"
                        && c.last_activity_at
                            .is_none_or(|t| t < now - Duration::days(10))
                }),
            ),
            // A trait value the trait index does not hold (a number) beside one it holds:
            // the count probes the index for one and reads the row for the other.
            (
                json!({"minMrrCents": 1_000, "traits": {"region": "EU", "seats": 3}}),
                Box::new(|c| {
                    c.mrr_cents >= 1_000 && c.traits["region"] == "EU" && c.traits["seats"] == 3
                }),
            ),
            // A name the name index finds in few customers (111), in many (all), and with a
            // trait beside it.
            (
                json!({"name": "company 12"}),
                Box::new(|c| c.name.to_lowercase().contains("company 12")),
            ),
            (
                json!({"name": "COMPANY"}),
                Box::new(|c| c.name.to_lowercase().contains("company")),
            ),
            (
                json!({"name": "company 1", "traits": {"region": "EU"}, "activeWithin": "30d"}),
                Box::new(move |c| {
                    c.name.to_lowercase().contains("company 1")
                        && c.traits["region"] == "EU"
                        && c.last_activity_at
                            .is_some_and(|t| t >= now - Duration::days(30))
                }),
            ),
            (
                json!({"maxMrrCents": 5_000, "activeWithin": "20d"}),
                Box::new(move |c| {
                    c.mrr_cents <= 5_000
                        && c.last_activity_at
                            .is_some_and(|t| t >= now - Duration::days(20))
                }),
            ),
        ];
        for (input, keep) in cases {
            let mut expected: Vec<&entity::customer::Model> =
                rows.iter().filter(|c| keep(c)).collect();
            expected.sort_by(|a, b| {
                match (a.last_activity_at, b.last_activity_at) {
                    (Some(x), Some(y)) => y.cmp(&x),
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (None, None) => std::cmp::Ordering::Equal,
                }
                .then_with(|| b.id.cmp(&a.id))
            });
            let expected: Vec<String> = expected.iter().map(|c| c.id.clone()).collect();
            let (ids, pagination) =
                all_pages(&app, &org.api_key, "svc_list_customers", &input).await;
            assert_eq!(ids.len(), expected.len(), "{input}");
            assert!(ids == expected, "{input}: the list's order differs");
            if pagination["totalExact"] == true {
                assert_eq!(pagination["total"], expected.len(), "{input}");
            } else {
                assert!(pagination["total"].as_u64() <= Some(expected.len() as u64));
            }
            if input.get("name").is_some() && expected.len() <= 5_000 {
                // A name the name index finds in few customers is counted exactly.
                assert_eq!(pagination["totalExact"], true, "{input}");
            }
            if input
                .get("traits")
                .is_some_and(|t| t.as_object().is_some_and(|t| t.len() == 1))
                && input.as_object().is_some_and(|i| i.len() == 1)
            {
                // A trait value alone is counted exactly (up to 10,000 matches).
                assert_eq!(pagination["totalExact"], true, "{input}");
            }
        }
    }
);

// Customers' kept counts per hour and per day of last activity follow every way activity
// moves (imported, then advanced by events from several senders at once, and not moved back
// by older ones), and `activeWithin` or `inactiveFor` alone read their totals from them: exact,
// the rows' own, and only the organization's.
db_test!(
    activity_totals_follow_events_from_concurrent_senders,
    |app: TestApp| async move {
        let org = app.org("Active Book").await;
        let other = app.org("Beside").await;
        let now = Utc::now();
        // Times 30 to 46 minutes off whole hours from now, so that none lies near the edge of
        // a call's range (whole hours back from now), at several minutes of their hours.
        let at =
            |hours: usize| now - Duration::minutes(hours as i64 * 60 + 30 + (hours % 17) as i64);
        for (o, n) in [(&org, 400), (&other, 50)] {
            let lines = (0..n)
                .map(|c| {
                    let active = (c % 9 != 0).then(|| at((c * 37) % (40 * 24)).to_rfc3339());
                    json!({"kind": "customer", "domain": format!("a{c}.example.com"),
                    "externalId": format!("acct_{c}"), "name": format!("Active {c}"),
                    "lastActivityAt": active})
                    .to_string()
                })
                .collect::<Vec<_>>()
                .join("\n");
            let report = import::import_text(&app.db, &o.organization_id, &lines)
                .await
                .expect("import");
            assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        }
        // Eight senders at once, each batch one customer's event ten days ago or later.
        let senders = (0..8usize).map(|s| {
            let (app, key) = (&app, org.public_key.clone());
            async move {
                for b in 0..12usize {
                    let c = (s * 37 + b * 11) % 400;
                    let when = at(((s * 12 + b) * 13) % (10 * 24)).timestamp_millis();
                    let body = json!({"source": "server",
                        "customerIdentity": {"customerId": format!("acct_{c}")},
                        "events": [{"type": "custom", "eventName": "seat_added",
                            "url": "https://app.example.com/", "path": "/", "timestamp": when}]});
                    let r = app.ingest_unapplied(&key, body).await;
                    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
                }
            }
        });
        futures::future::join_all(senders).await;
        app.settle().await;
        // Customer 0 was never active until its event.
        let first = entity::customer::Entity::find()
            .filter(entity::customer::Column::OrganizationId.eq(&org.organization_id))
            .filter(entity::customer::Column::ExternalId.eq("acct_0"))
            .one(&app.db)
            .await
            .unwrap()
            .expect("customer");
        assert!(
            first.last_activity_at.is_some(),
            "the events were not applied"
        );

        for o in [&org, &other] {
            let rows = entity::customer::Entity::find()
                .filter(entity::customer::Column::OrganizationId.eq(&o.organization_id))
                .all(&app.db)
                .await
                .unwrap();
            // The kept counts, label by label, against the rows.
            crate::import::assert_activity_counts(&app, &o.organization_id).await;
            // Totals from the kept counts for edges at chosen minutes of their hour (a list's
            // edge falls at the minute of the call), against the rows.
            let hour = now
                .duration_trunc(Duration::hours(1))
                .expect("a whole hour");
            for back in [2, 20, 30, 80, 300, 2_000] {
                for minute in [0, 10, 45] {
                    let t = hour - Duration::hours(back) + Duration::minutes(minute);
                    for (since, before, expected) in [
                        (
                            Some(t),
                            None,
                            rows.iter()
                                .filter(|c| c.last_activity_at.is_some_and(|a| a >= t))
                                .count(),
                        ),
                        (
                            None,
                            Some(t),
                            rows.iter()
                                .filter(|c| c.last_activity_at.is_none_or(|a| a < t))
                                .count(),
                        ),
                    ] {
                        use custintel::tools::record_counts::customers_by_activity;
                        let total = customers_by_activity(&o.organization_id, since, before)
                            .expect("one bound");
                        let matching = total
                            .edge
                            .map(|edge| entity::customer::Entity::find().filter(edge));
                        let counted = custintel::tools::common::kept_plus_counted(
                            &app.db, total.kept, matching,
                        )
                        .await
                        .expect("total");
                        assert_eq!(counted.count as usize, expected, "{since:?} {before:?}");
                        assert!(counted.exact);
                    }
                }
            }
            // The lists' totals.
            for within in ["3h", "5h", "1d", "36h", "3d", "7d", "30d", "60d"] {
                let span = custintel::tools::common::parse_duration("t", within).unwrap();
                let cutoff = now - span;
                for (input, expected) in [
                    (
                        json!({"activeWithin": within}),
                        rows.iter()
                            .filter(|c| c.last_activity_at.is_some_and(|t| t > cutoff))
                            .count(),
                    ),
                    (
                        json!({"inactiveFor": within}),
                        rows.iter()
                            .filter(|c| c.last_activity_at.is_none_or(|t| t < cutoff))
                            .count(),
                    ),
                ] {
                    let mut input = input;
                    input["limit"] = json!(7);
                    let r = tool(&app, &o.api_key, "svc_list_customers", input.clone()).await;
                    assert_eq!(r.status, StatusCode::OK, "{input}: {}", r.body);
                    assert_eq!(r.body["pagination"]["total"], expected, "{input}");
                    assert_eq!(r.body["pagination"]["totalExact"], true, "{input}");
                    assert_eq!(field(&r, "id").len(), expected.min(7), "{input}");
                }
            }
        }
    }
);

db_test!(
    user_lists_by_name_agree_whichever_way_they_are_read,
    |app: TestApp| async move {
        // More users than a list with few matches may have: a rare name reads the users the
        // name index finds, a common one walks the activity index; both give the lists a
        // filter over every user gives, in order, and nothing of the organization beside.
        let org = app.org("Named Users").await;
        let other = app.org("Beside").await;
        let times: Vec<String> = (0..40).map(ago).collect();
        let book = |n: usize, beside: bool| {
            let customers = (0..20).map(|c| {
                json!({"kind": "customer", "domain": format!("n{c}.example.com"),
                "name": format!("Company {c}")})
            });
            let users = (0..n).map(|u| {
                // Some users have no name, some a name too short for the trigram index.
                let name = match u % 11 {
                    0 => Value::Null,
                    1 => json!(format!("U{}", u % 10)),
                    _ if beside => json!(format!("Only Beside {u}")),
                    _ => json!(format!("User {u}")),
                };
                let active = (u % 7 != 0).then(|| times[u % 40].clone());
                let role = ["admin", "member", "viewer"][u % 3];
                json!({"kind": "user", "customer": format!("n{}.example.com", u % 20),
                "email": format!("user{u}@n{}.example.com", u % 20), "name": name,
                "stage": if u % 2 == 0 { "engaged" } else { "activated" },
                "traits": {"role": role},
                "lastActivityAt": active})
            });
            customers
                .chain(users)
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        };
        for (o, n, beside) in [(&org, 7_000, false), (&other, 300, true)] {
            let report = import::import_text(&app.db, &o.organization_id, &book(n, beside))
                .await
                .expect("import");
            assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        }
        // A renamed user (renamed by an import line naming them by email) is found by the
        // new name only.
        let rename = json!({"kind": "user", "email": "user123@n3.example.com",
            "name": "Renamed Person"});
        let report = import::import_text(&app.db, &org.organization_id, &rename.to_string())
            .await
            .expect("import");
        assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        let rows = entity::user::Entity::find()
            .filter(entity::user::Column::OrganizationId.eq(&org.organization_id))
            .all(&app.db)
            .await
            .unwrap();
        let now = Utc::now();
        let named = |needle: &'static str| {
            move |u: &entity::user::Model| {
                u.name
                    .as_ref()
                    .is_some_and(|n| n.to_lowercase().contains(needle))
            }
        };
        let cases: Vec<(Value, Box<dyn Fn(&entity::user::Model) -> bool>)> = vec![
            // Few (111 matches, the renamed one no more), many (5,727), none.
            (json!({"name": "user 12"}), Box::new(named("user 12"))),
            (json!({"name": "USER"}), Box::new(named("user"))),
            (json!({"name": "renamed"}), Box::new(named("renamed"))),
            (
                json!({"name": "only beside"}),
                Box::new(named("only beside")),
            ),
            // Too short for the index; a wildcard taken literally.
            (json!({"name": "u3"}), Box::new(named("u3"))),
            (json!({"name": "user 1%"}), Box::new(named("user 1%"))),
            (
                json!({"name": "user 1", "traits": {"role": "admin"}, "activeWithin": "30d"}),
                Box::new(move |u| {
                    named("user 1")(u)
                        && u.traits["role"] == "admin"
                        && u.last_activity_at
                            .is_some_and(|t| t >= now - Duration::days(30))
                }),
            ),
            (
                json!({"name": "user 2", "stage": "engaged", "customer": "n4.example.com"}),
                Box::new(|u| {
                    named("user 2")(u)
                        && u.stage == "engaged"
                        && u.email
                            .as_deref()
                            .is_some_and(|e| e.ends_with("@n4.example.com"))
                }),
            ),
        ];
        for (input, keep) in cases {
            let mut expected: Vec<&entity::user::Model> = rows.iter().filter(|u| keep(u)).collect();
            expected.sort_by(|a, b| {
                b.last_activity_at
                    .cmp(&a.last_activity_at)
                    .then_with(|| b.id.cmp(&a.id))
            });
            let expected: Vec<String> = expected.iter().map(|u| u.id.clone()).collect();
            let (ids, pagination) = all_pages(&app, &org.api_key, "svc_list_users", &input).await;
            assert_eq!(ids.len(), expected.len(), "{input}");
            assert!(ids == expected, "{input}: the list's order differs");
            if pagination["totalExact"] == true {
                assert_eq!(pagination["total"], expected.len(), "{input}");
            } else {
                assert!(pagination["total"].as_u64() <= Some(expected.len() as u64));
            }
            let indexed = input["name"]
                .as_str()
                .is_some_and(|n| n.len() >= 3 && !n.contains('%'));
            if indexed && expected.len() <= 5_000 {
                // A name the name index finds in few users is counted exactly.
                assert_eq!(pagination["totalExact"], true, "{input}");
            }
        }
    }
);

db_test!(get_timeline, |app: TestApp| async move {
    let org = app.org("Timeline Inc").await;
    seed(&app, &org.organization_id).await;
    let k = &org.api_key;

    let r = tool(
        &app,
        k,
        "svc_get_timeline",
        json!({"customer": "acme.com", "timeframe": "60d"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let kinds = field(&r, "kind");
    // 2 billing changes, 4 sources, 2 events (the billing event is shown as its change).
    assert_eq!(r.body["pagination"]["total"], 8, "{kinds:?}");
    assert!(!kinds.contains(&"billing".to_string()));
    let ats = field(&r, "at");
    let mut sorted = ats.clone();
    sorted.sort();
    assert_eq!(ats, sorted);
    snap!("get_timeline", r.body);

    let r = tool(
        &app,
        k,
        "svc_get_timeline",
        json!({"customer": "acme.com", "timeframe": "60d", "channels": ["support", "conversation"]}),
    )
    .await;
    assert_eq!(field(&r, "kind"), ["email", "support_ticket", "call"]);
    let r = tool(
        &app,
        k,
        "svc_get_timeline",
        json!({"customer": "acme.com", "timeframe": "60d", "channels": ["billing"]}),
    )
    .await;
    assert_eq!(
        field(&r, "kind"),
        ["billing_change", "billing_change", "opportunity"]
    );
    assert_eq!(
        r.body["items"][2]["ref"],
        json!({"type": "OPPORTUNITY", "id": "opp_1"})
    );

    // Default 30 days leaves out the change 40 days ago.
    let r = tool(&app, k, "svc_get_timeline", json!({"customer": "acme.com"})).await;
    assert_eq!(r.body["pagination"]["total"], 7);

    let r = tool(
        &app,
        k,
        "svc_get_timeline",
        json!({"customer": "acme.com", "after": ago(5), "before": ago(1)}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        field(&r, "kind"),
        ["support_ticket", "custom", "call", "pageview"]
    );

    // Pages of three cover all eight in order.
    let mut all = Vec::new();
    let mut cursor = Value::String(String::new());
    loop {
        let r = tool(
            &app,
            k,
            "svc_get_timeline",
            json!({"customer": "cus_1", "timeframe": "60d", "limit": 3, "cursor": cursor}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        all.extend(field(&r, "at"));
        if r.body["pagination"]["hasMore"] == false {
            break;
        }
        cursor = r.body["pagination"]["nextCursor"].clone();
    }
    assert_eq!(all, ats);
    // A first page's total is the window's whatever the page's size: read off the page's rows
    // when every channel came back short of what was asked, counted otherwise.
    for limit in 1..=5 {
        let input = json!({"customer": "acme.com", "timeframe": "60d", "limit": limit});
        let r = tool(&app, k, "svc_get_timeline", input).await;
        assert_eq!(r.body["pagination"]["total"], 8, "limit {limit}");
    }

    let r = tool(
        &app,
        k,
        "svc_get_timeline",
        json!({"customer": "acme.com", "timeframe": "7d", "after": ago(3)}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["details"][0]["path"], json!(["timeframe"]));
    let r = tool(
        &app,
        k,
        "svc_get_timeline",
        json!({"customer": "acme.com", "after": "yesterday"}),
    )
    .await;
    assert_eq!(r.body["details"][0]["path"], json!(["after"]));
    let r = tool(
        &app,
        k,
        "svc_get_timeline",
        json!({"customer": "acme.com", "channels": ["sales"]}),
    )
    .await;
    assert_eq!(r.body["details"][0]["path"], json!(["channels", 0]));
});

db_test!(facts_and_sources, |app: TestApp| async move {
    let org = app.org("Facts Inc").await;
    seed(&app, &org.organization_id).await;
    let k = &org.api_key;

    let r = tool(&app, k, "svc_list_facts", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        field(&r, "text"),
        [
            "Acme plans to add 40 seats in Q1",
            "Exports time out above 400k rows",
            "Globex evaluates a competitor"
        ]
    );
    assert_eq!(
        r.body["items"][0]["permalink"],
        "https://crm.example.com/calls/1"
    );
    snap!("list_facts", r.body);
    let cases = [
        (
            json!({"status": ["SUPERSEDED"]}),
            vec!["Acme renews in March"],
        ),
        (
            json!({"status": ["ACTIVE", "SUPERSEDED"], "customer": "globex.com"}),
            vec!["Globex evaluates a competitor"],
        ),
        (
            json!({"sourceTypes": [" call "]}),
            vec![
                "Acme plans to add 40 seats in Q1",
                "Globex evaluates a competitor",
            ],
        ),
        (
            json!({"sourceTypes": ["support_ticket"], "customer": "cus_1"}),
            vec!["Exports time out above 400k rows"],
        ),
        (
            json!({"after": ago(3)}),
            vec!["Acme plans to add 40 seats in Q1"],
        ),
    ];
    for (input, expected) in cases {
        let r = tool(&app, k, "svc_list_facts", input.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "{input}: {}", r.body);
        assert_eq!(field(&r, "text"), expected, "{input}");
    }
    let r = tool(
        &app,
        k,
        "svc_list_facts",
        json!({"sourceTypes": ["CALL", "VOICEMAIL"]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["details"][0]["path"], json!(["sourceTypes", 1]));
    let r = tool(&app, k, "svc_list_facts", json!({"status": ["MAYBE"]})).await;
    assert_eq!(r.body["details"][0]["path"], json!(["status", 0]));
    let r = tool(&app, k, "svc_list_facts", json!({"limit": 1})).await;
    let first = field(&r, "id");
    let r2 = tool(
        &app,
        k,
        "svc_list_facts",
        json!({"limit": 2, "cursor": r.body["pagination"]["nextCursor"]}),
    )
    .await;
    assert_eq!(r2.body["pagination"]["hasMore"], false);
    assert_eq!(field(&r2, "id").len(), 2);
    assert!(!field(&r2, "id").contains(&first[0]));

    let fact_id = first[0].clone();
    let r = tool(&app, k, "svc_get_fact", json!({"factId": fact_id})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["sourceQuote"], "we want forty more seats");
    snap!("get_fact", r.body);
    let r = tool(&app, k, "svc_get_fact", json!({"factId": "f_missing"})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    snap!("error_fact_not_found", r.body);

    let r = tool(&app, k, "svc_list_sources", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        field(&r, "sourceId"),
        ["call_1", "ticket_1", "opp_1", "email_1", "call_2"]
    );
    let snippet = r.body["items"][0]["snippet"].as_str().unwrap();
    assert!(snippet.chars().count() <= 280 && snippet.ends_with('…'));
    assert!(r.body["items"][0].get("body").is_none());
    snap!("list_sources", r.body);
    let cases = [
        (json!({"sourceTypes": ["CRM_OPPORTUNITY"]}), vec!["opp_1"]),
        (json!({"customer": "globex.com"}), vec!["call_2"]),
        (json!({"after": ago(5), "before": ago(3)}), vec!["ticket_1"]),
        (json!({"fields": ["title"], "limit": 1}), vec!["call_1"]),
    ];
    for (input, expected) in cases {
        let r = tool(&app, k, "svc_list_sources", input.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "{input}: {}", r.body);
        assert_eq!(field(&r, "sourceId"), expected, "{input}");
    }
    let r = tool(
        &app,
        k,
        "svc_list_sources",
        json!({"fields": ["title"], "limit": 1}),
    )
    .await;
    let mut keys: Vec<&String> = r.body["items"][0].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["sourceId", "sourceType", "title"]);

    let r = tool(
        &app,
        k,
        "svc_get_source",
        json!({"sourceType": "crm", "sourceId": "opp_1"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["sourceType"], "OPPORTUNITY");
    assert_eq!(r.body["participants"], json!([]));
    let r = tool(
        &app,
        k,
        "svc_get_source",
        json!({"sourceType": "CALL", "sourceId": "call_1"}),
    )
    .await;
    assert!(r.body["body"].as_str().unwrap().len() > 280);
    snap!("get_source", r.body);
    // The pair must match: an existing id under another type is not found.
    let r = tool(
        &app,
        k,
        "svc_get_source",
        json!({"sourceType": "EMAIL", "sourceId": "call_1"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = tool(
        &app,
        k,
        "svc_get_source",
        json!({"sourceType": "FAX", "sourceId": "call_1"}),
    )
    .await;
    assert_eq!(r.body["details"][0]["path"], json!(["sourceType"]));
});

db_test!(other_tenants_are_invisible, |app: TestApp| async move {
    let a = app.org("Tenant A").await;
    let b = app.org("Tenant B").await;
    seed(&app, &a.organization_id).await;
    let fact_id = {
        let r = tool(&app, &a.api_key, "svc_list_facts", json!({"limit": 1})).await;
        field(&r, "id")[0].clone()
    };
    let k = &b.api_key;
    for name in [
        "svc_list_customers",
        "svc_list_users",
        "svc_list_workspace_users",
        "svc_list_facts",
        "svc_list_sources",
    ] {
        let r = tool(&app, k, name, json!({})).await;
        assert_eq!(r.status, StatusCode::OK, "{name}");
        assert_eq!(r.body["items"], json!([]), "{name}");
        assert_eq!(r.body["pagination"]["total"], 0, "{name}");
    }
    // The name-search index is shared by all organizations; its matches stay candidates.
    let r = tool(&app, k, "svc_list_customers", json!({"name": "umbrella"})).await;
    assert_eq!(r.body["items"], json!([]));
    assert_eq!(r.body["pagination"]["total"], 0);
    for (name, input) in [
        ("svc_get_customer", json!({"customer": "acme.com"})),
        ("svc_get_customer", json!({"customer": "cus_1"})),
        ("svc_get_timeline", json!({"customer": "acme.com"})),
        ("svc_list_users", json!({"customer": "acme.com"})),
        ("svc_get_fact", json!({"factId": fact_id})),
        (
            "svc_get_source",
            json!({"sourceType": "CALL", "sourceId": "call_1"}),
        ),
    ] {
        let r = tool(&app, k, name, input.clone()).await;
        assert_eq!(
            r.status,
            StatusCode::NOT_FOUND,
            "{name} {input}: {}",
            r.body
        );
    }
});

db_test!(call_errors, |app: TestApp| async move {
    let org = app.org("Errors Inc").await;
    let k = &org.api_key;
    let r = app
        .raw(
            Method::POST,
            CALL,
            k,
            Some("application/json"),
            "{\"tool\": ",
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body["details"][0]["message"]
        .as_str()
        .unwrap()
        .contains("JSON"));
    crate::helpers::check_schema("POST", CALL, 400, &r.body);
    snap!("error_invalid_json", r.body);

    let r = app
        .post(CALL, CALL, k, Some(json!({"tool": "svc_drop_tables"})))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["details"][0]["path"], json!(["tool"]));
    snap!("error_unknown_tool", r.body);

    let r = app.post(CALL, CALL, k, Some(json!({"input": {}}))).await;
    assert_eq!(r.body["details"][0]["path"], json!(["tool"]));
    let r = app
        .post(
            CALL,
            CALL,
            k,
            Some(json!({"tool": "svc_list_customers", "input": [1]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["details"][0]["path"], json!(["input"]));
    // `input` defaults to `{}`.
    let r = app
        .post(CALL, CALL, k, Some(json!({"tool": "svc_list_customers"})))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    let r = app
        .call(
            Method::POST,
            CALL,
            CALL,
            None,
            Some(json!({"tool": "svc_list_customers"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    snap!("error_missing_key", r.body);
    let r = app
        .call(
            Method::POST,
            CALL,
            CALL,
            Some("ok_not_a_key"),
            Some(json!({"tool": "svc_list_customers"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
});

/// A Free organization allowed `limit` tool calls a cycle.
async fn free_org(
    app: &TestApp,
    name: &str,
    limit: i64,
) -> custintel::ops::admin::CreatedOrganization {
    custintel::ops::admin::create_org(
        &app.db,
        custintel::ops::admin::NewOrganization {
            name: name.into(),
            plan: custintel::ops::admin::Plan::Free,
            api_call_limit: Some(limit),
            connection_limit: None,
            ingest_rate_limit: None,
            tracking_domains: vec![],
        },
    )
    .await
    .unwrap()
}

db_test!(
    allowance_counted_before_an_upgrade_still_counts,
    |app: TestApp| async move {
        // An earlier version counted in the main file's `api_usage`; on SQLite the counts now
        // live in a file of their own, and the first call moves them there.
        let org = free_org(&app, "Upgraded", 3).await;
        entity::api_usage::ActiveModel {
            organization_id: Set(org.organization_id.clone()),
            cycle: Set(custintel::tools::allowance::cycle_of(Utc::now())),
            calls: Set(2),
        }
        .insert(&app.db)
        .await
        .unwrap();
        let k = &org.api_key;
        let r = tool(&app, k, "svc_list_customers", json!({})).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let r = tool(&app, k, "svc_list_customers", json!({})).await;
        assert_eq!(r.status, StatusCode::PAYMENT_REQUIRED, "{}", r.body);
        let counted = crate::helpers::stored_usage(&app.db, &org.organization_id)
            .await
            .expect("usage row");
        assert_eq!(counted.calls, 3);
    }
);

db_test!(allowance, |app: TestApp| async move {
    let org = free_org(&app, "Small Plan", 3).await;
    let k = &org.api_key;
    // Refused before the tool runs: not counted.
    let r = tool(&app, k, "svc_list_customers", json!({"limit": 5000})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    for _ in 0..2 {
        let r = tool(&app, k, "svc_list_customers", json!({})).await;
        assert_eq!(r.status, StatusCode::OK);
    }
    // A lookup that finds nothing ran the tool: counted.
    let r = tool(&app, k, "svc_get_fact", json!({"factId": "nope"})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = tool(&app, k, "svc_list_customers", json!({})).await;
    assert_eq!(r.status, StatusCode::PAYMENT_REQUIRED, "{}", r.body);
    assert_eq!(r.body["code"], "api_limit_exceeded");
    assert_eq!(r.body["plan"], "free");
    assert_eq!(r.body["feature"], "api_calls");
    let reset_at = r.body["resetAt"].as_i64().unwrap();
    let expected = custintel::tools::allowance::next_cycle_start_ms(Utc::now());
    assert_eq!(reset_at, expected);
    assert!(reset_at > Utc::now().timestamp_millis());
    snap!("error_limit_exceeded", r.body);

    // The count lives in the database: a new server on the same database still refuses.
    let other = second_instance(&app).await;
    let resp = app
        .client
        .post(format!("{other}{CALL}"))
        .bearer_auth(k)
        .json(&json!({"tool": "svc_list_customers"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYMENT_REQUIRED);
    let usage = crate::helpers::stored_usage(&app.db, &org.organization_id)
        .await
        .unwrap();
    assert_eq!(usage.calls, 3);
    assert_eq!(
        usage.cycle,
        custintel::tools::allowance::cycle_of(Utc::now())
    );
});

db_test!(allowance_under_concurrency, |app: TestApp| async move {
    let org = custintel::ops::admin::create_org(
        &app.db,
        custintel::ops::admin::NewOrganization {
            name: "Busy".into(),
            plan: custintel::ops::admin::Plan::Pro,
            api_call_limit: Some(5),
            connection_limit: None,
            ingest_rate_limit: None,
            tracking_domains: vec![],
        },
    )
    .await
    .unwrap();
    let calls = (0..12).map(|_| {
        let client = app.client.clone();
        let url = format!("{}{CALL}", app.base);
        let key = org.api_key.clone();
        async move {
            client
                .post(url)
                .bearer_auth(key)
                .json(&json!({"tool": "svc_list_workspace_users"}))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    let statuses = futures_join_all(calls).await;
    // A call either counts, is refused by the allowance, or (a pool that could not open a
    // connection in time) is told to retry; never a 500.
    assert!(
        statuses.iter().all(|s| [
            StatusCode::OK,
            StatusCode::PAYMENT_REQUIRED,
            StatusCode::SERVICE_UNAVAILABLE
        ]
        .contains(s)),
        "{statuses:?}"
    );
    let mut ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let limited = statuses
        .iter()
        .filter(|s| **s == StatusCode::PAYMENT_REQUIRED)
        .count();
    assert!(ok <= 5, "the burst overshot the allowance: {statuses:?}");
    // Calls told to retry (503, nothing counted) are retried one by one until the allowance
    // ends.
    let mut status = StatusCode::OK;
    let mut retries = 0;
    while status != StatusCode::PAYMENT_REQUIRED && retries < 20 {
        let r = tool(&app, &org.api_key, "svc_list_workspace_users", json!({})).await;
        status = r.status;
        if status == StatusCode::OK {
            ok += 1;
        }
        retries += 1;
    }
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        ok, 5,
        "exactly the allowance succeeded ({limited} refused in the burst)"
    );
    let usage = crate::helpers::stored_usage(&app.db, &org.organization_id)
        .await
        .unwrap();
    assert_eq!(usage.calls, 5);
});

/// Another instance on the app's database, with allowance blocks of its own: its base URL.
async fn second_instance(app: &TestApp) -> String {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let state = custintel::state::AppState {
        allowance: Default::default(),
        ..app.state.clone()
    };
    tokio::spawn(async move {
        custintel::http::server::serve(state, "127.0.0.1:0", move |addr| {
            let _ = tx.send(addr);
        })
        .await
    });
    format!("http://{}", rx.await.unwrap())
}

/// The organization's count in the current cycle, as stored.
async fn stored_calls(app: &TestApp, organization_id: &str) -> i64 {
    crate::helpers::stored_usage(&app.db, organization_id)
        .await
        .map_or(0, |u| u.calls)
}

/// Calls `svc_list_workspace_users` at `base` until refused with 402 (or `most` times);
/// answers how many succeeded.
async fn call_until_refused(client: reqwest::Client, base: String, key: String, most: u32) -> u32 {
    let mut ok = 0;
    for _ in 0..most {
        let status = client
            .post(format!("{base}{CALL}"))
            .bearer_auth(&key)
            .json(&json!({"tool": "svc_list_workspace_users"}))
            .send()
            .await
            .unwrap()
            .status();
        match status {
            StatusCode::OK => ok += 1,
            StatusCode::PAYMENT_REQUIRED => break,
            // Told to retry (nothing counted).
            StatusCode::SERVICE_UNAVAILABLE => {}
            other => panic!("unexpected {other}"),
        }
    }
    ok
}

/// Eight callers, half on the app and half on a second instance, each calling until refused
/// (or `most` times): how many calls succeeded in all.
async fn call_from_two_instances(app: &TestApp, key: &str, most: u32) -> u32 {
    let other = second_instance(app).await;
    let callers = (0..8).map(|i| {
        let base = if i % 2 == 0 {
            app.base.clone()
        } else {
            other.clone()
        };
        call_until_refused(app.client.clone(), base, key.to_string(), most)
    });
    futures_join_all(callers).await.into_iter().sum()
}

db_test!(
    allowance_in_blocks_counts_the_calls_made,
    |app: TestApp| async move {
        // Busy callers on two instances: each instance counts its calls in blocks, and what
        // it counted and did not use is given back once the calls pause.
        let org = free_org(&app, "Blocks", 1_000_000).await;
        let made = call_from_two_instances(&app, &org.api_key, 60).await;
        assert_eq!(made, 8 * 60);
        let mut stored = stored_calls(&app, &org.organization_id).await;
        let waited = std::time::Instant::now();
        while stored != i64::from(made) && waited.elapsed() < std::time::Duration::from_secs(5) {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            stored = stored_calls(&app, &org.organization_id).await;
        }
        assert_eq!(stored, i64::from(made), "unused calls were not given back");
    }
);

db_test!(
    allowance_in_blocks_ends_exactly_at_the_limit,
    |app: TestApp| async move {
        // Callers on two instances call until refused: together they make exactly the
        // allowance, though each instance held blocks the other could not use.
        let org = free_org(&app, "Exact", 300).await;
        let made = call_from_two_instances(&app, &org.api_key, 400).await;
        assert_eq!(made, 300);
        assert_eq!(stored_calls(&app, &org.organization_id).await, 300);
    }
);

/// Runs futures concurrently on the runtime and collects their outputs in order.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

// Tool calls write their counts (in blocks) to the usage file beside a SQLite database; that
// file's WAL is checkpointed as it goes, so it stays small however many calls are made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_file_wal_stays_small() {
    let app = crate::helpers::spawn(crate::helpers::Backend::Sqlite)
        .await
        .expect("sqlite app");
    let app = std::sync::Arc::new(app);
    let org = app.org("Chatty").await;
    // Eight callers at once, as a busy service has them: calls that never pause leave a
    // checkpoint that waits for nobody no moment to start the WAL over.
    let callers = (0..8).map(|_| {
        let (app, key) = (app.clone(), org.api_key.clone());
        tokio::spawn(async move {
            for _ in 0..300 {
                let r = tool(&app, &key, "svc_list_workspace_users", json!({})).await;
                assert_eq!(r.status, StatusCode::OK, "{}", r.body);
            }
        })
    });
    for caller in callers.collect::<Vec<_>>() {
        caller.await.expect("caller");
    }
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let file = custintel::db::sqlite_file(&app.db)
        .await
        .unwrap()
        .expect("a database file");
    let mut wal = custintel::tools::allowance::own_file_path(&file).into_os_string();
    wal.push("-wal");
    let wal = std::path::PathBuf::from(wal);
    let bytes = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    // Without checkpoints: at least a page of 8 KiB per call, 18 MiB or more for these calls;
    // with checkpoints that wait for nobody, 2.7-9.3 MB in runs here (the WAL starts over
    // only in the calls' pauses); emptied past 64 pages, 1.7 MB or less.
    assert!(bytes < 5 << 19, "{} holds {bytes} bytes", wal.display());
}

db_test!(
    names_renamed_by_ingest_are_found_by_the_new_name,
    |app: TestApp| async move {
        // Ingest writes names (new and renamed users and customers) to the name indexes
        // itself: a list by the new name finds the record, by the old one nothing.
        let org = app.org("Renames").await;
        let identify = |user: &str, customer: &str| {
            json!({"source": "server", "events": [{"type": "identify",
                "url": "https://app.x.com/", "path": "/", "email": "ada@renames.example",
                "userId": "u_ada", "traits": {"name": user},
                "customerId": "acct_renames", "customerTraits": {"name": customer}}]})
        };
        for (user, customer) in [
            ("Zephyrine Quill", "Quillworks Ltd"),
            ("Ottoline Brack", "Brackwater Ltd"),
        ] {
            let r = app.ingest(&org.public_key, identify(user, customer)).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        }
        for (name, input, expected) in [
            (
                "svc_list_users",
                json!({"name": "brack"}),
                vec!["Ottoline Brack"],
            ),
            ("svc_list_users", json!({"name": "zephyr"}), vec![]),
            (
                "svc_list_customers",
                json!({"name": "brackwater"}),
                vec!["Brackwater Ltd"],
            ),
            ("svc_list_customers", json!({"name": "quillworks"}), vec![]),
        ] {
            let r = tool(&app, &org.api_key, name, input.clone()).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
            assert_eq!(field(&r, "name"), expected, "{name} {input}");
            assert_eq!(
                r.body["pagination"]["total"],
                expected.len(),
                "{name} {input}"
            );
        }
    }
);
