//! The processor: claims pending runs (a lease on the row, so one instance works on a run at a
//! time and a stopped instance's runs are picked up again), checks the audience and the
//! destinations, builds the message (the automation's agent when it has one, else a template),
//! and delivers it through the notifier to every enabled destination.
//!
//! Statuses walked: `PENDING` -> `RUNNING_PROCESSOR` -> `READY_FOR_DELIVERY` -> `DELIVERED`,
//! `PARTIAL_FAILURE` or `FAILED`, or `PENDING_DELIVERY` while the notifier still retries in the
//! background (settled by [`super::runs::settle_deliveries`]). `SKIPPED` with a reason when the
//! subject is outside the audience, a digest is empty, or no destination is enabled; `FAILED`
//! when the processor failed three times.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use chrono::Utc;
use entity::{
    automation,
    automation_run::{self, AutomationRunStatus},
    customer, destination, user,
};
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::{
    config, digest,
    evaluate::Identities,
    runs::{self, Transition},
};
use crate::{
    agents::{AgentRuntime, AutomationRunInput},
    engine::automations::{self, AutomationView},
    notify::delivery::{record_attempts_of, Outbox},
    state::AppState,
    tools::{get_customer, ToolContext},
};

/// How long a claimed run is an instance's (an agent run takes up to 60 s and deliveries up to
/// four attempts with their time-outs).
const LEASE_SECS: i64 = 180;
/// Runs processed at once per instance: four batches. (One batch was chosen while the
/// acknowledging writer shared the processor's write lock on SQLite; with the journal in its
/// own file one batch in flight no longer kept up with 500 runs/s, each batch's transactions
/// waiting on the applier's; docs/performance.md.)
const IN_FLIGHT: usize = 512;
/// Runs claimed and written together.
const BATCH: usize = 128;
/// How often an idle processor looks for runs other instances created.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// How often runs waiting on background retries are settled.
const SETTLE_EVERY: Duration = Duration::from_secs(1);
/// How often old signal hits are removed.
const SWEEP_EVERY: Duration = Duration::from_secs(600);
/// While ingest is saturated the processor claims [`SATURATED_BATCH`] runs per this interval
/// (it gives the cores to acknowledgements, and still makes progress; docs/decisions.md).
const SATURATED_CLAIM_EVERY: Duration = Duration::from_secs(1);
/// Runs claimed per [`SATURATED_CLAIM_EVERY`] while ingest is saturated: a trickle. Batches of
/// 128, with saturation flapping off between them, took 10-25% of a saturated peak's
/// acknowledgements on a large database (docs/performance.md).
const SATURATED_BATCH: usize = 16;
/// ... unless the runs it claims have waited this long: then it works at full speed whatever
/// ingest does, so a sustained overload delays deliveries by a bounded time.
const MOST_GIVING_WAY: chrono::Duration = chrono::Duration::seconds(30);
/// Processor failures after which a run is `FAILED`.
const MAX_ATTEMPTS: i32 = 3;

/// Set by `bench automations` to measure evaluation alone: processors in this process claim
/// nothing while it is set (runs wait, nothing is lost).
static PAUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Pauses or resumes every processor of this process (benchmarks only).
pub fn set_paused(paused: bool) {
    PAUSED.store(paused, std::sync::atomic::Ordering::Relaxed);
}

/// Claims runs in one write transaction (the claim and the automations' last-run status), after
/// a read that finds some due: an idle processor polls without taking SQLite's write lock.
async fn claim(
    db: &DatabaseConnection,
    limit: u64,
) -> Result<Vec<automation_run::Model>, sea_orm::DbErr> {
    if !runs::any_due(db).await? {
        return Ok(Vec::new());
    }
    let txn = crate::db::begin_write(db).await?;
    let claimed = runs::claim(&txn, limit, chrono::Duration::seconds(LEASE_SECS)).await?;
    txn.commit().await?;
    Ok(claimed)
}

