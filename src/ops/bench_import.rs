//! `custintel bench import`: `custintel import` of a large book while a serving instance on
//! the same database answers ingest and platform writes.
//!
//! Generates the book (customers, users, sources, facts as JSON Lines) into a temporary file,
//! serves the application on 127.0.0.1:0 in this process over a temporary SQLite database, or
//! a fresh schema of PostgreSQL with `--postgres URL` (dropped at the end), with the search
//! index follower and integration scheduler running as in `custintel serve`, then
//! imports the book through [`crate::import::import_file`] on a connection pool of its own
//! (as the separate `custintel import` process would have) while a bounded number of clients
//! send ingest batches and platform writes to the server. Prints the import's lines/s and
//! the server's request counts, 5xx count and latencies during the import.

use std::{
    io::{BufWriter, Write},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{json, Value};

use crate::{
    crypto::SecretBox,
    db,
    ops::{
        admin::{self, NewOrganization, Plan},
        bench_ingest,
    },
    state::AppState,
};

/// Sizes of the generated book and of the load beside it.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportBenchArgs {
    #[arg(long, default_value_t = 100_000)]
    pub customers: usize,
    #[arg(long, default_value_t = 500_000)]
    pub users: usize,
    #[arg(long, default_value_t = 200_000)]
    pub sources: usize,
    #[arg(long, default_value_t = 50_000)]
    pub facts: usize,
    /// Clients sending requests to the server during the import (0: the import alone).
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Pause of each client between two requests, in milliseconds (bounds the load).
    #[arg(long, default_value_t = 20)]
    pub pause_ms: u64,
    /// Measure on this PostgreSQL database (`postgres://...`, in a fresh schema dropped at the
    /// end) instead of a temporary SQLite file.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
}

// The generated book draws on the same vocabulary as `bench tools`' data set.
use crate::ops::bench::{PLANS, REGIONS, ROLES, SOURCE_TYPES, STAGES, WORDS};
use entity::{customer::BillingStatus, fact::FactStatus};

fn domain(c: usize) -> String {
    format!("company-{c}.example.com")
}

/// Writes the book: customers, then users (every tenth email in mixed case), sources and
/// facts, each referring back to records earlier in the file. Returns the number of lines.
fn write_book(path: &std::path::Path, a: &ImportBenchArgs) -> Result<usize> {
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    let customers = a.customers.max(1);
    let mut lines = 0;
    let mut line = |out: &mut BufWriter<std::fs::File>, v: Value| -> Result<()> {
        serde_json::to_writer(&mut *out, &v)?;
        out.write_all(b"\n")?;
        lines += 1;
        Ok(())
    };
    for c in 0..a.customers {
        let status = BillingStatus::ALL[c % BillingStatus::ALL.len()];
        line(
            &mut out,
            json!({"kind": "customer", "name": format!("Company {c} {}", WORDS[c % WORDS.len()]),
                "domain": domain(c), "externalId": format!("cus_{c}"), "billingStatus": status.as_str(),
                "mrrCents": if status == BillingStatus::Paying { 1_000 + (c as i64 * 37) % 400_000 } else { 0 },
                "traits": {"plan": PLANS[c % 3], "region": REGIONS[c % 3]},
                "createdAt": "2025-06-01T00:00:00Z"}),
        )?;
    }
    for u in 0..a.users {
        let c = u % customers;
        let email = if u % 10 == 0 {
            format!("User{u}@Company-{c}.Example.com")
        } else {
            format!("user{u}@{}", domain(c))
        };
        line(
            &mut out,
            json!({"kind": "user", "customer": domain(c), "email": email,
                "externalId": format!("u_{u}"), "name": format!("User {u}"),
                "stage": STAGES[u % STAGES.len()], "traits": {"role": ROLES[u % 2]},
                "lastActivityAt": "2026-10-01T12:00:00Z"}),
        )?;
    }
    for s in 0..a.sources {
        let c = s % customers;
        let body: Vec<&str> = (0..40)
            .map(|k| WORDS[(s * 7 + k * 3) % WORDS.len()])
            .collect();
        line(
            &mut out,
            json!({"kind": "source", "sourceType": SOURCE_TYPES[s % SOURCE_TYPES.len()],
                "sourceId": format!("src_{s}"), "customer": format!("cus_{c}"),
                "title": format!("About {}", WORDS[s % WORDS.len()]), "body": body.join(" "),
                "occurredAt": "2026-09-01T15:00:00Z",
                "permalink": format!("https://crm.example.com/src_{s}"),
                "participants": [format!("user{c}@{}", domain(c))]}),
        )?;
    }
    let sources = a.sources.max(1);
    for f in 0..a.facts {
        let s = (f * 4) % sources;
        let c = s % customers;
        line(
            &mut out,
            json!({"kind": "fact", "customer": domain(c),
                "text": format!("Cares about {} ({f})", WORDS[f % WORDS.len()]),
                "status": FactStatus::Active.as_str(), "sourceType": SOURCE_TYPES[s % SOURCE_TYPES.len()],
                "sourceId": format!("src_{s}"), "sourceQuote": WORDS[f % WORDS.len()]}),
        )?;
    }
    out.flush()?;
    Ok(lines)
}

