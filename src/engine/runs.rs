//! Automation runs: created by evaluation (one per subject per dedupe bucket) or by a schedule
//! tick (one per tick), walked through the spec's statuses by the processor, and kept in step
//! with the automation's `lastRunAt`/`lastRunStatus` (which follow its newest run).

use chrono::{DateTime, Utc};
use entity::{
    automation,
    automation_run::{self, AutomationRunStatus},
    notification_delivery::{self, DeliveryStatus},
};
use sea_orm::{
    sea_query::{Expr, ExprTrait, Query},
    ActiveValue, ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, Set,
};
use serde_json::{json, Value};

use super::{config::SignalTrigger, contract::Grain};
use crate::ingest::store::EventRow as AppliedEvent;
use crate::timestamp;

/// Who an occurrence is about.
#[derive(Debug, Clone)]
pub struct Subject {
    pub grain: Grain,
    /// A user's or customer's id, or `visitor:{visitorId}`.
    pub id: String,
    pub key: String,
    pub name: Option<String>,
    pub customer_id: Option<String>,
}

impl Subject {
    pub fn to_json(&self) -> Value {
        json!({
            "grain": self.grain.as_str(),
            "id": self.id,
            "key": self.key,
            "name": self.name,
            "customerId": self.customer_id,
        })
    }
}

/// Where this process's processors wait for new runs (they also poll).
pub(super) fn new_runs() -> &'static tokio::sync::Notify {
    static NEW_RUNS: std::sync::OnceLock<tokio::sync::Notify> = std::sync::OnceLock::new();
    NEW_RUNS.get_or_init(tokio::sync::Notify::new)
}

/// Tells this process's processors that runs were created.
pub fn wake() {
    new_runs().notify_waiters();
}

/// A new run row (status `PENDING`).
pub fn new_run(
    automation: &automation::Model,
    dedupe_key: String,
    subject: Option<Value>,
    events: Vec<Value>,
    signals: Vec<Value>,
    triggered_at: DateTime<Utc>,
) -> automation_run::ActiveModel {
    automation_run::ActiveModel {
        // Time-ordered, so a run's row and index entries append instead of landing at random
        // places in the tables' B-trees (runs are made at ingest's pace).
        id: Set(crate::ids::time_ordered_id()),
        organization_id: Set(automation.organization_id.clone()),
        automation_id: Set(automation.id.clone()),
        dedupe_key: Set(dedupe_key),
        status: Set(AutomationRunStatus::Pending),
        triggered_at: Set(triggered_at),
        started_at: Set(None),
        finished_at: Set(None),
        config_hash: Set(automation.config_hash.clone()),
        subject: Set(subject),
        digest_since: Set(None),
        skip_reason: Set(None),
        title: Set(None),
        message: Set(None),
        warnings: Set(json!([])),
        events: Set(Value::Array(events)),
        signals: Set(Value::Array(signals)),
        processor_attempts: Set(0),
        lease_until: Set(None),
        updated_at: Set(triggered_at),
    }
}

/// A subject's run for the bucket the event falls in (`dedupe` `none`: one per event).
pub fn subject_run(
    automation: &automation::Model,
    trigger: &SignalTrigger,
    subject: &Subject,
    event: &AppliedEvent,
    signals: Vec<Value>,
) -> automation_run::ActiveModel {
    let bucket = trigger
        .dedupe
        .bucket(event.received_at)
        .unwrap_or_else(|| format!("event:{}", event.id));
    // The bucket first: within an automation the current bucket's keys are neighbours in the
    // unique index, so inserting them touches the same few pages.
    let key = format!("{bucket}:{}:{}", subject.grain.as_str(), subject.id);
    new_run(
        automation,
        key,
        Some(subject.to_json()),
        vec![event.record()],
        signals,
        Utc::now(),
    )
}