/// Runs the processor until the task is aborted.
pub fn spawn(state: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let permits = Arc::new(Semaphore::new(IN_FLIGHT));
        let mut last_settle = tokio::time::Instant::now();
        let mut last_sweep = tokio::time::Instant::now();
        let mut failures = 0u32;
        let shares_write_lock = crate::ingest::journal::Journal::of(&state.db)
            .await
            .is_ok_and(|journal| journal.shares_write_lock());
        let mut ingest_load = crate::ingest::stats::WriterLoad::new(shares_write_lock);
        let mut last_claim = tokio::time::Instant::now() - SATURATED_CLAIM_EVERY;
        // Whether the oldest run of the latest claim had waited longer than MOST_GIVING_WAY.
        let mut behind = false;
        loop {
            let woken = runs::new_runs().notified();
            if last_sweep.elapsed() >= SWEEP_EVERY {
                last_sweep = tokio::time::Instant::now();
                let db = state.db.clone();
                tokio::spawn(async move {
                    if let Err(e) = super::retention::sweep(&db).await {
                        tracing::warn!(error = %e, "removing old signal hits failed");
                    }
                });
            }
            if last_settle.elapsed() >= SETTLE_EVERY {
                last_settle = tokio::time::Instant::now();
                if let Err(e) = runs::settle_deliveries(&state.db).await {
                    tracing::warn!(error = %e, "settling automation runs' deliveries failed");
                }
            }
            let free = permits.available_permits();
            let saturated = !behind && ingest_load.saturated();
            let giving_way = saturated && last_claim.elapsed() < SATURATED_CLAIM_EVERY;
            let limit = if saturated { SATURATED_BATCH } else { BATCH };
            let claimed =
                if free == 0 || giving_way || PAUSED.load(std::sync::atomic::Ordering::Relaxed) {
                    Ok(Vec::new())
                } else {
                    claim(&state.db, free.min(limit) as u64).await
                };
            match claimed {
                Ok(batch) if !batch.is_empty() => {
                    failures = 0;
                    last_claim = tokio::time::Instant::now();
                    // Claims take the oldest due runs first.
                    behind = batch
                        .iter()
                        .map(|r| r.triggered_at)
                        .min()
                        .is_some_and(|t| Utc::now() - t > MOST_GIVING_WAY);
                    let Ok(permit) = permits.clone().acquire_many_owned(batch.len() as u32).await
                    else {
                        return;
                    };
                    let state = state.clone();
                    tokio::spawn(async move {
                        process_batch(&state, batch).await;
                        drop(permit);
                    });
                    continue;
                }
                Ok(_) => failures = 0,
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, failures, "claiming automation runs failed");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(failures.min(25))))
                        .await;
                }
            }
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep(IDLE_POLL) => {}
            }
        }
    })
}

/// A run whose processing failed goes back to `PENDING` (with a pause) or, the third time,
/// `FAILED`.
async fn fail(state: &AppState, run: &automation_run::Model, e: anyhow::Error) {
    tracing::warn!(run = %run.id, error = %e, attempts = run.processor_attempts, "automation run failed");
    let outcome = if run.processor_attempts >= MAX_ATTEMPTS {
        runs::transition(
            &state.db,
            run,
            AutomationRunStatus::Failed,
            Transition {
                warnings: Some(vec![format!(
                    "the processor failed {} times; last error: {e}",
                    run.processor_attempts
                )]),
                finished: true,
                ..Default::default()
            },
        )
        .await
    } else {
        retry_later(&state.db, run).await
    };
    if let Err(e) = outcome {
        tracing::warn!(run = %run.id, error = %e, "could not record the run's failure; its lease will lapse");
    }
}

async fn retry_later(
    db: &DatabaseConnection,
    run: &automation_run::Model,
) -> Result<(), sea_orm::DbErr> {
    use sea_orm::sea_query::Expr;
    let pause = chrono::Duration::seconds(2i64.pow(run.processor_attempts.clamp(0, 6) as u32));
    // One transaction with the automation's last-run fields (see `runs::transition`).
    let txn = crate::db::begin_write(db).await?;
    automation_run::Entity::update_many()
        .col_expr(
            automation_run::Column::Status,
            Expr::value(AutomationRunStatus::Pending),
        )
        .col_expr(
            automation_run::Column::LeaseUntil,
            Expr::value(Some(Utc::now() + pause)),
        )
        .filter(automation_run::Column::Id.eq(&run.id))
        .exec(&txn)
        .await?;
    runs::follow_newest(
        &txn,
        &run.automation_id,
        run.triggered_at,
        AutomationRunStatus::Pending,
    )
    .await?;
    txn.commit().await
}

/// What a run is about, loaded for the audience check and the payload.
pub struct SubjectRecords {
    pub user: Option<user::Model>,
    pub customer: Option<customer::Model>,
}

