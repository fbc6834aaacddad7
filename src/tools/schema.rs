//! `svc_schema`: the analytics views `svc_query` reads, with their columns.

use serde::Deserialize;
use serde_json::{json, Value};

use super::{analytics_views, ToolContext, ToolError, ToolResult};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// Only this view (e.g. `customers`); omitted: every view.
    pub view: Option<String>,
}

pub const DESCRIPTION: &str = "Inspect the analytics views that svc_query runs SQL against: \
each view's name, purpose and columns (name, type, description). Views hold only your \
organization's rows; timestamps are ISO 8601 text in UTC and JSON fields are JSON text. \
Views: customers, users, workspace_users, facts, sources, events, billing_history, \
engagement_sessions, and the kept totals customer_totals (customers and revenue per billing \
status) and user_totals (users per stage).";

pub async fn run(_ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let views: Vec<&analytics_views::View> = match input.view.as_deref().map(str::trim) {
        None => analytics_views::VIEWS.iter().collect(),
        Some(name) => match analytics_views::find(&name.to_ascii_lowercase()) {
            Some(view) => vec![view],
            None => {
                return Err(ToolError::invalid(
                    "view",
                    format!(
                        "unknown view `{name}`; expected one of {}",
                        analytics_views::names().join(", ")
                    ),
                ))
            }
        },
    };
    let views: Vec<Value> = views
        .into_iter()
        .map(|v| {
            json!({
                "name": v.name,
                "description": v.description,
                "columns": v.columns.iter().map(|c| json!({
                    "name": c.name,
                    "type": c.type_name(),
                    "description": c.description,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(json!({ "views": views }))
}