/// Inserts the runs whose (automation, dedupe key) is new, in multi-row statements, and moves
/// their automations' last-run fields; returns how many were inserted. Callers hold what makes
/// their keys theirs (the applier is the one evaluator at a time; a schedule tick is claimed
/// first); the unique index decides what is new, and `RETURNING` names what was inserted
/// (one statement per chunk instead of a look-up followed by the insert).
pub async fn insert_new<C: ConnectionTrait>(
    conn: &C,
    candidates: Vec<automation_run::ActiveModel>,
) -> Result<usize, DbErr> {
    // The values moved in, no query builder between: evaluation writes thousands of runs a
    // second at ingest's peak, inside the applier's transaction.
    const RUNS: crate::db::RowsInsert = crate::db::RowsInsert {
        into: "automation_runs (id, organization_id, automation_id, dedupe_key, status, \
               triggered_at, started_at, finished_at, config_hash, subject, digest_since, \
               skip_reason, title, message, warnings, events, signals, processor_attempts, \
               lease_until, updated_at)",
        width: 20,
        tail: "ON CONFLICT (automation_id, dedupe_key) DO NOTHING RETURNING id",
    };
    let json = |mut v: ActiveValue<Value>| sea_orm::Value::Json(v.take().map(Box::new));
    let mut seen = std::collections::HashSet::new();
    let mut made: std::collections::HashMap<String, (String, DateTime<Utc>)> = Default::default();
    let mut values = Vec::with_capacity(candidates.len() * 20);
    for mut r in candidates {
        let (Some(id), Some(automation_id), Some(dedupe_key), Some(triggered_at)) = (
            r.id.take(),
            r.automation_id.take(),
            r.dedupe_key.take(),
            r.triggered_at.take(),
        ) else {
            continue;
        };
        if !seen.insert((automation_id.clone(), dedupe_key.clone())) {
            continue;
        }
        made.insert(id.clone(), (automation_id.clone(), triggered_at));
        values.extend([
            id.into(),
            r.organization_id.take().into(),
            automation_id.into(),
            dedupe_key.into(),
            r.status
                .take()
                .unwrap_or(AutomationRunStatus::Pending)
                .as_str()
                .into(),
            triggered_at.into(),
            r.started_at.take().flatten().into(),
            r.finished_at.take().flatten().into(),
            r.config_hash.take().flatten().into(),
            sea_orm::Value::Json(r.subject.take().flatten().map(Box::new)),
            r.digest_since.take().flatten().into(),
            r.skip_reason.take().flatten().into(),
            r.title.take().flatten().into(),
            r.message.take().flatten().into(),
            json(r.warnings),
            json(r.events),
            json(r.signals),
            r.processor_attempts.take().unwrap_or(0).into(),
            r.lease_until.take().flatten().into(),
            r.updated_at.take().unwrap_or(triggered_at).into(),
        ]);
    }
    let mut inserted = 0;
    let mut newest: std::collections::HashMap<String, DateTime<Utc>> = Default::default();
    for id in RUNS.returning(conn, values).await? {
        let Some((automation_id, at)) = made.remove(&id) else {
            continue;
        };
        inserted += 1;
        let entry = newest.entry(automation_id).or_insert(at);
        *entry = std::cmp::max(*entry, at);
    }
    let moved: Vec<_> = newest
        .iter()
        .map(|(automation_id, at)| (automation_id.as_str(), *at, AutomationRunStatus::Pending))
        .collect();
    follow_newest_many(conn, &moved).await?;
    Ok(inserted)
}

/// Keeps the automation's `lastRunAt`/`lastRunStatus` on its newest run.
pub async fn follow_newest<C: ConnectionTrait>(
    conn: &C,
    automation_id: &str,
    triggered_at: DateTime<Utc>,
    run_status: AutomationRunStatus,
) -> Result<(), DbErr> {
    follow_newest_many(conn, &[(automation_id, triggered_at, run_status)]).await
}

/// What changes when a run moves on.
#[derive(Debug, Default)]
pub struct Transition {
    pub skip_reason: Option<String>,
    pub title: Option<String>,
    pub message: Option<String>,
    pub warnings: Option<Vec<String>>,
    pub finished: bool,
    /// Keep the processor's lease (the run is still being worked on).
    pub keep_lease: bool,
}

/// Moves a run to `to` and the automation's last-run fields with it.
pub async fn transition(
    db: &sea_orm::DatabaseConnection,
    run: &automation_run::Model,
    to: AutomationRunStatus,
    change: Transition,
) -> Result<(), DbErr> {
    // One transaction: a reader never sees the run moved and its automation not yet.
    let txn = crate::db::begin_write(db).await?;
    transition_run(&txn, run, to, change).await?;
    follow_newest(&txn, &run.automation_id, run.triggered_at, to).await?;
    txn.commit().await
}

/// Moves the runs' automations' last-run fields to the newest of `moved` (run, its new status).
pub async fn follow_newest_of<C: ConnectionTrait>(
    conn: &C,
    moved: &[(&automation_run::Model, AutomationRunStatus)],
) -> Result<(), DbErr> {
    let mut newest: std::collections::HashMap<&str, (DateTime<Utc>, AutomationRunStatus)> =
        Default::default();
    for &(run, to) in moved {
        let entry = newest
            .entry(run.automation_id.as_str())
            .or_insert((run.triggered_at, to));
        if run.triggered_at >= entry.0 {
            *entry = (run.triggered_at, to);
        }
    }
    let moved: Vec<_> = newest
        .into_iter()
        .map(|(automation_id, (at, to))| (automation_id, at, to))
        .collect();
    follow_newest_many(conn, &moved).await
}

