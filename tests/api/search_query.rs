//! svc_search_customer_context, svc_schema and svc_query, called through their `run`
//! functions (the gateway route maps their results and errors to HTTP).

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use custintel::{
    search::SearchIndex,
    tools::{
        query,
        query_kept_totals::{rewrite, QueryDialect},
        schema, search_customer_context as search, ToolContext, ToolError,
    },
};
use entity::{
    change,
    customer::{self, BillingStatus},
    fact::{self, FactStatus},
    source,
};
use sea_orm::{
    ActiveModelTrait, ActiveValue::NotSet, ColumnTrait, ConnectionTrait, DatabaseBackend,
    EntityTrait, PaginatorTrait, QueryFilter, Set, TransactionTrait,
};
use serde_json::{json, Value};

use crate::{db_test, helpers::TestApp, snap};

fn ctx(app: &TestApp, organization_id: &str) -> ToolContext {
    ToolContext::new(app.state.clone(), organization_id.to_string())
}

fn at(day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 10, day, 15, 0, 0).unwrap()
}

async fn add_customer(
    app: &TestApp,
    org: &str,
    name: &str,
    domain: &str,
    status: BillingStatus,
    mrr: i64,
) -> String {
    add_customer_on(&app.db, org, name, domain, status, mrr).await
}

async fn add_customer_on(
    db: &sea_orm::DatabaseConnection,
    org: &str,
    name: &str,
    domain: &str,
    status: BillingStatus,
    mrr: i64,
) -> String {
    let id = uuid::Uuid::new_v4().to_string();
    customer::ActiveModel {
        id: Set(id.clone()),
        organization_id: Set(org.into()),
        name: Set(name.into()),
        domain: Set(Some(domain.into())),
        external_id: Set(Some(format!("ext_{domain}"))),
        billing_status: Set(status),
        mrr_cents: Set(mrr),
        traits: Set(json!({ "plan": "pro" })),
        last_activity_at: Set(Some(at(20))),
        events_counted: sea_orm::ActiveValue::Set(0),
        created_at: Set(at(1)),
        updated_at: Set(at(1)),
    }
    .insert(db)
    .await
    .expect("customer");
    id
}

/// Writes a change-log row and returns its seq, as every source/fact writer does.
async fn record_change<C: ConnectionTrait>(db: &C, org: &str, kind: &str, id: &str) -> i64 {
    change::ActiveModel {
        seq: NotSet,
        organization_id: Set(org.into()),
        artifact_type: Set(kind.into()),
        artifact_id: Set(id.into()),
        created_at: Set(Utc::now()),
    }
    .insert(db)
    .await
    .expect("change")
    .seq
}

/// Inserts (or, with an existing `id`, rewrites) a source; returns its database id.
#[allow(clippy::too_many_arguments)]
async fn put_source(
    app: &TestApp,
    org: &str,
    id: Option<&str>,
    customer_id: &str,
    source_type: &str,
    source_id: &str,
    title: &str,
    body: &str,
    occurred_at: DateTime<Utc>,
) -> String {
    let txn = app.db.begin().await.expect("begin");
    let db_id = id
        .map(String::from)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let seq = record_change(&txn, org, "source", &db_id).await;
    let row = source::ActiveModel {
        id: Set(db_id.clone()),
        organization_id: Set(org.into()),
        source_type: Set(source_type.into()),
        source_id: Set(source_id.into()),
        customer_id: Set(Some(customer_id.into())),
        title: Set(title.into()),
        body: Set(body.into()),
        occurred_at: Set(occurred_at),
        permalink: Set(None),
        participants: Set(json!(["ada@acme.com"])),
        change_seq: Set(seq),
        created_at: Set(occurred_at),
        updated_at: Set(Utc::now()),
    };
    if id.is_some() {
        row.update(&txn).await.expect("update source");
    } else {
        row.insert(&txn).await.expect("insert source");
    }
    txn.commit().await.expect("commit");
    db_id
}

#[allow(clippy::too_many_arguments)]
async fn put_fact(
    app: &TestApp,
    org: &str,
    id: Option<&str>,
    customer_id: &str,
    text: &str,
    status: FactStatus,
    source_type: &str,
    source_id: &str,
    occurred_at: DateTime<Utc>,
) -> String {
    let txn = app.db.begin().await.expect("begin");
    let db_id = id
        .map(String::from)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let seq = record_change(&txn, org, "fact", &db_id).await;
    let row = fact::ActiveModel {
        id: Set(db_id.clone()),
        organization_id: Set(org.into()),
        customer_id: Set(customer_id.into()),
        text: Set(text.into()),
        status: Set(status),
        source_type: Set(source_type.into()),
        source_id: Set(source_id.into()),
        source_occurred_at: Set(occurred_at),
        source_quote: Set(format!("as they said: {text}")),
        permalink: Set(None),
        change_seq: Set(seq),
        created_at: Set(occurred_at),
        updated_at: Set(Utc::now()),
    };
    if id.is_some() {
        row.update(&txn).await.expect("update fact");
    } else {
        row.insert(&txn).await.expect("insert fact");
    }
    txn.commit().await.expect("commit");
    db_id
}

async fn caught_up(index: &SearchIndex) {
    index
        .wait_caught_up(Duration::from_secs(20))
        .await
        .expect("index caught up");
}

async fn search_for(app: &TestApp, org: &str, input: Value) -> Result<Value, ToolError> {
    let input: search::Input = serde_json::from_value(input).expect("input parses");
    search::run(&ctx(app, org), input).await
}

fn results(v: &Value) -> Vec<Value> {
    v["results"].as_array().cloned().unwrap_or_default()
}

