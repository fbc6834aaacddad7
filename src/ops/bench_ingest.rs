//! `custintel bench ingest`: the Ingest API's throughput, latency, effects lag and memory,
//! measured in-process over loopback on a temporary SQLite database (or a fresh schema of a
//! PostgreSQL database, with one or more serving instances), next to the physical floor: the
//! same rows appended to a table without any index, same durability, no HTTP.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use chrono::Utc;
use serde_json::{json, Value};

use crate::{
    crypto::SecretBox,
    db,
    ingest::{dedup, journal, stats, validate},
    ops::admin::{self, NewOrganization, Plan},
    state::AppState,
};

/// Options of a run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Length of the peak-load phase (the half-load phase runs as long).
    pub seconds: u64,
    /// Requests in flight during the peak-load phase.
    pub concurrency: usize,
    /// `postgres://...` to measure on PostgreSQL (a fresh schema); SQLite in a temporary
    /// directory otherwise.
    pub database_url: Option<String>,
    /// Serving instances on the one database (PostgreSQL only).
    pub instances: usize,
}

/// Visitors the generated traffic comes from.
const VISITORS: usize = 1_000;
/// Rows per transaction when measuring the floor (about what one acknowledging group holds at
/// peak).
const FLOOR_ROWS_PER_COMMIT: usize = 2_000;

/// A batch of 100 mixed events from one visitor (`seq` picks the visitor), each with a new random message id.
pub fn batch_body(seq: u64) -> Value {
    let visitor = seq as usize % VISITORS;
    let visitor_id = format!("00000000-0000-4000-8000-{visitor:012}");
    let session_id = format!("00000000-0000-4000-9000-{visitor:012}");
    let now = Utc::now().timestamp_millis();
    let mut events = Vec::with_capacity(100);
    for i in 0..100u64 {
        // Analytics SDKs send random (version 4) message ids; sequential ones would flatter
        // the dedup index, whose inserts then land on the same few pages.
        let message_id = uuid::Uuid::new_v4().to_string();
        let url = format!("https://app.example.com/page/{}", i % 7);
        let path = format!("/page/{}", i % 7);
        let ts = now - 1_000 + i as i64;
        let event = match i {
            0 => json!({"type": "identify", "email": format!("user{visitor}@example.com"),
                        "userId": format!("u_{visitor}"), "traits": {"name": format!("User {visitor}")},
                        "customerId": format!("acct_{}", visitor % 100)}),
            1..=20 => json!({"type": "custom", "eventName": "feature_used",
                             "properties": {"feature": "reports", "count": i, "beta": false}}),
            21..=30 => json!({"type": "engagement", "activeTimeMs": 1_000, "totalTimeMs": 2_000,
                              "sessionId": session_id}),
            31..=38 => json!({"type": "form", "formId": "contact",
                              "formFields": {"company": "Acme", "message": "hello", "password": "x"}}),
            39 => json!({"type": "calendar", "provider": "calendly", "eventType": "demo",
                         "duration": 30}),
            40 if seq.is_multiple_of(20) => json!({"type": "stage", "stage": "activated"}),
            41 if seq.is_multiple_of(50) => json!({"type": "billing", "status": "paid",
                                          "customerId": format!("acct_{}", visitor % 100)}),
            _ => json!({"type": "pageview", "title": "Page", "referrer": "https://google.com",
                        "utm": {"source": "newsletter", "campaign": "launch"}}),
        };
        let mut event = event;
        if let Some(obj) = event.as_object_mut() {
            obj.insert("url".into(), json!(url));
            obj.insert("path".into(), json!(path));
            obj.insert("timestamp".into(), json!(ts));
            obj.insert("messageId".into(), json!(message_id));
        }
        events.push(event);
    }
    json!({"visitorId": visitor_id, "sentAt": now, "events": events})
}

