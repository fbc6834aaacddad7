//! Signals: event-matching definitions that automations trigger on.

use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, QuerySelect, Set,
};
use serde_json::{json, Value};

use super::config::{compile_signal, under};
use crate::platform::{
    config_hash, unique_key, uuid_id, ActionContext, Change, Patch, PlatformError, PlatformResult,
    ResourceRef,
};
use crate::validation::Issues;
use entity::signal::{self, SignalKind};

/// A new signal. Only `EVENT_MATCH` signals can be created through the API.
#[derive(Debug)]
pub struct NewSignal {
    pub name: String,
    /// An `EVENT_MATCH` definition ([`crate::engine::contract::EventMatchDefinition`]).
    pub definition: Value,
    pub description: Patch<String>,
}

fn validate(body: &NewSignal) -> PlatformResult<()> {
    let mut issues = Issues::default();
    issues.length(&["name"], &body.name, 1, 120);
    if let Some(d) = body.description.as_value() {
        issues.length(&["description"], d, 0, 1000);
    }
    if let Err(found) = compile_signal(SignalKind::EventMatch, &body.definition) {
        issues.0.extend(under(&["definition"], found));
    }
    issues.into_result().map_err(Into::into)
}

/// Lists the organization's signals, newest first; archived ones only when asked.
pub async fn list(
    db: &DatabaseConnection,
    org: &str,
    include_archived: bool,
) -> PlatformResult<Vec<signal::Model>> {
    let mut q = signal::Entity::find().filter(signal::Column::OrganizationId.eq(org));
    if !include_archived {
        q = q.filter(signal::Column::ArchivedAt.is_null());
    }
    Ok(q.order_by_desc(signal::Column::CreatedAt)
        .order_by_asc(signal::Column::Key)
        .all(db)
        .await?)
}

pub async fn get<C: ConnectionTrait>(db: &C, org: &str, id: &str) -> PlatformResult<signal::Model> {
    let id = uuid_id(id, "signal")?;
    signal::Entity::find_by_id(id.clone())
        .filter(signal::Column::OrganizationId.eq(org))
        .one(db)
        .await?
        .ok_or_else(|| PlatformError::NotFound(format!("signal `{id}` not found")))
}

pub async fn create(
    db: &DatabaseConnection,
    ctx: &ActionContext<'_>,
    body: NewSignal,
) -> PlatformResult<Change<signal::Model>> {
    ctx.auth.require_write()?;
    validate(&body)?;
    let org = ctx.org().to_string();
    let txn = crate::db::begin_write(db).await?;
    let existing: Vec<String> = signal::Entity::find()
        .select_only()
        .column(signal::Column::Key)
        .filter(signal::Column::OrganizationId.eq(org.as_str()))
        .into_tuple()
        .all(&txn)
        .await?;
    let key = unique_key(&body.name, &existing);
    let definition = body.definition;
    let now = Utc::now();
    let signal = signal::ActiveModel {
        id: Set(uuid::Uuid::new_v4().to_string()),
        organization_id: Set(org.clone()),
        key: Set(key),
        managed_by: Set("UI".into()),
        name: Set(body.name),
        description: Set(body.description.value()),
        kind: Set(SignalKind::EventMatch),
        config_hash: Set(Some(config_hash(&definition))),
        definition: Set(definition),
        schema_version: Set(crate::platform::SCHEMA_VERSION.into()),
        archived_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    let resources = vec![ResourceRef::new("signal", signal.id.clone())];
    let details = json!({ "key": signal.key });
    Change::commit(txn, ctx, signal, resources, details).await
}

/// Archives a signal; archiving an archived signal keeps its first `archivedAt`.
pub async fn archive(
    db: &DatabaseConnection,
    ctx: &ActionContext<'_>,
    id: &str,
) -> PlatformResult<Change<signal::Model>> {
    ctx.auth.require_write()?;
    let txn = crate::db::begin_write(db).await?;
    let current = get(&txn, ctx.org(), id).await?;
    if current.managed_by == "CODE" {
        let message = format!(
            "signal `{}` is managed by code (custintel apply); change its file instead",
            current.key
        );
        return Err(PlatformError::Conflict {
            unmet: vec![message.clone()],
            message,
        });
    }
    let signal = if current.archived_at.is_some() {
        current
    } else {
        let now = Utc::now();
        let mut model = current.into_active_model();
        model.archived_at = Set(Some(now));
        model.updated_at = Set(now);
        model.update(&txn).await?
    };
    let resources = vec![ResourceRef::new("signal", signal.id.clone())];
    Change::commit(txn, ctx, signal, resources, json!({})).await
}
