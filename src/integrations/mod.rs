//! Integrations: the provider registry, connections and connect sessions, setup steps, the
//! Stripe sync with its webhook, and the background scheduler that runs syncs.
//!
//! Functions here take a connection and plain values and return [`IntegrationError`]; the API
//! layer maps that to the spec's bodies.

pub mod capabilities;
pub mod connections;
pub mod credentials;
pub mod jobs;
pub mod providers;
pub mod scheduler;
pub mod sessions;
pub mod setup;
pub mod stripe;
pub mod sync;
pub mod webhook;

use std::time::Duration;

use sea_orm::DbErr;

use crate::validation::ValidationIssue;

pub use providers::Provider;

/// Integration settings of one process (environment variables of `serve`).
#[derive(Debug, Clone)]
pub struct IntegrationsConfig {
    /// `CUSTINTEL_STRIPE_API_BASE`: the service appends `/v1/...`.
    pub stripe_api_base: String,
    /// `CUSTINTEL_SYNC_INTERVAL_SECS`: time between two syncs of one connection.
    pub sync_interval: Duration,
    /// How often the scheduler looks for due work (`CUSTINTEL_SCHEDULER_TICK_MS`).
    pub scheduler_tick: Duration,
    /// Whether a serving instance's background work runs the scheduler (syncs, connect
    /// sessions' expiry). On for `serve`; off where a caller drives the scheduler itself.
    pub runs_scheduler: bool,
}

pub const DEFAULT_STRIPE_API_BASE: &str = "https://api.stripe.com";
pub const DEFAULT_SYNC_INTERVAL_SECS: u64 = 900;
/// Short enough that a new connection's first sync starts within 10 s of connect.
pub const DEFAULT_SCHEDULER_TICK_MS: u64 = 2_000;

impl Default for IntegrationsConfig {
    fn default() -> Self {
        Self {
            stripe_api_base: DEFAULT_STRIPE_API_BASE.to_string(),
            sync_interval: Duration::from_secs(DEFAULT_SYNC_INTERVAL_SECS),
            scheduler_tick: Duration::from_millis(DEFAULT_SCHEDULER_TICK_MS),
            runs_scheduler: true,
        }
    }
}

impl IntegrationsConfig {
    /// Reads the environment; unset or unparsable values keep their defaults.
    pub fn from_env() -> Self {
        let mut config = Self::default();
        if let Ok(base) = std::env::var("CUSTINTEL_STRIPE_API_BASE") {
            if !base.trim().is_empty() {
                config.stripe_api_base = base.trim().trim_end_matches('/').to_string();
            }
        }
        if let Some(secs) = env_u64("CUSTINTEL_SYNC_INTERVAL_SECS").filter(|s| *s > 0) {
            config.sync_interval = Duration::from_secs(secs);
        }
        if let Some(ms) = env_u64("CUSTINTEL_SCHEDULER_TICK_MS").filter(|s| *s > 0) {
            config.scheduler_tick = Duration::from_millis(ms);
        }
        config
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

#[derive(Debug, thiserror::Error)]
pub enum IntegrationError {
    /// The body, a parameter or the provider name is invalid.
    #[error("{message}")]
    BadRequest {
        message: String,
        issues: Vec<ValidationIssue>,
    },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("the plan's integration connection limit is reached")]
    ConnectionLimit {
        plan: String,
        current: i64,
        limit: i64,
    },
    /// The provider is valid but not connected in this organization.
    #[error("{0}")]
    NotConnected(String),
    /// The connection exists but a setup step it needs has not run (a Stripe webhook before
    /// its signing secret is stored).
    #[error("{0}")]
    NotSetUp(String),
    #[error("{0}")]
    NotFound(String),
    /// A provider's API failed or could not be reached.
    #[error("{0}")]
    Upstream(String),
    /// The database could not be reached; retry.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl IntegrationError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        let message = message.into();
        Self::BadRequest {
            issues: vec![],
            message,
        }
    }

    /// A 400 that names the offending field.
    pub fn invalid_field(field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self::BadRequest {
            issues: vec![ValidationIssue::at(field, message.clone())],
            message: format!("`{field}`: {message}"),
        }
    }
}

impl From<DbErr> for IntegrationError {
    fn from(err: DbErr) -> Self {
        if crate::db::is_unavailable(&err) {
            IntegrationError::Unavailable(crate::db::UNAVAILABLE_MESSAGE.into())
        } else if crate::db::is_nul_character(&err) {
            IntegrationError::BadRequest {
                message: crate::db::NUL_CHARACTER_REFUSED.into(),
                issues: vec![ValidationIssue::root(crate::db::NUL_CHARACTER_REFUSED)],
            }
        } else {
            IntegrationError::Internal(err.to_string())
        }
    }
}

impl From<crate::auth::AuthError> for IntegrationError {
    fn from(err: crate::auth::AuthError) -> Self {
        match err {
            crate::auth::AuthError::Internal(e) => e.into(),
            other => IntegrationError::Unauthorized(other.to_string()),
        }
    }
}

pub type IntegrationResult<T> = Result<T, IntegrationError>;

/// A provider named in an API request: the exact ID (`gmail` is the CLI's alias only).
pub fn provider_for_api(name: &str) -> IntegrationResult<&'static Provider> {
    let name = name.trim();
    if name == providers::GMAIL_ALIAS {
        return Err(IntegrationError::invalid_field(
            "provider",
            "`gmail` is the command line's alias: API requests use `google-mail`",
        ));
    }
    providers::by_id(name).ok_or_else(|| {
        IntegrationError::invalid_field(
            "provider",
            format!("unknown provider `{name}`; one of: {}", providers::ids()),
        )
    })
}