/// Moves each automation's last-run fields to (its run's `triggered_at`, status) unless it
/// already shows a newer run, in one statement (an evaluation that makes runs of hundreds of
/// automations would otherwise send one UPDATE each, inside the applier's transaction).
async fn follow_newest_many<C: ConnectionTrait>(
    conn: &C,
    moved: &[(&str, DateTime<Utc>, AutomationRunStatus)],
) -> Result<(), DbErr> {
    const LAST_RUN: crate::db::RowsUpdate = crate::db::RowsUpdate {
        table: "automations",
        types: &["text", "timestamptz", "text"],
        set: "last_run_at = v.column2, last_run_status = v.column3",
        and_where: "automations.last_run_at IS NULL OR automations.last_run_at <= v.column2",
    };
    let rows = moved
        .iter()
        .map(|(automation_id, at, to)| {
            vec![(*automation_id).into(), (*at).into(), to.as_str().into()]
        })
        .collect();
    LAST_RUN.exec(conn, rows).await?;
    Ok(())
}

/// Moves a run to `to`, leaving the automation's last-run fields to the caller.
pub async fn transition_run<C: ConnectionTrait>(
    conn: &C,
    run: &automation_run::Model,
    to: AutomationRunStatus,
    change: Transition,
) -> Result<(), DbErr> {
    transition_runs(conn, vec![(run, to, change)]).await
}

/// Moves each run to its status with its changes, in one statement per few thousand runs (a
/// processor's batch holds the write lock meanwhile), leaving the automations' last-run fields
/// to the caller.
pub async fn transition_runs<C: ConnectionTrait>(
    conn: &C,
    moves: Vec<(&automation_run::Model, AutomationRunStatus, Transition)>,
) -> Result<(), DbErr> {
    // What a transition leaves unset keeps the row's value (`COALESCE`); the lease is kept
    // only when asked.
    const MOVE: crate::db::RowsUpdate = crate::db::RowsUpdate {
        table: "automation_runs",
        types: &[
            "text",
            "text",
            "timestamptz",
            "text",
            "text",
            "text",
            "jsonb",
            "timestamptz",
            "integer",
        ],
        set: "status = v.column2, updated_at = v.column3, \
              skip_reason = COALESCE(v.column4, automation_runs.skip_reason), \
              title = COALESCE(v.column5, automation_runs.title), \
              message = COALESCE(v.column6, automation_runs.message), \
              warnings = COALESCE(v.column7, automation_runs.warnings), \
              finished_at = COALESCE(v.column8, automation_runs.finished_at), \
              lease_until = CASE WHEN v.column9 = 1 THEN automation_runs.lease_until ELSE NULL END",
        and_where: "",
    };
    let now = Utc::now();
    let rows = moves
        .into_iter()
        .map(|(run, to, change)| {
            vec![
                run.id.clone().into(),
                to.as_str().into(),
                now.into(),
                change.skip_reason.into(),
                change.title.into(),
                change.message.into(),
                sea_orm::Value::Json(change.warnings.map(|w| Box::new(json!(w)))),
                change.finished.then_some(now).into(),
                i32::from(change.keep_lease).into(),
            ]
        })
        .collect();
    MOVE.exec(conn, rows).await?;
    Ok(())
}

/// A run's status from its deliveries' statuses: `None` while some are still retrying.
pub fn settled_status(deliveries: &[DeliveryStatus]) -> Option<AutomationRunStatus> {
    if deliveries.contains(&DeliveryStatus::Retrying) {
        return None;
    }
    let delivered = deliveries
        .iter()
        .filter(|s| **s == DeliveryStatus::Delivered)
        .count();
    Some(if delivered == deliveries.len() && delivered > 0 {
        AutomationRunStatus::Delivered
    } else if delivered > 0 {
        AutomationRunStatus::PartialFailure
    } else {
        AutomationRunStatus::Failed
    })
}

/// Runs waiting on background retries whose deliveries have all finished get their final
/// status; returns how many.
pub async fn settle_deliveries(conn: &sea_orm::DatabaseConnection) -> Result<usize, DbErr> {
    let waiting = automation_run::Entity::find()
        .filter(automation_run::Column::Status.eq(AutomationRunStatus::PendingDelivery))
        .order_by_asc(automation_run::Column::UpdatedAt)
        .limit(200)
        .all(conn)
        .await?;
    let mut settled = 0;
    for run in waiting {
        let statuses: Vec<DeliveryStatus> = notification_delivery::Entity::find()
            .select_only()
            .column(notification_delivery::Column::Status)
            .filter(notification_delivery::Column::AutomationRunId.eq(&run.id))
            .into_tuple()
            .all(conn)
            .await?;
        if let Some(final_status) = settled_status(&statuses) {
            transition(
                conn,
                &run,
                final_status,
                Transition {
                    finished: true,
                    ..Default::default()
                },
            )
            .await?;
            settled += 1;
        }
    }
    Ok(settled)
}

