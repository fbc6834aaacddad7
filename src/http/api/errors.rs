//! The one place that maps domain errors to HTTP: each domain error type ([`PlatformError`],
//! [`ToolError`], [`AuthError`], [`IntegrationError`], [`IngestError`]) to the status and body
//! the spec gives it. Each envelope has its error type here: the command envelope's error
//! variants of [`ActionResponse`], [`ToolFailure`], [`KeyRefusal`], [`IntegrationFailure`] and
//! [`IngestFailure`]. A route's typed response takes one with `From`, as its variant of the same
//! status, so imports run one way: the routes read this file, and this file reads no route.
//! Nothing else in `src/http/api/` picks a status for a domain error.

use std::collections::BTreeMap;

use poem::{
    http::{header, HeaderName, HeaderValue, StatusCode},
    web::Json as PoemJson,
    IntoResponse, Response,
};
use poem_openapi::{payload::Json, types::ToJSON, Object};
use serde_json::{json, Value};

use crate::{
    auth::AuthError,
    http::envelope::{
        action_validation, error_envelope, issue_bodies, ActionResponse, CommandData, ErrorBody,
        ErrorCode,
    },
    ingest::IngestError,
    integrations::IntegrationError,
    platform::PlatformError,
    tools::ToolError,
    validation::ValidationIssue,
};

// ---------------------------------------------------------------------------------------------
// Platform actions: PlatformError -> the command envelope's error responses.

impl<T: CommandData> From<PlatformError> for ActionResponse<T> {
    fn from(err: PlatformError) -> Self {
        match err {
            PlatformError::Validation(issues) => action_validation(issues),
            PlatformError::Forbidden(message) => Self::Forbidden(error_envelope::<T>(
                ErrorCode::AuthorizationDenied,
                message,
                false,
                None,
            )),
            PlatformError::NotFound(message) => Self::NotFound(error_envelope::<T>(
                ErrorCode::NotFound,
                message,
                false,
                None,
            )),
            PlatformError::Conflict { message, unmet } => {
                let mut details = BTreeMap::new();
                details.insert(
                    "unmet".to_string(),
                    Value::Array(unmet.into_iter().map(Value::String).collect()),
                );
                Self::Conflict(error_envelope::<T>(
                    ErrorCode::Conflict,
                    message,
                    false,
                    Some(details),
                ))
            }
            PlatformError::Unavailable(message) => Self::Unavailable(error_envelope::<T>(
                ErrorCode::TransientFailure,
                message,
                true,
                None,
            )),
            PlatformError::Unauthorized(message) => Self::Unauthorized(ErrorBody::new(message)),
            PlatformError::Internal(message) => {
                tracing::error!(command = T::COMMAND_ID, %message, "platform action failed");
                Self::Internal(ErrorBody::new("internal error"))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The tool gateway: ToolError -> `POST /api/tools/call`, `GET /api/tools` and MCP `tools/call`.

/// The plan's tool-call allowance for this billing cycle is used up.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct PlanLimitError {
    pub error: String,
    /// Always `api_limit_exceeded`.
    pub code: String,
    /// The organization's plan: `free`, `pro` or `enterprise`.
    pub plan: String,
    /// Always `api_calls`.
    pub feature: String,
    /// When the allowance renews: Unix milliseconds of the next billing cycle's start (the
    /// first day of the next calendar month, 00:00 UTC).
    pub reset_at: i64,
}

/// A failed tool call (or key check of the tool routes), by status.
pub enum ToolFailure {
    BadRequest(Json<ErrorBody>),
    Unauthorized(Json<ErrorBody>),
    LimitExceeded(Json<PlanLimitError>),
    NotFound(Json<ErrorBody>),
    Internal(Json<ErrorBody>),
    Unavailable(Json<ErrorBody>),
}

impl From<ToolError> for ToolFailure {
    fn from(err: ToolError) -> Self {
        match err {
            ToolError::Invalid(issues) => Self::BadRequest(Json(ErrorBody {
                error: "invalid tool call".to_string(),
                details: Some(issue_bodies(issues)),
            })),
            ToolError::Refused(message) => Self::BadRequest(ErrorBody::new(message)),
            ToolError::NotFound(message) => Self::NotFound(ErrorBody::new(message)),
            ToolError::Internal(message) => {
                tracing::error!("tool failed: {message}");
                Self::Internal(ErrorBody::new("internal error"))
            }
            ToolError::Unavailable(message) => Self::Unavailable(ErrorBody::new(message)),
            ToolError::LimitExceeded {
                ref plan, reset_at, ..
            } => Self::LimitExceeded(Json(PlanLimitError {
                error: err.to_string(),
                code: "api_limit_exceeded".into(),
                plan: plan.clone(),
                feature: "api_calls".into(),
                reset_at,
            })),
        }
    }
}

/// A key check of the tool routes that failed: 401, or as a failed call when the check itself
/// failed (503 while the database cannot be reached).
impl From<AuthError> for ToolFailure {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Internal(e) => ToolError::from(e).into(),
            other => Self::Unauthorized(ErrorBody::new(other.to_string())),
        }
    }
}

/// The body a failed tool call answers over HTTP, as JSON: MCP's `tools/call` returns it as its
/// error result, so both transports say the same.
pub fn tool_error_json(err: ToolError) -> Value {
    match ToolFailure::from(err) {
        ToolFailure::LimitExceeded(Json(body)) => body.to_json().unwrap_or(Value::Null),
        ToolFailure::BadRequest(Json(body))
        | ToolFailure::Unauthorized(Json(body))
        | ToolFailure::NotFound(Json(body))
        | ToolFailure::Internal(Json(body))
        | ToolFailure::Unavailable(Json(body)) => body.to_json().unwrap_or(Value::Null),
    }
}

// ---------------------------------------------------------------------------------------------
// Keys and MCP: AuthError on routes that answer it themselves.

/// What a key check that could not reach the database answers (503).
const KEY_CHECK_UNAVAILABLE: &str =
    "the key could not be checked: the database is unavailable; retry";

/// A key that `POST /api/validate-api-key` refuses (401 `{valid: false, error}`), or a check
/// that could not be made: 503 while the database cannot be reached, else 500.
pub enum KeyRefusal {
    Invalid(String),
    Unavailable(Json<ErrorBody>),
    Internal(Json<ErrorBody>),
}

impl From<AuthError> for KeyRefusal {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Internal(e) if crate::db::is_unavailable(&e) => {
                Self::Unavailable(ErrorBody::new(KEY_CHECK_UNAVAILABLE))
            }
            AuthError::Internal(e) => {
                tracing::error!(error = %e, "key validation failed");
                Self::Internal(ErrorBody::new("key validation failed"))
            }
            other => Self::Invalid(other.to_string()),
        }
    }
}

