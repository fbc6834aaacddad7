//! PostgreSQL: the `messageId` window's runs an instance publishes to the database for new
//! instances to copy. One instance publishes at a time (a lease); a merged run replaces the
//! runs it covers; runs that left the window leave the database; a lease taken over makes the
//! new publisher's runs the only ones; a copy holds the publisher's keys.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use custintel::ingest::{
    dedup::MessageKey,
    window::{self, published, runs, shared::database_identity, LocalWindow},
};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

const WINDOW: Duration = Duration::from_secs(24 * 3600);

fn keys(seal: u64, n: u64) -> Vec<MessageKey> {
    (0..n)
        .map(|i| (seal * 1_000_003 + i * 7919, seal ^ (i << 20)))
        .collect()
}

/// A window directory holding seals `seals` (keys first seen `age` ago), opened.
fn window_with(
    dir: &std::path::Path,
    identity: &str,
    seals: &[u64],
    age: chrono::Duration,
) -> LocalWindow {
    let second = (Utc::now() - age).timestamp() as u32;
    for seal in seals {
        let records = keys(*seal, 300).into_iter().map(|k| (k, second)).collect();
        runs::write_seal(dir, *seal, second, records).expect("seal");
    }
    std::fs::write(dir.join("database"), identity).expect("identity");
    LocalWindow::open(dir, identity, WINDOW).expect("open")
}

fn settled(window: &LocalWindow) -> Vec<(Arc<runs::KeyRun>, bool)> {
    let now = Utc::now();
    window
        .runs()
        .into_iter()
        .map(|r| {
            let over = window.part_is_over(&r, now);
            (r, over)
        })
        .collect()
}

/// The published runs: (publisher, first seal, last seal), in order.
async fn published_runs(db: &DatabaseConnection) -> Vec<(String, i64, i64)> {
    db.query_all_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT DISTINCT publisher, first_seal, last_seal FROM ingest_window_runs \
         ORDER BY publisher, first_seal",
    ))
    .await
    .expect("runs")
    .iter()
    .map(|r| {
        (
            r.try_get_by_index(0).unwrap(),
            r.try_get_by_index(1).unwrap(),
            r.try_get_by_index(2).unwrap(),
        )
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_publishes_its_runs_and_a_copy_holds_them_postgres() {
    let Some((db, _tmp)) = crate::helpers::fresh_db(crate::helpers::Backend::Postgres).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let identity = database_identity(&db).await.expect("identity");
    let base = tempfile::tempdir().expect("tempdir");
    let (dir_a, dir_b) = (base.path().join("a"), base.path().join("b"));
    std::fs::create_dir_all(&dir_a).unwrap();
    std::fs::create_dir_all(&dir_b).unwrap();
    let a = window_with(&dir_a, &identity, &[1, 2, 3], chrono::Duration::minutes(1));
    let b = window_with(&dir_b, &identity, &[1, 2], chrono::Duration::minutes(1));

    // Two instances publish at once: one holds the lease, and only its runs are stored.
    let (runs_a, runs_b) = (settled(&a), settled(&b));
    let (held_a, held_b) = tokio::join!(
        published::publish_once(&db, "a", &runs_a, WINDOW),
        published::publish_once(&db, "b", &runs_b, WINDOW)
    );
    let (held_a, held_b) = (held_a.expect("publish a"), held_b.expect("publish b"));
    assert!(held_a ^ held_b, "exactly one instance publishes");
    let (leader, leader_window, other, other_window) = if held_a {
        ("a", &a, "b", &b)
    } else {
        ("b", &b, "a", &a)
    };
    let seals = leader_window.runs().len() as i64;
    let expected: Vec<(String, i64, i64)> =
        (1..=seals).map(|s| (leader.to_string(), s, s)).collect();
    assert_eq!(published_runs(&db).await, expected);
    assert!(
        !published::publish_once(&db, other, &settled(other_window), WINDOW)
            .await
            .expect("publish")
    );

    // The leader's seals merged into one run: it replaces them.
    let leader_dir = if leader == "a" { &dir_a } else { &dir_b };
    let merged = runs::merge(leader_dir, &leader_window.runs(), 0).expect("merge");
    let merged = vec![(Arc::new(merged), true)];
    assert!(published::publish_once(&db, leader, &merged, WINDOW)
        .await
        .expect("publish"));
    assert_eq!(
        published_runs(&db).await,
        vec![(leader.to_string(), 1, seals)]
    );

    // A new instance's empty directory: the copy holds every key the leader published.
    let copy_dir = base.path().join("copy");
    let copied = published::copy_into(&db, &copy_dir, &identity, WINDOW)
        .await
        .expect("copy")
        .expect("runs copied");
    assert_eq!(copied.len(), 1);
    // Opened from the runs read as they were copied, as a new instance opens it.
    let copy = window::open_in(copy_dir.clone(), identity.clone(), WINDOW, Some(copied))
        .await
        .expect("open the copy");
    let now = Utc::now();
    for seal in 1..=seals as u64 {
        for key in keys(seal, 300) {
            assert!(
                copy.contains(&key, now),
                "seal {seal}: a key the copy lacks"
            );
        }
    }
    assert!(!copy.contains(&(u64::MAX, u64::MAX), now));
    // A directory that holds runs already is not copied into.
    assert!(
        published::copy_into(&db, &copy_dir, &identity, WINDOW)
            .await
            .expect("copy")
            .is_none(),
        "copied into a directory with runs"
    );

    // The lease not renewed for longer than it lasts: the other instance takes it, publishes
    // its runs and removes the old publisher's.
    db.execute_unprepared(
        "UPDATE ingest_window_publisher SET renewed_at = now() - interval '1 minute'",
    )
    .await
    .expect("age the lease");
    assert!(
        published::publish_once(&db, other, &settled(other_window), WINDOW)
            .await
            .expect("publish")
    );
    let others = other_window.runs().len() as i64;
    let expected: Vec<(String, i64, i64)> =
        (1..=others).map(|s| (other.to_string(), s, s)).collect();
    assert_eq!(published_runs(&db).await, expected);

    // Runs that left the window leave the database.
    let old_dir = base.path().join("old");
    std::fs::create_dir_all(&old_dir).unwrap();
    let old = window_with(&old_dir, &identity, &[7], chrono::Duration::hours(25));
    let mut runs = settled(&old);
    assert!(runs.is_empty(), "the window itself drops the expired run");
    let expired = runs::write_seal(
        &old_dir,
        8,
        (Utc::now() - chrono::Duration::hours(25)).timestamp() as u32,
        keys(8, 10)
            .into_iter()
            .map(|k| {
                (
                    k,
                    (Utc::now() - chrono::Duration::hours(25)).timestamp() as u32,
                )
            })
            .collect(),
    )
    .expect("seal");
    runs.push((Arc::new(expired), true));
    db.execute_unprepared("UPDATE ingest_window_runs SET newest_second = newest_second - 90000")
        .await
        .expect("age the runs");
    assert!(published::publish_once(&db, other, &runs, WINDOW)
        .await
        .expect("publish"));
    assert_eq!(published_runs(&db).await, Vec::new());
}
