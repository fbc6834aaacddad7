//! The ingest journal in a file of its own (SQLite): batches an earlier version left in the
//! main file are moved in, rows the applied mark covers are neither applied again nor shown
//! twice, and two appliers racing for the same batches apply them once. On PostgreSQL, appliers
//! lease organizations and apply each batch once, and the `messageId` window's claim keys are
//! those its migration computed; maintaining the claims and the journal never holds up the
//! writers.

use custintel::engine::evaluate::RulesCache;
use custintel::ingest::{
    applier::apply_next,
    journal::{self, Journal},
    validate::{validate_batch, Batch},
};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use serde_json::{json, Value};

async fn count(db: &DatabaseConnection, sql: &str) -> i64 {
    db.query_one_raw(Statement::from_string(DbBackend::Sqlite, sql))
        .await
        .expect("count")
        .expect("a row")
        .try_get_by_index::<i64>(0)
        .expect("count value")
}

fn batch(org: &str, message_id: &str) -> Batch {
    let body = json!({"visitorId": "7d1f1c56-2b8f-4a43-9a8e-3f7f6f0b6d11", "events": [
        {"type": "custom", "eventName": "seat_added", "messageId": message_id,
         "url": "https://app.example.com/", "path": "/"},
    ]});
    let (batch, errors) =
        validate_batch(org, body.to_string().as_bytes(), chrono::Utc::now()).expect("valid");
    assert!(errors.is_empty());
    batch
}

async fn events_in_view(state: &custintel::state::AppState, org: &str) -> Value {
    let answer = custintel::tools::call(
        custintel::tools::ToolContext::new(state.clone(), org.to_string()),
        "svc_query",
        Some(json!({"sql": "SELECT count(*) FROM events"})),
    )
    .await
    .expect("query");
    answer["rows"][0][0].clone()
}

async fn create_org(db: &DatabaseConnection, name: &str) -> String {
    crate::helpers::org_in(db, name).await.organization_id
}

/// A pool of its own on the test's database file, as a second process would have.
async fn second_pool(tmp: &Option<tempfile::TempDir>) -> DatabaseConnection {
    let file = tmp.as_ref().expect("dir").path().join("test.db");
    custintel::db::connect(&format!("sqlite://{}?mode=rwc", file.display()), None)
        .await
        .expect("second pool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_file_journal_applies_each_batch_once() {
    let (state, tmp) = crate::helpers::state_without_server(crate::helpers::Backend::Sqlite)
        .await
        .expect("sqlite");
    let db = state.db.clone();
    let org = create_org(&db, "Journal File Co").await;

    // A batch an earlier version journaled in the main file moves into the journal's file.
    let first = batch(&org, "m1");
    journal::append(&db, &[&first]).await.expect("append");
    let journal = Journal::of(&db).await.expect("journal");
    let file = journal.own_file().expect("a file of its own").clone();
    assert_eq!(count(&db, "SELECT count(*) FROM ingest_journal").await, 0);
    assert_eq!(journal.backlog(None).await.expect("backlog").batches, 1);
    assert_eq!(events_in_view(&state, &org).await, 1, "pending, shown once");

    let mut rules = RulesCache::default();
    let applied = apply_next(&journal, &mut rules).await.expect("apply");
    assert_eq!(applied.map(|a| a.events), Some(1));
    let mark = journal::applied_through(&db).await.expect("mark");
    assert!(mark >= 1);
    assert_eq!(count(&db, "SELECT count(*) FROM events").await, 1);
    assert_eq!(count(&file, "SELECT count(*) FROM ingest_journal").await, 0);

    // A stop between the applier's commit and its delete leaves the row the mark covers.
    file.execute_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "INSERT INTO ingest_journal (seq, organization_id, received_at, event_count, batch) \
         VALUES (?, ?, ?, 1, ?)",
        [
            mark.into(),
            org.clone().into(),
            first.received_at.into(),
            serde_json::to_string(&first).expect("json").into(),
        ],
    ))
    .await
    .expect("leftover");
    assert_eq!(journal.backlog(None).await.expect("backlog").batches, 0);
    assert_eq!(events_in_view(&state, &org).await, 1, "applied, shown once");
    assert_eq!(apply_next(&journal, &mut rules).await.expect("apply"), None);
    assert_eq!(count(&db, "SELECT count(*) FROM events").await, 1);

    // The next apply deletes it with its own batches.
    let second = batch(&org, "m2");
    journal::append(journal.conn(), &[&second])
        .await
        .expect("append");
    assert_eq!(events_in_view(&state, &org).await, 2);
    apply_next(&journal, &mut rules).await.expect("apply");
    assert_eq!(count(&db, "SELECT count(*) FROM events").await, 2);
    assert_eq!(count(&file, "SELECT count(*) FROM ingest_journal").await, 0);

    // Two appliers (each with its own pool on the main file) race for the same batches: the
    // applied mark lets one of them apply, never both.
    let other_main = second_pool(&tmp).await;
    let racing = Journal::OwnFile {
        main: other_main,
        file: file.clone(),
    };
    for round in 0..10 {
        let batches: Vec<Batch> = (0..3)
            .map(|i| batch(&org, &format!("r{round}-{i}")))
            .collect();
        let refs: Vec<&Batch> = batches.iter().collect();
        journal::append(journal.conn(), &refs)
            .await
            .expect("append");
        let (mut a, mut b) = (RulesCache::default(), RulesCache::default());
        let (x, y) = tokio::join!(apply_next(&journal, &mut a), apply_next(&racing, &mut b));
        x.expect("first applier");
        y.expect("second applier");
        while journal.backlog(None).await.expect("backlog").batches > 0 {
            apply_next(&journal, &mut rules).await.expect("apply");
        }
        assert_eq!(
            count(&db, "SELECT count(*) FROM events").await,
            2 + 3 * (round + 1),
            "round {round}"
        );
    }
    assert_eq!(events_in_view(&state, &org).await, 32);
}