/// `/mcp` refuses a request: 401 `{error}` with `WWW-Authenticate: Bearer`.
pub fn mcp_unauthorized(message: &str) -> Response {
    PoemJson(json!({ "error": message }))
        .with_status(StatusCode::UNAUTHORIZED)
        .with_header("WWW-Authenticate", "Bearer")
        .into_response()
}

/// `/mcp`'s key check failed: as [`KeyRefusal`] decides, in `/mcp`'s plain `{error}` shape.
pub fn mcp_auth_error(err: AuthError) -> Response {
    match KeyRefusal::from(err) {
        KeyRefusal::Invalid(message) => mcp_unauthorized(&message),
        KeyRefusal::Unavailable(Json(body)) => PoemJson(json!({ "error": body.error }))
            .with_status(StatusCode::SERVICE_UNAVAILABLE)
            .into_response(),
        KeyRefusal::Internal(_) => PoemJson(json!({ "error": "internal error" }))
            .with_status(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response(),
    }
}

// ---------------------------------------------------------------------------------------------
// Integrations: IntegrationError -> `/api/integrations`, disconnect, the Stripe webhook and the
// connect page.

/// The plan allows no more integration connections.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct PlanConnectionLimit {
    pub error: String,
    /// `plan_connection_limit_exceeded`.
    pub code: String,
    /// `integration_connections`.
    pub feature: String,
    pub plan: String,
    pub current_connections: i64,
    pub limit: i64,
}

/// A failed integration request, by status. Routes that cannot meet a variant (the Stripe
/// webhook has no API key) answer it as an internal error.
pub enum IntegrationFailure {
    BadRequest(Json<ErrorBody>),
    Unauthorized(Json<ErrorBody>),
    /// 403: the key is read-only.
    Forbidden(Json<ErrorBody>),
    /// 403: the plan's connection limit is reached.
    ConnectionLimit(Json<PlanConnectionLimit>),
    /// 404: the provider is valid but not connected (disconnect answers it in its own body).
    NotConnected(String),
    NotFound(Json<ErrorBody>),
    /// 409 on the Stripe webhook before its signing secret is stored; 400 on the other routes.
    NotSetUp(Json<ErrorBody>),
    /// 503: a provider's API or the database cannot be reached.
    Unavailable(Json<ErrorBody>),
    /// 500, logged here; the body says no more than "internal error".
    Internal(Json<ErrorBody>),
}

