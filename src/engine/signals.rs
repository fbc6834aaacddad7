//! Signals: event-matching definitions that automations trigger on.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, Set,
};
use serde_json::{json, Value};

use super::config::{compile_signal, under};
use crate::platform::{
    config_hash, free_key, uuid_id, ActionContext, Change, Patch, PlatformError, PlatformResult,
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

/// What a signal is, as a create body or a configuration file declares it.
#[derive(Debug, Clone)]
pub struct SignalContent {
    pub kind: SignalKind,
    pub name: String,
    pub description: Option<String>,
    /// Checked against the kind's contract ([`compile_signal`]) before it is stored.
    pub definition: Value,
}

impl SignalContent {
    /// A new signal's row: this content under `key`, never archived, made `now`.
    pub fn new_row(
        self,
        org: &str,
        key: &str,
        managed_by: &'static str,
        now: DateTime<Utc>,
    ) -> signal::ActiveModel {
        signal::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org.to_string()),
            key: Set(key.to_string()),
            managed_by: Set(managed_by.into()),
            name: Set(self.name),
            description: Set(self.description),
            kind: Set(self.kind),
            config_hash: Set(Some(config_hash(&self.definition))),
            definition: Set(self.definition),
            schema_version: Set(crate::platform::SCHEMA_VERSION.into()),
            archived_at: Set(None),
            created_at: Set(now),
            updated_at: Set(now),
        }
    }

    /// Whether `stored` holds this content already, managed by `managed_by` and not archived.
    pub fn is_stored_in(&self, stored: &signal::Model, managed_by: &str) -> bool {
        stored.managed_by == managed_by
            && stored.archived_at.is_none()
            && stored.kind == self.kind
            && stored.name == self.name
            && stored.description == self.description
            && stored.definition == self.definition
            && stored.config_hash.as_deref() == Some(config_hash(&self.definition).as_str())
    }
}

/// The one write of a signal's row, for the API's create and `custintel apply`: a new signal
/// under `key`, or `current` given this content in place (restored if it was archived, and
/// managed by `managed_by` from now on).
pub async fn store<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    key: &str,
    content: SignalContent,
    managed_by: &'static str,
    current: Option<signal::Model>,
    now: DateTime<Utc>,
) -> PlatformResult<signal::Model> {
    let Some(current) = current else {
        return Ok(content
            .new_row(org, key, managed_by, now)
            .insert(conn)
            .await?);
    };
    let mut model = current.into_active_model();
    model.managed_by = Set(managed_by.into());
    model.kind = Set(content.kind);
    model.name = Set(content.name);
    model.description = Set(content.description);
    model.config_hash = Set(Some(config_hash(&content.definition)));
    model.definition = Set(content.definition);
    model.archived_at = Set(None);
    model.updated_at = Set(now);
    Ok(model.update(conn).await?)
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
    let key = free_key::<signal::Entity>(
        &txn,
        &org,
        &body.name,
        signal::Column::OrganizationId,
        signal::Column::Key,
    )
    .await?;
    let content = SignalContent {
        kind: SignalKind::EventMatch,
        name: body.name,
        description: body.description.value(),
        definition: body.definition,
    };
    let signal = store(&txn, &org, &key, content, "UI", None, Utc::now()).await?;
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