/// Journals `rounds` groups of batches (`round` makes each) a few milliseconds apart while
/// `appliers` run, waits until the journal is empty, and stops them.
async fn apply_while_journaling(
    journal: &Journal,
    appliers: impl IntoIterator<Item = custintel::ingest::applier::Applier>,
    rounds: usize,
    round: impl Fn(usize) -> Vec<Batch>,
) {
    for r in 0..rounds {
        let batches = round(r);
        let refs: Vec<&Batch> = batches.iter().collect();
        journal::append(journal.conn(), &refs)
            .await
            .expect("append");
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while journal.backlog(None).await.expect("backlog").batches > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "backlog not applied"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for applier in appliers {
        applier.drain(tokio::time::Instant::now()).await;
    }
}

// Two running appliers (each reading the next group ahead while it writes, on pools of their
// own over one file) race while batches keep arriving: every batch is applied once. The one
// that loses a group finds the applied mark elsewhere than its read-ahead started from and
// reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_appliers_reading_ahead_apply_each_batch_once() {
    let (state, tmp) = crate::helpers::state_without_server(crate::helpers::Backend::Sqlite)
        .await
        .expect("sqlite");
    let db = state.db.clone();
    let org = create_org(&db, "Racing Appliers Co").await;
    let journal = Journal::of(&db).await.expect("journal");
    let other_main = second_pool(&tmp).await;
    let appliers = [
        custintel::ingest::applier::Applier::spawn(db.clone(), RulesCache::default()),
        custintel::ingest::applier::Applier::spawn(other_main, RulesCache::default()),
    ];
    const ROUNDS: usize = 40;
    const PER_ROUND: usize = 5;
    apply_while_journaling(&journal, appliers, ROUNDS, |round| {
        (0..PER_ROUND)
            .map(|i| batch(&org, &format!("race{round}-{i}")))
            .collect()
    })
    .await;
    let expected = (ROUNDS * PER_ROUND) as i64;
    assert_eq!(count(&db, "SELECT count(*) FROM events").await, expected);
    assert_eq!(
        count(&db, "SELECT count(DISTINCT message_id) FROM events").await,
        expected
    );
    assert_eq!(events_in_view(&state, &org).await, expected);
}

