//! A tool call's read connection (`custintel::db::Reads`): on a SQLite file it reads through
//! rusqlite and types each value by its column's declared type, so every record the tools read
//! must come back equal to what sea-orm's own SQLite driver reads. On PostgreSQL it is a pooled
//! connection the call holds, its statements run through sqlx: the records must come back as
//! the pool's, and calls holding connections must not starve one another of the pool's.

use custintel::{
    crypto::SecretBox,
    db::Reads,
    state::AppState,
    tools::{self, ToolContext},
};
use entity::{api_key, billing_change, customer, event, fact, source, user};
use sea_orm::{DatabaseConnection, EntityTrait, QueryOrder};
use serde_json::json;

use crate::{
    helpers::{fresh_db, org_in, Backend},
    query_plans::seed,
};

async fn both<E>(db: &DatabaseConnection, reads: &Reads, order: E::Column) -> usize
where
    E: EntityTrait,
    E::Model: PartialEq + std::fmt::Debug,
{
    let pool = E::find()
        .order_by_asc(order)
        .all(db)
        .await
        .expect("read through the pool");
    let read = E::find()
        .order_by_asc(order)
        .all(reads)
        .await
        .expect("read through the read connection");
    assert_eq!(pool, read, "{}", E::default().table_name());
    read.len()
}

fn state(db: &DatabaseConnection) -> AppState {
    AppState {
        db: db.clone(),
        secrets: SecretBox::from_key(&[7u8; 32]),
        public_url: "http://127.0.0.1".into(),
        integrations: Default::default(),
        search: custintel::search::SearchIndex::new(db.clone()).expect("search"),
        agents: Default::default(),
        name_trigrams: Default::default(),
        allowance: Default::default(),
    }
}

#[tokio::test]
async fn read_connections_read_every_record_as_the_pool_does() {
    read_every_record_as_the_pool_does(Backend::Sqlite).await;
}

#[tokio::test]
async fn held_postgres_connections_read_every_record_as_the_pool_does() {
    read_every_record_as_the_pool_does(Backend::Postgres).await;
}

async fn read_every_record_as_the_pool_does(backend: Backend) {
    let Some((db, _tmp)) = fresh_db(backend).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let org = org_in(&db, "Reads").await;
    seed(&db, &org.organization_id, 200).await;
    let reads = Reads::open(&db).await.expect("open");
    match backend {
        Backend::Sqlite => assert!(
            matches!(reads, Reads::Sqlite(_)),
            "a SQLite file is read through read connections"
        ),
        Backend::Postgres => assert!(
            matches!(reads, Reads::Postgres(_)),
            "PostgreSQL is read through a held connection"
        ),
    }
    // Every kind of column: texts, optional texts, times and missing times, JSON, booleans,
    // integers, enums.
    assert!(both::<customer::Entity>(&db, &reads, customer::Column::Id).await > 0);
    assert!(both::<user::Entity>(&db, &reads, user::Column::Id).await > 0);
    assert!(both::<source::Entity>(&db, &reads, source::Column::Id).await > 0);
    assert!(both::<fact::Entity>(&db, &reads, fact::Column::Id).await > 0);
    assert!(both::<event::Entity>(&db, &reads, event::Column::Id).await > 0);
    assert!(both::<billing_change::Entity>(&db, &reads, billing_change::Column::Id).await > 0);
    assert!(both::<api_key::Entity>(&db, &reads, api_key::Column::Id).await > 0);
}

#[tokio::test]
async fn read_connections_refuse_writes() {
    let (db, _tmp) = fresh_db(Backend::Sqlite).await.expect("sqlite");
    let reads = Reads::open(&db).await.expect("open");
    let err = sea_orm::ConnectionTrait::execute_unprepared(&reads, "DELETE FROM customers")
        .await
        .expect_err("a write on a read connection");
    assert!(err.to_string().contains("read connection"), "{err}");
}

