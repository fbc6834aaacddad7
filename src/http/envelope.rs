//! The command envelope of platform actions and the error bodies, in one place; which domain
//! error answers which of them is decided in [`crate::http::api::errors`].

use std::collections::BTreeMap;

use poem::error::ParsePathError;
use poem_openapi::{
    error::{AuthorizationError, ContentTypeError, ParseParamError},
    payload::Json,
    types::{ParseFromJSON, ToJSON},
    ApiResponse, Enum, Object, Union,
};
use serde_json::Value;

use crate::{
    correlation,
    http::request::RequestValidationError,
    validation::{PathSegment, ValidationIssue},
};

/// Version of every command's contract; the spec fixes 1 for `automation.enable`.
pub const COMMAND_VERSION: i32 = 1;

/// The `data` of one platform action, with the fixed `commandId` of that action.
pub trait CommandData: ParseFromJSON + ToJSON + Send + Sync {
    const COMMAND_ID: &'static str;
}

/// Implements [`CommandData`] for a data type.
#[macro_export]
macro_rules! command_data {
    ($ty:ty, $id:literal) => {
        impl $crate::http::envelope::CommandData for $ty {
            const COMMAND_ID: &'static str = $id;
        }
    };
}

/// A resource a command touched.
#[derive(Debug, Clone, Object)]
pub struct ResourceRef {
    /// Kind of resource: `agent`, `signal`, `automation`, `destination`.
    #[oai(rename = "type")]
    pub kind: String,
    pub id: String,
}

impl ResourceRef {
    pub fn new(kind: &str, id: impl Into<String>) -> Self {
        crate::platform::ResourceRef::new(kind, id).into()
    }
}

impl From<crate::platform::ResourceRef> for ResourceRef {
    fn from(r: crate::platform::ResourceRef) -> Self {
        Self {
            kind: r.kind,
            id: r.id,
        }
    }
}

/// Outcome of a completed command.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct CommandResult<T: ParseFromJSON + ToJSON + Send + Sync> {
    /// Same value as the envelope's `commandId`.
    pub operation_id: String,
    /// Always `completed`.
    pub status: String,
    pub resources: Vec<ResourceRef>,
    pub data: T,
    pub warnings: Vec<String>,
    /// Id of the audit record written for a change; absent on reads.
    #[oai(skip_serializing_if_is_none)]
    pub audit_id: Option<String>,
}

/// Success envelope of every platform action.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct CommandEnvelope<T: ParseFromJSON + ToJSON + Send + Sync> {
    /// Always `true`.
    pub ok: bool,
    pub command_id: String,
    pub command_version: i32,
    pub correlation_id: String,
    pub result: CommandResult<T>,
}

/// Machine-readable failure class of a platform action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum ErrorCode {
    ValidationFailed,
    AuthorizationDenied,
    Conflict,
    NotFound,
    RateLimited,
    TransientFailure,
}

/// What went wrong in a platform action.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct CommandError {
    pub code: ErrorCode,
    pub message: String,
    pub correlation_id: String,
    /// Whether the same request may succeed when retried unchanged.
    pub retryable: bool,
    /// Free-form detail: `issues` for `validation_failed`, `unmet` for `conflict`.
    #[oai(skip_serializing_if_is_none)]
    pub details: Option<BTreeMap<String, Value>>,
}

/// Error envelope of platform actions (400, 403, 404, 409, 503).
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct ErrorEnvelope {
    /// Always `false`.
    pub ok: bool,
    pub command_id: String,
    pub command_version: i32,
    pub error: CommandError,
}

/// Plain error body of the Platform API (401 and 500 of platform actions, and other routes).
#[derive(Debug, Object)]
pub struct ErrorBody {
    pub error: String,
    /// Validation issues, when the error is about the request's content.
    #[oai(skip_serializing_if_is_none)]
    pub details: Option<Vec<IssueBody>>,
}

/// A validation issue: where in the input, and what is wrong there.
#[derive(Debug, Clone, PartialEq, Object)]
#[oai(rename = "ValidationIssue")]
pub struct IssueBody {
    /// Keys and array indexes from the root of the input to the offending value; empty for the
    /// input as a whole.
    pub path: Vec<PathSegmentBody>,
    pub message: String,
}

/// One segment of a validation path: an object key or an array index.
#[derive(Debug, Clone, PartialEq, Union)]
#[oai(rename = "PathSegment")]
pub enum PathSegmentBody {
    Key(String),
    Index(i64),
}

impl From<ValidationIssue> for IssueBody {
    fn from(issue: ValidationIssue) -> Self {
        let path = issue
            .path
            .into_iter()
            .map(|segment| match segment {
                PathSegment::Key(key) => PathSegmentBody::Key(key),
                PathSegment::Index(index) => PathSegmentBody::Index(index),
            })
            .collect();
        Self {
            path,
            message: issue.message,
        }
    }
}

/// The wire form of domain issues.
pub fn issue_bodies(issues: Vec<ValidationIssue>) -> Vec<IssueBody> {
    issues.into_iter().map(IssueBody::from).collect()
}

impl ErrorBody {
    pub fn new(error: impl Into<String>) -> Json<Self> {
        Json(Self {
            error: error.into(),
            details: None,
        })
    }
}