// PostgreSQL: appliers (one per instance) lease an organization per transaction. Three of them
// on one database, with batches of four organizations arriving while they run: every batch is
// applied once, and each organization's events are all stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appliers_on_one_database_apply_each_batch_once() {
    let Some((state, _tmp)) =
        crate::helpers::state_without_server(crate::helpers::Backend::Postgres).await
    else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let db = state.db.clone();
    let mut orgs = Vec::new();
    for i in 0..4 {
        orgs.push(create_org(&db, &format!("Several Appliers {i} Co")).await);
    }
    let journal = Journal::of(&db).await.expect("journal");
    let appliers: Vec<_> = (0..3)
        .map(|_| custintel::ingest::applier::Applier::spawn(db.clone(), RulesCache::default()))
        .collect();
    const ROUNDS: usize = 30;
    apply_while_journaling(&journal, appliers, ROUNDS, |round| {
        orgs.iter()
            .map(|org| batch(org, &format!("several{round}")))
            .collect()
    })
    .await;
    let expected = (ROUNDS * orgs.len()) as i64;
    assert_eq!(count(&db, "SELECT count(*) FROM events").await, expected);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM (SELECT DISTINCT organization_id, message_id FROM events) m"
        )
        .await,
        expected
    );
    for org in &orgs {
        assert_eq!(events_in_view(&state, org).await, ROUNDS as i64);
    }
}

fn batch_of(org: &str, message_ids: &[&str]) -> Batch {
    let events: Vec<Value> = message_ids
        .iter()
        .map(|id| {
            json!({"type": "custom", "eventName": "seat_added", "messageId": id,
                   "url": "https://app.example.com/", "path": "/"})
        })
        .collect();
    let body = json!({"visitorId": "7d1f1c56-2b8f-4a43-9a8e-3f7f6f0b6d11", "events": events});
    let (batch, errors) =
        validate_batch(org, body.to_string().as_bytes(), chrono::Utc::now()).expect("valid");
    assert!(errors.is_empty());
    batch
}

/// A group that fails is written again batch by batch. A copy of a message that another batch
/// of the group also had was set aside as a repeat; if that other batch then fails on its own,
/// the copy must go in with its own batch, whose request is told it was processed.
#[tokio::test]
async fn a_repeat_set_aside_in_a_failed_group_is_written_when_its_first_copy_fails() {
    use custintel::ingest::writer::{self, Job};

    let (state, _tmp) = crate::helpers::state_without_server(crate::helpers::Backend::Sqlite)
        .await
        .expect("sqlite");
    let db = state.db.clone();
    let org = create_org(&db, "Failing Group Co").await;
    let journal = Journal::of(&db).await.expect("journal");
    // A database error for one batch alone: the journal refuses batches of three events.
    journal
        .conn()
        .execute_unprepared(
            "CREATE TRIGGER refuse_three BEFORE INSERT ON ingest_journal \
             WHEN NEW.event_count = 3 BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
        )
        .await
        .expect("trigger");

    // Both jobs wait in the queue before the writer first runs (one thread), so they form one
    // group, in this order: the first batch has `shared` first.
    let jobs = writer::spawn(
        db.clone(),
        std::time::Duration::from_secs(3600),
        Default::default(),
    );
    let mut answers = Vec::new();
    for ids in [&["shared", "a1", "a2"][..], &["shared", "b1"][..]] {
        let (reply, answer) = tokio::sync::oneshot::channel();
        jobs.try_send(Job {
            batch: batch_of(&org, ids),
            encoded: None,
            reply,
        })
        .map_err(|_| "queue full")
        .expect("queued");
        answers.push(answer);
    }
    let second = answers.pop().expect("two").await.expect("answered");
    let first = answers.pop().expect("two").await.expect("answered");
    assert!(first.is_err(), "the refused batch fails: {first:?}");
    assert_eq!(second.expect("the other batch is written"), 2);

    let journaled = journal.conn().query_one_raw(Statement::from_string(
        DbBackend::Sqlite,
        "SELECT count(*), sum(event_count), group_concat(batch) FROM ingest_journal",
    ));
    let row = journaled.await.expect("query").expect("a row");
    assert_eq!(row.try_get_by_index::<i64>(0).expect("rows"), 1);
    assert_eq!(row.try_get_by_index::<i64>(1).expect("events"), 2);
    let text: String = row.try_get_by_index(2).expect("batch");
    assert!(
        text.contains("\"shared\"") && text.contains("\"b1\""),
        "{text}"
    );
}

