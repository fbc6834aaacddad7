//! Administration on the database directly: organizations, API keys, tracking domains.

use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait,
    IntoActiveModel, QueryFilter, Set,
};
use serde::Serialize;

use crate::{
    auth::{SCOPE_READ, SCOPE_WRITE},
    crypto::{random_token, ApiKeyHash},
};

/// Plans and their allowances (DESIGN.md): tool calls per billing cycle and integration
/// connections; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Plan {
    Free,
    Pro,
    Enterprise,
}

impl Plan {
    pub fn as_str(self) -> &'static str {
        match self {
            Plan::Free => "free",
            Plan::Pro => "pro",
            Plan::Enterprise => "enterprise",
        }
    }

    pub fn api_call_limit(self) -> Option<i64> {
        match self {
            Plan::Free => Some(1_000),
            Plan::Pro => Some(100_000),
            Plan::Enterprise => None,
        }
    }

    pub fn connection_limit(self) -> Option<i64> {
        match self {
            Plan::Free => Some(2),
            Plan::Pro => Some(10),
            Plan::Enterprise => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct NewOrganization {
    pub name: String,
    pub plan: Plan,
    pub api_call_limit: Option<i64>,
    pub connection_limit: Option<i64>,
    pub ingest_rate_limit: Option<i32>,
    pub tracking_domains: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedOrganization {
    pub organization_id: String,
    pub api_key: String,
    pub public_key: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedKey {
    pub key_id: String,
    pub api_key: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisabledKey {
    pub key_id: String,
    pub disabled: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Db(#[from] sea_orm::DbErr),
}

/// Normalizes a tracking domain: host only, lower case, no scheme, port or path.
pub fn normalize_domain(raw: &str) -> Result<String, AdminError> {
    let s = raw.trim().to_ascii_lowercase();
    let s = s.split("://").last().unwrap_or("");
    let host = s.split(['/', '?', '#']).next().unwrap_or("");
    let host = if host.starts_with('[') {
        host.split(']')
            .next()
            .map(|h| format!("{h}]"))
            .unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or("").to_string()
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(AdminError::Invalid(format!("`{raw}` is not a domain")));
    }
    Ok(host)
}

async fn insert_key<C: ConnectionTrait>(
    conn: &C,
    org_id: &str,
    name: Option<String>,
    read_only: bool,
) -> Result<CreatedKey, AdminError> {
    let api_key = random_token("ok_", 40);
    let key_id = uuid::Uuid::new_v4().to_string();
    let scopes = if read_only {
        SCOPE_READ.to_string()
    } else {
        format!("{SCOPE_READ},{SCOPE_WRITE}")
    };
    entity::api_key::ActiveModel {
        id: Set(key_id.clone()),
        organization_id: Set(org_id.to_string()),
        name: Set(name),
        key_hash: Set(ApiKeyHash::of(&api_key).0),
        key_prefix: Set(api_key.chars().take(8).collect()),
        scopes: Set(scopes),
        disabled: Set(false),
        created_by_id: Set(None),
        created_at: Set(Utc::now()),
        last_used_at: Set(None),
    }
    .insert(conn)
    .await?;
    Ok(CreatedKey { key_id, api_key })
}

pub async fn create_org(
    db: &DatabaseConnection,
    new: NewOrganization,
) -> Result<CreatedOrganization, AdminError> {
    let name = new.name.trim().to_string();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(AdminError::Invalid(
            "--name must be 1 to 200 characters".into(),
        ));
    }
    if let Some(rate) = new.ingest_rate_limit {
        if rate < 1 {
            return Err(AdminError::Invalid(
                "--ingest-rate-limit must be at least 1".into(),
            ));
        }
    }
    for (flag, value) in [
        ("--api-call-limit", new.api_call_limit),
        ("--connection-limit", new.connection_limit),
    ] {
        if value.is_some_and(|v| v < 0) {
            return Err(AdminError::Invalid(format!("{flag} must not be negative")));
        }
    }
    let domains = new
        .tracking_domains
        .iter()
        .map(|d| normalize_domain(d))
        .collect::<Result<Vec<_>, _>>()?;

    let txn = crate::db::begin_write(db).await?;
    let org_id = uuid::Uuid::new_v4().to_string();
    let now = Utc::now();
    entity::organization::ActiveModel {
        id: Set(org_id.clone()),
        name: Set(name),
        plan: Set(new.plan.as_str().to_string()),
        api_call_limit: Set(new.api_call_limit.or(new.plan.api_call_limit())),
        connection_limit: Set(new.connection_limit.or(new.plan.connection_limit())),
        ingest_rate_limit: Set(new
            .ingest_rate_limit
            .unwrap_or(crate::ingest::DEFAULT_RATE_LIMIT)),
        created_at: Set(now),
    }
    .insert(&txn)
    .await?;
    let key = insert_key(&txn, &org_id, Some("default".into()), false).await?;
    let public_key = random_token("pk_", 32);
    entity::tracking_config::ActiveModel {
        id: Set(uuid::Uuid::new_v4().to_string()),
        organization_id: Set(org_id.clone()),
        public_key: Set(public_key.clone()),
        active: Set(true),
        created_at: Set(now),
    }
    .insert(&txn)
    .await?;
    let mut seen = std::collections::HashSet::new();
    for domain in domains.into_iter().filter(|d| seen.insert(d.clone())) {
        entity::tracking_domain::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org_id.clone()),
            domain: Set(domain),
            enabled: Set(true),
            created_at: Set(now),
        }
        .insert(&txn)
        .await?;
    }
    txn.commit().await?;
    Ok(CreatedOrganization {
        organization_id: org_id,
        api_key: key.api_key,
        public_key,
    })
}

pub async fn create_key(
    db: &DatabaseConnection,
    org_id: &str,
    name: Option<String>,
    read_only: bool,
) -> Result<CreatedKey, AdminError> {
    let org = entity::organization::Entity::find_by_id(org_id.to_string())
        .one(db)
        .await?;
    if org.is_none() {
        return Err(AdminError::NotFound(format!(
            "organization `{org_id}` not found"
        )));
    }
    insert_key(db, org_id, name, read_only).await
}

pub async fn disable_key(db: &DatabaseConnection, key_id: &str) -> Result<DisabledKey, AdminError> {
    let key = entity::api_key::Entity::find()
        .filter(entity::api_key::Column::Id.eq(key_id))
        .one(db)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("key `{key_id}` not found")))?;
    let mut model = key.into_active_model();
    model.disabled = Set(true);
    model.update(db).await?;
    Ok(DisabledKey {
        key_id: key_id.to_string(),
        disabled: true,
    })
}