/// Every platform action answers with one of these.
#[derive(ApiResponse)]
#[oai(bad_request_handler = "action_bad_request")]
pub enum ActionResponse<T: CommandData> {
    /// The command completed; `result.data` holds what it returned.
    #[oai(status = 200)]
    Ok(Json<CommandEnvelope<T>>),
    /// The body or a parameter is invalid: `validation_failed`, with `details.issues`.
    #[oai(status = 400)]
    BadRequest(Json<ErrorEnvelope>),
    /// Missing, unknown or disabled API key.
    #[oai(status = 401)]
    Unauthorized(Json<ErrorBody>),
    /// The key is valid but lacks the write scope: `authorization_denied`.
    #[oai(status = 403)]
    Forbidden(Json<ErrorEnvelope>),
    /// No such resource in the key's organization: `not_found`.
    #[oai(status = 404)]
    NotFound(Json<ErrorEnvelope>),
    /// The change conflicts with the resource's current state: `conflict`, with `details.unmet`.
    #[oai(status = 409)]
    Conflict(Json<ErrorEnvelope>),
    /// Internal error.
    #[oai(status = 500)]
    Internal(Json<ErrorBody>),
    /// The platform could not complete the command now (the database cannot be reached):
    /// `transient_failure`, retryable. Retry after `Retry-After`.
    #[oai(
        status = 503,
        header(
            name = "Retry-After",
            ty = "u64",
            description = "Seconds to wait before retrying."
        )
    )]
    Unavailable(Json<ErrorEnvelope>),
}

impl<T: CommandData> ActionResponse<T> {
    pub fn ok(
        data: T,
        resources: Vec<ResourceRef>,
        audit_id: Option<String>,
        warnings: Vec<String>,
    ) -> Self {
        Self::Ok(Json(CommandEnvelope {
            ok: true,
            command_id: T::COMMAND_ID.to_string(),
            command_version: COMMAND_VERSION,
            correlation_id: correlation::current(),
            result: CommandResult {
                operation_id: T::COMMAND_ID.to_string(),
                status: "completed".to_string(),
                resources,
                data,
                warnings,
                audit_id,
            },
        }))
    }

    /// 400 `validation_failed` with `details.issues`.
    pub fn validation(issues: Vec<ValidationIssue>) -> Self {
        action_validation(issues)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::Unauthorized(ErrorBody::new(message))
    }
}

/// The error envelope of command `T`.
pub fn error_envelope<T: CommandData>(
    code: ErrorCode,
    message: String,
    retryable: bool,
    details: Option<BTreeMap<String, Value>>,
) -> Json<ErrorEnvelope> {
    Json(ErrorEnvelope {
        ok: false,
        command_id: T::COMMAND_ID.to_string(),
        command_version: COMMAND_VERSION,
        error: CommandError {
            code,
            message,
            correlation_id: correlation::current(),
            retryable,
            details,
        },
    })
}

/// The `error` text of a 400 that lists validation issues: up to three of them, or how many
/// there are.
pub fn invalid_request_message(issues: &[ValidationIssue]) -> String {
    if (1..=3).contains(&issues.len()) {
        let listed: Vec<&str> = issues.iter().map(|i| i.message.as_str()).collect();
        format!("invalid request: {}", listed.join("; "))
    } else {
        format!("invalid request: {} problems", issues.len())
    }
}

/// 400 `validation_failed` with `details.issues`.
pub fn action_validation<T: CommandData>(issues: Vec<ValidationIssue>) -> ActionResponse<T> {
    let mut details = BTreeMap::new();
    details.insert(
        "issues".to_string(),
        serde_json::to_value(&issues).unwrap_or(Value::Array(vec![])),
    );
    ActionResponse::BadRequest(error_envelope::<T>(
        ErrorCode::ValidationFailed,
        invalid_request_message(&issues),
        false,
        Some(details),
    ))
}

/// Turns framework-level request errors (bad JSON, content type, parameters, missing key) into
/// the spec's bodies rather than poem's plain-text defaults.
fn action_bad_request<T: CommandData>(err: poem::Error) -> ActionResponse<T> {
    if err.is::<AuthorizationError>() {
        return ActionResponse::unauthorized(crate::auth::MISSING_KEY);
    }
    ActionResponse::validation(request_issues(&err))
}

/// Describes a framework request error as validation issues.
pub fn request_issues(err: &poem::Error) -> Vec<ValidationIssue> {
    if let Some(e) = err.downcast_ref::<RequestValidationError>() {
        return e.0.clone();
    }
    if let Some(e) = err.downcast_ref::<ContentTypeError>() {
        let message = match e {
            ContentTypeError::ExpectContentType => {
                "a `Content-Type: application/json` header is required".to_string()
            }
            ContentTypeError::NotSupported { content_type } => {
                format!("unsupported content type `{content_type}`: send application/json")
            }
        };
        return vec![ValidationIssue::root(message)];
    }
    if let Some(e) = err.downcast_ref::<ParseParamError>() {
        return vec![ValidationIssue::at(e.name, e.reason.clone())];
    }
    if err.is::<ParsePathError>() {
        return vec![ValidationIssue::root("invalid path parameter")];
    }
    vec![ValidationIssue::root(err.to_string())]
}
