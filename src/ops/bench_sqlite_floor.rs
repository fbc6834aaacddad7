//! `custintel bench sqlite-floor`: how fast SQLite itself takes rows into the `events` table
//! on this machine, with nothing of the service around it. It answers "how much of the gap
//! to an ingest target is ours?": no HTTP, no JSON, no identity effects, no ORM; one prepared
//! INSERT per row through rusqlite, large transactions, the service's durability settings, the
//! real migrated schema. Measured twice: with the indexes the service keeps on `events` (the
//! applier writes there behind the acknowledgement), and with the `(organization_id,
//! message_id)` unique index that dedup used before the window replaced it, whose keys are
//! random.

use std::time::{Duration, Instant};

use rusqlite::{params, Connection};

use crate::db;

/// Options of a run.
#[derive(Debug, Clone)]
pub struct FloorOptions {
    /// Rows inserted per variant.
    pub rows: usize,
    /// Rows per transaction (one commit each).
    pub rows_per_commit: usize,
}

/// Rows between progress lines.
const REPORT_EVERY: usize = 500_000;
/// Visitors, users and customers the rows are spread over, as in `bench ingest`.
const VISITORS: usize = 1_000;
const USERS: usize = 300;
const CUSTOMERS: usize = 100;

pub async fn run(options: FloorOptions) -> anyhow::Result<()> {
    println!(
        "custintel bench sqlite-floor: {} rows per variant, {} rows per commit, SQLite WAL, synchronous=NORMAL, the service's cache and mmap settings",
        options.rows, options.rows_per_commit
    );
    for with_dedup_index in [true, false] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("floor.db");
        // The real schema, made by the service's migrations.
        let conn = db::connect(&format!("sqlite://{}?mode=rwc", path.display()), None).await?;
        db::migrate(&conn).await?;
        conn.close().await?;
        let label = if with_dedup_index {
            "with a unique messageId index (the design before the window)"
        } else {
            "the indexes the service keeps"
        };
        let opts = options.clone();
        let rate =
            tokio::task::spawn_blocking(move || insert_rows(&path, &opts, with_dedup_index, label))
                .await??;
        println!("{label}: {rate:.0} rows/s overall");
    }
    Ok(())
}

fn insert_rows(
    path: &std::path::Path,
    options: &FloorOptions,
    with_dedup_index: bool,
    label: &str,
) -> anyhow::Result<f64> {
    let conn = Connection::open(path)?;
    conn.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-16384; \
         PRAGMA temp_store=memory; PRAGMA mmap_size={};",
        db::SQLITE_MMAP_BYTES
    ))?;
    if with_dedup_index {
        conn.execute_batch(
            "CREATE UNIQUE INDEX ux_floor_message_id ON events (organization_id, message_id)",
        )?;
    }
    let org = uuid::Uuid::new_v4().to_string();
    let ids =
        |n: usize| -> Vec<String> { (0..n).map(|_| uuid::Uuid::new_v4().to_string()).collect() };
    let (visitors, users, customers) = (ids(VISITORS), ids(USERS), ids(CUSTOMERS));
    let data = r#"{"title":"Page","referrer":"https://google.com","utm":{"source":"newsletter","campaign":"launch"}}"#;
    let started = Instant::now();
    let mut lap = Instant::now();
    let mut written = 0usize;
    while written < options.rows {
        let n = options.rows_per_commit.min(options.rows - written);
        let tx = conn.unchecked_transaction()?;
        {
            let mut insert = tx.prepare(
                "INSERT INTO events (id, organization_id, message_id, event_type, event_name, \
                 visitor_id, user_id, customer_id, url, path, occurred_at, received_at, data) \
                 VALUES (?, ?, ?, 'pageview', NULL, ?, ?, ?, ?, ?, ?, ?, ?)",
            )?;
            for k in written..written + n {
                // A third of the events come from identified users of a customer.
                let (user, customer) = if k % 3 == 0 {
                    (Some(&users[k % USERS]), Some(&customers[k % CUSTOMERS]))
                } else {
                    (None, None)
                };
                let at = chrono::Utc::now().format("%F %T%.6f%:z").to_string();
                insert.execute(params![
                    crate::ids::time_ordered_id(),
                    org,
                    // Analytics SDKs send random (version 4) message ids.
                    uuid::Uuid::new_v4().to_string(),
                    visitors[k % VISITORS],
                    user,
                    customer,
                    format!("https://app.example.com/page/{}", k % 7),
                    format!("/page/{}", k % 7),
                    at,
                    &at,
                    data,
                ])?;
            }
        }
        tx.commit()?;
        written += n;
        if written % REPORT_EVERY < n {
            let secs = lap.elapsed().as_secs_f64().max(1e-9);
            println!(
                "  {label}: {written} rows stored, the last {} at {:.0} rows/s",
                REPORT_EVERY.min(written),
                REPORT_EVERY.min(written) as f64 / secs
            );
            lap = Instant::now();
        }
    }
    Ok(written as f64 / started.elapsed().max(Duration::from_nanos(1)).as_secs_f64())
}
