//! Agent runs as stored: started as `RUNNING`, finished once with everything the run did, listed
//! newest first.

use chrono::{DateTime, Utc};
use sea_orm::{
    sea_query::Expr, ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, Set,
};
use serde::Serialize;
use serde_json::{json, Value};

use super::definition;
use super::Trigger;
use crate::platform::{PlatformError, PlatformResult};
use entity::agent_run::{self, AgentRunStatus};

/// How long a `RUNNING` row may stay so before a sweep closes it as `FAILED`: well past the run
/// time limit, so only runs whose instance stopped are closed.
pub const RUN_LEASE: chrono::Duration = chrono::Duration::minutes(3);

/// One tool call of a run.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    pub name: String,
    pub input: Value,
    pub result_bytes: u64,
    pub duration_ms: u64,
    pub error: Option<String>,
}

/// What became of an action a model asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionStatus {
    /// It ran.
    Done,
    /// The agent may not take it (not among its action keys, or unknown).
    Refused,
    /// It ran and failed.
    Failed,
}

/// One action of a run.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionRecord {
    pub key: String,
    pub input: Value,
    pub status: ActionStatus,
    pub error: Option<String>,
}

/// A run as it is being made.
#[derive(Clone, Debug)]
pub struct RunRecord {
    pub id: String,
    pub organization_id: String,
    pub agent_id: String,
    pub trigger: Trigger,
    pub automation_run_id: Option<String>,
    pub scheduled_for: Option<DateTime<Utc>>,
    pub status: AgentRunStatus,
    pub reason: Option<String>,
    pub warnings: Vec<String>,
    pub started_at: DateTime<Utc>,
    pub turns: u32,
    pub tool_calls: Vec<ToolCallRecord>,
    pub actions: Vec<ActionRecord>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub total_tokens: i64,
    pub message: Option<String>,
}

impl RunRecord {
    pub fn new(
        organization_id: &str,
        agent_id: &str,
        trigger: Trigger,
        automation_run_id: Option<String>,
        scheduled_for: Option<DateTime<Utc>>,
    ) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            organization_id: organization_id.to_string(),
            agent_id: agent_id.to_string(),
            trigger,
            automation_run_id,
            scheduled_for,
            status: AgentRunStatus::Running,
            reason: None,
            warnings: Vec::new(),
            started_at: Utc::now(),
            turns: 0,
            tool_calls: Vec::new(),
            actions: Vec::new(),
            prompt_tokens: 0,
            completion_tokens: 0,
            total_tokens: 0,
            message: None,
        }
    }

    pub fn finish(&mut self, status: AgentRunStatus, reason: Option<String>) {
        self.status = status;
        self.reason = reason;
    }
}

/// Stores a new `RUNNING` run. For a scheduled run, `Ok(false)` when another instance already
/// started the run of that tick.
pub async fn start(db: &DatabaseConnection, run: &RunRecord) -> Result<bool, sea_orm::DbErr> {
    let row = agent_run::ActiveModel {
        id: Set(run.id.clone()),
        organization_id: Set(run.organization_id.clone()),
        agent_id: Set(run.agent_id.clone()),
        trigger: Set(run.trigger.as_str().to_string()),
        automation_run_id: Set(run.automation_run_id.clone()),
        scheduled_for: Set(run.scheduled_for),
        status: Set(run.status),
        reason: Set(run.reason.clone()),
        warnings: Set(json!(run.warnings)),
        started_at: Set(run.started_at),
        finished_at: Set(None),
        lease_until: Set(Some(run.started_at + RUN_LEASE)),
        turns: Set(0),
        tool_calls: Set(json!([])),
        actions: Set(json!([])),
        prompt_tokens: Set(0),
        completion_tokens: Set(0),
        total_tokens: Set(0),
        message: Set(None),
    };
    let inserted = agent_run::Entity::insert(row)
        .on_conflict_do_nothing_on([agent_run::Column::AgentId, agent_run::Column::ScheduledFor])
        .exec_without_returning(db)
        .await?;
    Ok(matches!(inserted, sea_orm::TryInsertResult::Inserted(n) if n == 1))
}

