//! The Ingest API under more load than the database commits: an instance holds a bounded
//! backlog of unanswered batches; a batch that finds no room within a second is refused with
//! 503 and `Retry-After` (nothing of it stored), while the batches it holds are stored once the
//! database takes them, and the refused ones' retries are stored once.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, TransactionTrait};
use serde_json::{json, Value};

use crate::helpers::{spawn_with_ingest_backlog, Backend, TestApp};

/// The test instance's backlog: room for three of the batches below.
const BACKLOG: usize = 1024 * 1024;
/// Concurrent clients, each sending one batch (and retrying it until stored).
const CLIENTS: usize = 12;
const EVENTS: usize = 100;

/// A batch of about 300 KB: 100 events, each with 3 KB of properties.
fn batch(client: usize) -> Value {
    let filler = "x".repeat(3_000);
    let events: Vec<Value> = (0..EVENTS)
        .map(|i| {
            json!({
                "type": "custom",
                "eventName": "backlog_probe",
                "url": "https://app.example.com/",
                "path": "/",
                "messageId": format!("backlog-{client}-{i}"),
                "properties": {"filler": filler},
            })
        })
        .collect();
    json!({"visitorId": "7d1f1c56-2b8f-4a43-9a8e-3f7f6f0b6d11", "events": events})
}

/// Keeps the acknowledging writer from committing until the answer is dropped (or rolled
/// back): on SQLite by holding the journal file's write lock from a connection of its own, on
/// PostgreSQL by locking the journal table against inserts.
async fn hold_writer(app: &TestApp) -> (DatabaseTransaction, sea_orm::DatabaseConnection) {
    if app.db.get_database_backend() == DbBackend::Sqlite {
        let main = custintel::db::sqlite_file(&app.db)
            .await
            .expect("database file")
            .expect("a SQLite file");
        let journal = custintel::ingest::journal::own_file_path(&main);
        let conn = custintel::db::connect(&format!("sqlite://{}", journal.display()), None)
            .await
            .expect("the journal file");
        let txn = custintel::db::begin_write(&conn)
            .await
            .expect("the journal's write lock");
        return (txn, conn);
    }
    let txn = app.db.begin().await.expect("a transaction");
    txn.execute_unprepared("LOCK TABLE ingest_journal IN EXCLUSIVE MODE")
        .await
        .expect("the journal's lock");
    (txn, app.db.clone())
}

async fn stored(app: &TestApp, api_key: &str) -> (i64, i64) {
    let body = crate::ingest::query(
        app,
        api_key,
        "SELECT count(*), count(DISTINCT message_id) FROM events",
    )
    .await;
    let row = &body["rows"][0];
    (
        row[0].as_i64().expect("count"),
        row[1].as_i64().expect("distinct"),
    )
}

async fn a_full_backlog_refuses_at_once_and_loses_nothing(backend: Backend) {
    let Some(app) = spawn_with_ingest_backlog(backend, BACKLOG).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let org = app.org("Backlog Co").await;
    // Ready: the writer has loaded its window and takes batches.
    let warm = app
        .ingest_unapplied(
            &org.public_key,
            json!({"visitorId": "7d1f1c56-2b8f-4a43-9a8e-3f7f6f0b6d11", "events": [{
                "type": "custom", "eventName": "warm", "url": "https://app.example.com/",
                "path": "/", "messageId": "warm"}]}),
        )
        .await;
    assert_eq!(warm.status, StatusCode::OK, "{}", warm.body);

    let held = hold_writer(&app).await;
    let app = std::sync::Arc::new(app);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (app, key) = (app.clone(), org.public_key.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let reply = app.ingest_unapplied(&key, batch(client)).await;
                (client, reply, started.elapsed())
            })
        })
        .collect();

    // While the writer is held, the batches beyond the backlog are refused within about a
    // second each; those it holds wait.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut answered = Vec::new();
    let mut waiting = Vec::new();
    for client in clients {
        if client.is_finished() {
            answered.push(client.await.expect("client"));
        } else {
            waiting.push(client);
        }
    }
    assert!(
        !answered.is_empty(),
        "batches beyond the backlog were answered while the writer was held"
    );
    assert!(
        !waiting.is_empty() && waiting.len() <= 3,
        "the backlog holds the batches that fit in it ({} waiting)",
        waiting.len()
    );
    for (client, reply, took) in &answered {
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "client {client}: {}",
            reply.body
        );
        assert!(
            reply.headers.contains_key("retry-after"),
            "client {client}: a refusal says when to retry"
        );
        assert!(
            reply.body["errors"][0]["message"]
                .as_str()
                .is_some_and(|e| e.contains("faster than it can store")),
            "client {client}: {}",
            reply.body
        );
        assert!(
            *took < Duration::from_millis(2_000),
            "client {client}: refused after {took:?}"
        );
    }
    crate::snap!("ingest_backlog_refusal", answered[0].1.body);

    // Released, the held batches are answered: stored (200), or on PostgreSQL possibly refused
    // as having waited too long to commit; either way every batch is retried until stored.
    drop(held);
    let mut pending: Vec<usize> = answered.iter().map(|(client, ..)| *client).collect();
    for client in waiting {
        let (client, reply, ..) = client.await.expect("client");
        if reply.status != StatusCode::OK {
            assert_eq!(
                reply.status,
                StatusCode::SERVICE_UNAVAILABLE,
                "{}",
                reply.body
            );
            // Held too long to commit its claims (PostgreSQL): said so, not "unavailable".
            let message = reply.body["errors"][0]["message"]
                .as_str()
                .unwrap_or_default();
            assert!(
                message.ends_with("the events were not acknowledged; retry")
                    && !message.contains("database is unavailable"),
                "{message}"
            );
            pending.push(client);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for client in pending {
        loop {
            let reply = app.ingest_unapplied(&org.public_key, batch(client)).await;
            if reply.status == StatusCode::OK {
                assert_eq!(reply.body["processed"], EVENTS, "{}", reply.body);
                break;
            }
            assert_eq!(
                reply.status,
                StatusCode::SERVICE_UNAVAILABLE,
                "{}",
                reply.body
            );
            assert!(Instant::now() < deadline, "client {client} never stored");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    app.settle().await;
    let (events, distinct) = stored(&app, &org.api_key).await;
    assert_eq!(
        (events, distinct),
        ((CLIENTS * EVENTS + 1) as i64, (CLIENTS * EVENTS + 1) as i64),
        "every batch stored, each event once"
    );
    let metrics = app
        .client
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    let saturated = metrics
        .lines()
        .find_map(|l| l.strip_prefix("custintel_ingest_batches_saturated_total "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("the saturation counter");
    assert!(saturated >= answered.len() as u64, "{saturated}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_backlog_refuses_at_once_and_loses_nothing_sqlite() {
    a_full_backlog_refuses_at_once_and_loses_nothing(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_backlog_refuses_at_once_and_loses_nothing_postgres() {
    a_full_backlog_refuses_at_once_and_loses_nothing(Backend::Postgres).await;
}
