//! Agents: read, rename, re-instruct, change actions, disable.

use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, DatabaseConnection, EntityTrait, IntoActiveModel,
    QueryFilter, QueryOrder, Set,
};
use serde_json::json;

use crate::cron::{Schedule, ScheduleError};
use crate::{
    platform::{ActionContext, Change, PlatformError, PlatformResult, ResourceRef},
    validation::{Issues, ValidationIssue},
};
use entity::agent;

/// Changes to an agent; only fields that are `Some` change.
#[derive(Debug, Default)]
pub struct AgentChanges {
    pub display_name: Option<String>,
    pub instructions: Option<String>,
    pub action_keys: Option<Vec<String>>,
    pub schedule: Option<ScheduleChanges>,
}

/// When the agent runs on its own: a 5-field cron read in a time zone. A cron or time zone
/// left out keeps the current one.
#[derive(Debug, Default)]
pub struct ScheduleChanges {
    pub enabled: bool,
    pub cron: Option<String>,
    pub timezone: Option<String>,
}

pub async fn list(db: &DatabaseConnection, org: &str) -> PlatformResult<Vec<agent::Model>> {
    Ok(agent::Entity::find()
        .filter(agent::Column::OrganizationId.eq(org))
        .order_by_asc(agent::Column::CreatedAt)
        .order_by_asc(agent::Column::AgentKey)
        .all(db)
        .await?)
}

/// Finds an agent by id or by `agentKey` within the organization.
pub async fn get<C: sea_orm::ConnectionTrait>(
    db: &C,
    org: &str,
    id: &str,
) -> PlatformResult<agent::Model> {
    let id = id.trim();
    agent::Entity::find()
        .filter(agent::Column::OrganizationId.eq(org))
        .filter(
            Condition::any()
                .add(agent::Column::Id.eq(id))
                .add(agent::Column::AgentKey.eq(id)),
        )
        .one(db)
        .await?
        .ok_or_else(|| PlatformError::NotFound(format!("agent `{id}` not found")))
}

fn validate(update: &AgentChanges) -> PlatformResult<()> {
    let mut issues = Issues::default();
    if let Some(name) = &update.display_name {
        issues.length(&["displayName"], name, 1, 120);
    }
    if let Some(text) = &update.instructions {
        issues.length(&["instructions"], text, 1, 10_000);
    }
    if let Some(keys) = &update.action_keys {
        for (i, key) in keys.iter().enumerate() {
            if key.is_empty() {
                issues.push(
                    vec!["actionKeys".into(), i.into()],
                    "must be at least 1 character long",
                );
            }
        }
    }
    issues.into_result().map_err(Into::into)
}

pub async fn update(
    db: &DatabaseConnection,
    ctx: &ActionContext<'_>,
    id: &str,
    changes: AgentChanges,
) -> PlatformResult<Change<agent::Model>> {
    ctx.auth.require_write()?;
    validate(&changes)?;
    let txn = crate::db::begin_write(db).await?;
    let current = get(&txn, ctx.org(), id).await?;
    let current_cron = current.schedule_cron.clone();
    let current_timezone = current.schedule_timezone.clone();
    let mut model = current.into_active_model();
    let mut changed = Vec::new();
    if let Some(name) = changes.display_name {
        model.display_name = Set(name);
        changed.push("displayName");
    }
    if let Some(text) = changes.instructions {
        model.instructions = Set(text);
        changed.push("instructions");
    }
    if let Some(keys) = changes.action_keys {
        model.action_keys = Set(json!(keys));
        changed.push("actionKeys");
    }
    if let Some(schedule) = changes.schedule {
        let cron = schedule
            .cron
            .as_deref()
            .map(str::trim)
            .map(str::to_string)
            .or_else(|| current_cron.clone());
        let timezone = schedule
            .timezone
            .as_deref()
            .map(str::trim)
            .map(str::to_string)
            .unwrap_or_else(|| current_timezone.clone());
        let next_run_at = match (&cron, schedule.enabled) {
            (None, true) => {
                return Err(PlatformError::Validation(vec![ValidationIssue::new(
                    vec!["schedule".into(), "cron".into()],
                    "a cron is needed to enable the schedule",
                )]))
            }
            (None, false) => None,
            (Some(cron), enabled) => {
                let parsed = Schedule::parse(cron, &timezone).map_err(|e| {
                    let field = match e {
                        ScheduleError::Cron(_) => "cron",
                        ScheduleError::Timezone(_) => "timezone",
                    };
                    PlatformError::Validation(vec![ValidationIssue::new(
                        vec!["schedule".into(), field.into()],
                        e.to_string(),
                    )])
                })?;
                if enabled {
                    Some(parsed.next_after(Utc::now()).ok_or_else(|| {
                        PlatformError::Validation(vec![ValidationIssue::new(
                            vec!["schedule".into(), "cron".into()],
                            format!("`{cron}` never matches a future time"),
                        )])
                    })?)
                } else {
                    None
                }
            }
        };
        model.schedule_cron = Set(cron);
        model.schedule_timezone = Set(timezone);
        model.schedule_enabled = Set(schedule.enabled);
        model.next_run_at = Set(next_run_at);
        changed.push("schedule");
    }
    model.updated_at = Set(Utc::now());
    let agent = model.update(&txn).await?;
    let resources = vec![ResourceRef::new("agent", agent.id.clone())];
    Change::commit(txn, ctx, agent, resources, json!({ "changed": changed })).await
}

/// Disables the agent: its schedule stops and has no next run.
pub async fn disable(
    db: &DatabaseConnection,
    ctx: &ActionContext<'_>,
    id: &str,
) -> PlatformResult<Change<agent::Model>> {
    ctx.auth.require_write()?;
    let txn = crate::db::begin_write(db).await?;
    let current = get(&txn, ctx.org(), id).await?;
    let was_enabled = current.schedule_enabled;
    let mut model = current.into_active_model();
    model.schedule_enabled = Set(false);
    model.next_run_at = Set(None);
    model.updated_at = Set(Utc::now());
    let agent = model.update(&txn).await?;
    let resources = vec![ResourceRef::new("agent", agent.id.clone())];
    Change::commit(
        txn,
        ctx,
        agent,
        resources,
        json!({ "wasEnabled": was_enabled }),
    )
    .await
}
