//! The tool gateway: `POST /api/tools/call` and `GET /api/tools` (extension).

use std::collections::BTreeMap;

use poem_openapi::{payload::Json, ApiResponse, Object, OpenApi};
use serde_json::Value;

use super::{
    errors::{PlanLimitError, ToolFailure},
    ApiTags, AppState,
};
use crate::{
    auth::{authenticate, authenticate_reading, AuthError},
    http::api::ApiKeyAuth,
    http::envelope::{request_issues, ErrorBody},
    http::json_answer::JsonAnswer,
    http::request::JsonBody,
    tools::{self, registry, ToolContext},
};

/// `input` when sent: an object (`null` is refused; leave it out for `{}`).
fn present_object<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, Value>>, D::Error> {
    serde::Deserialize::deserialize(deserializer).map(Some)
}

/// A tool call.
#[derive(Debug, Object, serde::Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(deny_unknown_fields)]
pub struct ToolCallRequest {
    /// The tool to run (`GET /api/tools` lists them with their input schemas).
    pub tool: String,
    /// The tool's input, validated against its input schema (default `{}`).
    #[serde(default, deserialize_with = "present_object")]
    pub input: Option<BTreeMap<String, Value>>,
}

#[derive(ApiResponse)]
#[oai(bad_request_handler = "call_bad_request")]
pub enum ToolCallResponse {
    /// The tool's result: list tools answer `{items, pagination: {hasMore, nextCursor, total}}`,
    /// lookups the record.
    #[oai(status = 200)]
    Ok(JsonAnswer),
    /// Invalid JSON, an unknown tool or an input that breaks the tool's contract (`details`
    /// name each offending field), or a call the tool refuses.
    #[oai(status = 400)]
    BadRequest(Json<ErrorBody>),
    /// Missing, invalid or disabled API key.
    #[oai(status = 401)]
    Unauthorized(Json<ErrorBody>),
    /// The plan's tool-call allowance for this billing cycle is used up.
    #[oai(status = 402)]
    LimitExceeded(Json<PlanLimitError>),
    /// An exact lookup found nothing in the organization.
    #[oai(status = 404)]
    NotFound(Json<ErrorBody>),
    /// Internal error.
    #[oai(status = 500)]
    Internal(Json<ErrorBody>),
    /// The database cannot be reached; retry after `Retry-After`.
    #[oai(
        status = 503,
        header(
            name = "Retry-After",
            ty = "u64",
            description = "Seconds to wait before retrying."
        )
    )]
    Unavailable(Json<ErrorBody>),
}

impl From<ToolFailure> for ToolCallResponse {
    fn from(failure: ToolFailure) -> Self {
        match failure {
            ToolFailure::BadRequest(b) => Self::BadRequest(b),
            ToolFailure::Unauthorized(b) => Self::Unauthorized(b),
            ToolFailure::LimitExceeded(b) => Self::LimitExceeded(b),
            ToolFailure::NotFound(b) => Self::NotFound(b),
            ToolFailure::Internal(b) => Self::Internal(b),
            ToolFailure::Unavailable(b) => Self::Unavailable(b),
        }
    }
}

impl From<tools::ToolError> for ToolCallResponse {
    fn from(err: tools::ToolError) -> Self {
        ToolFailure::from(err).into()
    }
}

impl From<AuthError> for ToolCallResponse {
    fn from(err: AuthError) -> Self {
        ToolFailure::from(err).into()
    }
}

fn call_bad_request(err: poem::Error) -> ToolCallResponse {
    if err.is::<poem_openapi::error::AuthorizationError>() {
        return ToolCallResponse::Unauthorized(ErrorBody::new(crate::auth::MISSING_KEY));
    }
    tools::ToolError::Invalid(request_issues(&err)).into()
}

/// A tool an agent or SDK can call.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct ToolInfo {
    /// The name to send as `tool`.
    pub name: String,
    /// What the tool is for, written for an AI agent and a person.
    pub description: String,
    /// The tool's input contract (JSON Schema, draft 2020-12): the schema `POST
    /// /api/tools/call` validates `input` against.
    pub input_schema: Value,
}