/// The user id a subject names (a visitor is no stored user) and its customer id, if given.
fn subject_ids(subject: &Value) -> (Option<&str>, Option<&str>) {
    let id = subject.get("id").and_then(Value::as_str).unwrap_or("");
    let user = match subject.get("grain").and_then(Value::as_str) {
        Some("user") if !id.starts_with("visitor:") => Some(id),
        _ => None,
    };
    (user, subject.get("customerId").and_then(Value::as_str))
}

/// The users and customers some runs' subjects name, loaded together.
async fn load_subjects<'a>(
    db: &DatabaseConnection,
    subjects: impl Iterator<Item = &'a Value> + Clone,
) -> Result<Identities, sea_orm::DbErr> {
    Identities::of(
        db,
        subjects.clone().filter_map(|s| subject_ids(s).0),
        subjects.filter_map(|s| subject_ids(s).1),
    )
    .await
}

/// The subject's user and customer among those loaded, if they are the organization's.
fn records_of(loaded: &Identities, org: &str, subject: &Value) -> SubjectRecords {
    let (user_id, customer_id) = subject_ids(subject);
    let user = user_id
        .and_then(|id| loaded.users.get(id))
        .filter(|u| u.organization_id == org)
        .cloned();
    let customer = customer_id
        .or_else(|| user.as_ref().and_then(|u| u.customer_id.as_deref()))
        .and_then(|id| loaded.customers.get(id))
        .filter(|c| c.organization_id == org)
        .cloned();
    SubjectRecords { user, customer }
}

pub async fn subject_records(
    db: &DatabaseConnection,
    org: &str,
    subject: &Value,
) -> Result<SubjectRecords, sea_orm::DbErr> {
    let loaded = load_subjects(db, std::iter::once(subject)).await?;
    Ok(records_of(&loaded, org, subject))
}

/// The customer as `svc_get_customer` shows it with users, revenue and facts; null without one.
pub async fn customer_context(state: &AppState, org: &str, customer_id: Option<&str>) -> Value {
    let Some(id) = customer_id else {
        return Value::Null;
    };
    let ctx = ToolContext::new(state.clone(), org.to_string());
    let input = get_customer::Input {
        customer: id.to_string(),
        include: Some(vec![
            get_customer::Section::Users,
            get_customer::Section::Revenue,
            get_customer::Section::Facts,
        ]),
        timeframe: None,
    };
    get_customer::run(&ctx, input).await.unwrap_or(Value::Null)
}

/// The template message of a run (used without an agent, or when the agent gives none).
pub fn template(
    automation: &automation::Model,
    run: &automation_run::Model,
    customer: &Value,
    digest: Option<&[Value]>,
) -> (String, String) {
    let signal_names: Vec<&str> = run
        .signals
        .as_array()
        .map(|s| s.iter().filter_map(|x| x.get("name")?.as_str()).collect())
        .unwrap_or_default();
    if let Some(subjects) = digest {
        let title = format!("{}: {} subject(s)", automation.name, subjects.len());
        let mut lines = vec![format!(
            "{} subject(s) in the audience of \"{}\":",
            subjects.len(),
            automation.name
        )];
        for s in subjects.iter().take(50) {
            let name = s.get("name").and_then(Value::as_str);
            let key = s.get("key").and_then(Value::as_str).unwrap_or("");
            lines.push(match name {
                Some(n) if n != key => format!("- {n} ({key})"),
                _ => format!("- {key}"),
            });
        }
        if subjects.len() > 50 {
            lines.push(format!("... and {} more", subjects.len() - 50));
        }
        return (title, lines.join("\n"));
    }
    let subject = run.subject.clone().unwrap_or(Value::Null);
    let key = subject.get("key").and_then(Value::as_str).unwrap_or("");
    let label = match subject.get("name").and_then(Value::as_str) {
        Some(n) if n != key => format!("{n} ({key})"),
        _ => key.to_string(),
    };
    let title = format!("{}: {label}", automation.name);
    let mut message = format!(
        "{} for {} {label}",
        if signal_names.is_empty() {
            "Signal occurred".to_string()
        } else {
            signal_names.join(", ")
        },
        subject
            .get("grain")
            .and_then(Value::as_str)
            .unwrap_or("subject"),
    );
    if let Some(name) = customer.get("name").and_then(Value::as_str) {
        let billing = customer
            .get("billingStatus")
            .and_then(Value::as_str)
            .unwrap_or(customer::BillingStatus::None.as_str());
        let mrr = customer
            .get("mrrCents")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        message.push_str(&format!(
            ". Customer {name}: {billing}, MRR {}.{:02}",
            mrr / 100,
            mrr % 100
        ));
    }
    let events = run.events.as_array().map_or(0, Vec::len);
    if events > 0 {
        message.push_str(&format!(". {events} matching event(s)"));
    }
    (title, message)
}

