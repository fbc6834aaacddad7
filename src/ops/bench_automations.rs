//! `custintel bench automations`: the automation engine under ingest load, in-process over
//! loopback on a temporary SQLite database. Organizations each get active signals and enabled
//! automations delivering to a webhook receiver on 127.0.0.1; traffic has a share of events
//! that match. Figures: ingest's closed-loop peak with the automations disabled and enabled, and
//! at a steady offered rate the time from a matching event's acknowledgement (its `receivedAt`)
//! to the receiver getting the run's delivery.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use entity::{
    automation,
    automation_run::{self, AutomationRunStatus},
};
use poem::{handler, listener::TcpListener, web::Data, EndpointExt, Route, Server};
use sea_orm::{
    sea_query::Expr, ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection,
    EntityTrait, PaginatorTrait, QueryFilter,
};
use serde_json::json;

use crate::{
    crypto::SecretBox,
    engine::{
        automations::{link, AutomationContent},
        signals::SignalContent,
    },
    notify::destinations::DestinationContent,
    ops::bench_ingest::{self, BenchOptions, BodyFn},
};

/// Options of a run.
#[derive(Debug, Clone, clap::Args)]
pub struct AutomationsBenchArgs {
    /// Seconds of the steady phase at `--rate`.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Seconds of each closed-loop peak phase (without and with the automations).
    #[arg(long, default_value_t = 10)]
    pub peak_seconds: u64,
    /// Rounds of the three peak phases (disabled, evaluation alone, enabled), alternated so
    /// the tables' growth weighs on each kind alike; 0 measures the steady phase alone, on an
    /// empty database.
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// Organizations, each with its signals, automations and webhook destination.
    #[arg(long, default_value_t = 50)]
    pub orgs: usize,
    /// Active signals per organization.
    #[arg(long, default_value_t = 20)]
    pub signals: usize,
    /// Enabled automations per organization (each linked to signals in turn).
    #[arg(long, default_value_t = 10)]
    pub automations: usize,
    /// Events per second offered in the steady phase (batches of 100).
    #[arg(long, default_value_t = 10_000)]
    pub rate: u64,
    /// Matching events per batch of 100 (5 is 5%).
    #[arg(long, default_value_t = 5)]
    pub matching: u64,
    /// Measure on this PostgreSQL database (`postgres://...`, in a fresh schema dropped at
    /// the end) instead of a temporary SQLite file.
    #[arg(long)]
    pub postgres: Option<String>,
    /// Serving instances on the one database (PostgreSQL only).
    #[arg(long, default_value_t = 1)]
    pub instances: usize,
    /// Requests in flight at peak load.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
}

/// What the receiver saw: per delivery, milliseconds from the matching event's
/// acknowledgement to arrival.
#[derive(Clone, Default)]
struct Seen {
    latencies_ms: Arc<Mutex<Vec<f64>>>,
    deliveries: Arc<AtomicU64>,
}

#[handler]
async fn receive(body: String, seen: Data<&Seen>) -> &'static str {
    let arrived = Utc::now();
    seen.deliveries.fetch_add(1, Ordering::Relaxed);
    // The first event's `receivedAt`, found without parsing the whole body (the receiver shares
    // the two cores with the service).
    let acknowledged = body
        .split_once(r#""receivedAt":""#)
        .and_then(|(_, rest)| rest.split_once('"'))
        .and_then(|(t, _)| DateTime::parse_from_rfc3339(t).ok());
    if let Some(at) = acknowledged {
        let ms = (arrived - at.with_timezone(&Utc))
            .num_microseconds()
            .unwrap_or(0) as f64
            / 1000.0;
        if let Ok(mut l) = seen.latencies_ms.lock() {
            l.push(ms);
        }
    }
    "ok"
}

async fn start_receiver(seen: Seen) -> anyhow::Result<String> {
    let acceptor =
        poem::listener::Listener::into_acceptor(TcpListener::bind("127.0.0.1:0")).await?;
    let addr = poem::listener::Acceptor::local_addr(&acceptor)
        .first()
        .and_then(|a| a.as_socket_addr().copied())
        .ok_or_else(|| anyhow::anyhow!("receiver address"))?;
    let app = Route::new().at("/*path", poem::post(receive)).data(seen);
    tokio::spawn(Server::new_with_acceptor(acceptor).run(app));
    Ok(format!("http://{addr}/hook"))
}

