//! `custintel bench ingest`: the Ingest API's throughput, latency and memory, measured
//! in-process over loopback on a temporary SQLite database, next to the storage ceiling (the
//! same batches written straight into the same kind of database, same durability, no HTTP).

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
    admin::{self, NewOrganization, Plan},
    api::AppState,
    crypto::SecretBox,
    db,
    ingest::{validate, writer},
};

/// Options of a run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Length of the peak-load phase (the half-load phase runs as long).
    pub seconds: u64,
    /// Requests in flight during the peak-load phase.
    pub concurrency: usize,
}

/// Visitors the generated traffic comes from.
const VISITORS: usize = 1_000;
/// Batches per transaction when measuring the storage ceiling.
const CEILING_GROUP: usize = 50;

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
            40 if seq % 20 == 0 => json!({"type": "stage", "stage": "activated"}),
            41 if seq % 50 == 0 => json!({"type": "billing", "status": "paid",
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 10.0).round() / 10.0
}

struct LoadResult {
    events_per_sec: f64,
    requests: u64,
    failures: u64,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

/// Temporary SQLite database, migrated, with the service's connection settings.
async fn temp_db(dir: &std::path::Path, name: &str) -> anyhow::Result<sea_orm::DatabaseConnection> {
    let url = format!("sqlite://{}/{name}?mode=rwc", dir.display());
    let conn = db::connect(&url, None).await?;
    db::migrate(&conn).await?;
    Ok(conn)
}

async fn create_org(
    conn: &sea_orm::DatabaseConnection,
) -> anyhow::Result<admin::CreatedOrganization> {
    Ok(admin::create_org(
        conn,
        NewOrganization {
            name: "Bench".into(),
            plan: Plan::Enterprise,
            api_call_limit: None,
            connection_limit: None,
            // The benchmark measures the pipeline, not the limiter.
            ingest_rate_limit: Some(1_000_000),
            tracking_domains: vec![],
        },
    )
    .await?)
}

/// Writes the same batches straight through the writer's transaction code.
async fn storage_ceiling(dir: &std::path::Path, seconds: u64) -> anyhow::Result<f64> {
    let conn = temp_db(dir, "ceiling.db").await?;
    let org = create_org(&conn).await?;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut writing = Duration::ZERO;
    let mut seq = 10_000_000u64;
    let mut events = 0usize;
    while Instant::now() < deadline {
        let mut batches = Vec::with_capacity(CEILING_GROUP);
        for _ in 0..CEILING_GROUP {
            seq += 1;
            let body = serde_json::to_vec(&batch_body(seq))?;
            let (batch, errors) = validate::validate_batch(&org.organization_id, &body, Utc::now())
                .map_err(|e| anyhow::anyhow!(e.0))?;
            anyhow::ensure!(errors.is_empty(), "generated events refused: {errors:?}");
            batches.push(batch);
        }
        let refs: Vec<&validate::Batch> = batches.iter().collect();
        // Only the writing is timed: generating and validating the batches is not storage.
        let t = Instant::now();
        let counts = writer::write_group(&conn, &refs).await?;
        writing += t.elapsed();
        events += counts.iter().sum::<usize>();
    }
    Ok(events as f64 / writing.as_secs_f64().max(1e-9))
}

/// Drives the endpoint: closed loop with `concurrency` clients, or open loop at `rate`
/// requests per second when given.
async fn drive(
    url: &str,
    seconds: u64,
    concurrency: usize,
    rate: Option<f64>,
    seq: Arc<AtomicU64>,
) -> LoadResult {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency * 2)
        .build()
        .unwrap_or_default();
    let latencies = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let accepted = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let one = |client: reqwest::Client,
               url: String,
               seq: Arc<AtomicU64>,
               latencies: Arc<Mutex<Vec<Duration>>>,
               accepted: Arc<AtomicU64>,
               failures: Arc<AtomicU64>,
               requests: Arc<AtomicU64>| async move {
        let n = seq.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::to_vec(&batch_body(n)).unwrap_or_default();
        let t = Instant::now();
        let result = client
            .post(&url)
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
    };
    let mut tasks = Vec::new();
    match rate {
        None => {
            for _ in 0..concurrency {
                let (client, url, seq, lat, acc, fail, req, stop) = (
                    client.clone(),
                    url.to_string(),
                    seq.clone(),
                    latencies.clone(),
                    accepted.clone(),
                    failures.clone(),
                    requests.clone(),
                    stop.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                        one(
                            client.clone(),
                            url.clone(),
                            seq.clone(),
                            lat.clone(),
                            acc.clone(),
                            fail.clone(),
                            req.clone(),
                        )
                        .await;
                    }
                }));
            }
        }
        Some(per_sec) => {
            let interval = Duration::from_secs_f64(1.0 / per_sec.max(1.0));
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while Instant::now() < deadline {
                ticker.tick().await;
                tasks.push(tokio::spawn(one(
                    client.clone(),
                    url.to_string(),
                    seq.clone(),
                    latencies.clone(),
                    accepted.clone(),
                    failures.clone(),
                    requests.clone(),
                )));
            }
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    stop.store(true, Ordering::Relaxed);
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
    }
}