/// PostgreSQL: the claim keys the service computes are the bytes the migration computed in SQL
/// for the claims it carried over, so a repeat of a message claimed before the upgrade is
/// still found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_keys_match_the_migrations_sql() {
    let Some((db, _tmp)) = crate::helpers::fresh_db(crate::helpers::Backend::Postgres).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    for (org, message) in [("org-1", "m-1"), ("9b2c", "ünïcode ✓"), ("", "x")] {
        let row = db
            .query_one_raw(sea_orm::Statement::from_sql_and_values(
                sea_orm::DbBackend::Postgres,
                "SELECT encode(substring(sha256(convert_to($1, 'UTF8') || '\\xff'::bytea \
                 || convert_to($2, 'UTF8')) FROM 1 FOR 16), 'hex')",
                [org.into(), message.into()],
            ))
            .await
            .expect("query")
            .expect("row");
        let in_sql: String = row.try_get_by_index(0).expect("key");
        assert_eq!(
            in_sql,
            hex::encode(custintel::ingest::dedup::shared_key_bytes(org, message))
        );
    }
}

/// `n` claims made an hour ago, their keys seeded by `seed`.
async fn old_claims(db: &DatabaseConnection, seed: &str, n: i64) {
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "INSERT INTO ingest_message_keys (key, first_seen_at) \
         SELECT decode(md5($1 || g::text), 'hex'), now() - interval '1 hour' \
         FROM generate_series(1, $2) AS g",
        [seed.into(), n.into()],
    ))
    .await
    .expect("old claims");
}

/// The claims' expiry, failing with `waited` if it takes more than `seconds`.
async fn expire_within(
    db: &DatabaseConnection,
    kept: std::time::Duration,
    seconds: u64,
    waited: &str,
) -> u64 {
    tokio::time::timeout(
        std::time::Duration::from_secs(seconds),
        custintel::ingest::dedup::expire_shared(db, kept),
    )
    .await
    .expect(waited)
    .expect("expiry")
}

/// PostgreSQL: maintaining the shared claims never holds up the claims themselves. The expiry
/// does not wait for another instance's vacuum of the table (it skips its own) nor for another
/// instance's expiry (it leaves the claims to it), and a vacuum
/// leaves the table's emptied pages in place: cutting them off takes the lock every
/// acknowledging writer's claim waits for. The journal keeps its pages the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_maintenance_never_holds_up_claims() {
    let Some((db, _tmp)) = crate::helpers::fresh_db(crate::helpers::Backend::Postgres).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let kept = std::time::Duration::from_secs(30);
    old_claims(&db, "", 20000).await;
    let pages = || async {
        count(
            &db,
            "SELECT pg_relation_size('ingest_message_keys') / current_setting('block_size')::bigint",
        )
        .await
    };
    let before = pages().await;
    assert!(before > 10, "the claims fill {before} pages");

    // Another instance's vacuum, as far as locks go: the lock a vacuum holds, in a transaction
    // of another connection.
    let other = sea_orm::TransactionTrait::begin(&db).await.expect("begin");
    other
        .execute_unprepared("LOCK TABLE ingest_message_keys IN SHARE UPDATE EXCLUSIVE MODE")
        .await
        .expect("lock");
    let expired = expire_within(&db, kept, 10, "the expiry waited for the other vacuum").await;
    assert_eq!(expired, 20_000);
    other.commit().await.expect("commit");

    // Now the expiry's vacuum runs, on a table whose every page is empty.
    custintel::ingest::dedup::expire_shared(&db, kept)
        .await
        .expect("expiry");
    assert_eq!(
        count(&db, "SELECT count(*) FROM ingest_message_keys").await,
        0
    );
    assert_eq!(
        pages().await,
        before,
        "the vacuum cut the claims' emptied pages off"
    );
    let journal_options = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT array_to_string(c.reloptions, ',') || ';' \
                    || coalesce(array_to_string(t.reloptions, ','), '') \
             FROM pg_class c LEFT JOIN pg_class t ON t.oid = c.reltoastrelid \
             WHERE c.oid = 'ingest_journal'::regclass",
        ))
        .await
        .expect("query")
        .expect("row")
        .try_get_by_index::<String>(0)
        .expect("options");
    assert_eq!(
        journal_options,
        "vacuum_truncate=false;vacuum_truncate=false"
    );

    // While another instance's expiry runs (its lock held here), this one leaves the claims to
    // it at once instead of waiting for its row locks.
    old_claims(&db, "again", 100).await;
    let other = sea_orm::TransactionTrait::begin(&db).await.expect("begin");
    other
        .execute_unprepared(
            "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.ingest_claims_expiry'))",
        )
        .await
        .expect("the expiry's lock");
    let skipped = expire_within(&db, kept, 2, "the expiry waited for the other instance's").await;
    assert_eq!(skipped, 0, "the other instance's expiry removes them");
    other.commit().await.expect("commit");
    let expired = custintel::ingest::dedup::expire_shared(&db, kept)
        .await
        .expect("expiry");
    assert_eq!(expired, 100, "the next expiry takes its turn");

    // Two instances' expiries at once: each claim is removed once, and neither waits for the
    // other.
    old_claims(&db, "both", 1000).await;
    let (first, second) = tokio::join!(
        expire_within(&db, kept, 2, "an expiry waited for the other"),
        expire_within(&db, kept, 2, "an expiry waited for the other"),
    );
    assert_eq!(first + second, 1000, "{first} and {second}");
    assert_eq!(
        count(&db, "SELECT count(*) FROM ingest_message_keys").await,
        0
    );
}