/// What a run of a batch comes to before anything is written.
enum Prepared {
    Skip(String),
    Deliver {
        title: String,
        message: String,
        warnings: Vec<String>,
        body: Value,
        destinations: Vec<destination::Model>,
    },
}

/// Processes claimed runs. Runs with an agent and digests go one by one (an agent run takes
/// seconds, so the others do not wait for it); the others as one batch. Either way runs are
/// prepared concurrently and written in two transactions: their messages and delivery rows
/// before sending, the attempts' results and final statuses after.
pub async fn process_batch(state: &AppState, batch: Vec<automation_run::Model>) {
    let db = &state.db;
    let mut ids: Vec<String> = batch.iter().map(|r| r.automation_id.clone()).collect();
    ids.sort();
    ids.dedup();
    let views: HashMap<String, AutomationView> = match automations::views_by_ids(db, ids).await {
        Ok(v) => v
            .into_iter()
            .map(|v| (v.automation.id.clone(), v))
            .collect(),
        Err(e) => {
            let e = anyhow::anyhow!("loading the automations: {e}");
            for run in &batch {
                fail(state, run, anyhow::anyhow!("{e}")).await;
            }
            return;
        }
    };
    let (alone, together): (Vec<_>, Vec<_>) = batch.into_iter().partition(|r| {
        r.subject.is_none()
            || views
                .get(&r.automation_id)
                .is_none_or(|v| v.automation.agent_id.is_some())
    });
    let singles = alone
        .into_iter()
        .map(|run| process_together(state, &views, vec![run]));
    let grouped = process_together(state, &views, together);
    futures::future::join(futures::future::join_all(singles), grouped).await;
}

