//! The one place that maps domain errors to HTTP: each domain error type ([`PlatformError`],
//! [`ToolError`], [`AuthError`], [`IntegrationError`], [`IngestError`]) to the status and body
//! the spec gives it, as the typed response of the route that answers. Handlers convert with
//! `From` (`.into()`) and call nothing here by name, so imports run one way (this file reads the
//! routes' response types); nothing else in `src/http/api/` picks a status for a domain error.

use std::collections::BTreeMap;

use poem::{
    http::{header, HeaderName, HeaderValue, StatusCode},
    web::Json as PoemJson,
    IntoResponse, Response,
};
use poem_openapi::{
    payload::Json,
    types::{ParseFromJSON, ToJSON},
};
use serde_json::{json, Value};

use super::{
    connect_page,
    ingest::{refused, IngestRefusal, IngestResponse, PreflightResponse},
    integrations::{
        DisconnectResponse, Disconnected, Forbidden, IntegrationResponse, NotConnected,
        PlanConnectionLimit,
    },
    keys::ValidateKeyResponse,
    tools::{PlanLimitError, ToolCallResponse, ToolListResponse},
    webhooks::WebhookResponse,
};
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
// The tool gateway: ToolError -> `POST /api/tools/call` and MCP `tools/call`.

/// 400 `{error: "invalid tool call", details}`.
pub fn invalid_tool_call(issues: Vec<ValidationIssue>) -> ToolCallResponse {
    ToolCallResponse::BadRequest(Json(ErrorBody {
        error: "invalid tool call".to_string(),
        details: Some(issue_bodies(issues)),
    }))
}

impl From<ToolError> for ToolCallResponse {
    fn from(err: ToolError) -> Self {
        match err {
            ToolError::Invalid(issues) => invalid_tool_call(issues),
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

/// A key check of `POST /api/tools/call` that failed.
impl From<AuthError> for ToolCallResponse {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Internal(e) => ToolError::from(e).into(),
            other => Self::Unauthorized(ErrorBody::new(other.to_string())),
        }
    }
}

/// A key check of `GET /api/tools` that failed.
impl From<AuthError> for ToolListResponse {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Internal(e) => match ToolError::from(e) {
                ToolError::Unavailable(message) => Self::Unavailable(ErrorBody::new(message)),
                other => {
                    tracing::error!("key check failed: {other}");
                    Self::Internal(ErrorBody::new("internal error"))
                }
            },
            other => Self::Unauthorized(ErrorBody::new(other.to_string())),
        }
    }
}

/// The body a failed tool call answers over HTTP, as JSON: MCP's `tools/call` returns it as its
/// error result. Built from the typed response, so both transports say the same.
pub fn tool_error_json(err: ToolError) -> Value {
    match ToolCallResponse::from(err) {
        ToolCallResponse::Ok(Json(value)) => value,
        ToolCallResponse::LimitExceeded(Json(body)) => body.to_json().unwrap_or(Value::Null),
        ToolCallResponse::BadRequest(Json(body))
        | ToolCallResponse::Unauthorized(Json(body))
        | ToolCallResponse::NotFound(Json(body))
        | ToolCallResponse::Internal(Json(body))
        | ToolCallResponse::Unavailable(Json(body)) => body.to_json().unwrap_or(Value::Null),
    }
}

// ---------------------------------------------------------------------------------------------
// Keys and MCP: AuthError on routes that answer it themselves.

/// What a key check that could not reach the database answers (503).
const KEY_CHECK_UNAVAILABLE: &str =
    "the key could not be checked: the database is unavailable; retry";

