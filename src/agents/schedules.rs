//! Agents on their own schedule: a 5-field cron read in an IANA time zone. Each instance looks
//! for due agents every tick; a tick is claimed by moving the agent's `next_run_at` forward with
//! a conditional UPDATE (after `FOR UPDATE SKIP LOCKED` on PostgreSQL), and the run row of a tick
//! is unique per agent, so two instances never run the same tick. Ticks missed while no instance
//! ran make one run.

use chrono::{DateTime, Utc};
use sea_orm::{
    sea_query::{Expr, LockBehavior, LockType},
    ColumnTrait, DatabaseConnection, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::json;

use super::{
    run_loop::{self, RunRequest},
    run_records::{self, RunRecord},
    AgentRuntime, Trigger,
};
use crate::cron::Schedule;
use entity::{agent, agent_run::AgentRunStatus};

/// The agent's next run after `after`, or `None` when its schedule is off or unreadable.
pub fn next_run(agent: &agent::Model, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if !agent.schedule_enabled {
        return None;
    }
    let cron = agent.schedule_cron.as_deref()?;
    Schedule::parse(cron, &agent.schedule_timezone)
        .ok()?
        .next_after(after)
}

/// Agents whose next run is due, oldest tick first; locked and skipped on PostgreSQL.
async fn due<C: sea_orm::ConnectionTrait>(
    db: &C,
    now: DateTime<Utc>,
    lock: bool,
) -> Result<Vec<agent::Model>, sea_orm::DbErr> {
    let mut query = agent::Entity::find()
        .filter(agent::Column::ScheduleEnabled.eq(true))
        .filter(agent::Column::NextRunAt.lte(now))
        .order_by_asc(agent::Column::NextRunAt)
        .limit(50);
    if lock {
        query = query.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
    query.all(db).await
}

/// Moves a due agent's `next_run_at` from `tick` to its next time: the claim of that tick. Only
/// one caller's UPDATE matches `next_run_at = tick`.
async fn claim<C: sea_orm::ConnectionTrait>(
    db: &C,
    agent: &agent::Model,
    tick: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<bool, sea_orm::DbErr> {
    let next = next_run(agent, now);
    let claimed = agent::Entity::update_many()
        .col_expr(agent::Column::NextRunAt, Expr::value(next))
        .col_expr(agent::Column::LastRunAt, Expr::value(Some(now)))
        .filter(agent::Column::Id.eq(agent.id.as_str()))
        .filter(agent::Column::ScheduleEnabled.eq(true))
        .filter(agent::Column::NextRunAt.eq(tick))
        .exec(db)
        .await?;
    Ok(claimed.rows_affected == 1)
}

/// Claims the due ticks of this moment.
async fn claim_due(
    db: &DatabaseConnection,
    now: DateTime<Utc>,
) -> Result<Vec<(agent::Model, DateTime<Utc>)>, sea_orm::DbErr> {
    let mut claimed = Vec::new();
    if db.get_database_backend() == DbBackend::Postgres {
        let txn = crate::db::begin_write(db).await?;
        for agent in due(&txn, now, true).await? {
            if let Some(tick) = agent.next_run_at {
                if claim(&txn, &agent, tick, now).await? {
                    claimed.push((agent, tick));
                }
            }
        }
        txn.commit().await?;
    } else {
        for agent in due(db, now, false).await? {
            if let Some(tick) = agent.next_run_at {
                if claim(db, &agent, tick, now).await? {
                    claimed.push((agent, tick));
                }
            }
        }
    }
    Ok(claimed)
}

/// One pass: close abandoned runs, then run every due agent once. Returns the runs made.
pub async fn tick(runtime: &AgentRuntime) -> Result<Vec<RunRecord>, sea_orm::DbErr> {
    let db = &runtime.state.db;
    run_records::sweep_abandoned(db).await?;
    let now = Utc::now();
    let mut made = Vec::new();
    for (agent, tick) in claim_due(db, now).await? {
        let run = RunRecord::new(
            &agent.organization_id,
            &agent.id,
            Trigger::Schedule,
            None,
            Some(tick),
        );
        let request = RunRequest {
            context: json!({
                "trigger": "schedule",
                "scheduledFor": tick.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "now": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "cron": agent.schedule_cron,
                "timezone": agent.schedule_timezone,
            }),
            destination_ids: Vec::new(),
        };
        if let Some(run) = run_loop::execute(runtime, &agent, run, request).await? {
            if run.status == AgentRunStatus::Succeeded {
                agent::Entity::update_many()
                    .col_expr(
                        agent::Column::LastSuccessfulRunAt,
                        Expr::value(Some(Utc::now())),
                    )
                    .filter(agent::Column::Id.eq(agent.id.as_str()))
                    .exec(db)
                    .await?;
            }
            made.push(run);
        }
    }
    Ok(made)
}

/// The schedule loop of one instance; dropping the handle stops it.
pub struct ScheduleHandle(tokio::task::JoinHandle<()>);

impl Drop for ScheduleHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub fn spawn(runtime: AgentRuntime) -> ScheduleHandle {
    let every = runtime.config().schedule_tick;
    ScheduleHandle(tokio::spawn(async move {
        loop {
            if let Err(e) = tick(&runtime).await {
                tracing::warn!(error = %e, "agent schedule tick failed");
            }
            tokio::time::sleep(every).await;
        }
    }))
}
