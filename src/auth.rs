//! Platform API authentication: Bearer `ok_` keys, their scopes, and the organization they
//! scope every lookup to.

use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter};

use crate::{crypto::ApiKeyHash, db::Reads};

pub const SCOPE_READ: &str = "read";
pub const SCOPE_WRITE: &str = "write";

/// Who is calling: the key and its organization.
#[derive(Debug, Clone)]
pub struct AuthContext {
    pub organization_id: String,
    pub key_id: String,
    pub created_by_id: Option<String>,
    pub scopes: Vec<String>,
}

impl AuthContext {
    pub fn can_write(&self) -> bool {
        self.scopes.iter().any(|s| s == SCOPE_WRITE)
    }
}

/// What every route answers (401) when no Bearer key came with the request.
pub const MISSING_KEY: &str = "missing API key: send `Authorization: Bearer ok_...`";

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("API keys start with `ok_`")]
    Malformed,
    #[error("invalid API key")]
    Unknown,
    #[error("this API key is disabled")]
    Disabled,
    #[error("key validation failed: {0}")]
    Internal(#[from] sea_orm::DbErr),
}

/// Resolves a presented key to its organization.
pub async fn authenticate(db: &DatabaseConnection, key: &str) -> Result<AuthContext, AuthError> {
    authenticate_reading(db, key).await.map(|(auth, _)| auth)
}

/// [`authenticate`], answering also the read connection it looked the key up on, for the
/// request's own reads (a tool call's), so that a request takes one.
pub async fn authenticate_reading(
    db: &DatabaseConnection,
    key: &str,
) -> Result<(AuthContext, Reads), AuthError> {
    let key = key.trim();
    if !key.starts_with("ok_") {
        return Err(AuthError::Malformed);
    }
    let hash = ApiKeyHash::of(key);
    // Every request passes here: read on a read connection (on SQLite, no thread hand-off).
    let reads = Reads::open(db).await?;
    let row = entity::api_key::Entity::find()
        .filter(entity::api_key::Column::KeyHash.eq(hash.0))
        .one(&reads)
        .await?
        .ok_or(AuthError::Unknown)?;
    if row.disabled {
        return Err(AuthError::Disabled);
    }
    let auth = AuthContext {
        organization_id: row.organization_id,
        key_id: row.id,
        created_by_id: row.created_by_id,
        scopes: row
            .scopes
            .split(',')
            .map(|s| s.trim().to_string())
            .collect(),
    };
    Ok((auth, reads))
}
