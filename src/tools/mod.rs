//! The tool gateway's domain: each tool is one file here with an input contract (a struct
//! deriving `serde::Deserialize` and `schemars::JsonSchema`) and a `run` function; the gateway
//! validates input against the contract before a tool runs.

pub mod activity_page;
pub mod allowance;
pub mod common;
pub mod few_matches_page;
pub mod openapi;
pub mod record_counts;
pub mod records;
pub mod registry;
pub mod timeline;

pub mod analytics_views;
pub mod query;
pub mod query_kept_totals;
pub mod schema;
pub mod search_customer_context;

pub mod get_customer;
pub mod get_fact;
pub mod get_source;
pub mod get_timeline;
pub mod list_customers;
pub mod list_facts;
pub mod list_sources;
pub mod list_users;
pub mod list_workspace_users;
pub mod send_notification;

use serde_json::{Map, Value};

use crate::{
    db::Reads,
    state::AppState,
    validation::{PathSegment, ValidationIssue},
};

/// What a tool call runs with: the service's state and the caller's organization.
#[derive(Clone, Debug)]
pub struct ToolContext {
    pub state: AppState,
    /// Every query a tool makes is confined to this organization.
    pub organization_id: String,
    reads: CallReads,
}

impl ToolContext {
    pub fn new(state: AppState, organization_id: impl Into<String>) -> Self {
        Self {
            state,
            organization_id: organization_id.into(),
            reads: CallReads::default(),
        }
    }

    /// [`Self::new`], reading through `reads` (a connection the request already holds).
    pub fn reading(state: AppState, organization_id: impl Into<String>, reads: Reads) -> Self {
        Self {
            state,
            organization_id: organization_id.into(),
            reads: CallReads(tokio::sync::OnceCell::new_with(Some(reads))),
        }
    }

    /// The context with the connection it holds given back (a read after this opens another).
    pub fn without_reads(self) -> Self {
        Self {
            reads: CallReads::default(),
            ..self
        }
    }

    /// The connection this call reads through, opened on its first read and held until the
    /// context is dropped (see [`crate::db::Reads`]). Writes go through `state.db`.
    pub async fn db(&self) -> Result<&Reads, sea_orm::DbErr> {
        self.reads
            .0
            .get_or_try_init(|| Reads::open(&self.state.db))
            .await
    }
}

/// A call's read connection; a cloned context (another call) opens its own.
#[derive(Default)]
struct CallReads(tokio::sync::OnceCell<Reads>);

impl Clone for CallReads {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for CallReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallReads")
    }
}

/// Why a tool call failed; the gateway maps each to the spec's HTTP body.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// 400 `{error, details: [{path, message}]}`: the input breaks the tool's contract.
    #[error("invalid input")]
    Invalid(Vec<ValidationIssue>),
    /// 400 `{error}`: the input is well-formed but the tool refuses it (e.g. a write in
    /// `svc_query`, a time-out, no destination to notify).
    #[error("{0}")]
    Refused(String),
    /// 404 `{error}`: an exact lookup found nothing in the organization.
    #[error("{0}")]
    NotFound(String),
    /// 500 `{error}` without internals.
    #[error("{0}")]
    Internal(String),
    /// 503 `{error}`: the database could not be reached; retry.
    #[error("{0}")]
    Unavailable(String),
    /// 402 `{error, code: "api_limit_exceeded", plan, feature: "api_calls", resetAt}`: the
    /// organization used its plan's tool calls for this billing cycle.
    #[error("the {plan} plan's {limit} tool calls of this billing cycle are used up")]
    LimitExceeded {
        plan: String,
        limit: i64,
        /// Unix milliseconds of the next cycle's start.
        reset_at: i64,
    },
}

impl From<sea_orm::DbErr> for ToolError {
    fn from(err: sea_orm::DbErr) -> Self {
        if crate::db::is_unavailable(&err) {
            ToolError::Unavailable(crate::db::UNAVAILABLE_MESSAGE.into())
        } else if crate::db::is_nul_character(&err) {
            ToolError::Invalid(vec![ValidationIssue::root(
                crate::db::NUL_CHARACTER_REFUSED,
            )])
        } else {
            ToolError::Internal(err.to_string())
        }
    }
}

impl ToolError {
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        ToolError::Invalid(vec![ValidationIssue::at(field, message)])
    }
}

pub type ToolResult<T> = Result<T, ToolError>;

/// Runs one tool call: finds the tool, validates `input` against its contract, counts the call
/// toward the plan's allowance, then runs it.
///
/// Calls refused before the tool runs (unknown tool, invalid input) do not count; every call
/// that reaches the tool counts, also one whose lookup finds nothing.
pub async fn call(ctx: ToolContext, name: &str, input: Option<Value>) -> ToolResult<Value> {
    let registered = registry::find(name).ok_or_else(|| {
        ToolError::Invalid(vec![ValidationIssue::new(
            vec![PathSegment::from("tool")],
            format!(
                "unknown tool `{name}`: use one of {}",
                registry::names().join(", ")
            ),
        )])
    })?;
    let input = match input {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v @ Value::Object(_)) => v,
        Some(_) => {
            return Err(ToolError::Invalid(vec![ValidationIssue::new(
                vec![PathSegment::from("input")],
                "must be an object",
            )]))
        }
    };
    registered.validate(&input).map_err(ToolError::Invalid)?;
    allowance::consume(&ctx).await?;
    let ctx = if registered.tool.reads_call_connection {
        ctx
    } else {
        ctx.without_reads()
    };
    (registered.tool.run)(ctx, input).await
}

impl ToolError {
    /// The error as a tool's caller in this process reads it (an agent's model sees it as the
    /// tool's result): the same JSON as the body of a failed `POST /api/tools/call`, whose status
    /// and typed body `crate::http::api::errors` decides; a test there holds the two together.
    pub fn to_json(&self) -> Value {
        match self {
            ToolError::Invalid(issues) => {
                serde_json::json!({ "error": "invalid tool call", "details": issues })
            }
            ToolError::Internal(_) => serde_json::json!({ "error": "internal error" }),
            ToolError::Refused(message)
            | ToolError::NotFound(message)
            | ToolError::Unavailable(message) => serde_json::json!({ "error": message }),
            ToolError::LimitExceeded { plan, reset_at, .. } => serde_json::json!({
                "error": self.to_string(),
                "code": "api_limit_exceeded",
                "plan": plan,
                "feature": "api_calls",
                "resetAt": reset_at,
            }),
        }
    }
}