/// Runs the benchmark and prints its figures.
pub async fn run(options: BenchOptions) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let conn = temp_db(dir.path(), "bench.db").await?;
    let org = create_org(&conn).await?;
    let state = AppState {
        db: conn.clone(),
        secrets: SecretBox::from_key(&[0u8; 32]),
        public_url: "http://127.0.0.1".into(),
        integrations: Default::default(),
        search: crate::search::SearchIndex::new(conn.clone())?,
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _ = crate::server::serve(state, "127.0.0.1:0", move |addr| {
            let _ = tx.send(addr);
        })
        .await;
    });
    let addr = rx.await?;
    let url = format!("http://{addr}/api/i/v1/{}/events", org.public_key);

    // Memory over time, sampled once a second for the whole run.
    // Total RSS includes the SQLite file pages mapped by `mmap_size` (page cache, shared with
    // the OS); anonymous RSS is the process's own memory, the figure that must stay flat.
    let samples = Arc::new(Mutex::new(Vec::<(u64, u64, u64)>::new()));
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
                    ));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    println!(
        "custintel bench ingest: SQLite (WAL, synchronous=NORMAL), batches of 100 mixed events, {} s per phase, concurrency {}",
        options.seconds, options.concurrency
    );
    let ceiling_secs = options.seconds.clamp(3, 10);
    let ceiling = storage_ceiling(dir.path(), ceiling_secs).await?;
    println!("storage ceiling (same batches, writer's transactions of {CEILING_GROUP} batches, no HTTP): {ceiling:.0} events/s");

    let seq = Arc::new(AtomicU64::new(0));
    // Warm-up: connections, caches, the writer task.
    let _ = drive(&url, 1, options.concurrency, None, seq.clone()).await;
    let peak = drive(
        &url,
        options.seconds,
        options.concurrency,
        None,
        seq.clone(),
    )
    .await;
    println!(
        "peak load: {:.0} events/s accepted ({:.0}% of the storage ceiling), {} requests, {} failed, latency p50 {} ms, p99 {} ms, max {} ms",
        peak.events_per_sec,
        100.0 * peak.events_per_sec / ceiling.max(1.0),
        peak.requests,
        peak.failures,
        ms(peak.p50),
        ms(peak.p99),
        ms(peak.max)
    );
    let half_rate = peak.events_per_sec / 2.0 / 100.0;
    let half = drive(
        &url,
        options.seconds,
        options.concurrency,
        Some(half_rate),
        seq.clone(),
    )
    .await;
    println!(
        "half load ({:.0} requests/s offered): {:.0} events/s accepted, {} failed, latency p50 {} ms, p99 {} ms, max {} ms",
        half_rate,
        half.events_per_sec,
        half.failures,
        ms(half.p50),
        ms(half.p99),
        ms(half.max)
    );
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    let samples = samples.lock().map(|s| s.clone()).unwrap_or_default();
    let series: Vec<String> = samples
        .iter()
        .map(|(t, total, anon)| format!("{t}s:{}/{}MiB", total / 1024, anon / 1024))
        .collect();
    println!("RSS over time (total/anonymous): {}", series.join(" "));
    let peak_anon = samples.iter().map(|(_, _, anon)| *anon).max().unwrap_or(0);
    println!("peak anonymous RSS: {} MiB", peak_anon / 1024);
    println!(
        "peak RSS (VmHWM, server and load generator in one process): {} MiB",
        rss_kib("VmHWM:") / 1024
    );
    let stored: i64 = {
        use sea_orm::{EntityTrait, PaginatorTrait};
        entity::event::Entity::find().count(&conn).await? as i64
    };
    println!("events stored by the HTTP phases: {stored}");
    Ok(())
}
