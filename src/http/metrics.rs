//! `GET /metrics` in the Prometheus text format: requests by operation and status with latency
//! histograms (counted by a middleware), and, read when scraped, ingest counters and effects lag,
//! background queues, notification deliveries by outcome, database pool usage and the
//! process's memory by part.
//!
//! Labels never carry an organization or a raw path: an operation is the API's `operationId`
//! (or a fixed name for the few routes outside the description), so the series stay few and
//! no tenant's data shows.

use std::{
    fmt::Write as _,
    sync::{atomic::Ordering::Relaxed, Mutex, OnceLock},
    time::Instant,
};

use poem::{Endpoint, IntoResponse, Request, Response};
use poem_openapi::OperationId;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};

use crate::{ingest::stats, state::AppState};
use entity::notification_delivery::DeliveryStatus;

/// The process's metrics registered once.
struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    ingest_events: IntCounterVec,
    queue: IntGaugeVec,
    deliveries: IntGaugeVec,
    pool: IntGaugeVec,
    memory: IntGaugeVec,
    /// Ingest counters already copied into `ingest_events` (the counters live in `stats`).
    copied: Mutex<[u64; 4]>,
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "custintel_http_requests_total",
                "HTTP requests answered, by operation and status code.",
            ),
            &["operation", "method", "status"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "custintel_http_request_duration_seconds",
                "Time from request to response, by operation.",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["operation", "method"],
        )
        .expect("valid metric");
        let ingest_events = IntCounterVec::new(
            Opts::new(
                "custintel_ingest_events_total",
                "Ingested events by outcome: journaled (acknowledged), repeat (dropped as a \
                 messageId repeat), refused (failed validation), applied (effects applied).",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let queue = IntGaugeVec::new(
            Opts::new(
                "custintel_background_queue",
                "Work waiting in the database: ingest journal batches and events, notification \
                 deliveries retrying, background jobs by status.",
            ),
            &["queue"],
        )
        .expect("valid metric");
        let deliveries = IntGaugeVec::new(
            Opts::new(
                "custintel_notification_deliveries",
                "Notification deliveries stored, by outcome.",
            ),
            &["status"],
        )
        .expect("valid metric");
        let pool = IntGaugeVec::new(
            Opts::new(
                "custintel_db_pool_connections",
                "Database pool connections: open, idle, and the pool's maximum.",
            ),
            &["state"],
        )
        .expect("valid metric");
        let memory = IntGaugeVec::new(
            Opts::new(
                "custintel_memory_bytes",
                "Resident memory by part: process_own (the process's own pages: heap, the \
                 search replica, the messageId window), mapped_database (the database file's \
                 pages mapped by SQLite connections: the OS page cache, counted once per \
                 connection that maps them), search_index (the in-memory search replica) and \
                 message_window (the in-memory messageId window, SQLite).",
            ),
            &["part"],
        )
        .expect("valid metric");
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(latency.clone()),
            Box::new(ingest_events.clone()),
            Box::new(queue.clone()),
            Box::new(deliveries.clone()),
            Box::new(pool.clone()),
            Box::new(memory.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        Metrics {
            registry,
            requests,
            latency,
            ingest_events,
            queue,
            deliveries,
            pool,
            memory,
            copied: Mutex::new([0; 4]),
        }
    })
}

/// The label of a route outside the described API (fixed names; anything else is `other`, so
/// unknown paths cannot grow the series).
fn route_label(path: &str) -> &'static str {
    match path {
        "/healthz" => "healthz",
        "/readyz" => "readyz",
        "/metrics" => "metrics",
        "/openapi.yaml" | "/openapi.json" => "openapi",
        "/mcp" => "mcp",
        _ if path.starts_with("/docs") => "docs",
        _ if path.starts_with("/connect/") => "connect_page",
        _ => "other",
    }
}

/// Middleware: counts every answered request and its latency.
pub async fn middleware<E: Endpoint>(ep: E, req: Request) -> poem::Result<Response> {
    let started = Instant::now();
    let method = req.method().as_str().to_string();
    let fallback = route_label(req.uri().path());
    let resp = match ep.call(req).await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    };
    let operation = resp
        .data::<OperationId>()
        .map(|id| id.0)
        .unwrap_or(fallback);
    let m = metrics();
    m.requests
        .with_label_values(&[operation, &method, resp.status().as_str()])
        .inc();
    m.latency
        .with_label_values(&[operation, &method])
        .observe(started.elapsed().as_secs_f64());
    Ok(resp)
}