/// What the clients saw, per kind of request.
#[derive(Default)]
struct Seen {
    requests: u64,
    server_errors: u64,
    other_failures: u64,
    latencies: Vec<Duration>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// The load beside the import: each client in turn sends an ingest batch of 10 events,
/// creates a signal and creates a destination, pausing between requests, until `stop`.
async fn client_loop(
    base: String,
    api_key: String,
    public_key: String,
    client: usize,
    pause: Duration,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<[Seen; 3]>>,
    acknowledged_events: Arc<AtomicU64>,
) {
    let http = reqwest::Client::new();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let kind = n % 3;
        let tag = format!("c{client}n{n}");
        let request = match kind {
            0 => {
                let events: Vec<Value> = (0..10)
                    .map(|i| {
                        json!({"type": "custom", "eventName": "bench_import", "url": "server://bench",
                            "path": "/", "email": format!("load{client}_{i}@load.example.com"),
                            "customerId": format!("load_{client}"),
                            "messageId": uuid::Uuid::new_v4().to_string()})
                    })
                    .collect();
                http.post(format!("{base}/api/i/v1/{public_key}/events"))
                    .json(&json!({"source": "server", "events": events}))
            }
            1 => http
                .post(format!("{base}/api/signals"))
                .bearer_auth(&api_key)
                .json(
                    &json!({"kind": "EVENT_MATCH", "name": format!("Signal {tag}"),
                    "definition": {"grain": "user", "subjectResolver": "email",
                    "eventNames": [format!("ev_{tag}")], "propertyConditions": [],
                    "conditionMode": "ALL"}}),
                ),
            _ => http
                .post(format!("{base}/api/destinations"))
                .bearer_auth(&api_key)
                .json(
                    &json!({"type": "WEBHOOK_ENDPOINT", "name": format!("Hook {tag}"),
                    "url": "https://hooks.example.com/x"}),
                ),
        };
        let started = Instant::now();
        let status = request.send().await.map(|r| r.status());
        let took = started.elapsed();
        if let Ok(mut seen) = seen.lock() {
            let s = &mut seen[kind];
            s.requests += 1;
            match status {
                Ok(status) if status.is_server_error() => s.server_errors += 1,
                Ok(status) if status.is_success() => {
                    s.latencies.push(took);
                    if kind == 0 {
                        acknowledged_events.fetch_add(10, Ordering::Relaxed);
                    }
                }
                _ => s.other_failures += 1,
            }
        }
        n += 1;
        tokio::time::sleep(pause).await;
    }
}

async fn count<E>(db: &DatabaseConnection, org: E::Column, id: &str) -> Result<u64>
where
    E: EntityTrait,
    E::Model: Sync,
{
    Ok(E::find().filter(org.eq(id)).count(db).await?)
}

/// Runs the benchmark and prints its figures.
pub async fn run(a: ImportBenchArgs) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let book = dir.path().join("book.jsonl");
    let t = Instant::now();
    let lines = write_book(&book, &a)?;
    let size = std::fs::metadata(&book)?.len();
    println!(
        "custintel bench import: book of {} customers, {} users, {} sources, {} facts: {lines} lines, {} MiB (written in {:.1} s)",
        a.customers,
        a.users,
        a.sources,
        a.facts,
        size / (1 << 20),
        t.elapsed().as_secs_f64()
    );

    // The fresh schema (or temporary file) and its removal are `bench ingest`'s.
    let options = bench_ingest::BenchOptions {
        seconds: 0,
        concurrency: 1,
        database_url: a.postgres.clone(),
        instances: 1,
    };
    let (server_db, label, schema) = bench_ingest::open(&options, dir.path()).await?;
    println!("database: {label}");
    let result = measure(&a, &book, lines, dir.path(), server_db, schema.as_deref()).await;
    bench_ingest::drop_schema(&options, schema.as_deref()).await?;
    result
}