fn bad_request_body(message: String, issues: Vec<ValidationIssue>) -> Json<ErrorBody> {
    Json(ErrorBody {
        error: message,
        details: (!issues.is_empty()).then(|| issue_bodies(issues)),
    })
}

impl From<IntegrationError> for IntegrationFailure {
    fn from(err: IntegrationError) -> Self {
        match err {
            IntegrationError::BadRequest { message, issues } => {
                Self::BadRequest(bad_request_body(message, issues))
            }
            IntegrationError::Unauthorized(m) => Self::Unauthorized(ErrorBody::new(m)),
            IntegrationError::Forbidden(m) => Self::Forbidden(ErrorBody::new(m)),
            IntegrationError::ConnectionLimit {
                plan,
                current,
                limit,
            } => Self::ConnectionLimit(Json(PlanConnectionLimit {
                error: format!(
                    "the {plan} plan allows {limit} integration connection(s) and {current} are \
                     in use: disconnect one or upgrade the plan"
                ),
                code: "plan_connection_limit_exceeded".to_string(),
                feature: "integration_connections".to_string(),
                plan,
                current_connections: current,
                limit,
            })),
            IntegrationError::NotConnected(m) => Self::NotConnected(m),
            IntegrationError::NotFound(m) => Self::NotFound(ErrorBody::new(m)),
            IntegrationError::NotSetUp(m) => Self::NotSetUp(ErrorBody::new(m)),
            IntegrationError::Upstream(m) | IntegrationError::Unavailable(m) => {
                Self::Unavailable(ErrorBody::new(m))
            }
            IntegrationError::Internal(m) => {
                tracing::error!(message = %m, "integration request failed");
                Self::Internal(ErrorBody::new("internal error"))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Ingest: IngestError -> `{success: false, processed: 0, errors: [{index: -1, message}]}`.

/// A refused ingest request, by status, with the message its body carries.
pub enum IngestFailure {
    Forbidden(String),
    BadRequest(String),
    TooLarge(String),
    /// 429, with `Retry-After` and the exhausted rate limit in [`IngestFailure::headers`].
    RateLimited {
        message: String,
        limit: u32,
        retry_after_secs: u64,
    },
    /// 503: the database cannot be reached; nothing was stored.
    Unavailable(String),
    Internal(String),
}

fn header_value(v: impl ToString) -> HeaderValue {
    HeaderValue::from_str(&v.to_string()).unwrap_or_else(|_| HeaderValue::from_static(""))
}

impl From<IngestError> for IngestFailure {
    fn from(err: IngestError) -> Self {
        let message = err.to_string();
        match err {
            IngestError::Forbidden(_) => Self::Forbidden(message),
            IngestError::BadRequest(_) => Self::BadRequest(message),
            IngestError::TooLarge => Self::TooLarge(message),
            IngestError::RateLimited {
                limit,
                retry_after_secs,
            } => Self::RateLimited {
                message,
                limit,
                retry_after_secs,
            },
            IngestError::Unavailable(_) => Self::Unavailable(message),
            IngestError::Internal(_) => Self::Internal(message),
        }
    }
}

impl IngestFailure {
    /// The headers the answer carries (a 429: `Retry-After` and the exhausted rate limit).
    pub fn headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        let Self::RateLimited {
            limit,
            retry_after_secs,
            ..
        } = self
        else {
            return vec![];
        };
        vec![
            (header::RETRY_AFTER, header_value(retry_after_secs)),
            (
                HeaderName::from_static("x-ratelimit-limit"),
                header_value(limit),
            ),
            (
                HeaderName::from_static("x-ratelimit-remaining"),
                header_value(0),
            ),
            (
                HeaderName::from_static("x-ratelimit-reset"),
                header_value(retry_after_secs),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::PathSegment;

    /// An agent reads a failed tool call as [`ToolError::to_json`]; HTTP and MCP answer the
    /// typed body mapped here. They must say the same.
    #[test]
    fn tool_error_json_matches_what_agents_read() {
        let errors = || {
            vec![
                ToolError::Invalid(vec![
                    ValidationIssue::new(vec![PathSegment::from("input"), 0.into()], "bad"),
                    ValidationIssue::root("worse"),
                ]),
                ToolError::Refused("no writes".into()),
                ToolError::NotFound("customer `x` not found".into()),
                ToolError::Internal("secret detail".into()),
                ToolError::Unavailable("retry".into()),
                ToolError::LimitExceeded {
                    plan: "free".into(),
                    limit: 1000,
                    reset_at: 1_798_761_600_000,
                },
            ]
        };
        for (typed, plain) in errors().into_iter().zip(errors()) {
            assert_eq!(tool_error_json(typed), plain.to_json());
        }
    }
}