/// The Prometheus text of every metric, with the values read from the database now.
pub async fn render(state: &AppState) -> String {
    let m = metrics();
    let db = &state.db;
    copy_ingest_counters(m);
    if let Err(e) = read_queues(db, m).await {
        tracing::warn!(error = %e, "metrics: background queues could not be read");
    }
    read_pool(db, m);
    let memory = crate::memory::MemoryReport::now(&state.search);
    for (part, bytes) in memory.parts() {
        m.memory.with_label_values(&[part]).set(bytes as i64);
    }
    let mut out = Vec::new();
    let _ = TextEncoder::new().encode(&m.registry.gather(), &mut out);
    let mut text = String::from_utf8(out).unwrap_or_default();
    write_lag_histogram(&mut text);
    write_saturated(&mut text);
    text
}

/// Batches refused because the instance held as many unanswered batches as it may: a count
/// apart from the 503s of an outage, so an operator sees the offered load outgrow the database.
fn write_saturated(text: &mut String) {
    let name = "custintel_ingest_batches_saturated_total";
    let _ = writeln!(
        text,
        "# HELP {name} Ingest batches refused with 503 because the instance held as many \
         unanswered batches as CUSTINTEL_INGEST_BACKLOG_MB allows."
    );
    let _ = writeln!(text, "# TYPE {name} counter");
    let _ = writeln!(
        text,
        "{name} {}",
        stats::stats().saturated_batches.load(Relaxed)
    );
}

/// Moves what the ingest counters gained since the last scrape into the Prometheus counters.
fn copy_ingest_counters(m: &Metrics) {
    let s = stats::stats();
    let now = [
        s.journaled.load(Relaxed),
        s.repeats.load(Relaxed),
        s.refused.load(Relaxed),
        s.applied.load(Relaxed),
    ];
    let Ok(mut copied) = m.copied.lock() else {
        return;
    };
    for (i, outcome) in ["journaled", "repeat", "refused", "applied"]
        .into_iter()
        .enumerate()
    {
        let gained = now[i].saturating_sub(copied[i]);
        m.ingest_events.with_label_values(&[outcome]).inc_by(gained);
        copied[i] = now[i];
    }
}

/// The effects lag (acknowledgement to applied) as a Prometheus histogram, from the ingest
/// counters' fixed buckets.
fn write_lag_histogram(text: &mut String) {
    let lag = stats::stats().lag();
    let name = "custintel_ingest_effects_lag_seconds";
    let _ = writeln!(
        text,
        "# HELP {name} Time from an event's acknowledgement to its effects being applied."
    );
    let _ = writeln!(text, "# TYPE {name} histogram");
    let mut cumulative = 0;
    for (i, bound) in stats::LAG_BUCKETS.iter().enumerate() {
        cumulative += lag.buckets.get(i).copied().unwrap_or(0);
        let _ = writeln!(text, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(text, "{name}_bucket{{le=\"+Inf\"}} {}", lag.count());
    let _ = writeln!(text, "{name}_sum {}", lag.sum_secs);
    let _ = writeln!(text, "{name}_count {}", lag.count());
}

async fn read_queues(db: &DatabaseConnection, m: &Metrics) -> Result<(), DbErr> {
    let backlog = crate::ingest::journal::backlog(db, None).await?;
    m.queue
        .with_label_values(&["ingest_journal_batches"])
        .set(backlog.batches as i64);
    m.queue
        .with_label_values(&["ingest_journal_events"])
        .set(backlog.events as i64);
    for (status, count) in counts_by_status(db, "notification_deliveries").await? {
        m.deliveries.with_label_values(&[&status]).set(count);
        if status == DeliveryStatus::Retrying.as_str() {
            m.queue
                .with_label_values(&["notification_retries"])
                .set(count);
        }
    }
    for (status, count) in counts_by_status(db, "jobs").await? {
        m.queue
            .with_label_values(&[&format!("jobs_{status}")])
            .set(count);
    }
    Ok(())
}

/// Rows of `table` per `status` (the table name is one of ours, never input).
async fn counts_by_status(
    db: &DatabaseConnection,
    table: &'static str,
) -> Result<Vec<(String, i64)>, DbErr> {
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            format!("SELECT status, count(*) FROM {table} GROUP BY status"),
        ))
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get_by_index(0)?, r.try_get_by_index(1)?)))
        .collect()
}

fn read_pool(db: &DatabaseConnection, m: &Metrics) {
    let (size, idle, max) = match db.get_database_backend() {
        DbBackend::Sqlite => {
            let p = db.get_sqlite_connection_pool();
            (p.size(), p.num_idle(), p.options().get_max_connections())
        }
        DbBackend::Postgres => {
            let p = db.get_postgres_connection_pool();
            (p.size(), p.num_idle(), p.options().get_max_connections())
        }
        _ => return,
    };
    m.pool.with_label_values(&["open"]).set(i64::from(size));
    m.pool.with_label_values(&["idle"]).set(idle as i64);
    m.pool.with_label_values(&["max"]).set(i64::from(max));
}