/// Serves the application on `server_db`, imports the book beside the clients' load and prints
/// the figures; the server is stopped before returning.
async fn measure(
    a: &ImportBenchArgs,
    book: &std::path::Path,
    lines: usize,
    dir: &std::path::Path,
    server_db: DatabaseConnection,
    schema: Option<&str>,
) -> Result<()> {
    let org = admin::create_org(
        &server_db,
        NewOrganization {
            name: "Bench".into(),
            plan: Plan::Enterprise,
            api_call_limit: None,
            connection_limit: None,
            // The benchmark measures storage under an import, not the limiter.
            ingest_rate_limit: Some(1_000_000),
            tracking_domains: vec![],
        },
    )
    .await?;
    let secrets = SecretBox::from_key(&[0u8; 32]);
    let state = AppState {
        db: server_db.clone(),
        secrets,
        public_url: "http://127.0.0.1".into(),
        integrations: Default::default(),
        search: crate::search::SearchIndex::start(server_db.clone())?,
        agents: Default::default(),
        name_trigrams: Default::default(),
        allowance: Default::default(),
    };
    let server = crate::ops::bench_ingest::BenchInstance::serve(state).await?;
    let base = format!("http://{}", server.addr);

    // The import runs as `custintel import` would: its own connection pool on the same
    // database.
    let import_db = match (&a.postgres, schema) {
        (Some(url), Some(schema)) => db::connect(url, Some(schema)).await?,
        _ => {
            db::connect(
                &format!("sqlite://{}/bench.db?mode=rwc", dir.display()),
                None,
            )
            .await?
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(<[Seen; 3]>::default()));
    let acknowledged_events = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..a.clients)
        .map(|c| {
            tokio::spawn(client_loop(
                base.clone(),
                org.api_key.clone(),
                org.public_key.clone(),
                c,
                Duration::from_millis(a.pause_ms),
                stop.clone(),
                seen.clone(),
                acknowledged_events.clone(),
            ))
        })
        .collect();
    let chunks_at_once = crate::config::import_chunks_at_once()?;
    let started = Instant::now();
    let report = crate::import::import_file(
        &import_db,
        &org.organization_id,
        &book.display().to_string(),
        chunks_at_once,
    )
    .await
    .context("import")?;
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }

    println!(
        "import: {lines} lines in {:.1} s: {:.0} lines/s ({} clients beside it, {} ms pause)",
        took.as_secs_f64(),
        lines as f64 / took.as_secs_f64().max(1e-9),
        a.clients,
        a.pause_ms
    );
    println!(
        "imported: {}, rejected lines: {}",
        serde_json::to_string(&report.imported)?,
        report.rejected.len()
    );
    let mut seen = seen
        .lock()
        .map_err(|_| anyhow::anyhow!("a client panicked"))?;
    for (name, s) in ["ingest (10 events)", "create signal", "create destination"]
        .iter()
        .zip(seen.iter_mut())
    {
        s.latencies.sort();
        println!(
            "server during the import, {name}: {} requests ({:.1}/s), {} 5xx, {} other failures, latency p50 {} ms, p99 {} ms, max {} ms",
            s.requests,
            s.requests as f64 / took.as_secs_f64().max(1e-9),
            s.server_errors,
            s.other_failures,
            ms(percentile(&s.latencies, 0.5)),
            ms(percentile(&s.latencies, 0.99)),
            ms(s.latencies.last().copied().unwrap_or_default())
        );
    }
    drop(seen);
    let o = &org.organization_id;
    let stored = (
        count::<entity::customer::Entity>(&server_db, entity::customer::Column::OrganizationId, o)
            .await?,
        count::<entity::user::Entity>(&server_db, entity::user::Column::OrganizationId, o).await?,
        count::<entity::source::Entity>(&server_db, entity::source::Column::OrganizationId, o)
            .await?,
        count::<entity::fact::Entity>(&server_db, entity::fact::Column::OrganizationId, o).await?,
        count::<entity::event::Entity>(&server_db, entity::event::Column::OrganizationId, o)
            .await?,
    );
    println!(
        "stored: {} customers, {} users, {} sources, {} facts; {} events ({} acknowledged)",
        stored.0,
        stored.1,
        stored.2,
        stored.3,
        stored.4,
        acknowledged_events.load(Ordering::Relaxed)
    );
    server.stop().await;
    ensure!(
        report.rejected.is_empty(),
        "lines were rejected: {:?}",
        &report.rejected[..report.rejected.len().min(5)]
    );
    Ok(())
}
