//! What every configuration action of an organization shares (the actions themselves live with
//! their features: signals and automations in `engine`, destinations in `notify`, agents in
//! `agents`): the action context, [`Change`], patches, keys and config hashes, audit and
//! paging. Actions take a connection and plain values and return [`PlatformError`]; the API
//! layer maps that to the command envelope.

pub mod audit;
pub mod paging;

use sea_orm::DbErr;

use crate::{
    auth::{AuthContext, AuthError},
    validation::ValidationIssue,
};

#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    #[error("invalid request")]
    Validation(Vec<ValidationIssue>),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{message}")]
    Conflict { message: String, unmet: Vec<String> },
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl From<DbErr> for PlatformError {
    fn from(err: DbErr) -> Self {
        if crate::db::is_unavailable(&err) {
            // The driver's words stay in the log: they name the pool and the server, which are
            // the operator's business, not the caller's.
            tracing::warn!(error = %err, "platform action: the database is unavailable");
            PlatformError::Unavailable(crate::db::UNAVAILABLE_MESSAGE.into())
        } else if crate::db::is_nul_character(&err) {
            PlatformError::Validation(vec![ValidationIssue::root(
                crate::db::NUL_CHARACTER_REFUSED,
            )])
        } else {
            PlatformError::Internal(err.to_string())
        }
    }
}

impl From<AuthError> for PlatformError {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Internal(e) => PlatformError::from(e),
            other => PlatformError::Unauthorized(other.to_string()),
        }
    }
}

impl AuthContext {
    /// The "agent write scope" every write platform action needs.
    pub fn require_write(&self) -> Result<(), PlatformError> {
        if self.can_write() {
            Ok(())
        } else {
            Err(PlatformError::Forbidden(
                "this API key is read-only: the write scope is required".to_string(),
            ))
        }
    }
}

impl From<Vec<ValidationIssue>> for PlatformError {
    fn from(issues: Vec<ValidationIssue>) -> Self {
        PlatformError::Validation(issues)
    }
}

pub type PlatformResult<T> = Result<T, PlatformError>;

/// A resource a command touched: its kind (`agent`, `signal`, `automation`, ...) and id.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceRef {
    pub kind: String,
    pub id: String,
}

impl ResourceRef {
    pub fn new(kind: &str, id: impl Into<String>) -> Self {
        Self {
            kind: kind.to_string(),
            id: id.into(),
        }
    }
}

/// What a write action changed: the resource as it is now (`view`), the resources it touched and
/// the id of the audit row it wrote.
#[derive(Debug)]
pub struct Change<V> {
    pub view: V,
    pub resources: Vec<ResourceRef>,
    pub audit_id: String,
}

impl<V> Change<V> {
    /// Writes the audit row for `resources` in `txn`, commits it and returns the change.
    pub async fn commit(
        txn: sea_orm::DatabaseTransaction,
        ctx: &ActionContext<'_>,
        view: V,
        resources: Vec<ResourceRef>,
        details: serde_json::Value,
    ) -> PlatformResult<Self> {
        let audit_id = audit::record(&txn, ctx, &resources, details).await?;
        txn.commit().await?;
        Ok(Self {
            view,
            resources,
            audit_id,
        })
    }

    /// The same change with another view of the resource.
    pub fn map<W>(self, f: impl FnOnce(V) -> W) -> Change<W> {
        Change {
            view: f(self.view),
            resources: self.resources,
            audit_id: self.audit_id,
        }
    }
}

/// What a write action needs to know about its caller, for scope checks and the audit row.
pub struct ActionContext<'a> {
    pub auth: &'a AuthContext,
    pub command_id: &'static str,
}

impl ActionContext<'_> {
    pub fn org(&self) -> &str {
        &self.auth.organization_id
    }
}

/// Parses a path id that the spec types as a UUID; anything else cannot name a resource.
pub fn uuid_id(raw: &str, what: &str) -> PlatformResult<String> {
    uuid::Uuid::parse_str(raw.trim())
        .map(|u| u.to_string())
        .map_err(|_| PlatformError::NotFound(format!("{what} `{raw}` not found")))
}

/// Lower-case, dash-separated form of a name, used as the default `key`.
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for ch in name.chars() {
        if ch.is_ascii_alphanumeric() {
            out.push(ch.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let trimmed = out.trim_end_matches('-').to_string();
    if trimmed.is_empty() {
        "item".to_string()
    } else {
        trimmed
    }
}

/// Hex SHA-256 of a JSON value's canonical text, the `configHash` of configuration resources.
pub fn config_hash(value: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    // serde_json's map is ordered by key (no preserve_order feature), so this text is canonical.
    let text = serde_json::to_string(value).unwrap_or_default();
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Schema version written on configuration resources created by this service.
pub const SCHEMA_VERSION: &str = "1";

/// A key derived from `name` that none of `existing` uses: `name-slug`, `name-slug-2`, ...
pub fn unique_key(name: &str, existing: &[String]) -> String {
    let base = slug(name);
    let mut candidate = base.clone();
    let mut n = 2;
    while existing.iter().any(|k| k == &candidate) {
        candidate = format!("{base}-{n}");
        n += 1;
    }
    candidate
}

/// The keys the organization's resources of `E` already use, for a new one's key. Read in the
/// organization's configuration turn ([`crate::db::take_turns`]), held until `txn` ends, so a
/// key chosen from them is still free at its commit.
pub async fn taken_keys<E: sea_orm::EntityTrait>(
    txn: &sea_orm::DatabaseTransaction,
    org: &str,
    org_column: E::Column,
    key_column: E::Column,
) -> PlatformResult<Vec<String>> {
    use sea_orm::{ColumnTrait, QueryFilter, QuerySelect};
    crate::db::take_turns(txn, crate::db::CONFIGURATION, org).await?;
    Ok(E::find()
        .select_only()
        .column(key_column)
        .filter(org_column.eq(org))
        .into_tuple()
        .all(txn)
        .await?)
}

/// A key for a new resource of `E` named `name` that none of the organization's uses
/// ([`unique_key`] over [`taken_keys`]), still free when `txn` commits.
pub async fn free_key<E: sea_orm::EntityTrait>(
    txn: &sea_orm::DatabaseTransaction,
    org: &str,
    name: &str,
    org_column: E::Column,
    key_column: E::Column,
) -> PlatformResult<String> {
    let taken = taken_keys::<E>(txn, org, org_column, key_column).await?;
    Ok(unique_key(name, &taken))
}

/// An optional, nullable input field: left out, sent as `null`, or sent with a value. On
/// updates, absent keeps the current value and `null` clears it.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Patch<T> {
    #[default]
    Absent,
    Null,
    Value(T),
}

impl<T> Patch<T> {
    /// The value, treating "absent" and `null` alike.
    pub fn value(self) -> Option<T> {
        match self {
            Patch::Value(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_value(&self) -> Option<&T> {
        match self {
            Patch::Value(v) => Some(v),
            _ => None,
        }
    }
}