async fn process_together(
    state: &AppState,
    views: &HashMap<String, AutomationView>,
    runs: Vec<automation_run::Model>,
) {
    if runs.is_empty() {
        return;
    }
    // Where a batch's time goes, for `RUST_LOG=custintel::engine=debug`.
    let started = std::time::Instant::now();
    let count = runs.len();
    let customers: Mutex<HashMap<String, Value>> = Mutex::new(HashMap::new());
    // The batch's users, customers and audiences, read once for all its runs.
    let subjects =
        match load_subjects(&state.db, runs.iter().filter_map(|r| r.subject.as_ref())).await {
            Ok(loaded) => loaded,
            Err(e) => {
                for run in &runs {
                    fail(state, run, anyhow::anyhow!("loading the subjects: {e}")).await;
                }
                return;
            }
        };
    // Only the automations of these runs (a run processed alone comes here by itself).
    let audiences: HashMap<&str, Option<config::Audience>> = runs
        .iter()
        .filter_map(|r| views.get_key_value(&r.automation_id))
        .map(|(id, v)| {
            let audience = config::parse_audience(&v.automation.audience_filter_json).ok();
            (id.as_str(), audience)
        })
        .collect();
    let batch = Batch {
        subjects: &subjects,
        audiences: &audiences,
        customers: &customers,
    };
    let prepared = futures::future::join_all(runs.iter().map(|run| async {
        let view = views
            .get(&run.automation_id)
            .ok_or_else(|| anyhow::anyhow!("the automation was deleted"))?;
        prepare(state, view, run, &batch).await
    }))
    .await;
    let mut work = Vec::new();
    for (run, prep) in runs.into_iter().zip(prepared) {
        match prep {
            Ok(p) => work.push((run, p)),
            // Fails alone, with its own retries.
            Err(e) => fail(state, &run, e).await,
        }
    }
    // 1. Messages, skips and delivery rows, in one transaction of a few statements.
    // Each delivery's run, in the order the outbox sends them.
    let mut sends: Vec<&str> = Vec::new();
    let mut moves = Vec::with_capacity(work.len());
    let mut outbox = Outbox::default();
    for (run, prep) in &work {
        match prep {
            Prepared::Skip(reason) => {
                let change = Transition {
                    skip_reason: Some(reason.clone()),
                    finished: true,
                    ..Default::default()
                };
                moves.push((run, AutomationRunStatus::Skipped, change));
            }
            Prepared::Deliver {
                title,
                message,
                warnings,
                body,
                destinations,
            } => {
                let change = Transition {
                    title: Some(title.clone()),
                    message: Some(message.clone()),
                    warnings: Some(warnings.clone()),
                    keep_lease: true,
                    ..Default::default()
                };
                moves.push((run, AutomationRunStatus::ReadyForDelivery, change));
                for dest in destinations {
                    outbox.add(&run.organization_id, dest, body, Some(&run.id));
                    sends.push(&run.id);
                }
            }
        }
    }
    let moved: Vec<(&automation_run::Model, AutomationRunStatus)> =
        moves.iter().map(|(run, to, _)| (*run, *to)).collect();
    let prepared_at = started.elapsed();
    let written: Result<(), sea_orm::DbErr> = async {
        let txn = crate::db::begin_write(&state.db).await?;
        runs::transition_runs(&txn, moves).await?;
        outbox.record(&txn).await?;
        runs::follow_newest_of(&txn, &moved).await?;
        txn.commit().await
    }
    .await;
    if let Err(e) = written {
        tracing::warn!(error = %e, "writing a batch of runs failed; each is retried");
        for (run, _) in work {
            if let Err(e) = retry_later(&state.db, &run).await {
                tracing::warn!(run = %run.id, error = %e, "could not put the run back");
            }
        }
        return;
    }
    let written_at = started.elapsed();
    // 2. Every delivery at once.
    let attempted = outbox.send(&state.secrets).await;
    let sent_at = started.elapsed();
    // 3. Results and final statuses, in one transaction of a few statements.
    let mut moves = Vec::new();
    for (run, prep) in &work {
        if !matches!(prep, Prepared::Deliver { .. }) {
            continue;
        }
        let statuses: Vec<_> = sends
            .iter()
            .zip(&attempted)
            .filter(|(run_id, _)| **run_id == run.id)
            .map(|(_, done)| done.status)
            .collect();
        let (to, finished) = match runs::settled_status(&statuses) {
            Some(s) => (s, true),
            None => (AutomationRunStatus::PendingDelivery, false),
        };
        let change = Transition {
            finished,
            ..Default::default()
        };
        moves.push((run, to, change));
    }
    let moved: Vec<(&automation_run::Model, AutomationRunStatus)> =
        moves.iter().map(|(run, to, _)| (*run, *to)).collect();
    let finished: Result<(), sea_orm::DbErr> = async {
        let txn = crate::db::begin_write(&state.db).await?;
        record_attempts_of(&txn, &attempted).await?;
        runs::transition_runs(&txn, moves).await?;
        runs::follow_newest_of(&txn, &moved).await?;
        txn.commit().await
    }
    .await;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    tracing::debug!(
        runs = count,
        prepare_ms = ms(prepared_at),
        write_ms = ms(written_at - prepared_at),
        send_ms = ms(sent_at - written_at),
        record_ms = ms(started.elapsed() - sent_at),
        "batch of runs processed"
    );
    if let Err(e) = finished {
        // The deliveries were made; their rows stay leased until the lease lapses, then the
        // worker and the settling of runs finish them.
        tracing::warn!(error = %e, "recording a batch's deliveries failed");
    }
}

/// How long a customer's context built for one run serves later runs about the same customer
/// (a burst of runs about one account reads it once).
const CUSTOMER_CONTEXT_TTL: Duration = Duration::from_secs(2);

/// A customer's context, shared by the runs of a batch and, for [`CUSTOMER_CONTEXT_TTL`], by
/// later batches of this instance.
async fn shared_customer_context(
    state: &AppState,
    org: &str,
    customer_id: Option<String>,
    batch: &Mutex<HashMap<String, Value>>,
) -> Value {
    type Recent = Mutex<HashMap<(String, String), (tokio::time::Instant, Value)>>;
    static RECENT: OnceLock<Recent> = OnceLock::new();
    let Some(id) = customer_id else {
        return Value::Null;
    };
    let key = (org.to_string(), id.clone());
    let recent = RECENT.get_or_init(Default::default);
    if let Some(hit) = batch.lock().ok().and_then(|m| m.get(&id).cloned()) {
        return hit;
    }
    let fresh = recent.lock().ok().and_then(|m| {
        m.get(&key)
            .filter(|(at, _)| at.elapsed() < CUSTOMER_CONTEXT_TTL)
            .map(|(_, v)| v.clone())
    });
    let value = match fresh {
        Some(v) => v,
        None => {
            let v = customer_context(state, org, Some(&id)).await;
            if let Ok(mut m) = recent.lock() {
                if m.len() > 10_000 {
                    m.retain(|_, (at, _)| at.elapsed() < CUSTOMER_CONTEXT_TTL);
                }
                m.insert(key, (tokio::time::Instant::now(), v.clone()));
            }
            v
        }
    };
    if let Ok(mut m) = batch.lock() {
        m.insert(id, value.clone());
    }
    value
}

