//! Connections of an organization to providers: connect with credentials, the plan's connection
//! limit, disconnect, and what the list and sync status show.

use chrono::{DateTime, Utc};
use sea_orm::{
    sea_query::Expr, ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection,
    DatabaseTransaction, EntityTrait, IntoActiveModel, PaginatorTrait, QueryFilter, QueryOrder,
    Set,
};
use serde_json::{json, Map, Value};

use super::{
    jobs,
    providers::{Provider, SetupMode, PROVIDERS},
    IntegrationError, IntegrationResult,
};
use crate::{crypto::SecretBox, validation::ValidationIssue};
use entity::{
    integration_connection::{self as conn, ConnectionStatus},
    organization,
    sync_run::{self, SyncRunStatus},
};

/// Sync state of one model, from its latest run.
#[derive(Debug, Clone)]
pub struct ModelSync {
    pub model: String,
    /// `PENDING` when no run has started yet.
    pub status: SyncRunStatus,
    /// End of the latest successful run.
    pub last_synced_at: Option<DateTime<Utc>>,
    pub error_message: Option<String>,
}

/// One provider as the list shows it.
#[derive(Debug, Clone)]
pub struct IntegrationView {
    pub provider: &'static Provider,
    pub connection: Option<conn::Model>,
    pub sync_status: String,
    pub error_message: Option<String>,
}

/// Outcome of a direct connect.
#[derive(Debug, Clone)]
pub struct Connected {
    pub connection_id: String,
    pub already_connected: bool,
}

pub async fn find<C: ConnectionTrait>(
    db: &C,
    org: &str,
    provider: &str,
) -> IntegrationResult<Option<conn::Model>> {
    Ok(conn::Entity::find()
        .filter(conn::Column::OrganizationId.eq(org))
        .filter(conn::Column::Provider.eq(provider))
        .filter(conn::Column::Status.eq(ConnectionStatus::Connected))
        .one(db)
        .await?)
}

/// Refuses a new connection when the organization's plan allows no more.
pub async fn check_limit<C: ConnectionTrait>(db: &C, org: &str) -> IntegrationResult<()> {
    let organization = organization::Entity::find_by_id(org.to_string())
        .one(db)
        .await?
        .ok_or_else(|| IntegrationError::Unauthorized("organization not found".into()))?;
    let Some(limit) = organization.connection_limit else {
        return Ok(());
    };
    let current = conn::Entity::find()
        .filter(conn::Column::OrganizationId.eq(org))
        .filter(conn::Column::Status.eq(ConnectionStatus::Connected))
        .count(db)
        .await? as i64;
    if current >= limit {
        return Err(IntegrationError::ConnectionLimit {
            plan: organization.plan,
            current,
            limit,
        });
    }
    Ok(())
}

/// Checks `config` against the provider's required fields: each present, a string, non-empty;
/// nothing else. Returns the trimmed values.
pub fn validate_credentials(
    provider: &Provider,
    config: &Map<String, Value>,
    path_prefix: &str,
) -> Result<Map<String, Value>, Vec<ValidationIssue>> {
    let mut issues = Vec::new();
    let mut out = Map::new();
    let at = |key: &str| -> Vec<crate::validation::PathSegment> {
        let mut path = Vec::new();
        if !path_prefix.is_empty() {
            path.push(path_prefix.into());
        }
        path.push(key.into());
        path
    };
    for field in provider.fields {
        match config.get(field.key) {
            None | Some(Value::Null) => issues.push(ValidationIssue::new(
                at(field.key),
                format!("`{}` is required", field.key),
            )),
            Some(Value::String(s)) if s.trim().is_empty() => issues.push(ValidationIssue::new(
                at(field.key),
                format!("`{}` must not be empty", field.key),
            )),
            Some(Value::String(s)) => {
                out.insert(field.key.to_string(), Value::String(s.trim().to_string()));
            }
            Some(_) => issues.push(ValidationIssue::new(
                at(field.key),
                format!("`{}` must be a string", field.key),
            )),
        }
    }
    for key in config.keys() {
        if !provider.fields.iter().any(|f| f.key == key) {
            issues.push(ValidationIssue::new(
                at(key),
                format!("unknown property `{key}` for {}", provider.id),
            ));
        }
    }
    if provider.id == "posthog" {
        if let Some(region) = out.get("region").and_then(Value::as_str) {
            if !POSTHOG_REGIONS.contains(&region) {
                issues.push(ValidationIssue::new(
                    at("region"),
                    "`region` must be `us` or `eu`",
                ));
            }
        }
    }
    if issues.is_empty() {
        Ok(out)
    } else {
        Err(issues)
    }
}