/// PostgreSQL: an applier leases one organization at a time. While another transaction holds
/// the lease of the organization with the oldest batches, an applier applies the next
/// organization's; the first one's wait for its lease, in order. While the schema's applier
/// lock is held exclusively, nothing is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appliers_lease_organizations_one_at_a_time() {
    use sea_orm::TransactionTrait;
    let Some(app) = crate::helpers::spawn(crate::helpers::Backend::Postgres).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let db = app.db.clone();
    let first = create_org(&db, "Leased First Co").await;
    let second = create_org(&db, "Leased Second Co").await;
    let journal = Journal::of(&db).await.expect("journal");
    let batches = [
        batch_of(&first, &["f1"]),
        batch_of(&second, &["s1"]),
        batch_of(&first, &["f2"]),
        batch_of(&second, &["s2"]),
    ];
    let refs: Vec<&Batch> = batches.iter().collect();
    // Journal them before the server's applier can take them: hold every applier meanwhile.
    let held = app.hold_applier().await;
    journal::append(&db, &refs).await.expect("append");
    let mut rules = RulesCache::default();
    let stopped = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        apply_next(&journal, &mut rules),
    )
    .await
    .expect("no wait");
    assert_eq!(
        stopped.expect("apply"),
        None,
        "the schema's lock stops every applier"
    );

    // The first organization's lease is taken elsewhere (before the appliers are let go, or
    // the server's applier could take that organization first): the second's batches are
    // applied.
    let lease = db.begin().await.expect("transaction");
    lease
        .execute_unprepared(&format!(
            "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.ingest_applier'), \
             hashtext('{first}'))"
        ))
        .await
        .expect("lease");
    drop(held);
    let stored = |org: String| {
        let db = db.clone();
        async move {
            db.query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT message_id FROM events WHERE organization_id = $1 ORDER BY id",
                [org.into()],
            ))
            .await
            .expect("events")
            .iter()
            .map(|r| r.try_get_by_index::<String>(0).expect("message id"))
            .collect::<Vec<_>>()
        }
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while stored(second.clone()).await.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "second organization not applied"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(stored(second.clone()).await, ["s1", "s2"]);
    assert!(
        stored(first.clone()).await.is_empty(),
        "the leased organization waits"
    );
    drop(lease);
    while stored(first.clone()).await.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "first organization not applied"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(stored(first).await, ["f1", "f2"]);
}