/// Every tool of the gateway.
#[derive(Debug, Object)]
pub struct ToolList {
    pub tools: Vec<ToolInfo>,
}

#[derive(ApiResponse)]
#[oai(bad_request_handler = "list_bad_request")]
pub enum ToolListResponse {
    /// The tools.
    #[oai(status = 200)]
    Ok(Json<ToolList>),
    /// Missing, invalid or disabled API key.
    #[oai(status = 401)]
    Unauthorized(Json<ErrorBody>),
    /// Internal error.
    #[oai(status = 500)]
    Internal(Json<ErrorBody>),
    /// The key could not be checked: the database cannot be reached; retry after
    /// `Retry-After`.
    #[oai(
        status = 503,
        header(
            name = "Retry-After",
            ty = "u64",
            description = "Seconds to wait before retrying."
        )
    )]
    Unavailable(Json<ErrorBody>),
}

/// A key check of `GET /api/tools` that failed (the route answers no other failure).
impl From<AuthError> for ToolListResponse {
    fn from(err: AuthError) -> Self {
        match ToolFailure::from(err) {
            ToolFailure::Unauthorized(b) => Self::Unauthorized(b),
            ToolFailure::Unavailable(b) => Self::Unavailable(b),
            _ => Self::Internal(ErrorBody::new("internal error")),
        }
    }
}

fn list_bad_request(err: poem::Error) -> ToolListResponse {
    if err.is::<poem_openapi::error::AuthorizationError>() {
        return ToolListResponse::Unauthorized(ErrorBody::new(crate::auth::MISSING_KEY));
    }
    ToolListResponse::Internal(ErrorBody::new(err.to_string()))
}

/// The tool list as `GET /api/tools` and the MCP `tools/list` show it.
pub fn tool_list() -> ToolList {
    ToolList {
        tools: registry::all()
            .iter()
            .map(|r| ToolInfo {
                name: r.tool.name.to_string(),
                description: r.tool.description.to_string(),
                input_schema: r.schema.clone(),
            })
            .collect(),
    }
}

pub struct ToolsApi {
    pub state: AppState,
}

#[OpenApi(tag = "ApiTags::Tools")]
impl ToolsApi {
    /// Call a tool
    ///
    /// Runs one tool over your organization's customer data. `input` is validated against the
    /// tool's input schema first (unknown properties are refused). Each call that reaches the
    /// tool counts toward the plan's tool-call allowance of the billing cycle; calls refused
    /// with 400 before the tool runs do not.
    #[oai(path = "/api/tools/call", method = "post", operation_id = "callTool")]
    async fn call(&self, key: ApiKeyAuth, body: JsonBody<ToolCallRequest>) -> ToolCallResponse {
        let (auth, reads) = match authenticate_reading(&self.state.db, &key.0.token).await {
            Ok(found) => found,
            Err(e) => return e.into(),
        };
        let ctx = ToolContext::reading(self.state.clone(), auth.organization_id, reads);
        let body = body.0;
        let input = body.input.map(|m| Value::Object(m.into_iter().collect()));
        match tools::call(ctx, &body.tool, input).await {
            Ok(result) => ToolCallResponse::Ok(JsonAnswer(result)),
            Err(e) => e.into(),
        }
    }

    /// List tools (extension)
    ///
    /// Every tool's name, description and input schema: the same schemas `POST
    /// /api/tools/call` validates against, so agents and SDKs can discover the tools.
    #[oai(path = "/api/tools", method = "get", operation_id = "listTools")]
    async fn list(&self, key: ApiKeyAuth) -> ToolListResponse {
        match authenticate(&self.state.db, &key.0.token).await {
            Ok(_) => ToolListResponse::Ok(Json(tool_list())),
            Err(e) => e.into(),
        }
    }
}
