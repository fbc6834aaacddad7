//! Every tool the gateway serves, with its compiled input contract. Adding a tool is one line
//! in [`TOOLS`]: `tool!("svc_name", module)`, where `module` follows the per-tool convention
//! (`Input`, `DESCRIPTION`, `run`).

use std::{future::Future, pin::Pin, sync::LazyLock};

use serde_json::{Map, Value};

use super::{ToolContext, ToolError, ToolResult};
use crate::validation::{parse_value, ValidationIssue};

pub type ToolFuture = Pin<Box<dyn Future<Output = ToolResult<Value>> + Send>>;

/// A tool as the gateway sees it.
pub struct Tool {
    pub name: &'static str,
    pub description: &'static str,
    /// The input contract as JSON Schema (draft 2020-12).
    pub input_schema: fn() -> Value,
    /// Deserializes a validated input and runs the tool.
    pub run: fn(ToolContext, Value) -> ToolFuture,
    /// Whether the tool reads through the call's own connection ([`ToolContext::db`]). One
    /// that does not (`svc_query` reads through connections of its own, and
    /// `svc_send_notification` writes through the pool) gives the call's back before it runs:
    /// waiting for others, it must not hold one that other requests need.
    pub reads_call_connection: bool,
}

/// Declares a tool from its module under `src/tools/`; `own_connections` after the module
/// marks a tool that does not read through the call's connection.
#[macro_export]
macro_rules! tool {
    ($name:literal, $module:ident) => {
        $crate::tool!($name, $module, true)
    };
    ($name:literal, $module:ident, own_connections) => {
        $crate::tool!($name, $module, false)
    };
    ($name:literal, $module:ident, $reads:literal) => {
        $crate::tools::registry::Tool {
            name: $name,
            description: $crate::tools::$module::DESCRIPTION,
            input_schema: $crate::tools::registry::input_schema::<$crate::tools::$module::Input>,
            run: |ctx, input| {
                Box::pin(async move {
                    let input: $crate::tools::$module::Input =
                        $crate::tools::registry::parse_input(input)?;
                    $crate::tools::$module::run(&ctx, input).await
                })
            },
            reads_call_connection: $reads,
        }
    };
}

/// The tools, in the order `GET /api/tools` lists them.
fn tools() -> Vec<Tool> {
    vec![
        tool!("svc_list_customers", list_customers),
        tool!("svc_list_users", list_users),
        tool!("svc_list_workspace_users", list_workspace_users),
        tool!("svc_get_customer", get_customer),
        tool!("svc_get_timeline", get_timeline),
        tool!("svc_list_facts", list_facts),
        tool!("svc_get_fact", get_fact),
        tool!("svc_get_source", get_source),
        tool!("svc_list_sources", list_sources),
        tool!("svc_send_notification", send_notification, own_connections),
        tool!("svc_search_customer_context", search_customer_context),
        tool!("svc_schema", schema),
        tool!("svc_query", query, own_connections),
    ]
}

/// A tool with its schema and compiled validator.
pub struct Registered {
    pub tool: Tool,
    pub schema: Value,
    validator: Option<jsonschema::Validator>,
}

static REGISTRY: LazyLock<Vec<Registered>> = LazyLock::new(|| {
    tools()
        .into_iter()
        .map(|tool| {
            let schema = (tool.input_schema)();
            let validator = jsonschema::validator_for(&schema).ok();
            Registered {
                tool,
                schema,
                validator,
            }
        })
        .collect()
});

/// Every registered tool.
pub fn all() -> &'static [Registered] {
    &REGISTRY
}

pub fn find(name: &str) -> Option<&'static Registered> {
    REGISTRY.iter().find(|r| r.tool.name == name)
}

pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|r| r.tool.name).collect()
}

/// The JSON Schema of an input contract: subschemas inlined (no `$ref`s), no title.
pub fn input_schema<T: schemars::JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Some(obj) = value.as_object_mut() {
        obj.remove("title");
        obj.remove("$schema");
        // An input with no parameters is still an object that refuses unknown keys.
        obj.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
    }
    value
}

/// Deserializes an input already validated against its schema.
pub fn parse_input<T: serde::de::DeserializeOwned>(input: Value) -> ToolResult<T> {
    parse_value(input).map_err(ToolError::Invalid)
}

impl Registered {
    /// Checks `input` against the tool's schema, naming the offending field of each issue.
    pub fn validate(&self, input: &Value) -> Result<(), Vec<ValidationIssue>> {
        let Some(validator) = &self.validator else {
            return Err(vec![ValidationIssue::root(
                "this tool's input contract could not be compiled",
            )]);
        };
        let issues = crate::validation::schema_issues(validator, input);
        if issues.is_empty() {
            Ok(())
        } else {
            Err(issues)
        }
    }
}
