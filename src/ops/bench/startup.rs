//! `custintel bench startup`: how soon `custintel serve` answers on a large database. The
//! database holds one organization with `--events` events (50 million by default, spread over
//! 30 days, on `--customers` customers imported through `custintel import`) and a `messageId`
//! window of `--messages` messages (100 million), filled as the acknowledging writer fills it:
//! on SQLite beside the file, on PostgreSQL in the directory the started instance takes back
//! (under `CUSTINTEL_WINDOW_DIR`). It is loaded once and kept (a SQLite file in `--dir`, or the
//! PostgreSQL schema `bench_startup`), so later runs measure the start alone.
//!
//! `serve` then starts as a process of its own, as an operator starts it, and the run reports
//! the time to `/readyz` 200 (which waits for the database and for the window to be loaded),
//! the time to the first ingest batch acknowledged after it, that a message the window held
//! before the start is still dropped as a repeat, and the process's resident memory over its
//! first `--watch` seconds. With `--new-instance` (PostgreSQL), the started instance has an
//! empty window directory, as a new container has, and copies the runs published to the
//! database.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration as StdDuration, Instant},
};

use anyhow::{bail, Context, Result};
use chrono::Utc;
use sea_orm::{ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter};
use serde_json::json;

use super::{customer_ids, import_book, public_key_of, write_events, Location, Scale};
use crate::ingest::{dedup::message_key, window::SEAL_KEYS};

/// Options of a run.
#[derive(Debug, Clone, clap::Args)]
pub struct StartupBenchArgs {
    /// Events stored in the organization, spread over the last 30 days.
    #[arg(long, default_value_t = 50_000_000)]
    pub events: usize,
    /// Messages in the `messageId` window (all within its 24 h).
    #[arg(long, default_value_t = 100_000_000)]
    pub messages: u64,
    /// Customers the events belong to (a book of this size goes in through `custintel import`).
    #[arg(long, default_value_t = 10_000)]
    pub customers: usize,
    /// Where the SQLite database and its window are kept (`startup.db` in it); a database
    /// already there is served again without loading.
    #[arg(long, default_value = "custintel-bench-startup")]
    pub dir: PathBuf,
    /// Load and serve this PostgreSQL database instead (`postgres://...`), in the schema
    /// `bench_startup`, kept for later runs.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// Seconds to watch the started process's memory after it is ready.
    #[arg(long, default_value_t = 60)]
    pub watch: u64,
    /// PostgreSQL: start a new instance (an empty window directory) instead of one that takes
    /// back the filled window's directory. The filled window's runs are published to the
    /// database first, as a running instance publishes its own, and the new instance copies
    /// them.
    #[arg(long, requires = "postgres")]
    pub new_instance: bool,
}

const ORGANIZATION: &str = "Startup bench";
const SCHEMA: &str = "bench_startup";

/// The message id of the window's `i`th message.
fn window_message(i: u64) -> String {
    format!("startup-{i:016x}")
}