/// Signals, a webhook destination and automations of one organization (automations disabled).
async fn seed(
    db: &DatabaseConnection,
    secrets: &SecretBox,
    org: &str,
    receiver: &str,
    args: &AutomationsBenchArgs,
) -> anyhow::Result<()> {
    let now = Utc::now();
    let mut signal_ids = Vec::new();
    for k in 0..args.signals {
        let definition = json!({"grain": "user", "subjectResolver": "email",
            "eventNames": [format!("sig_{k}")],
            "propertyConditions": [{"property": "plan", "operator": "eq", "value": "pro"}],
            "conditionMode": "ALL"});
        let signal = SignalContent {
            kind: entity::signal::SignalKind::EventMatch,
            name: format!("Signal {k}"),
            description: None,
            definition,
        }
        .new_row(org, &format!("sig-{k}"), "UI", now)
        .insert(db)
        .await?;
        signal_ids.push(signal.id);
    }
    let (destination, _signing_secret) = DestinationContent {
        kind: entity::destination::DestinationKind::WebhookEndpoint,
        name: "Bench receiver".into(),
        description: None,
        enabled: Some(true),
        is_default: true,
        endpoint: receiver.to_string(),
    }
    .new_row(secrets, org, "bench-hook", "UI", now);
    let dest_id = destination.insert(db).await?.id;
    for a in 0..args.automations {
        let id = AutomationContent {
            name: format!("Automation {a}"),
            description: None,
            trigger_type: "SIGNAL_OCCURRENCE".into(),
            trigger_json: json!({ "dedupe": "hour" }),
            audience_filter_json: json!({}),
            agent_id: None,
            match_mode: "ANY".into(),
        }
        .new_row(org, &format!("auto-{a}"), "UI", now)
        .insert(db)
        .await?
        .id;
        // Signals are dealt to automations in turn, so every signal starts some automation.
        let dealt: Vec<String> = signal_ids
            .iter()
            .enumerate()
            .filter(|(k, _)| k % args.automations.max(1) == a)
            .map(|(_, sid)| sid.clone())
            .collect();
        link(db, &id, &dealt, std::slice::from_ref(&dest_id))
            .await
            .map_err(|e| anyhow::anyhow!("linking: {e}"))?;
    }
    Ok(())
}

/// Request `n`'s body: one user (new for every request, so runs are not deduplicated away; four
/// users to an account) of organization `n % orgs`, `matching` custom events that match a
/// signal, and page views.
fn body_fn(orgs: usize, signals: usize, matching: u64, phase: u64) -> BodyFn {
    Arc::new(move |n: u64| {
        use std::fmt::Write;
        let org = n as usize % orgs.max(1);
        let now = Utc::now().timestamp_millis();
        // A new user per request (so dedupe leaves the runs), in accounts of a few users each.
        let user = n / orgs.max(1) as u64;
        let email = format!("p{phase}u{user}@org{org}.example");
        let mut out = String::with_capacity(16_000);
        let _ = write!(
            out,
            r#"{{"source":"server","sentAt":{now},"userIdentity":{{"email":"{email}"}},"customerIdentity":{{"customerId":"acct_{org}_{phase}_{}"}},"events":["#,
            user / 4
        );
        for i in 0..100u64 {
            if i > 0 {
                out.push(',');
            }
            let message_id = uuid::Uuid::new_v4();
            if i >= 1 && i <= matching {
                let k = (n as usize * 7 + i as usize) % signals.max(1);
                let _ = write!(
                    out,
                    r#"{{"type":"custom","eventName":"sig_{k}","properties":{{"plan":"pro","step":{i}}},"url":"https://app.example.com/x","path":"/x","messageId":"{message_id}"}}"#
                );
            } else {
                let _ = write!(
                    out,
                    r#"{{"type":"pageview","title":"Page","url":"https://app.example.com/page/{p}","path":"/page/{p}","messageId":"{message_id}"}}"#,
                    p = i % 7
                );
            }
        }
        out.push_str("]}");
        out.into_bytes()
    })
}