fn issues_message(provider: &Provider, issues: &[ValidationIssue]) -> String {
    let missing: Vec<String> = issues
        .iter()
        .filter(|i| i.message.ends_with("is required"))
        .filter_map(|i| match i.path.last() {
            Some(crate::validation::PathSegment::Key(k)) => Some(k.clone()),
            _ => None,
        })
        .collect();
    if !missing.is_empty() {
        format!(
            "missing required config field(s) for {}: {}",
            provider.id,
            missing.join(", ")
        )
    } else {
        format!("invalid config for {}", provider.id)
    }
}

/// PostHog's cloud regions, the values its `region` credential may take.
pub const POSTHOG_REGIONS: [&str; 2] = ["us", "eu"];

/// A direct connection with credentials from `config`.
pub async fn connect_direct(
    db: &DatabaseConnection,
    secrets: &SecretBox,
    org: &str,
    provider: &'static Provider,
    config: &Map<String, Value>,
    now: DateTime<Utc>,
) -> IntegrationResult<Connected> {
    if provider.setup_mode == SetupMode::BrowserSession {
        return Err(IntegrationError::invalid_field(
            "config",
            format!(
                "{} connects only through a browser session: omit `config` to get a connect URL",
                provider.id
            ),
        ));
    }
    let credentials = validate_credentials(provider, config, "config").map_err(|issues| {
        IntegrationError::BadRequest {
            message: issues_message(provider, &issues),
            issues,
        }
    })?;
    let sealed = secrets.encrypt(&Value::Object(credentials).to_string());
    store(db, org, provider, Some(sealed), json!({}), now).await
}