/// A batch that waited in the writer's queue longer than the window's replay allows for is
/// refused (503 to its client), not journaled and not recorded in the window: the replay at
/// start trusts every acknowledged batch to have arrived shortly before it was recorded. The
/// client's retry of it is then stored, once.
async fn a_batch_that_waited_too_long_is_refused_then_its_retry_stored(
    backend: crate::helpers::Backend,
) {
    use custintel::ingest::writer::{self, Job, WriteError};

    let Some((state, _tmp)) = crate::helpers::state_without_server(backend).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let org = create_org(&state.db, "Late Batch Co").await;
    let journal = Journal::of(&state.db).await.expect("journal");
    let jobs = writer::spawn(
        state.db.clone(),
        std::time::Duration::from_secs(3600),
        Default::default(),
    );
    let send = |batch: Batch| {
        let jobs = jobs.clone();
        async move {
            let (reply, answer) = tokio::sync::oneshot::channel();
            jobs.send(Job {
                batch,
                encoded: None,
                reply,
            })
            .await
            .map_err(|_| "the writer stopped")
            .expect("queued");
            answer.await.expect("answered")
        }
    };
    let mut late = batch(&org, "late-1");
    late.received_at = chrono::Utc::now()
        - custintel::ingest::window::MAX_QUEUE_WAIT
        - std::time::Duration::from_secs(1);
    let refused = send(late).await;
    assert!(
        matches!(refused, Err(WriteError::Busy(_))),
        "a batch older than the queue's limit is refused as busy: {refused:?}"
    );
    assert_eq!(
        count(journal.conn(), "SELECT count(*) FROM ingest_journal").await,
        0,
        "nothing of the refused batch is journaled"
    );

    let retried = send(batch(&org, "late-1")).await;
    assert_eq!(retried.expect("the retry is written"), 1);
    let repeat = send(batch(&org, "late-1")).await;
    assert_eq!(repeat.expect("a repeat counts as processed"), 1);
    assert_eq!(
        count(
            journal.conn(),
            "SELECT CAST(coalesce(sum(event_count), 0) AS BIGINT) FROM ingest_journal"
        )
        .await,
        1,
        "the retry is stored once, its repeat dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_waited_too_long_is_refused_then_its_retry_stored_sqlite() {
    a_batch_that_waited_too_long_is_refused_then_its_retry_stored(crate::helpers::Backend::Sqlite)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_waited_too_long_is_refused_then_its_retry_stored_postgres() {
    a_batch_that_waited_too_long_is_refused_then_its_retry_stored(
        crate::helpers::Backend::Postgres,
    )
    .await;
}

/// A clock that stepped back after a message arrived cannot hide it from the `messageId`
/// window's replay at start: stored events are found by id, which rises with every event this
/// service stores whatever the clock says, not by their `receivedAt`. Ids made after the replay
/// sort after every stored one.
async fn the_replay_finds_messages_stored_before_the_clock_stepped_back(
    backend: crate::helpers::Backend,
) {
    use entity::event;
    use sea_orm::{ActiveModelTrait, IntoActiveModel};

    let Some((state, _tmp)) = crate::helpers::state_without_server(backend).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let org = create_org(&state.db, "Clock Co").await;
    let journal = Journal::of(&state.db).await.expect("journal");
    let now = chrono::Utc::now();
    let stored = |message_id: &str, id: String, received_at: chrono::DateTime<chrono::Utc>| {
        event::Model {
            id,
            organization_id: org.clone(),
            message_id: Some(message_id.into()),
            event_type: "custom".into(),
            event_name: Some("seat_added".into()),
            visitor_id: None,
            user_id: None,
            customer_id: None,
            url: "https://app.example.com/".into(),
            path: "/".into(),
            occurred_at: received_at,
            received_at,
            data: json!({}),
        }
        .into_active_model()
    };
    // Received after the clock stepped back 55 s: its `receivedAt` is before the replay's
    // start, its id (made after ids the process had already made at the later time) after it.
    stored(
        "after-the-step",
        custintel::ids::time_ordered_id_at(now),
        now - chrono::Duration::seconds(55),
    )
    .insert(&state.db)
    .await
    .expect("event");
    // Stored while the clock ran a second ahead of where it is now.
    let ahead = custintel::ids::time_ordered_id_at(now + chrono::Duration::seconds(1));
    stored("ahead", ahead.clone(), now)
        .insert(&state.db)
        .await
        .expect("event");

    let mut window = custintel::ingest::window::LocalWindow::in_memory(
        std::time::Duration::from_secs(24 * 3600),
    );
    let key_of = match backend {
        crate::helpers::Backend::Sqlite => custintel::ingest::dedup::message_key,
        crate::helpers::Backend::Postgres => custintel::ingest::dedup::shared_message_key,
    };
    window
        .replay(
            &state.db,
            &journal,
            now - chrono::Duration::seconds(15),
            key_of,
        )
        .await
        .expect("replay");
    assert!(
        window.contains(&key_of(&org, "after-the-step"), chrono::Utc::now()),
        "a message received after the clock stepped back is in the window"
    );
    assert!(window.contains(&key_of(&org, "ahead"), chrono::Utc::now()));
    let next = custintel::ids::time_ordered_id();
    assert!(
        next > ahead,
        "ids made after the replay sort after the stored ones: {next} after {ahead}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_finds_messages_stored_before_the_clock_stepped_back_sqlite() {
    the_replay_finds_messages_stored_before_the_clock_stepped_back(crate::helpers::Backend::Sqlite)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_finds_messages_stored_before_the_clock_stepped_back_postgres() {
    the_replay_finds_messages_stored_before_the_clock_stepped_back(
        crate::helpers::Backend::Postgres,
    )
    .await;
}