async fn set_enabled(db: &DatabaseConnection, enabled: bool) -> anyhow::Result<()> {
    automation::Entity::update_many()
        .col_expr(automation::Column::Enabled, Expr::value(enabled))
        .col_expr(
            automation::Column::EnabledAt,
            Expr::value(enabled.then(Utc::now)),
        )
        .col_expr(automation::Column::UpdatedAt, Expr::value(Utc::now()))
        .exec(db)
        .await?;
    Ok(())
}

/// Waits (at most `limit`) until no run is waiting for the processor or its deliveries.
async fn runs_settled(db: &DatabaseConnection, limit: Duration) -> anyhow::Result<bool> {
    let t = Instant::now();
    while t.elapsed() < limit {
        let open = automation_run::Entity::find()
            .filter(automation_run::Column::Status.is_in([
                AutomationRunStatus::Pending,
                AutomationRunStatus::RunningProcessor,
                AutomationRunStatus::ReadyForDelivery,
                AutomationRunStatus::PendingDelivery,
            ]))
            .count(db)
            .await?;
        if open == 0 {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(false)
}

/// Per run of the steady phase (the runs after the first `skip`): milliseconds from the
/// matching event's acknowledgement to the run's creation, from creation to the processor's
/// claim, and from the claim to its final status; each sorted.
async fn stages(
    db: &DatabaseConnection,
    skip: u64,
) -> anyhow::Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    use sea_orm::QueryOrder;
    let rows = automation_run::Entity::find()
        .order_by_asc(automation_run::Column::TriggeredAt)
        .all(db)
        .await?;
    let ms = |d: chrono::Duration| d.num_microseconds().unwrap_or(0) as f64 / 1000.0;
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for r in rows.into_iter().skip(skip as usize) {
        let acked = r.events[0]["receivedAt"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc));
        if let (Some(acked), Some(started), Some(finished)) = (acked, r.started_at, r.finished_at) {
            a.push(ms(r.triggered_at - acked));
            b.push(ms(started - r.triggered_at));
            c.push(ms(finished - started));
        }
    }
    for v in [&mut a, &mut b, &mut c] {
        v.sort_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
    }
    Ok((a, b, c))
}

fn p(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[(((sorted.len() - 1) as f64) * q).round() as usize]
}