fn ids(v: &Value) -> Vec<String> {
    results(v)
        .iter()
        .map(|r| r["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn without_scores(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(items) = v["results"].as_array_mut() {
        for item in items {
            assert!(item["score"].as_f64().is_some_and(|s| s > 0.0), "{item}");
            item["score"] = json!("[score]");
        }
    }
    v
}

fn invalid_paths(err: ToolError) -> Vec<String> {
    match err {
        ToolError::Invalid(issues) => issues
            .iter()
            .map(|i| serde_json::to_string(&i.path).unwrap_or_default())
            .collect(),
        other => panic!("expected invalid input, got {other:?}"),
    }
}

/// Two customers of one organization, a third organization's lookalike data.
struct Seeded {
    org: String,
    other_org: String,
    acme: String,
}

async fn seed(app: &TestApp) -> Seeded {
    let org = app.org("Search Co").await.organization_id;
    let other_org = app.org("Other Co").await.organization_id;
    let acme = add_customer(app, &org, "Acme", "acme.com", BillingStatus::Paying, 49_900).await;
    let globex = add_customer(
        app,
        &org,
        "Globex",
        "globex.com",
        BillingStatus::Trialing,
        0,
    )
    .await;
    let rival = add_customer(
        app,
        &other_org,
        "Acme",
        "acme.com",
        BillingStatus::Paying,
        1,
    )
    .await;
    put_source(
        app,
        &org,
        None,
        &acme,
        "CALL",
        "call_1",
        "Renewal pricing call",
        "Ada opened with the agenda. The renewal is in March and pricing is the main worry. \
         They want a discount on pricing for 40 more seats before the renewal. \
         We closed with next steps.",
        at(10),
    )
    .await;
    put_source(
        app,
        &org,
        None,
        &acme,
        "EMAIL",
        "email_1",
        "Follow-up",
        "Thanks for the call. Attached is the security questionnaire. Pricing to follow.",
        at(12),
    )
    .await;
    put_source(
        app,
        &org,
        None,
        &globex,
        "OPPORTUNITY",
        "opp_1",
        "Globex expansion",
        "Expansion opportunity: pricing for the enterprise plan and the renewal date.",
        at(3),
    )
    .await;
    put_source(
        app,
        &org,
        None,
        &globex,
        "SUPPORT_TICKET",
        "ticket_1",
        "Login broken",
        "SSO login fails for every user since Tuesday.",
        at(15),
    )
    .await;
    put_fact(
        app,
        &org,
        None,
        &acme,
        "Acme worries about renewal pricing",
        FactStatus::Active,
        "CALL",
        "call_1",
        at(10),
    )
    .await;
    put_fact(
        app,
        &org,
        None,
        &acme,
        "Acme dropped the renewal pricing concern",
        FactStatus::Retracted,
        "CALL",
        "call_1",
        at(10),
    )
    .await;
    // Another organization's text, with the same words and one of its own.
    put_source(
        app,
        &other_org,
        None,
        &rival,
        "CALL",
        "call_1",
        "Renewal pricing call zyzzyva",
        "Renewal pricing renewal pricing zyzzyva.",
        at(11),
    )
    .await;
    caught_up(&app.state.search).await;
    Seeded {
        org,
        other_org,
        acme,
    }
}

db_test!(search_ranks_groups_and_filters, |app: TestApp| async move {
    let s = seed(&app).await;

    let all = search_for(&app, &s.org, json!({ "query": "renewal pricing" }))
        .await
        .expect("search");
    let found = ids(&all);
    // The call says both words most often (and in its title); the retracted fact, the
    // ticket and the other organization's call are not found.
    assert_eq!(found.first().map(String::as_str), Some("call_1"), "{all:#}");
    assert_eq!(found.len(), 4, "{all:#}");
    assert!(!found.contains(&"ticket_1".to_string()));
    let scores: Vec<f64> = results(&all)
        .iter()
        .map(|r| r["score"].as_f64().unwrap_or_default())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    let call = &results(&all)[0];
    let passages = call["passages"].as_array().expect("passages");
    assert!(passages.len() >= 2, "{call:#}");
    assert!(passages[0].as_str().unwrap_or_default().contains("renewal"));
    snap!("search_results", without_scores(&all));

    // A fact result carries its provenance.
    let fact = results(&all)
        .into_iter()
        .find(|r| r["type"] == "fact")
        .expect("fact result");
    assert_eq!(fact["title"], "Acme worries about renewal pricing");
    assert_eq!(fact["sourceType"], "CALL");
    assert_eq!(fact["sourceId"], "call_1");

    // customer (by domain, external id or id), sourceTypes (normalized), after, topK.
    for reference in ["acme.com", " ACME.com ", "ext_acme.com", s.acme.as_str()] {
        let only_acme = search_for(
            &app,
            &s.org,
            json!({ "query": "pricing", "customer": reference }),
        )
        .await
        .expect("search");
        assert!(results(&only_acme)
            .iter()
            .all(|r| r["customerId"] == s.acme.as_str()));
        assert_eq!(results(&only_acme).len(), 3, "{only_acme:#}");
    }
    let crm = search_for(
        &app,
        &s.org,
        json!({ "query": "pricing", "sourceTypes": [" crm "] }),
    )
    .await
    .expect("search");
    assert_eq!(ids(&crm), vec!["opp_1"]);
    let calls = search_for(
        &app,
        &s.org,
        json!({ "query": "pricing", "sourceTypes": ["call", "Email"] }),
    )
    .await
    .expect("search");
    assert!(results(&calls)
        .iter()
        .all(|r| r["sourceType"] == "CALL" || r["sourceType"] == "EMAIL"));
    assert_eq!(results(&calls).len(), 3, "{calls:#}");
    let recent = search_for(
        &app,
        &s.org,
        json!({ "query": "pricing", "after": "2026-10-11T00:00:00Z" }),
    )
    .await
    .expect("search");
    assert_eq!(ids(&recent), vec!["email_1"]);
    let top1 = search_for(
        &app,
        &s.org,
        json!({ "query": "renewal pricing", "topK": 1 }),
    )
    .await
    .expect("search");
    assert_eq!(ids(&top1), vec!["call_1"]);
    let none = search_for(&app, &s.org, json!({ "query": "kumquat" }))
        .await
        .expect("search");
    snap!("search_no_results", none);

    // Bounds and bad filters.
    for top_k in [0, 101] {
        let err = search_for(&app, &s.org, json!({ "query": "x", "topK": top_k }))
            .await
            .expect_err("topK out of bounds");
        assert_eq!(invalid_paths(err), vec![r#"["topK"]"#]);
    }
    let err = search_for(
        &app,
        &s.org,
        json!({ "query": "  ", "sourceTypes": ["CALL", "FAX"], "after": "last week" }),
    )
    .await
    .expect_err("bad input");
    assert_eq!(
        invalid_paths(err),
        vec![r#"["query"]"#, r#"["sourceTypes",1]"#, r#"["after"]"#]
    );
    assert!(serde_json::from_value::<search::Input>(json!({ "query": "x", "limit": 3 })).is_err());
    let missing = search_for(
        &app,
        &s.org,
        json!({ "query": "pricing", "customer": "nope.example" }),
    )
    .await
    .expect_err("unknown customer");
    assert!(matches!(missing, ToolError::NotFound(_)), "{missing:?}");
    let blank = search_for(&app, &s.org, json!({ "query": "pricing", "customer": " " }))
        .await
        .expect_err("blank customer");
    assert_eq!(invalid_paths(blank), vec![r#"["customer"]"#]);

    // Tenant isolation: another organization's words and customers are never found.
    let theirs = search_for(&app, &s.org, json!({ "query": "zyzzyva" }))
        .await
        .expect("search");
    assert!(results(&theirs).is_empty(), "{theirs:#}");
    let by_their_customer = search_for(
        &app,
        &s.org,
        json!({ "query": "pricing", "customer": "acme.com" }),
    )
    .await
    .expect("search");
    assert!(!ids(&by_their_customer).is_empty());
    assert!(results(&by_their_customer)
        .iter()
        .all(|r| r["customerId"] == s.acme.as_str()));
    let own = search_for(&app, &s.other_org, json!({ "query": "zyzzyva" }))
        .await
        .expect("search");
    assert_eq!(ids(&own), vec!["call_1"]);
});

db_test!(
    search_follows_writes_and_survives_restart,
    |app: TestApp| async move {
        let s = seed(&app).await;
        let ticket = put_source(
            &app,
            &s.org,
            None,
            &s.acme,
            "SUPPORT_TICKET",
            "ticket_9",
            "Invoice question",
            "The invoice shows a wombat surcharge.",
            at(18),
        )
        .await;
        caught_up(&app.state.search).await;
        let found = search_for(&app, &s.org, json!({ "query": "wombat" }))
            .await
            .expect("search");
        assert_eq!(ids(&found), vec!["ticket_9"]);

        // An update replaces the indexed text; the artifact is not duplicated.
        put_source(
            &app,
            &s.org,
            Some(&ticket),
            &s.acme,
            "SUPPORT_TICKET",
            "ticket_9",
            "Invoice question",
            "The invoice shows a platypus surcharge, not a wombat one. Platypus again.",
            at(18),
        )
        .await;
        caught_up(&app.state.search).await;
        let updated = search_for(&app, &s.org, json!({ "query": "platypus wombat" }))
            .await
            .expect("search");
        assert_eq!(ids(&updated), vec!["ticket_9"], "{updated:#}");
        let old_only = search_for(&app, &s.org, json!({ "query": "surcharge" }))
            .await
            .expect("search");
        assert_eq!(ids(&old_only), vec!["ticket_9"]);

        // A fact that stops being active leaves the results.
        let fact_id = put_fact(
            &app,
            &s.org,
            None,
            &s.acme,
            "Acme loves koalas",
            FactStatus::Active,
            "EMAIL",
            "email_1",
            at(12),
        )
        .await;
        caught_up(&app.state.search).await;
        let koala = search_for(&app, &s.org, json!({ "query": "koalas" }))
            .await
            .expect("search");
        assert_eq!(ids(&koala), vec![fact_id.clone()]);
        put_fact(
            &app,
            &s.org,
            Some(&fact_id),
            &s.acme,
            "Acme loves koalas",
            FactStatus::Superseded,
            "EMAIL",
            "email_1",
            at(12),
        )
        .await;
        caught_up(&app.state.search).await;
        let gone = search_for(&app, &s.org, json!({ "query": "koalas" }))
            .await
            .expect("search");
        assert!(results(&gone).is_empty(), "{gone:#}");

        // A new instance over the same database (a restart) builds the same index.
        let restarted = SearchIndex::start(app.db.clone()).expect("index");
        caught_up(&restarted).await;
        let mut state = app.state.clone();
        state.search = restarted;
        let after_restart = search::run(
            &ToolContext::new(state, s.org.clone()),
            serde_json::from_value(json!({ "query": "renewal pricing platypus" })).expect("input"),
        )
        .await
        .expect("search");
        let before_restart =
            search_for(&app, &s.org, json!({ "query": "renewal pricing platypus" }))
                .await
                .expect("search");
        assert_eq!(ids(&after_restart), ids(&before_restart));
        assert_eq!(ids(&after_restart).len(), 5, "{after_restart:#}");
    }
);

db_test!(schema_lists_views, |app: TestApp| async move {
    let org = app.org("Schema Co").await.organization_id;
    let run = |input: Value| {
        let ctx = ctx(&app, &org);
        async move { schema::run(&ctx, serde_json::from_value(input).expect("input")).await }
    };
    let all = run(json!({})).await.expect("schema");
    let names: Vec<&str> = all["views"]
        .as_array()
        .expect("views")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for wanted in [
        "customers",
        "users",
        "workspace_users",
        "facts",
        "sources",
        "events",
    ] {
        assert!(names.contains(&wanted), "{names:?}");
    }
    assert!(!all.to_string().contains("organization_id"));
    snap!("schema_all", all);
    let one = run(json!({ "view": "events" })).await.expect("schema");
    snap!("schema_events", one);
    let err = run(json!({ "view": "secrets" }))
        .await
        .expect_err("unknown view");
    assert_eq!(invalid_paths(err), vec![r#"["view"]"#]);
});

async fn sql(app: &TestApp, org: &str, input: Value) -> Result<Value, ToolError> {
    query::run(
        &ctx(app, org),
        serde_json::from_value(input).expect("input"),
    )
    .await
}

fn refused(result: Result<Value, ToolError>, sql_text: &str) -> String {
    match result {
        Err(ToolError::Refused(message)) => message,
        other => panic!("`{sql_text}` should be refused, got {other:?}"),
    }
}

db_test!(query_reads_only_own_views, |app: TestApp| async move {
    let s = seed(&app).await;

    let rows = sql(&app, &s.org, json!({ "sql": "SELECT name, domain, billing_status, mrr_cents, created_at FROM customers ORDER BY name" }))
        .await
        .expect("query");
    snap!("query_customers", rows);
    assert_eq!(rows["rowCount"], 2);
    // Timestamps are ISO 8601 text in UTC with milliseconds; JSON fields are JSON text.
    assert_eq!(rows["rows"][0][4], "2026-10-01T15:00:00.000Z");
    let traits = sql(
        &app,
        &s.org,
        json!({ "sql": "SELECT traits FROM customers" }),
    )
    .await
    .expect("query");
    let text = traits["rows"][0][0].as_str().expect("JSON text");
    assert_eq!(
        serde_json::from_str::<Value>(text).expect("JSON"),
        json!({ "plan": "pro" })
    );

    let grouped = sql(&app, &s.org, json!({ "sql": "SELECT source_type, count(*) AS n FROM sources GROUP BY source_type ORDER BY source_type" }))
        .await
        .expect("query");
    snap!("query_grouped", grouped);

    let facts = sql(&app, &s.org, json!({ "sql": "SELECT f.text, s.title FROM facts f JOIN sources s ON s.source_type = f.source_type AND s.source_id = f.source_id WHERE f.status = 'ACTIVE'" }))
        .await
        .expect("query");
    assert_eq!(
        facts["rows"],
        json!([["Acme worries about renewal pricing", "Renewal pricing call"]])
    );

    // Another organization's rows are not in the views.
    let count = sql(
        &app,
        &s.org,
        json!({ "sql": "SELECT count(*) FROM customers WHERE mrr_cents = 1" }),
    )
    .await
    .expect("query");
    assert_eq!(count["rows"], json!([[0]]));
    let theirs = sql(
        &app,
        &s.other_org,
        json!({ "sql": "SELECT name, mrr_cents FROM customers" }),
    )
    .await
    .expect("query");
    assert_eq!(theirs["rows"], json!([["Acme", 1]]));

    // maxRows caps the answer and says so.
    let capped = sql(
        &app,
        &s.org,
        json!({ "sql": "SELECT source_id FROM sources ORDER BY source_id", "maxRows": 2 }),
    )
    .await
    .expect("query");
    assert_eq!(capped["rowCount"], 2);
    assert_eq!(capped["truncated"], true);
    snap!("query_truncated", capped);
    let exact = sql(
        &app,
        &s.org,
        json!({ "sql": "SELECT source_id FROM sources", "maxRows": 4 }),
    )
    .await
    .expect("query");
    assert_eq!(exact["truncated"], false);
    for max_rows in [0, 10_001] {
        let err = sql(
            &app,
            &s.org,
            json!({ "sql": "SELECT 1", "maxRows": max_rows }),
        )
        .await
        .expect_err("maxRows out of bounds");
        assert_eq!(invalid_paths(err), vec![r#"["maxRows"]"#]);
    }
    let err = sql(&app, &s.org, json!({ "sql": "   " }))
        .await
        .expect_err("empty");
    assert_eq!(invalid_paths(err), vec![r#"["sql"]"#]);
});

db_test!(
    query_sessions_leave_nothing_behind,
    |app: TestApp| async move {
        let s = seed(&app).await;
        let count = "SELECT count(*) FROM customers";
        // Calls of two organizations at once, more than the query connections kept: each sees
        // its own rows, whichever connection served the call before.
        let calls = (0..24).map(|n| {
            let (org, expected) = if n % 2 == 0 {
                (s.org.clone(), 2)
            } else {
                (s.other_org.clone(), 1)
            };
            let app = &app;
            async move {
                let rows = sql(app, &org, json!({ "sql": count }))
                    .await
                    .expect("count");
                assert_eq!(rows["rows"], json!([[expected]]), "call {n}");
            }
        });
        futures_util::future::join_all(calls).await;
        if app.db.get_database_backend() == DatabaseBackend::Postgres {
            // What a statement can leave on its session does not reach the next call: a
            // setting, a session advisory lock, a prepared statement.
            for leftover in [
                "SELECT set_config('search_path', 'public', false)",
                "SELECT pg_advisory_lock(424242)",
                "SELECT set_config('statement_timeout', '1', false)",
            ] {
                for _ in 0..8 {
                    sql(&app, &s.other_org, json!({ "sql": leftover }))
                        .await
                        .unwrap_or_else(|e| panic!("{leftover}: {e:?}"));
                }
            }
            let _ = sql(
                &app,
                &s.other_org,
                json!({ "sql": "PREPARE leftover AS SELECT 1" }),
            )
            .await;
            for _ in 0..8 {
                let rows = sql(
                    &app,
                    &s.org,
                    json!({ "sql": "SELECT count(*), pg_sleep(0.01)::text FROM customers" }),
                )
                .await
                .expect("after the leftovers");
                assert_eq!(rows["rows"][0][0], json!(2));
                let again = sql(
                    &app,
                    &s.org,
                    json!({ "sql": "PREPARE leftover AS SELECT 1" }),
                )
                .await;
                assert!(
                    !format!("{again:?}").contains("already exists"),
                    "a prepared statement outlived its call: {again:?}"
                );
            }
            let free = app
                .db
                .query_one_raw(sea_orm::Statement::from_string(
                    DatabaseBackend::Postgres,
                    "SELECT pg_try_advisory_lock(424242) AS free",
                ))
                .await
                .expect("try lock")
                .expect("row")
                .try_get::<bool>("", "free")
                .expect("free");
            assert!(
                free,
                "a query call's session advisory lock outlived the call"
            );
        }
    }
);

db_test!(
    query_refuses_writes_and_escapes,
    |app: TestApp| async move {
        let s = seed(&app).await;
        let backend = app.db.get_database_backend();
        let mut statements: Vec<(String, &str)> = vec![
            (
                "INSERT INTO customers (id, name) VALUES ('x', 'y')".into(),
                "read-only",
            ),
            ("UPDATE customers SET name = 'hacked'".into(), "read-only"),
            ("DELETE FROM customers".into(), "read-only"),
            ("CREATE TABLE notes (x integer)".into(), "read-only"),
            ("DROP VIEW customers".into(), "read-only"),
            ("ATTACH DATABASE 'other.db' AS other".into(), ""),
            ("PRAGMA table_info(customers)".into(), ""),
            ("SELECT 1; SELECT 2".into(), "exactly one statement"),
            ("SELECT 1; DELETE FROM customers".into(), ""),
            ("SELECT * FROM organizations".into(), "analytics views"),
            ("SELECT * FROM api_keys".into(), "analytics views"),
        ];
        match backend {
            DatabaseBackend::Sqlite => {
                statements.push((
                    "SELECT * FROM main.customers".into(),
                    "only the analytics views",
                ));
                statements.push((
                    "SELECT name FROM sqlite_master".into(),
                    "only the analytics views",
                ));
                // The name-search indexes hold every organization's customer names...
                statements.push((
                    "SELECT name FROM customer_name_search".into(),
                    "only the analytics views",
                ));
                statements.push((
                    "SELECT * FROM customer_name_search_content".into(),
                    "only the analytics views",
                ));
                // And the users' one every organization's user names.
                statements.push((
                    "SELECT user_id FROM user_name_search WHERE name LIKE '%a%'".into(),
                    "only the analytics views",
                ));
                statements.push((
                    "SELECT * FROM user_name_search_content".into(),
                    "only the analytics views",
                ));
                statements.push(("ATTACH DATABASE ':memory:' AS scratch".into(), "ATTACH"));
                statements.push(("PRAGMA journal_mode".into(), "PRAGMA"));
            }
            _ => {
                let row = app
                    .db
                    .query_one_raw(sea_orm::Statement::from_string(
                        backend,
                        "SELECT current_schema() AS s",
                    ))
                    .await
                    .expect("schema")
                    .expect("row");
                let data_schema: String = row.try_get("", "s").expect("schema name");
                statements.push((
                    format!("SELECT * FROM \"{data_schema}\".customers"),
                    "permission denied",
                ));
                statements.push((
                    format!("SELECT * FROM \"{data_schema}\".query_sessions"),
                    "permission denied",
                ));
                statements.push((format!("SELECT query_to_xml('SELECT * FROM \"{data_schema}\".customers', true, true, '')"), "permission denied"));
                statements.push(("SELECT * FROM public.customers".into(), ""));
                statements.push(("SELECT set_config('role', 'postgres', true)".into(), ""));
                statements.push(("SET ROLE postgres".into(), ""));
            }
        }
        for (statement, needle) in &statements {
            let message = refused(
                sql(&app, &s.org, json!({ "sql": statement })).await,
                statement,
            );
            assert!(message.contains(needle), "`{statement}`: {message}");
        }
        // Nothing changed.
        let count = sql(
            &app,
            &s.org,
            json!({ "sql": "SELECT count(*) FROM customers" }),
        )
        .await
        .expect("query");
        assert_eq!(count["rows"], json!([[2]]));
        assert_eq!(
            customer::Entity::find()
                .all(&app.db)
                .await
                .expect("customers")
                .len(),
            3
        );

        // The time limit stops a runaway statement.
        let started = std::time::Instant::now();
        let endless = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n";
        let message = refused(sql(&app, &s.org, json!({ "sql": endless })).await, endless);
        assert!(message.contains("time limit"), "{message}");
        assert!(
            started.elapsed() < Duration::from_secs(9),
            "{:?}",
            started.elapsed()
        );
    }
);

// The kept totals views agree with aggregating their records, after concurrent inserts,
// status and revenue changes and deletes, and show each organization only its own.
db_test!(
    kept_totals_agree_with_aggregates,
    |app: TestApp| async move {
        let mine = app.org("Totals Co").await.organization_id;
        let theirs = app.org("Other Totals Co").await.organization_id;
        let statuses = BillingStatus::ALL;
        let app = &app;
        let writers = (0..48usize).map(|n| {
            let org = if n % 4 == 0 {
                theirs.clone()
            } else {
                mine.clone()
            };
            async move {
                let status = statuses[(n / 4 + n) % statuses.len()];
                let id = add_customer(
                    app,
                    &org,
                    "Co",
                    &format!("t{n}.com"),
                    status,
                    100 * n as i64,
                )
                .await;
                for (i, stage) in entity::user::STAGES.iter().take(1 + n % 3).enumerate() {
                    entity::user::ActiveModel {
                        id: Set(uuid::Uuid::new_v4().to_string()),
                        organization_id: Set(org.clone()),
                        customer_id: Set(Some(id.clone())),
                        email: Set(Some(format!("u{i}@t{n}.com"))),
                        external_id: Set(None),
                        name: Set(None),
                        stage: Set(stage.to_string()),
                        traits: Set(json!({})),
                        last_activity_at: Set(None),
                        created_at: Set(at(1)),
                        updated_at: Set(at(1)),
                    }
                    .insert(&app.db)
                    .await
                    .expect("user");
                }
                // Change some: revenue alone, status and revenue, or remove the customer.
                let row = customer::Entity::find_by_id(id.clone())
                    .one(&app.db)
                    .await
                    .expect("read")
                    .expect("customer");
                let mut change: customer::ActiveModel = row.into();
                match n % 5 {
                    0 => {
                        change.mrr_cents = Set(7 * n as i64);
                        change.update(&app.db).await.expect("revenue");
                    }
                    1 => {
                        change.billing_status = Set(statuses[(n + 1) % statuses.len()]);
                        change.mrr_cents = Set(0);
                        change.update(&app.db).await.expect("status");
                    }
                    2 => {
                        change.last_activity_at = Set(Some(at(25)));
                        change.update(&app.db).await.expect("activity");
                    }
                    3 => {
                        entity::user::Entity::delete_many()
                            .filter(entity::user::Column::CustomerId.eq(id.clone()))
                            .exec(&app.db)
                            .await
                            .expect("users gone");
                        customer::Entity::delete_by_id(id)
                            .exec(&app.db)
                            .await
                            .expect("gone");
                    }
                    _ => {}
                }
            }
        });
        futures::future::join_all(writers).await;
        if app.db.get_database_backend() == DatabaseBackend::Postgres {
            // Counts made by a backend that has ended are folded into the shared rows.
            let schema: String = app
                .db
                .query_one_raw(sea_orm::Statement::from_string(
                    DatabaseBackend::Postgres,
                    "SELECT current_schema() AS s",
                ))
                .await
                .expect("schema")
                .expect("a row")
                .try_get("", "s")
                .expect("name");
            let url = std::env::var("TEST_DATABASE_URL").expect("PostgreSQL");
            // The `n` a counting statement answers.
            let count = |text: &'static str| async move {
                app.db
                    .query_one_raw(sea_orm::Statement::from_string(
                        DatabaseBackend::Postgres,
                        text,
                    ))
                    .await
                    .expect("count")
                    .expect("a row")
                    .try_get::<i64>("", "n")
                    .expect("n")
            };
            // Buckets with more than one row besides live backends' rows: what a fold merges.
            let unmerged = "SELECT count(*) AS n FROM (SELECT 1 FROM record_counts \
                            WHERE shard = 0 OR shard NOT IN (SELECT pid FROM pg_stat_activity) \
                            GROUP BY organization_id, record, bucket HAVING count(*) > 1) AS b";
            // Two backends that end, each counting a paying customer: the same bucket in two
            // ended rows.
            for (name, domain) in [("Ended", "t-ended.com"), ("Ended too", "t-ended-too.com")] {
                let other = custintel::db::connect(&url, Some(&schema))
                    .await
                    .expect("connect");
                add_customer_on(&other, &mine, name, domain, BillingStatus::Paying, 4_200).await;
                other.close().await.expect("close");
            }
            // A bucket whose only row is an ended backend's (no backend has a negative pid) has
            // nothing to merge with: it stays as it is.
            let lone = "SELECT count(*) AS n FROM record_counts \
                        WHERE bucket = 'lone-bucket' AND shard = -1";
            app.db
                .execute_raw(sea_orm::Statement::from_sql_and_values(
                    DatabaseBackend::Postgres,
                    "INSERT INTO record_counts (organization_id, record, bucket, shard, n, amount) \
                     VALUES ($1, 'customer_users', 'lone-bucket', -1, 0, 0)",
                    [mine.clone().into()],
                ))
                .await
                .expect("a lone row");
            let mut folded = 0;
            for _ in 0..100 {
                folded += custintel::tools::record_counts::fold(&app.db)
                    .await
                    .expect("fold");
                if folded > 0 && count(unmerged).await == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(folded > 0, "the ended backends' counts were not folded");
            assert_eq!(
                count(unmerged).await,
                0,
                "a bucket keeps several rows of ended backends"
            );
            let lone_rows = count(lone).await;
            assert_eq!(lone_rows, 1, "a bucket's only row was folded");
        }
        for org in [&mine, &theirs] {
            let ask = |text: &str| {
                let text = text.to_string();
                async move {
                    sql(app, org, json!({ "sql": text })).await.expect("query")["rows"].clone()
                }
            };
            let kept = ask(
                "SELECT billing_status, customers, mrr_cents FROM customer_totals \
                 ORDER BY billing_status",
            )
            .await;
            // `id IS NOT NULL` names a column the totals do not keep: these read every row.
            let counted = ask(
                "SELECT billing_status, count(*), CAST(sum(mrr_cents) AS BIGINT) FROM customers \
                 WHERE id IS NOT NULL GROUP BY billing_status ORDER BY billing_status",
            )
            .await;
            assert_eq!(kept, counted, "customer totals of {org}");
            assert!(kept.as_array().expect("rows").len() >= 3, "{kept}");
            let kept = ask("SELECT stage, users FROM user_totals ORDER BY stage").await;
            let counted = ask(
                "SELECT stage, count(*) FROM users WHERE id IS NOT NULL GROUP BY stage \
                 ORDER BY stage",
            )
            .await;
            assert_eq!(kept, counted, "user totals of {org}");

            // Statements svc_query answers from the kept totals give what reading every row
            // gives: the same columns, values and JSON types.
            for (answered, condition) in [
                (
                    "SELECT billing_status, count(*) AS customers, sum(mrr_cents) AS mrr, \
                     avg(mrr_cents) FROM customers {where} GROUP BY billing_status \
                     ORDER BY mrr DESC, 1",
                    "WHERE id IS NOT NULL",
                ),
                (
                    "SELECT count(*), sum(mrr_cents), count(*) / 2, sum(mrr_cents) / 3, \
                     avg(mrr_cents), sum(mrr_cents) / 100.0 FROM customers {where}",
                    "WHERE id IS NOT NULL",
                ),
                (
                    "SELECT count(1) FROM customers c WHERE c.billing_status IN ('PAYING', \
                     'CHURNED') {and}",
                    "AND c.id IS NOT NULL",
                ),
                (
                    "SELECT c.billing_status, count(c.id) FROM customers AS c {where} GROUP BY 1 \
                     HAVING count(*) > 1 ORDER BY 2 DESC, 1",
                    "WHERE c.id IS NOT NULL",
                ),
                (
                    "SELECT sum(mrr_cents), count(*), avg(mrr_cents) FROM customers \
                     WHERE billing_status = 'NO SUCH' {and}",
                    "AND id IS NOT NULL",
                ),
                (
                    "SELECT stage, count(*) AS n FROM users {where} GROUP BY stage \
                     ORDER BY n DESC, stage LIMIT 2",
                    "WHERE id IS NOT NULL",
                ),
            ] {
                let fast = answered.replace("{where}", "").replace("{and}", "");
                let slow = answered
                    .replace("{where}", condition)
                    .replace("{and}", condition);
                let dialect = match app.db.get_database_backend() {
                    DatabaseBackend::Postgres => QueryDialect::Postgres,
                    _ => QueryDialect::Sqlite,
                };
                assert!(
                    rewrite(&fast, dialect).is_some(),
                    "{fast} is answered from totals"
                );
                assert!(rewrite(&slow, dialect).is_none(), "{slow} reads every row");
                let (fast_answer, slow_answer) = (
                    sql(app, org, json!({ "sql": fast })).await.expect("query"),
                    sql(app, org, json!({ "sql": slow })).await.expect("query"),
                );
                assert_eq!(fast_answer, slow_answer, "{fast}");
            }
        }
        let totals = sql(
            app,
            &theirs,
            json!({ "sql": "SELECT * FROM customer_totals ORDER BY billing_status" }),
        )
        .await
        .expect("query");
        snap!("query_customer_totals", totals);
    }
);

db_test!(
    kept_source_and_fact_totals_agree_with_counts,
    |app: TestApp| async move {
        let mine = app.org("Kept Sources Co").await.organization_id;
        let theirs = app.org("Other Sources Co").await.organization_id;
        let customer_of = |org: String| {
            let app = &app;
            async move {
                add_customer(
                    app,
                    &org,
                    "Acme",
                    &format!("{org}.example"),
                    BillingStatus::Paying,
                    1,
                )
                .await
            }
        };
        let (my_customer, their_customer) =
            tokio::join!(customer_of(mine.clone()), customer_of(theirs.clone()));
        let types = [
            "CALL",
            "EMAIL",
            "CALENDAR_EVENT",
            "SUPPORT_TICKET",
            "OPPORTUNITY",
        ];
        let statuses = [
            FactStatus::Active,
            FactStatus::Superseded,
            FactStatus::Retracted,
        ];
        let app = &app;
        // Writers at once, in both organizations: sources and facts made, a fact's status and a
        // source's type changed, a source deleted.
        let writers = (0..40usize).map(|n| {
            let (org, customer) = if n % 4 == 0 {
                (theirs.clone(), their_customer.clone())
            } else {
                (mine.clone(), my_customer.clone())
            };
            async move {
                let source_type = types[n % types.len()];
                let source = put_source(
                    app,
                    &org,
                    None,
                    &customer,
                    source_type,
                    &format!("s{n}"),
                    "Call",
                    "body",
                    at(1),
                )
                .await;
                let fact = put_fact(
                    app,
                    &org,
                    None,
                    &customer,
                    "A fact",
                    FactStatus::Active,
                    source_type,
                    &format!("s{n}"),
                    at(1),
                )
                .await;
                if n % 3 == 0 {
                    put_fact(
                        app,
                        &org,
                        Some(&fact),
                        &customer,
                        "A fact",
                        statuses[n % 3 + 1],
                        source_type,
                        &format!("s{n}"),
                        at(2),
                    )
                    .await;
                }
                if n % 5 == 1 {
                    put_source(
                        app,
                        &org,
                        Some(&source),
                        &customer,
                        types[(n + 1) % types.len()],
                        &format!("s{n}"),
                        "Call",
                        "body",
                        at(2),
                    )
                    .await;
                }
                if n % 7 == 2 {
                    source::Entity::delete_by_id(source)
                        .exec(&app.db)
                        .await
                        .expect("delete");
                }
            }
        });
        futures_util::future::join_all(writers).await;

        let list = |tool: &'static str, input: Value| {
            let ctx = ctx(app, &mine);
            async move {
                custintel::tools::call(ctx, tool, Some(input))
                    .await
                    .unwrap_or_else(|e| panic!("{tool}: {e:?}"))
            }
        };
        for source_type in types {
            let counted = source::Entity::find()
                .filter(source::Column::OrganizationId.eq(&mine))
                .filter(source::Column::SourceType.eq(source_type))
                .count(&app.db)
                .await
                .expect("count");
            let page = list(
                "svc_list_sources",
                json!({ "sourceTypes": [source_type], "limit": 1 }),
            )
            .await;
            assert_eq!(
                page["pagination"]["total"],
                json!(counted),
                "{source_type}: {page}"
            );
            assert_eq!(page["pagination"]["totalExact"], json!(true));
            for status in [vec![FactStatus::Active], statuses.to_vec()] {
                let counted = fact::Entity::find()
                    .filter(fact::Column::OrganizationId.eq(&mine))
                    .filter(fact::Column::SourceType.eq(source_type))
                    .filter(fact::Column::Status.is_in(status.clone()))
                    .count(&app.db)
                    .await
                    .expect("count");
                let names: Vec<&str> = status.iter().map(|s| s.as_str()).collect();
                let page = list(
                    "svc_list_facts",
                    json!({ "sourceTypes": [source_type], "status": names, "limit": 1 }),
                )
                .await;
                assert_eq!(
                    page["pagination"]["total"],
                    json!(counted),
                    "{source_type} {names:?}: {page}"
                );
            }
        }
        let all = source::Entity::find()
            .filter(source::Column::OrganizationId.eq(&mine))
            .count(&app.db)
            .await
            .expect("count");
        let page = list("svc_list_sources", json!({ "limit": 1 })).await;
        assert_eq!(page["pagination"]["total"], json!(all));
        assert!(all > 0);
    }
);

// Customers per billing status and revenue band, and per trait value, are kept by triggers
// from concurrent writers (made, moved across bands, statuses and traits, deleted, and
// imported many to a statement) in two organizations; revenue lists read their totals from them, exactly on the bands' edges, and
// count the matches off them; a trait value alone reads its total from them.
db_test!(
    kept_revenue_and_trait_totals_agree_with_counts,
    |app: TestApp| async move {
        let mine = app.org("Kept Revenue Co").await.organization_id;
        let theirs = app.org("Other Revenue Co").await.organization_id;
        let statuses = [
            BillingStatus::Paying,
            BillingStatus::Trialing,
            BillingStatus::Churned,
        ];
        let amounts = [
            0, 1, 9, 10, 99, 100, 1_999, 2_000, 49_999, 50_000, 120_000, 1_000_000,
        ];
        let app = &app;
        let writers = (0..48usize).map(|n| {
            let org = if n % 4 == 0 {
                theirs.clone()
            } else {
                mine.clone()
            };
            async move {
                let id = add_customer(
                    app,
                    &org,
                    "Acme",
                    &format!("c{n}.example"),
                    statuses[n % 3],
                    amounts[n % amounts.len()],
                )
                .await;
                if n % 3 == 1 {
                    customer::ActiveModel {
                        id: Set(id.clone()),
                        mrr_cents: Set(amounts[(n * 7 + 3) % amounts.len()]),
                        billing_status: Set(statuses[(n + 1) % 3]),
                        traits: Set(json!({"plan": "team", "beta": n % 2 == 0, "seats": 3})),
                        events_counted: Set(0),
                        ..Default::default()
                    }
                    .update(&app.db)
                    .await
                    .expect("update");
                }
                if n % 5 == 2 {
                    customer::Entity::delete_by_id(id)
                        .exec(&app.db)
                        .await
                        .expect("delete");
                }
            }
        });
        // Multi-row statements beside them: an import into each organization at once (counted
        // per statement on PostgreSQL).
        let import = |org: String, tag: &'static str| async move {
            let lines: Vec<String> = (0..300)
                .map(|c| {
                    let status = ["PAYING", "TRIALING", "CHURNED"][c % 3];
                    let plan = ["pro", "team"][c % 2];
                    json!({"kind": "customer", "domain": format!("{tag}{c}.example"),
                        "billingStatus": status,
                        "mrrCents": amounts[c % amounts.len()],
                        "traits": {"plan": plan, "beta": c % 4 == 0}})
                    .to_string()
                })
                .collect();
            let report = custintel::ops::import::import_text(&app.db, &org, &lines.join("\n"))
                .await
                .expect("import");
            assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        };
        tokio::join!(
            futures_util::future::join_all(writers),
            import(mine.clone(), "mine"),
            import(theirs.clone(), "theirs"),
        );

        let ranges = [
            (Some(0), None),
            (Some(1), None),
            (Some(10), Some(99)),
            (Some(2_000), Some(49_999)),
            (Some(50_000), None),
            (None, Some(9)),
            (Some(5), Some(120_000)),
            (Some(101), None),
        ];
        for (min, max) in ranges {
            for status in [
                None,
                Some(BillingStatus::Paying),
                Some(BillingStatus::Churned),
            ] {
                let mut counted =
                    customer::Entity::find().filter(customer::Column::OrganizationId.eq(&mine));
                if let Some(min) = min {
                    counted = counted.filter(customer::Column::MrrCents.gte(min));
                }
                if let Some(max) = max {
                    counted = counted.filter(customer::Column::MrrCents.lte(max));
                }
                if let Some(status) = status {
                    counted = counted.filter(customer::Column::BillingStatus.eq(status));
                }
                let counted = counted.count(&app.db).await.expect("count");
                let mut input = json!({ "limit": 1 });
                if let Some(min) = min {
                    input["minMrrCents"] = json!(min);
                }
                if let Some(max) = max {
                    input["maxMrrCents"] = json!(max);
                }
                if let Some(status) = status {
                    input["billingStatus"] = json!(status.as_str());
                }
                let page = custintel::tools::call(
                    ctx(app, &mine),
                    "svc_list_customers",
                    Some(input.clone()),
                )
                .await
                .unwrap_or_else(|e| panic!("{input}: {e:?}"));
                assert_eq!(
                    page["pagination"]["total"],
                    json!(counted),
                    "{input}: {page}"
                );
                assert_eq!(page["pagination"]["totalExact"], json!(true), "{input}");
            }
        }
        // Trait values: the customers' triggers keep `trait_values`, whose own triggers count.
        let customers = customer::Entity::find()
            .filter(customer::Column::OrganizationId.eq(&mine))
            .all(&app.db)
            .await
            .expect("customers");
        for (key, value) in [
            ("plan", json!("pro")),
            ("plan", json!("team")),
            ("beta", json!(true)),
            ("beta", json!(false)),
            ("plan", json!("none")),
        ] {
            let counted = customers
                .iter()
                .filter(|c| c.traits.get(key) == Some(&value))
                .count();
            let input = json!({ "traits": { key: value }, "limit": 1 });
            let page =
                custintel::tools::call(ctx(app, &mine), "svc_list_customers", Some(input.clone()))
                    .await
                    .unwrap_or_else(|e| panic!("{input}: {e:?}"));
            assert_eq!(
                page["pagination"]["total"],
                json!(counted),
                "{input}: {page}"
            );
            assert_eq!(page["pagination"]["totalExact"], json!(true), "{input}");
        }
    }
);

db_test!(
    concurrent_searches_answer_as_one_alone,
    |app: TestApp| async move {
        // More callers than cores at once, from two organizations: searches wait their turn
        // for a core and each answers what it answers alone, with its own organization's
        // artifacts only.
        let s = seed(&app).await;
        let alone = search_for(&app, &s.org, json!({ "query": "renewal pricing" }))
            .await
            .expect("search");
        let other_alone = search_for(&app, &s.other_org, json!({ "query": "renewal pricing" }))
            .await
            .expect("search");
        assert!(!ids(&alone).is_empty() && !ids(&other_alone).is_empty());
        let (app, s) = (&app, &s);
        let calls = (0..24).map(|k| {
            let org = if k % 2 == 0 { &s.org } else { &s.other_org };
            async move {
                let found = search_for(app, org, json!({ "query": "renewal pricing" })).await;
                (org.clone(), found.expect("search"))
            }
        });
        for (org, found) in futures::future::join_all(calls).await {
            let expected = if org == s.org { &alone } else { &other_alone };
            assert_eq!(without_scores(&found), without_scores(expected));
        }
        // The two organizations' answers tell them apart (their customers differ).
        assert_ne!(without_scores(&alone), without_scores(&other_alone));
    }
);