/// [`batch_body`] as the bytes a client sends, written straight as text: the load generator
/// shares the two cores with the service, so it should cost as little as an SDK's serializer.
pub fn batch_bytes(seq: u64) -> Vec<u8> {
    use std::fmt::Write;
    let visitor = seq as usize % VISITORS;
    let now = Utc::now().timestamp_millis();
    let mut out = String::with_capacity(24_000);
    let _ = write!(
        out,
        r#"{{"visitorId":"00000000-0000-4000-8000-{visitor:012}","sentAt":{now},"events":["#
    );
    for i in 0..100u64 {
        if i > 0 {
            out.push(',');
        }
        let message_id = uuid::Uuid::new_v4();
        let page = i % 7;
        let ts = now - 1_000 + i as i64;
        out.push('{');
        match i {
            0 => {
                let _ = write!(
                    out,
                    r#""type":"identify","email":"user{visitor}@example.com","userId":"u_{visitor}","traits":{{"name":"User {visitor}"}},"customerId":"acct_{}""#,
                    visitor % 100
                );
            }
            1..=20 => {
                let _ = write!(
                    out,
                    r#""type":"custom","eventName":"feature_used","properties":{{"feature":"reports","count":{i},"beta":false}}"#
                );
            }
            21..=30 => {
                let _ = write!(
                    out,
                    r#""type":"engagement","activeTimeMs":1000,"totalTimeMs":2000,"sessionId":"00000000-0000-4000-9000-{visitor:012}""#
                );
            }
            31..=38 => out.push_str(
                r#""type":"form","formId":"contact","formFields":{"company":"Acme","message":"hello","password":"x"}"#,
            ),
            39 => out.push_str(
                r#""type":"calendar","provider":"calendly","eventType":"demo","duration":30"#,
            ),
            40 if seq.is_multiple_of(20) => out.push_str(r#""type":"stage","stage":"activated""#),
            41 if seq.is_multiple_of(50) => {
                let _ = write!(
                    out,
                    r#""type":"billing","status":"paid","customerId":"acct_{}""#,
                    visitor % 100
                );
            }
            _ => out.push_str(
                r#""type":"pageview","title":"Page","referrer":"https://google.com","utm":{"source":"newsletter","campaign":"launch"}"#,
            ),
        }
        let _ = write!(
            out,
            r#","url":"https://app.example.com/page/{page}","path":"/page/{page}","timestamp":{ts},"messageId":"{message_id}"}}"#
        );
    }
    out.push_str("]}");
    out.into_bytes()
}

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

pub(crate) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 10.0).round() / 10.0
}

pub(crate) struct LoadResult {
    pub(crate) events_per_sec: f64,
    pub(crate) requests: u64,
    pub(crate) failures: u64,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) max: Duration,
    /// Share of the phase the acknowledging writer was busy (near 1: ingest saturated).
    pub(crate) writer_busy: f64,
    /// Events acknowledged and applied per second in each stretch of [`SERIES_STEP`], so a
    /// figure that drifts over a long phase shows where.
    pub(crate) series: Vec<(f64, f64)>,
    /// The seconds (wall clock) in which requests that started took over [`SLOW_REQUEST`]:
    /// how many, and the longest. A tail shows whether it came from a few stalls (to be
    /// matched with the database's own log) or from the whole phase.
    pub(crate) slow_seconds: Vec<(chrono::DateTime<Utc>, usize, Duration)>,
}

/// What counts as a slow ingest request in [`LoadResult::slow_seconds`] (the target p99).
const SLOW_REQUEST: Duration = Duration::from_millis(50);

/// The length of one stretch of [`LoadResult::series`].
const SERIES_STEP: Duration = Duration::from_secs(10);

/// Temporary SQLite database, migrated, with the service's connection settings.
pub(crate) async fn temp_db(
    dir: &std::path::Path,
    name: &str,
) -> anyhow::Result<sea_orm::DatabaseConnection> {
    let url = format!("sqlite://{}/{name}?mode=rwc", dir.display());
    let conn = db::connect(&url, None).await?;
    db::migrate(&conn).await?;
    Ok(conn)
}

pub(crate) async fn create_org(
    conn: &sea_orm::DatabaseConnection,
    name: &str,
    rate_limit: i32,
) -> anyhow::Result<admin::CreatedOrganization> {
    Ok(admin::create_org(
        conn,
        NewOrganization {
            name: name.into(),
            plan: Plan::Enterprise,
            api_call_limit: None,
            connection_limit: None,
            ingest_rate_limit: Some(rate_limit),
            tracking_domains: vec![],
        },
    )
    .await?)
}

/// The physical floor: the rows the generated batches make, appended through one prepared
/// statement to a table without any index (not even a primary key), in transactions of
/// [`FLOOR_ROWS_PER_COMMIT`] rows, same page size and durability as the service. Only the
/// inserts are timed for the floor; reading the batches that make the rows is timed apart.
fn floor(dir: &std::path::Path, seconds: u64) -> anyhow::Result<Floor> {
    let conn = rusqlite::Connection::open(dir.join("floor.db"))?;
    conn.execute_batch(&format!(
        "PRAGMA page_size={}; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-16384; \
         PRAGMA temp_store=memory; PRAGMA mmap_size={};
         CREATE TABLE floor_events (id TEXT, organization_id TEXT, message_id TEXT, \
         event_type TEXT, event_name TEXT, visitor_id TEXT, user_id TEXT, customer_id TEXT, \
         url TEXT, path TEXT, occurred_at TEXT, received_at TEXT, data TEXT);",
        db::SQLITE_PAGE_BYTES,
        db::SQLITE_MMAP_BYTES
    ))?;
    let org = uuid::Uuid::new_v4().to_string();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut inserting = Duration::ZERO;
    let mut validating = Duration::ZERO;
    let mut batches = 0u32;
    let mut rows = 0usize;
    let mut seq = 50_000_000u64;
    while Instant::now() < deadline {
        let t = Instant::now();
        let (pending, made) = floor_rows(&org, &mut seq)?;
        validating += t.elapsed();
        batches += made;
        let t = Instant::now();
        let tx = conn.unchecked_transaction()?;
        {
            let mut stmt = tx.prepare(
                "INSERT INTO floor_events VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, NULL, ?7, ?8, ?9, ?10, ?11)",
            )?;
            for r in &pending {
                stmt.execute(rusqlite::params![
                    r.id,
                    org,
                    r.message_id,
                    r.event_type,
                    r.event_name,
                    r.visitor_id,
                    r.url,
                    r.path,
                    r.occurred_at,
                    r.received_at,
                    r.data
                ])?;
            }
        }
        tx.commit()?;
        inserting += t.elapsed();
        rows += pending.len();
    }
    Ok(Floor {
        rows_per_sec: rows as f64 / inserting.as_secs_f64().max(1e-9),
        validate_us: validating.as_secs_f64() * 1e6 / f64::from(batches.max(1)),
    })
}