/// Creates the connection, or replaces the credentials of an existing one. Checks the plan's
/// limit for a new connection and schedules the first sync for providers that have one.
///
/// One transaction that starts by writing the organization's row: concurrent connects of one
/// organization queue behind each other (a row lock on PostgreSQL, the write lock on SQLite),
/// so two of them cannot both pass the limit check.
pub async fn store(
    db: &DatabaseConnection,
    org: &str,
    provider: &'static Provider,
    credentials_ciphertext: Option<String>,
    settings: Value,
    now: DateTime<Utc>,
) -> IntegrationResult<Connected> {
    let txn = lock_organization(db, org).await?;
    let connected = match find(&txn, org, provider.id).await? {
        Some(existing) => {
            let id = existing.id.clone();
            let mut merged = existing.settings.clone();
            if let (Some(target), Value::Object(extra)) = (merged.as_object_mut(), settings) {
                target.extend(extra);
            }
            let mut row = existing.into_active_model();
            row.credentials_ciphertext = Set(credentials_ciphertext);
            row.settings = Set(merged);
            row.updated_at = Set(now);
            row.update(&txn).await?;
            Connected {
                connection_id: id,
                already_connected: true,
            }
        }
        None => {
            check_limit(&txn, org).await?;
            let id = uuid::Uuid::new_v4().to_string();
            // The unique index on (organization, provider) refuses a racing second connect.
            conn::ActiveModel {
                id: Set(id.clone()),
                organization_id: Set(org.to_string()),
                provider: Set(provider.id.to_string()),
                status: Set(ConnectionStatus::Connected),
                credentials_ciphertext: Set(credentials_ciphertext),
                settings: Set(settings),
                last_data_received_at: Set(None),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(&txn)
            .await
            .map_err(|e| match e.sql_err() {
                Some(sea_orm::SqlErr::UniqueConstraintViolation(_)) => {
                    IntegrationError::bad_request(format!(
                        "{} is being connected by another request: retry",
                        provider.id
                    ))
                }
                _ => IntegrationError::from(e),
            })?;
            Connected {
                connection_id: id,
                already_connected: false,
            }
        }
    };
    if provider.has_sync() {
        // New credentials deserve a fresh sync, first one within a scheduler tick.
        jobs::schedule_sync(&txn, org, &connected.connection_id, now).await?;
    }
    txn.commit().await?;
    Ok(connected)
}

/// Begins a transaction that holds the organization's row: connects and disconnects of one
/// organization then run one after the other.
async fn lock_organization(
    db: &DatabaseConnection,
    org: &str,
) -> IntegrationResult<DatabaseTransaction> {
    let txn = crate::db::begin_write(db).await?;
    // A no-op write of a non-key column: on PostgreSQL it locks the row without blocking the
    // foreign-key checks of rows that reference the organization (events, users, ...).
    organization::Entity::update_many()
        .col_expr(
            organization::Column::Name,
            Expr::col(organization::Column::Name),
        )
        .filter(organization::Column::Id.eq(org))
        .exec(&txn)
        .await?;
    Ok(txn)
}

/// Removes the connection, its stored credentials, its sync history and its scheduled sync.
///
/// All in one transaction, so the scheduler never sees the connection without its job.
pub async fn disconnect(
    db: &DatabaseConnection,
    org: &str,
    provider: &Provider,
) -> IntegrationResult<()> {
    let txn = lock_organization(db, org).await?;
    let existing = find(&txn, org, provider.id).await?.ok_or_else(|| {
        IntegrationError::NotConnected(format!("{} is not connected", provider.id))
    })?;
    jobs::unschedule_sync(&txn, &existing.id).await?;
    sync_run::Entity::delete_many()
        .filter(sync_run::Column::ConnectionId.eq(existing.id.clone()))
        .exec(&txn)
        .await?;
    conn::Entity::delete_by_id(existing.id).exec(&txn).await?;
    txn.commit().await?;
    Ok(())
}

/// Latest state of each model a provider syncs.
pub async fn model_syncs<C: ConnectionTrait>(
    db: &C,
    provider: &Provider,
    connection_id: &str,
) -> IntegrationResult<Vec<ModelSync>> {
    let mut out = Vec::new();
    for model in provider.sync_models {
        let runs = sync_run::Entity::find()
            .filter(sync_run::Column::ConnectionId.eq(connection_id))
            .filter(sync_run::Column::Model.eq(*model))
            .order_by_desc(sync_run::Column::StartedAt)
            .all(db)
            .await?;
        let latest = runs.first();
        let last_success = runs
            .iter()
            .filter(|r| r.status == SyncRunStatus::Success)
            .find_map(|r| r.finished_at);
        out.push(ModelSync {
            model: model.to_string(),
            status: latest.map_or(SyncRunStatus::Pending, |r| r.status),
            last_synced_at: last_success,
            error_message: latest.and_then(|r| r.error_message.clone()),
        });
    }
    Ok(out)
}

/// Summary of the model states for the list: the worst state wins.
fn overall(provider: &Provider, syncs: &[ModelSync]) -> (String, Option<String>) {
    if !provider.has_sync() {
        return ("NO_SYNC".to_string(), None);
    }
    if let Some(failed) = syncs.iter().find(|s| s.status == SyncRunStatus::Failed) {
        return (
            SyncRunStatus::Failed.to_string(),
            failed.error_message.clone(),
        );
    }
    for state in [SyncRunStatus::Running, SyncRunStatus::Pending] {
        if syncs.iter().any(|s| s.status == state) {
            return (state.to_string(), None);
        }
    }
    (SyncRunStatus::Success.to_string(), None)
}

/// Every provider with its connection state, or only the connected ones.
pub async fn list<C: ConnectionTrait>(
    db: &C,
    org: &str,
    connected_only: bool,
) -> IntegrationResult<Vec<IntegrationView>> {
    let rows = conn::Entity::find()
        .filter(conn::Column::OrganizationId.eq(org))
        .filter(conn::Column::Status.eq(ConnectionStatus::Connected))
        .all(db)
        .await?;
    let mut out = Vec::new();
    for provider in PROVIDERS {
        let connection = rows.iter().find(|r| r.provider == provider.id).cloned();
        let view = match connection {
            Some(c) => {
                let syncs = model_syncs(db, provider, &c.id).await?;
                let (sync_status, error_message) = overall(provider, &syncs);
                IntegrationView {
                    provider,
                    connection: Some(c),
                    sync_status,
                    error_message,
                }
            }
            None if connected_only => continue,
            None => IntegrationView {
                provider,
                connection: None,
                sync_status: "NOT_CONNECTED".to_string(),
                error_message: None,
            },
        };
        out.push(view);
    }
    Ok(out)
}

/// The sync status of one provider: empty for a provider that is not connected.
pub async fn sync_status<C: ConnectionTrait>(
    db: &C,
    org: &str,
    provider: &Provider,
) -> IntegrationResult<(bool, Vec<ModelSync>)> {
    match find(db, org, provider.id).await? {
        Some(c) => Ok((true, model_syncs(db, provider, &c.id).await?)),
        None => Ok((false, vec![])),
    }
}