/// What the runs of a batch share, read once.
struct Batch<'a> {
    subjects: &'a Identities,
    audiences: &'a HashMap<&'a str, Option<config::Audience>>,
    customers: &'a Mutex<HashMap<String, Value>>,
}

/// What a run comes to: skipped (audience, empty digest, no destination), or its message (the
/// agent's when the automation has one and it answers, else the template) and body.
async fn prepare(
    state: &AppState,
    view: &AutomationView,
    run: &automation_run::Model,
    batch: &Batch<'_>,
) -> anyhow::Result<Prepared> {
    let db = &state.db;
    let org = run.organization_id.as_str();
    let automation = &view.automation;
    let customers = batch.customers;
    let (customer, digest_subjects) = match &run.subject {
        Some(subject) => {
            let records = records_of(batch.subjects, org, subject);
            let audience = batch
                .audiences
                .get(automation.id.as_str())
                .and_then(Option::as_ref)
                .ok_or_else(|| {
                    anyhow::anyhow!("the automation's audienceFilterJson does not fit")
                })?;
            if let Err(reason) =
                audience.admits(records.customer.as_ref(), records.user.as_ref(), Utc::now())
            {
                return Ok(Prepared::Skip(format!(
                    "the subject is outside the audience: {reason}"
                )));
            }
            let customer_id = records.customer.as_ref().map(|c| c.id.clone());
            (
                shared_customer_context(state, org, customer_id, customers).await,
                None,
            )
        }
        None => {
            let subjects = digest::subjects(db, view, run).await?;
            if subjects.is_empty() {
                return Ok(Prepared::Skip(
                    "the digest is empty: no subject of the audience qualified".to_string(),
                ));
            }
            (Value::Null, Some(subjects))
        }
    };
    let destinations = enabled_destinations(view);
    if destinations.is_empty() {
        return Ok(Prepared::Skip(
            "the automation has no enabled destination".to_string(),
        ));
    }
    let (title, template_message) =
        template(automation, run, &customer, digest_subjects.as_deref());
    let subjects = |s: &Option<Vec<Value>>| s.clone().map(|s| ("subjects", Value::Array(s)));
    let mut warnings = Vec::new();
    let mut message = None;
    if let Some(agent_id) = &automation.agent_id {
        let context = runs::payload(
            automation,
            run,
            AutomationRunStatus::RunningProcessor,
            customer.clone(),
            subjects(&digest_subjects),
            &title,
            &template_message,
            None,
        );
        let input = AutomationRunInput {
            organization_id: uuid::Uuid::parse_str(org)?,
            agent_id: uuid::Uuid::parse_str(agent_id)?,
            automation_run_id: uuid::Uuid::parse_str(&run.id)?,
            context,
            destination_ids: destinations
                .iter()
                .filter_map(|d| uuid::Uuid::parse_str(&d.id).ok())
                .collect(),
        };
        let outcome =
            crate::agents::run_for_automation(&AgentRuntime::new(state.clone()), input).await;
        warnings = outcome.warnings;
        message = outcome.message;
    }
    let message = message.unwrap_or(template_message);
    let body = runs::payload(
        automation,
        run,
        AutomationRunStatus::ReadyForDelivery,
        customer,
        subjects(&digest_subjects),
        &title,
        &message,
        None,
    );
    Ok(Prepared::Deliver {
        title,
        message,
        warnings,
        body,
        destinations,
    })
}

fn enabled_destinations(view: &AutomationView) -> Vec<destination::Model> {
    view.destinations
        .iter()
        .filter(|d| d.enabled && d.archived_at.is_none())
        .cloned()
        .collect()
}

/// The payload a run would send, for the dry run.
pub fn sample_payload(
    automation: &automation::Model,
    run: &automation_run::Model,
    customer: Value,
) -> (String, String, Value) {
    let (title, message) = template(automation, run, &customer, None);
    let body = runs::payload(
        automation, run, run.status, customer, None, &title, &message, None,
    );
    (title, message, json!(body))
}