/// One row of the floor's table, as the applier would store the event.
struct FloorRow {
    id: String,
    message_id: Option<String>,
    event_type: String,
    event_name: Option<String>,
    visitor_id: Option<String>,
    url: String,
    path: String,
    occurred_at: String,
    received_at: String,
    data: String,
}

/// [`FLOOR_ROWS_PER_COMMIT`] rows (or a few more) of generated batches, parsed and validated as
/// requests are; answers them and how many batches made them.
fn floor_rows(org: &str, seq: &mut u64) -> anyhow::Result<(Vec<FloorRow>, u32)> {
    let mut rows = Vec::with_capacity(FLOOR_ROWS_PER_COMMIT + 100);
    let mut batches = 0;
    while rows.len() < FLOOR_ROWS_PER_COMMIT {
        *seq += 1;
        let body = batch_bytes(*seq);
        let (batch, _) =
            validate::validate_batch(org, &body, Utc::now()).map_err(|e| anyhow::anyhow!(e.0))?;
        batches += 1;
        for e in batch.events {
            rows.push(FloorRow {
                id: e.id,
                message_id: e.message_id,
                event_type: e.event_type.to_string(),
                event_name: e.event_name,
                visitor_id: batch.visitor_id.clone(),
                url: e.url,
                path: e.path,
                occurred_at: e.occurred_at.to_rfc3339(),
                received_at: batch.received_at.to_rfc3339(),
                data: e.data.to_string(),
            });
        }
    }
    Ok((rows, batches))
}

/// PostgreSQL's own floor: the same rows sent with `COPY ... FROM STDIN` (text format) into a
/// table without any index in the run's schema, [`FLOOR_ROWS_PER_COMMIT`] rows per
/// transaction, with the server's durability (`synchronous_commit` as configured, on by
/// default). Only the copies and commits are timed. Answers rows per second.
async fn postgres_floor(url: &str, schema: &str, seconds: u64) -> anyhow::Result<f64> {
    use sea_orm::sqlx::{postgres::PgConnectOptions, Connection, Executor, PgConnection};
    let options: PgConnectOptions = url.parse()?;
    let mut conn = PgConnection::connect_with(&options).await?;
    if let Some(port) = db::postgres_port(url) {
        db::postgres_sockets::configure_towards(port);
    }
    let table = format!("{schema}.floor_events");
    conn.execute(sea_orm::sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {table} (id TEXT, organization_id TEXT, message_id TEXT, event_type TEXT, \
         event_name TEXT, visitor_id TEXT, user_id TEXT, customer_id TEXT, url TEXT, path TEXT, \
         occurred_at TIMESTAMPTZ, received_at TIMESTAMPTZ, data JSONB)"
    )))
    .await?;
    let org = uuid::Uuid::new_v4().to_string();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut copying = Duration::ZERO;
    let mut rows = 0usize;
    let mut seq = 60_000_000u64;
    while Instant::now() < deadline {
        let (pending, _) = floor_rows(&org, &mut seq)?;
        let mut text = String::with_capacity(pending.len() * 600);
        for r in &pending {
            let fields = [
                Some(r.id.as_str()),
                Some(org.as_str()),
                r.message_id.as_deref(),
                Some(r.event_type.as_str()),
                r.event_name.as_deref(),
                r.visitor_id.as_deref(),
                None,
                None,
                Some(r.url.as_str()),
                Some(r.path.as_str()),
                Some(r.occurred_at.as_str()),
                Some(r.received_at.as_str()),
                Some(r.data.as_str()),
            ];
            for (i, field) in fields.iter().enumerate() {
                if i > 0 {
                    text.push('\t');
                }
                copy_text_field(&mut text, *field);
            }
            text.push('\n');
        }
        let t = Instant::now();
        let mut txn = conn.begin().await?;
        let mut copy = txn
            .copy_in_raw(&format!("COPY {table} FROM STDIN (FORMAT text)"))
            .await?;
        copy.send(text.into_bytes()).await?;
        copy.finish().await?;
        txn.commit().await?;
        copying += t.elapsed();
        rows += pending.len();
    }
    conn.close().await?;
    Ok(rows as f64 / copying.as_secs_f64().max(1e-9))
}