/// Runs the benchmark and prints its figures.
pub async fn startup(args: StartupBenchArgs) -> Result<()> {
    let location = match &args.postgres {
        Some(url) => {
            let admin_conn = crate::db::connect(url, None).await?;
            admin_conn
                .execute_unprepared(&format!("CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
                .await?;
            Location::Postgres {
                url: url.clone(),
                schema: SCHEMA.into(),
            }
        }
        None => {
            std::fs::create_dir_all(&args.dir)?;
            Location::Sqlite(std::fs::canonicalize(&args.dir)?.join("startup.db"))
        }
    };
    let conn = match &location {
        Location::Postgres { url, schema } => crate::db::connect(url, Some(schema)).await?,
        // Created when missing.
        Location::Sqlite(file) => {
            crate::db::connect(&format!("sqlite://{}?mode=rwc", file.display()), None).await?
        }
    };
    crate::db::migrate(&conn).await?;
    let (organization_id, public_key) = match loaded(&conn).await? {
        Some(found) => {
            println!("custintel bench startup: serving the database loaded earlier");
            found
        }
        None => load(&args, &conn).await?,
    };
    let filled = fill_window(&conn, &organization_id, args.messages).await?;
    if args.new_instance {
        publish_window(&conn, filled).await?;
    }
    // The benchmark's own connections stay out of the started process's way.
    conn.close().await?;
    serve_and_measure(&args, &location, &organization_id, &public_key).await?;
    // Counted after the start, so that reading the events does not bring their pages into
    // the cache before `serve` starts.
    let conn = match &location {
        Location::Postgres { url, schema } => crate::db::connect(url, Some(schema)).await?,
        Location::Sqlite(_) => crate::db::connect(&location.url(), None).await?,
    };
    let events: u64 = conn
        .query_one_raw(sea_orm::Statement::from_string(
            conn.get_database_backend(),
            "SELECT COUNT(*) FROM events",
        ))
        .await?
        .context("no count")?
        .try_get_by_index::<i64>(0)? as u64;
    println!("the database held {events} events");
    Ok(())
}

/// The organization of a database loaded earlier, with its public (ingest) key.
async fn loaded(conn: &DatabaseConnection) -> Result<Option<(String, String)>> {
    let Some(org) = entity::organization::Entity::find()
        .filter(entity::organization::Column::Name.eq(ORGANIZATION))
        .one(conn)
        .await?
    else {
        return Ok(None);
    };
    let public_key = public_key_of(conn, &org.id).await?;
    Ok(Some((org.id, public_key)))
}

/// Loads the organization, its customers and events.
async fn load(args: &StartupBenchArgs, conn: &DatabaseConnection) -> Result<(String, String)> {
    let org = crate::ops::bench_ingest::create_org(conn, ORGANIZATION, 1_000_000).await?;
    let scale = Scale {
        events: args.events,
        ..Scale::of(args.customers)
    };
    let work = tempfile::tempdir()?;
    let (lines, took) = import_book(conn, work.path(), &org.organization_id, scale, 11).await?;
    println!("imported {lines} lines in {took:.1} s");
    let started = Instant::now();
    let ids = customer_ids(conn, &org.organization_id, scale.customers).await?;
    write_events(conn, &org.organization_id, &ids, scale).await?;
    crate::db::statistics::after_bulk_load(conn, &["events", "billing_history"]).await?;
    println!(
        "{} events written in {:.1} s",
        scale.events,
        started.elapsed().as_secs_f64()
    );
    Ok((org.organization_id, org.public_key))
}

/// Fills the window with `messages` messages of the organization, unless it holds runs
/// already (a run that stopped while writing events fills it on the next start): on SQLite the
/// window beside the file, on PostgreSQL the directory a new instance would take back (under
/// `CUSTINTEL_WINDOW_DIR`, which the started `serve` inherits). Filled after the events, as a
/// running service's window holds the messages it acknowledged last; `serve` then replays only
/// the events received after its newest run.
async fn fill_window(
    conn: &DatabaseConnection,
    organization_id: &str,
    messages: u64,
) -> Result<PathBuf> {
    let length = crate::config::dedup_window()?;
    let (dir, identity, held) = match crate::db::sqlite_file(conn).await? {
        Some(file) => {
            let identity = crate::ingest::window::database_identity(conn, &file).await?;
            (crate::db::beside(&file, "window"), identity, None)
        }
        None => {
            let (dir, identity, lock) = crate::ingest::window::shared::free_directory(conn).await?;
            (dir, identity, Some(lock))
        }
    };
    // Seen without opening the window, whose opening reads the runs (and would bring them
    // into the cache before `serve` starts).
    if crate::ingest::window::holds_runs(&dir, &identity) {
        println!(
            "the messageId window holds runs already ({})",
            dir.display()
        );
        return Ok(dir);
    }
    let key_of = window_key(conn);
    let window = crate::ingest::window::open_in(dir.clone(), identity, length, None)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let org = organization_id.to_string();
    println!(
        "filling the messageId window in {} with {messages} messages",
        dir.display()
    );
    tokio::task::spawn_blocking(move || -> Result<()> {
        let mut window = window;
        crate::ops::bench_window::fill(&mut window, messages, 2_000, |i| {
            key_of(&org, &window_message(i))
        })
    })
    .await??;
    // The directory is free for the started instance to take back.
    drop(held);
    Ok(dir)
}

/// Publishes the runs of the window filled in `dir` to the database, in place of whatever was
/// published before, as the publishing instance of a running service keeps them.
async fn publish_window(conn: &DatabaseConnection, dir: PathBuf) -> Result<()> {
    use crate::ingest::window::published;
    let length = crate::config::dedup_window()?;
    let identity = crate::ingest::window::shared::database_identity(conn).await?;
    let window = crate::ingest::window::open_in(dir.clone(), identity, length, None)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let now = Utc::now();
    let runs: Vec<_> = window
        .runs()
        .into_iter()
        .map(|r| {
            let settled = window.part_is_over(&r, now);
            (r, settled)
        })
        .collect();
    conn.execute_unprepared("DELETE FROM ingest_window_runs; DELETE FROM ingest_window_publisher")
        .await?;
    let publisher = published::publisher_name(&dir)?;
    let started = Instant::now();
    if !published::publish_once(conn, &publisher, &runs, length).await? {
        bail!("another instance holds the lease to publish the window");
    }
    let bytes: i64 = conn
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT coalesce(sum(octet_length(content)), 0)::bigint FROM ingest_window_runs",
        ))
        .await?
        .context("no sum")?
        .try_get_by_index(0)?;
    println!(
        "published {} runs of the window ({:.1} MiB) in {:.1} s",
        runs.len(),
        bytes as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// How the database's instances key a message in their windows.
fn window_key(conn: &DatabaseConnection) -> fn(&str, &str) -> crate::ingest::dedup::MessageKey {
    match conn.get_database_backend() {
        sea_orm::DbBackend::Postgres => crate::ingest::dedup::shared_message_key,
        _ => message_key,
    }
}

/// A port free on 127.0.0.1 now.
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A field of `/proc/<pid>/status`, in MiB.
fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// Stops the started `serve` when dropped, whatever ended the run.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn serve_and_measure(
    args: &StartupBenchArgs,
    location: &Location,
    organization_id: &str,
    public_key: &str,
) -> Result<()> {
    let port = free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    let log_path = match location {
        Location::Sqlite(file) => file.with_file_name("serve.log"),
        Location::Postgres { .. } => std::env::temp_dir().join("custintel-bench-startup.log"),
    };
    let log = std::fs::File::create(&log_path)?;
    // A new instance: a window directory of its own, empty.
    let new_windows = tempfile::tempdir()?;
    let mut command = Command::new(std::env::current_exe()?);
    if args.new_instance {
        command.env("CUSTINTEL_WINDOW_DIR", new_windows.path());
    }
    let started = Instant::now();
    let served = Served(
        command
            .arg("serve")
            .env("DATABASE_URL", location.url())
            .env("CUSTINTEL_BIND", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info")
            // A plain log, read back below.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("could not start custintel serve")?,
    );
    let pid = served.0.id();
    let http = reqwest::Client::builder()
        .timeout(StdDuration::from_secs(60))
        .build()?;
    let ready = loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
            if r.status().is_success() {
                break started.elapsed();
            }
        }
        if started.elapsed() > StdDuration::from_secs(600) {
            bail!("/readyz did not answer 200 within 10 minutes");
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    };
    println!(
        "/readyz 200 after {:.2} s (resident {:.1} MiB, anonymous {:.1} MiB)",
        ready.as_secs_f64(),
        status_mib(pid, "VmRSS:"),
        status_mib(pid, "RssAnon:")
    );

    // A new message and one the window held before the start, in one batch: the batch is
    // acknowledged once the window is rebuilt, and only the new message is stored.
    let fresh = format!("startup-probe-{}", uuid::Uuid::new_v4());
    let now = Utc::now().timestamp_millis();
    let event = |message_id: &str| {
        json!({"type": "custom", "eventName": "startup_probe", "url": "https://app.example.com/",
               "path": "/", "timestamp": now, "messageId": message_id})
    };
    let mut sent = vec![event(&fresh)];
    // The probe must be in a sealed run: the fill's messages are in no stored event, so the
    // ones after the last seal (fewer than a run's keys) are not kept when the fill ends.
    let sealed = args.messages / SEAL_KEYS as u64 * SEAL_KEYS as u64;
    let repeat = (args.messages / 2 < sealed).then(|| window_message(args.messages / 2));
    if repeat.is_none() && args.messages > 0 {
        println!(
            "no repeat probe: {} messages fill no run of the window ({SEAL_KEYS} keys a run)",
            args.messages
        );
    }
    if let Some(repeat) = &repeat {
        sent.push(event(repeat));
    }
    let body = json!({"visitorId": "00000000-0000-4000-8000-000000000001", "events": sent});
    let asked = Instant::now();
    let answer = http
        .post(format!("{base}/api/i/v1/{public_key}/events"))
        .json(&body)
        .send()
        .await?;
    let status = answer.status();
    let text = answer.text().await?;
    if !status.is_success() {
        bail!("the first ingest batch was answered {status}: {text}");
    }
    println!(
        "first ingest batch acknowledged after {:.2} s from the start ({:.2} s after it was sent): {text}",
        started.elapsed().as_secs_f64(),
        asked.elapsed().as_secs_f64()
    );
    if let Some(line) = std::fs::read_to_string(&log_path)?
        .lines()
        .find(|l| l.contains("messageId window loaded"))
    {
        println!("serve's log: {}", line.trim());
    }

    let conn = match location {
        Location::Postgres { url, schema } => crate::db::connect(url, Some(schema)).await?,
        Location::Sqlite(_) => crate::db::connect(&location.url(), None).await?,
    };
    let stored = |message_id: String| {
        let conn = conn.clone();
        let org = organization_id.to_string();
        // Only the events received since the start: a primary-key range, not a scan.
        let since = crate::ids::time_ordered_floor(Utc::now() - chrono::Duration::minutes(10));
        async move {
            let row = conn
                .query_one_raw(sea_orm::Statement::from_sql_and_values(
                    conn.get_database_backend(),
                    crate::db::placeholders(
                        conn.get_database_backend(),
                        "SELECT COUNT(*) FROM events WHERE id > ? AND organization_id = ? \
                         AND message_id = ?",
                    ),
                    [since.into(), org.into(), message_id.into()],
                ))
                .await?
                .context("no count")?;
            anyhow::Ok(row.try_get_by_index::<i64>(0)?)
        }
    };
    let applied = loop {
        if stored(fresh.clone()).await? == 1 {
            break asked.elapsed();
        }
        if asked.elapsed() > StdDuration::from_secs(120) {
            bail!("the new message was not stored within 2 minutes");
        }
        tokio::time::sleep(StdDuration::from_millis(50)).await;
    };
    println!(
        "the new message was stored {:.2} s after it was sent",
        applied.as_secs_f64()
    );
    if let Some(repeat) = repeat {
        let n = stored(repeat.clone()).await?;
        if n != 0 {
            bail!("{repeat}, held by the window before the start, was stored {n} time(s)");
        }
        println!("{repeat}, held by the window before the start, was dropped as a repeat");
    }

    let watch = StdDuration::from_secs(args.watch);
    let mut peak = (0.0f64, 0.0f64);
    while started.elapsed() < ready + watch {
        tokio::time::sleep(StdDuration::from_secs(5)).await;
        let (rss, anon) = (status_mib(pid, "VmRSS:"), status_mib(pid, "RssAnon:"));
        peak = (peak.0.max(rss), peak.1.max(anon));
        println!(
            "  {:>5.0} s  resident {rss:>7.1} MiB  anonymous {anon:>7.1} MiB",
            started.elapsed().as_secs_f64()
        );
    }
    println!(
        "over its first {:.0} s: resident at most {:.1} MiB, anonymous at most {:.1} MiB; serve's log in {}",
        started.elapsed().as_secs_f64(),
        peak.0,
        peak.1,
        log_path.display()
    );
    drop(served);
    Ok(())
}
