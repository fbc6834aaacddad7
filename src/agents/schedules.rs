//! Agents on their own schedule: a 5-field cron read in an IANA time zone. Each instance looks
//! for due agents every tick; a tick is claimed by moving the agent's `next_run_at` forward with
//! a conditional UPDATE (after `FOR UPDATE SKIP LOCKED` on PostgreSQL), and the run row of a tick
//! is unique per agent, so two instances never run the same tick. Ticks missed while no instance
//! ran make one run.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
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
use entity::{agent, agent_run::AgentRunStatus};

/// Each field's bounds, for ranges that wrap around.
const FIELD_BOUNDS: [(u16, u16); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)];

/// Rewrites the fields into the form the cron parser takes: ranges that run from a higher to a
/// lower number as the two ranges they wrap around to (`5-1` -> `5-6,0-1`), keeping their
/// step, and a list with a bare `*` in it as `*` (which it means; the parser refuses `*` in a
/// list).
fn wrap_ranges(cron: &str) -> String {
    let fields: Vec<String> = cron
        .split_whitespace()
        .zip(FIELD_BOUNDS)
        .map(|(field, (min, max))| {
            if field.split(',').any(|item| item == "*") {
                return "*".to_string();
            }
            let items: Vec<String> = field
                .split(',')
                .map(|item| {
                    let (range, step) = match item.split_once('/') {
                        Some((r, s)) => (r, format!("/{s}")),
                        None => (item, String::new()),
                    };
                    let bounds = range
                        .split_once('-')
                        .and_then(|(a, b)| Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?)));
                    match bounds {
                        // Day of week 7 is Sunday, 0 after the wrap.
                        Some((a, b)) if a > b => {
                            let a = if max == 6 && a == 7 { 0 } else { a };
                            if a <= b {
                                format!("{a}-{b}{step}")
                            } else {
                                format!("{a}-{max}{step},{min}-{b}{step}")
                            }
                        }
                        _ => item.to_string(),
                    }
                })
                .collect();
            items.join(",")
        })
        .collect();
    fields.join(" ")
}

/// A parsed schedule.
#[derive(Clone, Debug)]
pub struct Schedule {
    cron: Cron,
    tz: Tz,
}

impl Schedule {
    /// Parses a 5-field POSIX cron (`minute hour day-of-month month day-of-week`) and an IANA
    /// time zone; the errors name what is wrong.
    pub fn parse(cron: &str, timezone: &str) -> Result<Self, ScheduleError> {
        let fields = cron.split_whitespace().count();
        if fields != 5 {
            return Err(ScheduleError::Cron(format!(
                "`{cron}` has {fields} fields; a schedule has 5: minute hour day-of-month month day-of-week"
            )));
        }
        let parsed = Cron::from_str(&wrap_ranges(cron.trim()))
            .map_err(|e| ScheduleError::Cron(format!("`{cron}` is not a cron expression: {e}")))?;
        let tz = Tz::from_str(timezone.trim()).map_err(|_| {
            ScheduleError::Timezone(format!(
                "`{timezone}` is not an IANA time zone (e.g. `UTC`, `Europe/Berlin`)"
            ))
        })?;
        Ok(Self { cron: parsed, tz })
    }

    /// The first time strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&after.with_timezone(&self.tz), false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0}")]
    Cron(String),
    #[error("{0}")]
    Timezone(String),
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::patterns::CRON_PATTERN;

    /// Every expression the description's pattern admits parses, wrapped ranges included.
    #[test]
    fn the_cron_pattern_admits_only_expressions_that_parse() {
        let pattern = jsonschema::validator_for(
            &serde_json::json!({"type": "string", "pattern": CRON_PATTERN}),
        )
        .expect("pattern compiles");
        let admitted = [
            "0 9 * * 1",
            "*/15 * * * *",
            "0 9 * * 1-5",
            "0 22 * * 5-1",
            "0 0 31-2 * 7-2",
            "59 23 31 12 7",
            "0,30 8-18/2 1,15 */3 0",
            // Found by schemathesis: `*` inside lists, steps past the field's range.
            " 44,44-20/98    17,05,04-8,1,*/29,13,*/25,23,*,04-19,06-4,*  23-07,*,08,*  \
             *,*/2,*,*/4,*/21  0-0/28,*     ",
        ];
        for cron in admitted {
            assert!(pattern.is_valid(&serde_json::json!(cron)), "{cron} refused");
            assert!(
                Schedule::parse(cron, "UTC").is_ok(),
                "{cron} does not parse"
            );
        }
        for refused in [
            "0",
            "60 * * * *",
            "* * * * * *",
            "0/5 * * * *",
            "*/0 * * * *",
        ] {
            assert!(
                !pattern.is_valid(&serde_json::json!(refused)),
                "{refused} admitted"
            );
        }
        assert_eq!(wrap_ranges("0 22 * * 5-1"), "0 22 * * 5-6,0-1");
        assert_eq!(wrap_ranges("0 1,*,5-1 * * *"), "0 * * * *");
    }
}