/// Writes the finished run (one statement).
pub async fn finish(db: &DatabaseConnection, run: &RunRecord) -> Result<(), sea_orm::DbErr> {
    let now = Utc::now();
    agent_run::Entity::update_many()
        .col_expr(agent_run::Column::Status, Expr::value(run.status))
        .col_expr(agent_run::Column::Reason, Expr::value(run.reason.clone()))
        .col_expr(
            agent_run::Column::Warnings,
            Expr::value(json!(run.warnings)),
        )
        .col_expr(agent_run::Column::FinishedAt, Expr::value(Some(now)))
        .col_expr(
            agent_run::Column::LeaseUntil,
            Expr::value(None::<DateTime<Utc>>),
        )
        .col_expr(agent_run::Column::Turns, Expr::value(run.turns as i32))
        .col_expr(
            agent_run::Column::ToolCalls,
            Expr::value(json!(run.tool_calls)),
        )
        .col_expr(agent_run::Column::Actions, Expr::value(json!(run.actions)))
        .col_expr(
            agent_run::Column::PromptTokens,
            Expr::value(run.prompt_tokens),
        )
        .col_expr(
            agent_run::Column::CompletionTokens,
            Expr::value(run.completion_tokens),
        )
        .col_expr(
            agent_run::Column::TotalTokens,
            Expr::value(run.total_tokens),
        )
        .col_expr(agent_run::Column::Message, Expr::value(run.message.clone()))
        .filter(agent_run::Column::Id.eq(run.id.as_str()))
        .exec(db)
        .await?;
    Ok(())
}

/// Closes `RUNNING` runs whose instance stopped (their lease ended) as `FAILED`.
pub async fn sweep_abandoned<C: ConnectionTrait>(db: &C) -> Result<u64, sea_orm::DbErr> {
    let now = Utc::now();
    // A read first: most sweeps find nothing, and then take no write lock on SQLite.
    let abandoned = agent_run::Entity::find()
        .filter(agent_run::Column::Status.eq(AgentRunStatus::Running))
        .filter(agent_run::Column::LeaseUntil.lt(now))
        .one(db)
        .await?;
    if abandoned.is_none() {
        return Ok(0);
    }
    let closed = agent_run::Entity::update_many()
        .col_expr(
            agent_run::Column::Status,
            Expr::value(AgentRunStatus::Failed),
        )
        .col_expr(
            agent_run::Column::Reason,
            Expr::value("the instance running it stopped before the run finished"),
        )
        .col_expr(agent_run::Column::FinishedAt, Expr::value(Some(now)))
        .col_expr(
            agent_run::Column::LeaseUntil,
            Expr::value(None::<DateTime<Utc>>),
        )
        .filter(agent_run::Column::Status.eq(AgentRunStatus::Running))
        .filter(agent_run::Column::LeaseUntil.lt(now))
        .exec(db)
        .await?;
    Ok(closed.rows_affected)
}

/// A page of an agent's runs, newest first.
pub struct RunPage {
    pub runs: Vec<agent_run::Model>,
    /// `""` on the last page.
    pub next_cursor: String,
}

/// The agent's runs (by agent id or key), filtered by `status`, `limit` per page.
pub async fn list(
    db: &DatabaseConnection,
    org: &str,
    agent: &str,
    status_filter: Option<&str>,
    limit: Option<u32>,
    cursor: Option<&str>,
) -> PlatformResult<RunPage> {
    let page =
        crate::platform::paging::page_request::<AgentRunStatus>(status_filter, limit, cursor)?;
    let (status_filter, limit, after) = (page.status, page.limit, page.after);
    let agent = definition::get(db, org, agent).await?;
    let mut query = agent_run::Entity::find()
        .filter(agent_run::Column::OrganizationId.eq(org))
        .filter(agent_run::Column::AgentId.eq(agent.id.as_str()));
    if let Some(s) = status_filter {
        query = query.filter(agent_run::Column::Status.eq(s));
    }
    if let Some((at, id)) = after {
        query = query.filter(
            Condition::any()
                .add(agent_run::Column::StartedAt.lt(at))
                .add(
                    Condition::all()
                        .add(agent_run::Column::StartedAt.eq(at))
                        .add(agent_run::Column::Id.lt(id)),
                ),
        );
    }
    let mut runs = query
        .order_by_desc(agent_run::Column::StartedAt)
        .order_by_desc(agent_run::Column::Id)
        .limit(u64::from(limit) + 1)
        .all(db)
        .await?;
    let next_cursor = if runs.len() > limit as usize {
        runs.truncate(limit as usize);
        runs.last()
            .map(|r| crate::platform::paging::encode_cursor(&r.started_at, &r.id))
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok(RunPage { runs, next_cursor })
}

/// One run of the agent (by agent id or key).
pub async fn get(
    db: &DatabaseConnection,
    org: &str,
    agent: &str,
    run_id: &str,
) -> PlatformResult<agent_run::Model> {
    let agent = definition::get(db, org, agent).await?;
    agent_run::Entity::find_by_id(run_id.trim().to_string())
        .filter(agent_run::Column::OrganizationId.eq(org))
        .filter(agent_run::Column::AgentId.eq(agent.id.as_str()))
        .one(db)
        .await?
        .ok_or_else(|| PlatformError::NotFound(format!("agent run `{}` not found", run_id.trim())))
}