/// Runs a processor may claim at `now`: `PENDING` ones whose retry pause is over, and
/// `RUNNING_PROCESSOR` ones whose lease lapsed.
fn due_at(now: DateTime<Utc>) -> Condition {
    use automation_run::Column as R;
    Condition::any()
        .add(
            Condition::all()
                .add(R::Status.eq(AutomationRunStatus::Pending))
                .add(
                    Condition::any()
                        .add(R::LeaseUntil.is_null())
                        .add(R::LeaseUntil.lt(now)),
                ),
        )
        .add(
            Condition::all()
                .add(R::Status.eq(AutomationRunStatus::RunningProcessor))
                .add(R::LeaseUntil.lt(now)),
        )
}

/// Whether any run is due (a read: an idle processor takes no write lock).
pub async fn any_due<C: ConnectionTrait>(conn: &C) -> Result<bool, DbErr> {
    Ok(automation_run::Entity::find()
        .select_only()
        .column(automation_run::Column::Id)
        .filter(due_at(Utc::now()))
        .into_tuple::<String>()
        .one(conn)
        .await?
        .is_some())
}

/// Claims up to `limit` runs to process: `PENDING` ones whose retry pause is over, and
/// `RUNNING_PROCESSOR` ones whose instance let its lease lapse. One statement, so two
/// instances never claim the same run (rows locked and skipped on PostgreSQL).
pub async fn claim<C: ConnectionTrait>(
    conn: &C,
    limit: u64,
    lease: chrono::Duration,
) -> Result<Vec<automation_run::Model>, DbErr> {
    use automation_run::Column as R;
    let now = Utc::now();
    let backend = conn.get_database_backend();
    let due = due_at(now);
    let mut pick = Query::select();
    pick.column(R::Id)
        .from(automation_run::Entity)
        .cond_where(due.clone())
        .order_by(R::TriggeredAt, sea_orm::Order::Asc)
        .limit(limit);
    if backend == sea_orm::DbBackend::Postgres {
        pick.lock_with_behavior(
            sea_orm::sea_query::LockType::Update,
            sea_orm::sea_query::LockBehavior::SkipLocked,
        );
    }
    let mut update = Query::update();
    update
        .table(automation_run::Entity)
        .value(R::Status, AutomationRunStatus::RunningProcessor)
        .value(R::LeaseUntil, Some(now + lease))
        .value(R::UpdatedAt, now)
        .value(
            R::StartedAt,
            sea_orm::sea_query::Func::coalesce([Expr::col(R::StartedAt), Expr::value(now)]),
        )
        .value(
            R::ProcessorAttempts,
            Expr::col(R::ProcessorAttempts).add(Expr::value(1)),
        )
        .and_where(Expr::col(R::Id).in_subquery(pick))
        .cond_where(due)
        .returning_all();
    let rows = conn.query_all_raw(backend.build(&update)).await?;
    let mut claimed = rows
        .iter()
        .map(|r| <automation_run::Model as sea_orm::FromQueryResult>::from_query_result(r, ""))
        .collect::<Result<Vec<_>, _>>()?;
    claimed.sort_by_key(|r| r.triggered_at);
    let moved: Vec<(&automation_run::Model, AutomationRunStatus)> = claimed
        .iter()
        .map(|r| (r, AutomationRunStatus::RunningProcessor))
        .collect();
    follow_newest_of(conn, &moved).await?;
    Ok(claimed)
}

/// The webhook body of an automation run (DESIGN.md's `automation.run`).
#[allow(clippy::too_many_arguments)]
pub fn payload(
    automation: &automation::Model,
    run: &automation_run::Model,
    run_status: AutomationRunStatus,
    customer: Value,
    extra: Option<(&str, Value)>,
    title: &str,
    message: &str,
    markdown: Option<&str>,
) -> Value {
    let mut body = json!({
        "type": "automation.run",
        "automation": { "id": automation.id, "key": automation.key, "name": automation.name },
        "run": {
            "id": run.id,
            "triggeredAt": timestamp::format(&run.triggered_at),
            "status": run_status.as_str(),
        },
        "subject": run.subject,
        "signals": run.signals,
        "events": run.events,
        "customer": customer,
        "title": title,
        "message": message,
        "markdown": markdown,
        "sentAt": timestamp::format(&Utc::now()),
    });
    if let (Some((key, value)), Some(obj)) = (extra, body.as_object_mut()) {
        obj.insert(key.to_string(), value);
    }
    body
}