pub async fn run(args: AutomationsBenchArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let options = BenchOptions {
        seconds: args.seconds,
        concurrency: args.concurrency,
        database_url: args.postgres.clone(),
        instances: args.instances.max(1),
    };
    let (db, label, schema) = bench_ingest::open(&options, dir.path()).await?;
    let instances = if schema.is_some() {
        options.instances
    } else {
        1
    };
    // The instance's secrets box (bench_ingest starts instances with this key).
    let secrets = SecretBox::from_key(&[0u8; 32]);
    let seen = Seen::default();
    let receiver = start_receiver(seen.clone()).await?;
    let mut urls = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..instances {
        servers.push(bench_ingest::start_instance(&options, db.clone(), schema.as_deref()).await?);
    }
    for i in 0..args.orgs {
        let org = bench_ingest::create_org(&db, &format!("Bench {i}"), 1_000_000).await?;
        seed(&db, &secrets, &org.organization_id, &receiver, &args).await?;
        // An organization's traffic goes to one instance (its requests stay in order there).
        let addr = servers[i % servers.len()].addr;
        urls.push(format!("http://{addr}/api/i/v1/{}/events", org.public_key));
    }
    println!(
        "custintel bench automations: {label}, {instances} instance(s), {} organizations x {} active signals, {} automations (webhook to a receiver on 127.0.0.1, dedupe hour), {} of 100 events matching",
        args.orgs, args.signals, args.automations, args.matching
    );
    let seq = Arc::new(AtomicU64::new(0));

    // 1. Closed-loop peaks, in rounds of three phases: automations disabled (signals stored,
    // nothing enabled), enabled whole (runs processed and delivered beside the load), and
    // enabled with the processor paused (evaluation and runs made in the applier only). The
    // tables grow from phase to phase and that alone slows ingest, so the phases alternate and
    // each kind is summed over the rounds.
    let mut sums = [0.0f64; 3];
    let mut phase_no = 0u64;
    for round in 1..=args.rounds {
        for (kind, label) in [
            (0, "automations disabled"),
            (2, "automations enabled"),
            (1, "automations enabled, processor paused"),
        ] {
            set_enabled(&db, kind > 0).await?;
            // Every phase starts from a checkpointed database: working the previous phase's
            // runs leaves a large WAL whose checkpoint would otherwise slow the next phase.
            if schema.is_none() {
                db.execute_unprepared("PRAGMA wal_checkpoint(TRUNCATE)")
                    .await?;
            }
            crate::engine::processor::set_paused(kind == 1);
            let delivered_before = seen.deliveries.load(Ordering::Relaxed);
            phase_no += 1;
            let load = bench_ingest::drive(
                &urls,
                args.peak_seconds,
                args.concurrency,
                None,
                seq.clone(),
                body_fn(args.orgs, args.signals, args.matching, 10 + phase_no),
            )
            .await;
            crate::engine::processor::set_paused(false);
            bench_ingest::print_load(&format!("round {round}, peak, {label}"), &load);
            if kind == 2 {
                println!(
                    "  deliveries received during the peak: {}",
                    seen.deliveries.load(Ordering::Relaxed) - delivered_before
                );
            }
            sums[kind] += load.events_per_sec;
            bench_ingest::drain(&db).await?;
            if !runs_settled(&db, Duration::from_secs(300)).await? {
                println!("  runs not settled within 300 s");
            }
        }
    }
    if args.rounds > 0 {
        println!(
            "  peak with automations / without: {:.2} (target at least 0.90); evaluation alone (processor paused) / without: {:.2}",
            sums[2] / sums[0].max(1e-9),
            sums[1] / sums[0].max(1e-9)
        );
    }
    println!(
        "  runs made by the peaks: {}, all settled",
        automation_run::Entity::find().count(&db).await?
    );
    set_enabled(&db, true).await?;

    // 3. Steady offered load: acknowledgement to delivery.
    if let Ok(mut l) = seen.latencies_ms.lock() {
        l.clear();
    }
    let runs_before = automation_run::Entity::find().count(&db).await?;
    let delivered_before = seen.deliveries.load(Ordering::Relaxed);
    let steady = bench_ingest::drive(
        &urls,
        args.seconds,
        args.concurrency,
        Some(args.rate as f64 / 100.0),
        seq.clone(),
        body_fn(args.orgs, args.signals, args.matching, 3),
    )
    .await;
    bench_ingest::print_load(
        &format!("steady at {} events/s offered", args.rate),
        &steady,
    );
    bench_ingest::drain(&db).await?;
    let settled = runs_settled(&db, Duration::from_secs(120)).await?;
    let runs = automation_run::Entity::find().count(&db).await? - runs_before;
    let delivered = seen.deliveries.load(Ordering::Relaxed) - delivered_before;
    let mut lat = seen
        .latencies_ms
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    println!(
        "  runs made {runs} ({:.0}/s), deliveries received {delivered}, all settled: {settled}",
        runs as f64 / args.seconds.max(1) as f64
    );
    println!(
        "  acknowledgement -> destination: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (target p99 under 2000 ms)",
        p(&lat, 0.50),
        p(&lat, 0.99),
        lat.last().copied().unwrap_or(0.0)
    );
    let (evaluated, queued, processed) = stages(&db, runs_before).await?;
    println!(
        "  where the time goes (p50 / p99 ms): acknowledgement -> run made {:.0} / {:.0}, run made -> claimed {:.0} / {:.0}, claimed -> finished {:.0} / {:.0}",
        p(&evaluated, 0.5), p(&evaluated, 0.99), p(&queued, 0.5), p(&queued, 0.99), p(&processed, 0.5), p(&processed, 0.99)
    );
    let failed = automation_run::Entity::find()
        .filter(automation_run::Column::Status.is_in([
            AutomationRunStatus::Failed,
            AutomationRunStatus::PartialFailure,
        ]))
        .count(&db)
        .await?;
    println!("  failed runs over the whole benchmark: {failed}");
    for server in servers {
        server.stop().await;
    }
    bench_ingest::drop_schema(&options, schema.as_deref()).await
}