/// More callers than read connections (SQLite's 16, PostgreSQL's pool of 20), in two
/// organizations at once: every call answers, and each sees its own organization's records
/// only.
#[tokio::test]
async fn concurrent_calls_share_the_read_connections_and_keep_to_their_organization() {
    concurrent_calls_keep_to_their_organization(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_postgres_connections_and_keep_to_their_organization() {
    concurrent_calls_keep_to_their_organization(Backend::Postgres).await;
}

async fn concurrent_calls_keep_to_their_organization(backend: Backend) {
    let Some((db, _tmp)) = fresh_db(backend).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let large = org_in(&db, "Large").await;
    let small = org_in(&db, "Small").await;
    seed(&db, &large.organization_id, 200).await;
    seed(&db, &small.organization_id, 25).await;
    let state = state(&db);
    let calls = (0..48).map(|i| {
        let (org, customers) = if i % 2 == 0 {
            (large.organization_id.clone(), 200)
        } else {
            (small.organization_id.clone(), 25)
        };
        let ctx = ToolContext::new(state.clone(), org);
        tokio::spawn(async move {
            let listed = tools::call(ctx.clone(), "svc_list_customers", Some(json!({"limit": 5})))
                .await
                .expect("list");
            assert_eq!(listed["pagination"]["total"], json!(customers), "{listed}");
            let first = listed["items"][0]["id"].as_str().expect("id").to_string();
            let found = tools::call(
                ctx.clone(),
                "svc_get_customer",
                Some(json!({"customer": first, "include": ["users", "facts", "sources"]})),
            )
            .await
            .expect("get");
            assert_eq!(found["id"], json!(first), "{found}");
            assert!(found["users"].is_array(), "{found}");
        })
    });
    for call in futures::future::join_all(calls).await {
        call.expect("call");
    }
    // A customer of one organization is not found from the other.
    let theirs = tools::call(
        ToolContext::new(state.clone(), large.organization_id.clone()),
        "svc_list_customers",
        Some(json!({"limit": 1})),
    )
    .await
    .expect("list");
    let id = theirs["items"][0]["id"].as_str().expect("id").to_string();
    let err = tools::call(
        ToolContext::new(state, small.organization_id.clone()),
        "svc_get_customer",
        Some(json!({"customer": id})),
    )
    .await
    .expect_err("another organization's customer");
    assert!(matches!(err, tools::ToolError::NotFound(_)), "{err:?}");
}

/// Users and customers are written by several connections at once, before and after another
/// connection changes the schema (as the statistics refresh does, by making and dropping a
/// table), so that some connections prepare their insert again. Every insert must succeed:
/// while triggers on these tables wrote their names to FTS5 tables, a loaded machine failed
/// most of these runs with "no such table: users" (the writers now add names themselves, see
/// `custintel::db::name_search`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn users_are_written_across_schema_changes() {
    use custintel::db::name_search::{index_names, NamesOf};
    use sea_orm::{ActiveModelTrait, ConnectionTrait, Set};
    let (db, _tmp) = fresh_db(Backend::Sqlite).await.expect("sqlite");
    let org = org_in(&db, "Schema").await;
    let write = |round: usize| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let (db, org) = (db.clone(), org.organization_id.clone());
                tokio::spawn(async move {
                    // As ingest writes them: the records and their names, in one transaction.
                    let txn = custintel::db::begin_write(&db).await?;
                    let now = chrono::Utc::now();
                    let customer = customer::ActiveModel {
                        id: Set(uuid::Uuid::new_v4().to_string()),
                        organization_id: Set(org.clone()),
                        name: Set(format!("Company {round} {i}")),
                        billing_status: Set(customer::BillingStatus::None),
                        mrr_cents: Set(0),
                        traits: Set(json!({})),
                        created_at: Set(now),
                        updated_at: Set(now),
                        events_counted: Set(0),
                        ..Default::default()
                    }
                    .insert(&txn)
                    .await?;
                    let user = user::ActiveModel {
                        id: Set(uuid::Uuid::new_v4().to_string()),
                        organization_id: Set(org),
                        customer_id: Set(Some(customer.id.clone())),
                        name: Set(Some(format!("User {round} {i}"))),
                        stage: Set("discovered".into()),
                        traits: Set(json!({})),
                        created_at: Set(now),
                        updated_at: Set(now),
                        ..Default::default()
                    }
                    .insert(&txn)
                    .await?;
                    index_names(&txn, NamesOf::Customers, [(customer.id, customer.name)]).await?;
                    let named = user.name.clone().map(|n| (user.id.clone(), n));
                    index_names(&txn, NamesOf::Users, named).await?;
                    txn.commit().await
                })
            })
            .collect();
        handles
    };
    for round in 0..6 {
        for handle in write(round) {
            handle.await.expect("task").expect("a user written");
        }
        db.execute_unprepared("CREATE TABLE schema_bump (x INTEGER); DROP TABLE schema_bump")
            .await
            .expect("schema change");
    }
    // Every name is in its index.
    for (sql, what) in [
        (
            "SELECT COUNT(*) AS n FROM customer_name_search WHERE name LIKE '%Company %'",
            "customers",
        ),
        (
            "SELECT COUNT(*) AS n FROM user_name_search WHERE name LIKE '%User %'",
            "users",
        ),
    ] {
        let row = db
            .query_one_raw(sea_orm::Statement::from_string(
                sea_orm::DbBackend::Sqlite,
                sql,
            ))
            .await
            .expect("count")
            .expect("row");
        assert_eq!(row.try_get::<i64>("", "n").expect("n"), 48, "{what}");
    }
}

/// A tool that does not read through the call's connection (`svc_query` waits for connections
/// of its own) gives the call's back before it runs, so a slow query holds none of the
/// service's pool, which the other requests need (PostgreSQL).
#[tokio::test]
async fn a_query_call_holds_none_of_the_pool_while_it_runs() {
    let Some((db, _tmp)) = fresh_db(Backend::Postgres).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let org = org_in(&db, "Query").await;
    let pool = db.get_postgres_connection_pool().clone();
    let in_use = move || pool.size() as usize - pool.num_idle();
    // A connection goes back to the pool in a task of its own after a round trip: settled.
    let settle = || tokio::time::sleep(std::time::Duration::from_millis(250));
    settle().await;
    assert_eq!(in_use(), 0, "connections in use before the call");
    // As the tool gateway calls it: the connection the API key was looked up on comes along.
    let reads = Reads::open(&db).await.expect("open");
    assert_eq!(in_use(), 1, "the call's connection is taken");
    let ctx = ToolContext::reading(state(&db), org.organization_id.clone(), reads);
    let call = tokio::spawn(tools::call(
        ctx,
        "svc_query",
        Some(json!({"sql": "SELECT pg_sleep(1.5)::text AS slept"})),
    ));
    tokio::time::sleep(std::time::Duration::from_millis(750)).await;
    let busy = in_use();
    call.await.expect("task").expect("the query answers");
    assert_eq!(
        busy, 0,
        "a connection of the pool was held during the query"
    );
}