/// A field of `COPY`'s text format: `\N` for NULL; backslash, tab, newline and carriage return
/// escaped.
fn copy_text_field(out: &mut String, field: Option<&str>) {
    let Some(value) = field else {
        out.push_str("\\N");
        return;
    };
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
}

struct Floor {
    rows_per_sec: f64,
    /// Time to parse and validate one generated batch, in microseconds of one thread.
    validate_us: f64,
}

/// Drives the endpoints (requests spread over `urls` in turn): closed loop with `concurrency`
/// clients, or open loop at `rate` requests per second when given.
/// The request body of request number `n` (sent to `urls[n % urls.len()]`).
pub(crate) type BodyFn = Arc<dyn Fn(u64) -> Vec<u8> + Send + Sync>;

/// Sends batches for `seconds`: closed loop with `concurrency` requests in flight, or open loop
/// at `rate` requests per second.
pub(crate) async fn drive(
    urls: &[String],
    seconds: u64,
    concurrency: usize,
    rate: Option<f64>,
    seq: Arc<AtomicU64>,
    body: BodyFn,
) -> LoadResult {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency * 2)
        .build()
        .unwrap_or_default();
    let urls: Arc<Vec<String>> = Arc::new(urls.to_vec());
    let latencies = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let slow = Arc::new(Mutex::new(Vec::<(chrono::DateTime<Utc>, Duration)>::new()));
    let accepted = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let one = {
        let (client, urls, seq, make) = (client.clone(), urls.clone(), seq.clone(), body.clone());
        let (latencies, slow, accepted, failures, requests) = (
            latencies.clone(),
            slow.clone(),
            accepted.clone(),
            failures.clone(),
            requests.clone(),
        );
        move || {
            let (client, urls, seq, make) =
                (client.clone(), urls.clone(), seq.clone(), make.clone());
            let (latencies, slow, accepted, failures, requests) = (
                latencies.clone(),
                slow.clone(),
                accepted.clone(),
                failures.clone(),
                requests.clone(),
            );
            async move {
                let n = seq.fetch_add(1, Ordering::Relaxed);
                let url = &urls[n as usize % urls.len()];
                let body = make(n);
                let sent_at = Utc::now();
                let t = Instant::now();
                let result = client
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                let ok = match result {
                    Ok(resp) if resp.status().is_success() => resp
                        .json::<Value>()
                        .await
                        .ok()
                        .and_then(|v| v["processed"].as_u64()),
                    _ => None,
                };
                let elapsed = t.elapsed();
                requests.fetch_add(1, Ordering::Relaxed);
                if elapsed > SLOW_REQUEST {
                    if let Ok(mut s) = slow.lock() {
                        s.push((sent_at, elapsed));
                    }
                }
                match ok {
                    Some(p) => {
                        accepted.fetch_add(p, Ordering::Relaxed);
                        if let Ok(mut l) = latencies.lock() {
                            l.push(elapsed);
                        }
                    }
                    None => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    };
    let busy_before = stats::stats().writer_busy_us.load(Ordering::Relaxed);
    let series = {
        let accepted = accepted.clone();
        tokio::spawn(async move {
            let mut series = Vec::new();
            let (mut acked, mut applied) = (0, applied_total());
            let mut end = start + SERIES_STEP;
            while end <= deadline {
                tokio::time::sleep_until(end.into()).await;
                let (now_acked, now_applied) = (accepted.load(Ordering::Relaxed), applied_total());
                let secs = SERIES_STEP.as_secs_f64();
                series.push((
                    (now_acked - acked) as f64 / secs,
                    (now_applied - applied) as f64 / secs,
                ));
                (acked, applied, end) = (now_acked, now_applied, end + SERIES_STEP);
            }
            series
        })
    };
    let mut tasks = Vec::new();
    match rate {
        None => {
            for _ in 0..concurrency {
                let one = one.clone();
                tasks.push(tokio::spawn(async move {
                    while Instant::now() < deadline {
                        one().await;
                    }
                }));
            }
        }
        Some(per_sec) => {
            let interval = Duration::from_secs_f64(1.0 / per_sec.max(1.0));
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            while Instant::now() < deadline {
                ticker.tick().await;
                tasks.push(tokio::spawn(one()));
            }
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut lat = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    lat.sort();
    LoadResult {
        events_per_sec: accepted.load(Ordering::Relaxed) as f64 / elapsed,
        requests: requests.load(Ordering::Relaxed),
        failures: failures.load(Ordering::Relaxed),
        p50: percentile(&lat, 0.50),
        p99: percentile(&lat, 0.99),
        max: lat.last().copied().unwrap_or_default(),
        writer_busy: (stats::stats().writer_busy_us.load(Ordering::Relaxed) - busy_before) as f64
            / 1e6
            / elapsed.max(1e-9),
        series: series.await.unwrap_or_default(),
        slow_seconds: by_second(slow.lock().map(|s| s.clone()).unwrap_or_default()),
    }
}

/// Slow requests grouped by the second they were sent in.
fn by_second(
    slow: Vec<(chrono::DateTime<Utc>, Duration)>,
) -> Vec<(chrono::DateTime<Utc>, usize, Duration)> {
    let mut seconds: std::collections::BTreeMap<i64, (usize, Duration)> = Default::default();
    for (at, took) in slow {
        let second = seconds.entry(at.timestamp()).or_default();
        second.0 += 1;
        second.1 = second.1.max(took);
    }
    seconds
        .into_iter()
        .filter_map(|(second, (n, longest))| {
            Some((chrono::DateTime::from_timestamp(second, 0)?, n, longest))
        })
        .collect()
}

pub(crate) fn print_load(label: &str, r: &LoadResult) {
    println!(
        "{label}: {:.0} events/s acknowledged, {} requests, {} failed, latency p50 {} ms, p99 {} ms, max {} ms, writer busy {:.0}%",
        r.events_per_sec,
        r.requests,
        r.failures,
        ms(r.p50),
        ms(r.p99),
        ms(r.max),
        r.writer_busy * 100.0
    );
    if r.series.len() > 1 {
        let stretches: Vec<String> = r
            .series
            .iter()
            .map(|(acked, applied)| format!("{acked:.0}/{applied:.0}"))
            .collect();
        println!(
            "  per {} s, acknowledged/applied events/s: {}",
            SERIES_STEP.as_secs(),
            stretches.join(" ")
        );
    }
}

/// Prints [`LoadResult::slow_seconds`] (at most the 12 with the longest requests).
pub(crate) fn print_slow_seconds(r: &LoadResult) {
    if r.slow_seconds.is_empty() {
        println!("  no request took over {} ms", SLOW_REQUEST.as_millis());
        return;
    }
    let mut worst = r.slow_seconds.clone();
    worst.sort_by_key(|(_, _, longest)| std::cmp::Reverse(*longest));
    worst.truncate(12);
    worst.sort_by_key(|(at, _, _)| *at);
    let shown: Vec<String> = worst
        .iter()
        .map(|(at, n, longest)| format!("{} {n} (max {} ms)", at.format("%H:%M:%S"), ms(*longest)))
        .collect();
    println!(
        "  requests over {} ms in {} second(s), by the second they were sent (UTC): {}",
        SLOW_REQUEST.as_millis(),
        r.slow_seconds.len(),
        shown.join(", ")
    );
}

/// Waits until the journal is empty and the applier has counted what it applied; answers how
/// long that took.
pub(crate) async fn drain(conn: &sea_orm::DatabaseConnection) -> anyhow::Result<Duration> {
    let t = Instant::now();
    loop {
        let counters = stats::stats();
        let counted =
            counters.applied.load(Ordering::Relaxed) >= counters.journaled.load(Ordering::Relaxed);
        if counted && journal::backlog(conn, None).await?.batches == 0 {
            return Ok(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Applies what the last phase left journaled and prints how fast that went.
async fn apply_backlog(conn: &sea_orm::DatabaseConnection) -> anyhow::Result<()> {
    let before = applied_total();
    let took = drain(conn).await?;
    let drained = applied_total() - before;
    if drained > 0 {
        println!(
            "  backlog of {drained} events applied in {:.1} s: {:.0} events/s with no ingest beside it",
            took.as_secs_f64(),
            drained as f64 / took.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}

fn applied_total() -> u64 {
    stats::stats().applied.load(Ordering::Relaxed)
}

/// The database the run uses: a temporary SQLite file, or a fresh schema of PostgreSQL.
pub(crate) async fn open(
    options: &BenchOptions,
    dir: &std::path::Path,
) -> anyhow::Result<(sea_orm::DatabaseConnection, String, Option<String>)> {
    match &options.database_url {
        Some(url) if url.starts_with("postgres") => {
            let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
            let admin_conn = db::connect(url, None).await?;
            sea_orm::ConnectionTrait::execute_unprepared(
                &admin_conn,
                &format!("CREATE SCHEMA {schema}"),
            )
            .await?;
            let conn = db::connect(url, Some(&schema)).await?;
            db::migrate(&conn).await?;
            let settings = postgres_settings(&conn).await?;
            Ok((
                conn,
                format!("PostgreSQL ({url}, schema {schema}; {settings})"),
                Some(schema),
            ))
        }
        Some(other) => anyhow::bail!("--database-url must be postgres://... (got {other})"),
        None => Ok((
            temp_db(dir, "bench.db").await?,
            "SQLite (WAL, synchronous=NORMAL)".into(),
            None,
        )),
    }
}

/// The PostgreSQL server's settings that move write-heavy figures most, as one line for a
/// benchmark's header: the same book measures very differently with a larger WAL between
/// checkpoints or compressed full-page images, so figures are comparable only with these.
pub(crate) async fn postgres_settings(
    conn: &sea_orm::DatabaseConnection,
) -> anyhow::Result<String> {
    const NAMES: [&str; 6] = [
        "shared_buffers",
        "max_wal_size",
        "wal_compression",
        "synchronous_commit",
        "autovacuum",
        "max_connections",
    ];
    // One statement for all of them: a row per name, in the list's order.
    let rows = sea_orm::ConnectionTrait::query_all_raw(
        conn,
        sea_orm::Statement::from_sql_and_values(
            sea_orm::DbBackend::Postgres,
            "SELECT name || ' ' || current_setting(name) AS setting \
             FROM unnest(string_to_array($1, ',')) WITH ORDINALITY AS s(name, place) ORDER BY place",
            [NAMES.join(",").into()],
        ),
    )
    .await?;
    let settings = rows
        .iter()
        .map(|row| row.try_get::<String>("", "setting"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(format!("server: {}", settings.join(", ")))
}

/// A serving instance a benchmark started in its process.
pub(crate) struct BenchInstance {
    pub addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<()>,
}

impl BenchInstance {
    /// Stops the instance as SIGTERM would (its applier, processor and schedule ticks
    /// included) and waits for it: a PostgreSQL run drops its schema afterwards, and tasks still
    /// running would log errors about the missing tables.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let limit = crate::http::server::SHUTDOWN_LIMIT + Duration::from_secs(1);
        let _ = tokio::time::timeout(limit, self.serving).await;
    }
}

/// Starts a serving instance on its own connection pool.
pub(crate) async fn start_instance(
    options: &BenchOptions,
    conn: sea_orm::DatabaseConnection,
    schema: Option<&str>,
) -> anyhow::Result<BenchInstance> {
    let conn = match (&options.database_url, schema) {
        (Some(url), Some(schema)) => db::connect(url, Some(schema)).await?,
        _ => conn,
    };
    let state = AppState {
        db: conn.clone(),
        secrets: SecretBox::from_key(&[0u8; 32]),
        public_url: "http://127.0.0.1".into(),
        integrations: Default::default(),
        search: crate::search::SearchIndex::new(conn)?,
        agents: Default::default(),
        name_trigrams: Default::default(),
        allowance: Default::default(),
    };
    BenchInstance::serve(state).await
}

impl BenchInstance {
    /// Serves `state` in this process on 127.0.0.1:0 until [`BenchInstance::stop`].
    pub(crate) async fn serve(state: AppState) -> anyhow::Result<Self> {
        let (bound_tx, bound) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(async move {
            if let Err(e) = crate::http::server::serve_until(
                state,
                "127.0.0.1:0",
                move |addr| {
                    let _ = bound_tx.send(addr);
                },
                async move {
                    let _ = stopped.await;
                },
            )
            .await
            {
                eprintln!("bench server stopped: {e:#}");
            }
        });
        Ok(BenchInstance {
            addr: bound.await?,
            stop,
            serving,
        })
    }
}

/// The SQLite `messageId` window's cost: bytes per million messages and time per check and
/// record, as the writer does them (`custintel bench window` fills it to 100 million).
fn window_cost(dir: &std::path::Path) -> anyhow::Result<(f64, f64)> {
    let mut window = crate::ingest::window::LocalWindow::open(
        &dir.join("window-cost"),
        "bench",
        Duration::from_secs(86_400),
    )?;
    let n = 1_000_000u64;
    let now = Utc::now();
    let t = Instant::now();
    for i in 0..n {
        let key = dedup::message_key("org", &format!("{i:032x}"));
        window.check_and_record(key, now);
        if i % 2_000 == 0 {
            window.sweep(now);
        }
    }
    let per_event_ns = t.elapsed().as_nanos() as f64 / n as f64;
    Ok((window.memory_bytes() as f64, per_event_ns))
}

/// Runs the benchmark and prints its figures.
pub async fn run(options: BenchOptions) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (conn, label, schema) = open(&options, dir.path()).await?;
    let instances = if schema.is_some() {
        options.instances.max(1)
    } else {
        if options.instances > 1 {
            eprintln!(
                "note: --instances applies to PostgreSQL; on SQLite one process serves a file"
            );
        }
        1
    };
    let org = create_org(&conn, "Bench", 1_000_000).await?;
    let mut servers = Vec::new();
    for _ in 0..instances {
        servers.push(start_instance(&options, conn.clone(), schema.as_deref()).await?);
    }
    let urls_for = |public_key: &str| -> Vec<String> {
        servers
            .iter()
            .map(|s| format!("http://{}/api/i/v1/{public_key}/events", s.addr))
            .collect()
    };
    let urls = urls_for(&org.public_key);

    // Memory over time, sampled once a second for the whole run.
    // Total RSS includes the SQLite file pages mapped by `mmap_size` (page cache, shared with
    // the OS); anonymous RSS is the process's own memory, the figure that must stay flat.
    // (second, total RSS KiB, anonymous RSS KiB, messageId window KiB)
    let samples = Arc::new(Mutex::new(Vec::<(u64, u64, u64, u64)>::new()));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (samples, sampling) = (samples.clone(), sampling.clone());
        tokio::spawn(async move {
            let t0 = Instant::now();
            while sampling.load(Ordering::Relaxed) {
                if let Ok(mut s) = samples.lock() {
                    s.push((
                        t0.elapsed().as_secs(),
                        rss_kib("VmRSS:"),
                        rss_kib("RssAnon:"),
                        stats::stats().window_bytes.load(Ordering::Relaxed) / 1024,
                    ));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    println!(
        "custintel bench ingest: {label}, {instances} instance(s), batches of 100 mixed events with random (v4) messageIds, {} s per phase, concurrency {}",
        options.seconds, options.concurrency
    );
    let (window_bytes, window_ns) = window_cost(dir.path())?;
    println!(
        "messageId window (SQLite): {:.1} MiB per million messages, {window_ns:.0} ns per event (check + record)",
        window_bytes / 1_048_576.0
    );
    let floor_secs = options.seconds.clamp(3, 10);
    let floor_dir = dir.path().to_path_buf();
    let floor = tokio::task::spawn_blocking(move || floor(&floor_dir, floor_secs)).await??;
    let sqlite_floor = floor.rows_per_sec;
    // The SQLite floor says what this machine's disk and CPU allow; on PostgreSQL the ratio is
    // to PostgreSQL's own floor, measured in the run's schema.
    let (floor_rate, ratio_name) = match (&options.database_url, schema.as_deref()) {
        (Some(url), Some(schema)) => {
            println!(
                "SQLite's physical floor on this machine (same rows appended to a table without any index, {FLOOR_ROWS_PER_COMMIT} rows per commit, no HTTP): {sqlite_floor:.0} rows/s"
            );
            let pg_floor = postgres_floor(url, schema, floor_secs).await?;
            println!(
                "PostgreSQL's floor (same rows sent with COPY into a table without any index, {FLOOR_ROWS_PER_COMMIT} rows per commit, the server's durability, no HTTP): {pg_floor:.0} rows/s"
            );
            (pg_floor, "acknowledged / PostgreSQL's floor")
        }
        _ => {
            println!(
                "physical floor (same rows appended to a table without any index, {FLOOR_ROWS_PER_COMMIT} rows per commit, same page size and durability, no HTTP): {sqlite_floor:.0} rows/s"
            );
            (sqlite_floor, "acknowledged / floor")
        }
    };
    println!(
        "parsing and validating one generated 100-event batch: {:.1} us of one thread",
        floor.validate_us
    );

    let seq = Arc::new(AtomicU64::new(0));
    // Warm-up: connections, caches, the writer task.
    let _ = drive(
        &urls,
        1,
        options.concurrency,
        None,
        seq.clone(),
        Arc::new(batch_bytes),
    )
    .await;
    drain(&conn).await?;

    // 1. Peak: closed loop, as many acknowledged events as the service takes.
    let applied_before = applied_total();
    let peak = drive(
        &urls,
        options.seconds,
        options.concurrency,
        None,
        seq.clone(),
        Arc::new(batch_bytes),
    )
    .await;
    let applied_during = applied_total() - applied_before;
    print_load("peak (closed loop)", &peak);
    let backlog = journal::backlog(&conn, None).await?;
    println!(
        "  {ratio_name}: {:.2}; effects applied meanwhile: {:.0} events/s; backlog at the end: {} events",
        peak.events_per_sec / floor_rate.max(1.0),
        applied_during as f64 / options.seconds as f64,
        backlog.events
    );
    apply_backlog(&conn).await?;

    // 1b. The acknowledging path alone: the same closed loop with the applier paused, so the
    //     two cores are shared only by the HTTP/JSON path, the journal append and the load
    //     generator; the backlog is applied afterwards.
    crate::ingest::applier::set_paused(true);
    let alone = drive(
        &urls,
        options.seconds,
        options.concurrency,
        None,
        seq.clone(),
        Arc::new(batch_bytes),
    )
    .await;
    crate::ingest::applier::set_paused(false);
    print_load(
        "peak with the applier paused (acknowledging path alone)",
        &alone,
    );
    println!(
        "  {ratio_name}: {:.2}",
        alone.events_per_sec / floor_rate.max(1.0)
    );
    apply_backlog(&conn).await?;

    // 2. Effects at the spec's rate limit for five organizations: 5 x 100 requests/s of 100
    //    events offered (50,000 events/s), open loop.
    let mut five = Vec::new();
    for i in 0..5 {
        let o = create_org(&conn, &format!("Bench {i}"), 100).await?;
        five.extend(urls_for(&o.public_key));
    }
    let lag_before = stats::stats().lag();
    let applied_before = applied_total();
    let t = Instant::now();
    let effects = drive(
        &five,
        options.seconds,
        options.concurrency,
        Some(500.0),
        seq.clone(),
        Arc::new(batch_bytes),
    )
    .await;
    let offered_secs = t.elapsed().as_secs_f64();
    let applied_in_phase = applied_total() - applied_before;
    print_load(
        "five organizations at 100 requests/s each (open loop)",
        &effects,
    );
    let took = drain(&conn).await?;
    let applied_all = applied_total() - applied_before;
    let lag = stats::stats().lag().since(&lag_before);
    println!(
        "  effects applied: {:.0} events/s during the phase, {:.0} events/s including the {:.1} s drain after it; lag p99 <= {} s",
        applied_in_phase as f64 / offered_secs,
        applied_all as f64 / (offered_secs + took.as_secs_f64()),
        took.as_secs_f64(),
        lag.quantile_bound(0.99)
    );

    // 3. 10,000 events/s offered (100 requests/s), open loop: latency and effects lag.
    let lag_before = stats::stats().lag();
    let steady = drive(
        &urls,
        options.seconds,
        options.concurrency,
        Some(100.0),
        seq.clone(),
        Arc::new(batch_bytes),
    )
    .await;
    drain(&conn).await?;
    let lag = stats::stats().lag().since(&lag_before);
    print_load("10,000 events/s offered (open loop)", &steady);
    print_slow_seconds(&steady);
    println!(
        "  effects lag (acknowledgement to applied): p50 <= {} s, p99 <= {} s, mean {:.3} s over {} events",
        lag.quantile_bound(0.50),
        lag.quantile_bound(0.99),
        lag.sum_secs / lag.count().max(1) as f64,
        lag.count()
    );
    println!("  lag histogram (events per bucket): {}", lag.describe());

    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    let samples = samples.lock().map(|s| s.clone()).unwrap_or_default();
    let series: Vec<String> = samples
        .iter()
        .map(|(t, total, anon, window)| {
            format!("{t}s:{}/{}/{}MiB", total / 1024, anon / 1024, window / 1024)
        })
        .collect();
    println!(
        "RSS over time (total/anonymous/of which the messageId window): {}",
        series.join(" ")
    );
    let half = samples.len() / 2;
    let range = |of: &dyn Fn(&(u64, u64, u64, u64)) -> u64| {
        let values: Vec<u64> = samples[half..].iter().map(of).collect();
        (
            values.iter().min().copied().unwrap_or(0) / 1024,
            values.iter().max().copied().unwrap_or(0) / 1024,
        )
    };
    let (lo, hi) = range(&|(_, _, anon, _)| *anon);
    println!("anonymous RSS over the second half: {lo} to {hi} MiB");
    // The window holds every messageId of its length (24 h by default) by design, so it grows
    // with the events sent within it; the rest of the process should not.
    let (wlo, whi) = range(&|(_, _, _, window)| *window);
    let (rlo, rhi) = range(&|(_, _, anon, window)| anon.saturating_sub(*window));
    println!("  of which the messageId window: {wlo} to {whi} MiB; the rest: {rlo} to {rhi} MiB");
    println!(
        "peak RSS (VmHWM, server and load generator in one process): {} MiB",
        rss_kib("VmHWM:") / 1024
    );
    let stored: u64 = {
        use sea_orm::{EntityTrait, PaginatorTrait};
        entity::event::Entity::find().count(&conn).await?
    };
    let counters = stats::stats();
    println!(
        "events stored: {stored}; journaled {}, repeats dropped {}, applied {}",
        counters.journaled.load(Ordering::Relaxed),
        counters.repeats.load(Ordering::Relaxed),
        counters.applied.load(Ordering::Relaxed)
    );
    for server in servers {
        server.stop().await;
    }
    drop_schema(&options, schema.as_deref()).await
}

/// Drops the PostgreSQL schema [`open`] made (nothing to do on SQLite: the file is temporary).
pub(crate) async fn drop_schema(
    options: &BenchOptions,
    schema: Option<&str>,
) -> anyhow::Result<()> {
    if let (Some(url), Some(schema)) = (&options.database_url, schema) {
        // The instances' messageId windows on disk go with the schema: none will take them back.
        let in_schema = db::connect(url, Some(schema)).await?;
        crate::ingest::window::shared::remove_stopped_windows(&in_schema).await?;
        in_schema.close().await?;
        let admin_conn = db::connect(url, None).await?;
        sea_orm::ConnectionTrait::execute_unprepared(
            &admin_conn,
            &format!("DROP SCHEMA {schema} CASCADE"),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_bytes_are_the_generated_batch() {
        for seq in [0u64, 1, 20, 50, 100] {
            let mut text: Value = serde_json::from_slice(&batch_bytes(seq)).expect("json");
            let mut value = batch_body(seq);
            // Times and message ids differ between two generations.
            for v in [&mut text, &mut value] {
                v["sentAt"] = Value::Null;
                for e in v["events"].as_array_mut().expect("events") {
                    e["timestamp"] = Value::Null;
                    e["messageId"] = Value::Null;
                }
            }
            assert_eq!(text, value, "batch {seq}");
        }
    }
}