/// `POST /api/validate-api-key`: 401 `{valid: false, error}`, 503 when the database cannot be
/// reached, or 500 when the check failed otherwise.
impl From<AuthError> for ValidateKeyResponse {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Internal(e) if crate::db::is_unavailable(&e) => {
                Self::Unavailable(ErrorBody::new(KEY_CHECK_UNAVAILABLE))
            }
            AuthError::Internal(e) => {
                tracing::error!(error = %e, "key validation failed");
                Self::Internal(ErrorBody::new("key validation failed"))
            }
            other => Self::invalid(other.to_string()),
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

/// `/mcp`'s key check failed.
pub fn mcp_auth_error(err: AuthError) -> Response {
    match err {
        AuthError::Internal(e) if crate::db::is_unavailable(&e) => {
            PoemJson(json!({ "error": KEY_CHECK_UNAVAILABLE }))
                .with_status(StatusCode::SERVICE_UNAVAILABLE)
                .into_response()
        }
        AuthError::Internal(e) => {
            tracing::error!("key check failed: {e}");
            PoemJson(json!({ "error": "internal error" }))
                .with_status(StatusCode::INTERNAL_SERVER_ERROR)
                .into_response()
        }
        other => mcp_unauthorized(&other.to_string()),
    }
}

// ---------------------------------------------------------------------------------------------
// Integrations: IntegrationError -> `/api/integrations`, disconnect, the Stripe webhook and the
// connect page.

fn bad_request_body(message: String, issues: Vec<ValidationIssue>) -> Json<ErrorBody> {
    Json(ErrorBody {
        error: message,
        details: (!issues.is_empty()).then(|| issue_bodies(issues)),
    })
}

impl<T: ParseFromJSON + ToJSON + Send + Sync> From<IntegrationError> for IntegrationResponse<T> {
    fn from(err: IntegrationError) -> Self {
        match err {
            IntegrationError::BadRequest { message, issues } => {
                Self::BadRequest(bad_request_body(message, issues))
            }
            IntegrationError::Unauthorized(m) => Self::Unauthorized(ErrorBody::new(m)),
            IntegrationError::Forbidden(m) => {
                Self::Forbidden(Json(Forbidden::Scope(ErrorBody::new(m).0)))
            }
            IntegrationError::ConnectionLimit {
                plan,
                current,
                limit,
            } => Self::Forbidden(Json(Forbidden::Limit(PlanConnectionLimit {
                error: format!(
                    "the {plan} plan allows {limit} integration connection(s) and {current} are \
                     in use: disconnect one or upgrade the plan"
                ),
                code: "plan_connection_limit_exceeded".to_string(),
                feature: "integration_connections".to_string(),
                plan,
                current_connections: current,
                limit,
            }))),
            IntegrationError::NotConnected(m) | IntegrationError::NotFound(m) => {
                Self::NotFound(ErrorBody::new(m))
            }
            // Only the Stripe webhook route meets it (409 there); these routes answer 400.
            IntegrationError::NotSetUp(m) => Self::BadRequest(bad_request_body(m, vec![])),
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

/// Disconnect: 404 `{success: false, message}` when the provider is not connected; the rest as
/// the other integration routes, within the statuses disconnect documents.
impl From<IntegrationError> for DisconnectResponse {
    fn from(err: IntegrationError) -> Self {
        match err {
            IntegrationError::NotConnected(message) => Self::NotConnected(Json(NotConnected {
                success: false,
                message,
            })),
            IntegrationError::Forbidden(m) => Self::Forbidden(ErrorBody::new(m)),
            other => match IntegrationResponse::<Disconnected>::from(other) {
                IntegrationResponse::BadRequest(b) => Self::BadRequest(b),
                IntegrationResponse::Unauthorized(b) => Self::Unauthorized(b),
                IntegrationResponse::Unavailable(b) => Self::Unavailable(b),
                _ => Self::Internal(ErrorBody::new("internal error")),
            },
        }
    }
}

/// The Stripe webhook: 400 for a bad signature or event, 404 for an unknown connection, 409
/// before its signing secret is stored, 503 when Stripe or the database could not be reached
/// (Stripe retries).
impl From<IntegrationError> for WebhookResponse {
    fn from(err: IntegrationError) -> Self {
        match err {
            IntegrationError::BadRequest { message, issues } => {
                Self::BadRequest(bad_request_body(message, issues))
            }
            IntegrationError::NotFound(m) | IntegrationError::NotConnected(m) => {
                Self::NotFound(ErrorBody::new(m))
            }
            IntegrationError::NotSetUp(m) => Self::NotSetUp(ErrorBody::new(m)),
            IntegrationError::Upstream(m) | IntegrationError::Unavailable(m) => {
                Self::Unavailable(ErrorBody::new(m))
            }
            other => {
                tracing::error!(error = %other, "Stripe webhook failed");
                Self::Internal(ErrorBody::new("internal error"))
            }
        }
    }
}

/// The connect page's answer to a failed lookup: an HTML page, 404 for an unknown link, 503
/// while the database cannot be reached, else 500.
impl From<IntegrationError> for connect_page::ErrorPage {
    fn from(err: IntegrationError) -> Self {
        Self(match err {
            IntegrationError::NotFound(_) => connect_page::page(
                StatusCode::NOT_FOUND,
                "Connect link not found",
                "<h1>This connect link is not valid</h1>\
             <p>Run <code>custintel integrations connect PROVIDER</code> for a new one.</p>",
            ),
            IntegrationError::Unavailable(_) => connect_page::page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again in a moment",
                "<h1>The service is briefly unavailable</h1><p>Reload this page in a moment.</p>",
            ),
            other => {
                tracing::error!(error = %other, "connect page failed");
                connect_page::page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    "<h1>Something went wrong</h1><p>Try the link again in a moment.</p>",
                )
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Ingest: IngestError -> `{success: false, processed: 0, errors: [{index: -1, message}]}`.

fn header_value(v: impl ToString) -> HeaderValue {
    HeaderValue::from_str(&v.to_string()).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The ingest answer to a refused request, with the headers it carries (429: `Retry-After` and
/// the exhausted rate limit).
impl From<IngestError> for IngestRefusal {
    fn from(err: IngestError) -> Self {
        let (response, headers) = refusal(err);
        Self { response, headers }
    }
}

fn refusal(err: IngestError) -> (IngestResponse, Vec<(HeaderName, HeaderValue)>) {
    let message = err.to_string();
    match err {
        IngestError::Forbidden(_) => (IngestResponse::Forbidden(refused(message)), vec![]),
        IngestError::BadRequest(_) => (IngestResponse::BadRequest(refused(message)), vec![]),
        IngestError::TooLarge => (IngestResponse::TooLarge(refused(message)), vec![]),
        IngestError::RateLimited {
            limit,
            retry_after_secs,
        } => (
            IngestResponse::TooManyRequests(refused(message)),
            [
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
            .into(),
        ),
        IngestError::Unavailable(_) => (IngestResponse::Unavailable(refused(message)), vec![]),
        IngestError::Internal(_) => (IngestResponse::Internal(refused(message)), vec![]),
    }
}

/// A CORS preflight answers every refusal with 403 (a browser only needs to know it may not
/// send), and 503 while the key's domains cannot be read.
impl From<IngestError> for PreflightResponse {
    fn from(err: IngestError) -> Self {
        match err {
            IngestError::Unavailable(m) => Self::Unavailable(refused(m)),
            other => Self::Forbidden(refused(other.to_string())),
        }
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
