//! `svc_send_notification`: sends a notification through the organization's destinations.

use chrono::Utc;
use schemars::JsonSchema;
use sea_orm::{ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{ToolContext, ToolError, ToolResult};
use crate::{
    notify::{deliver_notification, Notification},
    validation::{Issues, ValidationIssue},
};
use entity::destination;

pub const DESCRIPTION: &str = "Send a notification (title, message or markdown, severity) to the \
organization's destinations: signed webhooks and Slack channels. Without `destinations` it goes \
to the organization's default destination. This is an action: call it only when a user \
explicitly asks to send, post or notify something. The result lists each delivery's outcome; \
`retrying` deliveries go on in the background for up to 24 hours.";

/// How urgent the notification is.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    #[default]
    Info,
    Warning,
    Critical,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// Headline, 1 to 200 characters.
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
    /// Plain-text body, up to 10000 characters. `message` or `markdown` is required.
    #[schemars(length(max = 10000))]
    pub message: Option<String>,
    /// `info` (default), `warning` or `critical`.
    pub severity: Option<Severity>,
    /// What produced the notification, e.g. an agent or automation name.
    #[schemars(length(max = 200))]
    pub source: Option<String>,
    /// What it is about, e.g. a customer's domain.
    #[schemars(length(max = 200))]
    pub subject: Option<String>,
    /// Structured data for machine receivers (webhooks get it as `payload`).
    pub payload: Option<Map<String, Value>>,
    /// Preferred human-readable body (Slack renders it), up to 40000 characters.
    #[schemars(length(max = 40000))]
    pub markdown: Option<String>,
    /// Destination ids or keys; when omitted the organization's default destination is used.
    /// Disabled destinations among them are skipped.
    pub destinations: Option<Vec<String>>,
}

fn validate(input: &Input) -> ToolResult<()> {
    let mut issues = Issues::default();
    issues.length(&["title"], &input.title, 1, 200);
    if let Some(m) = &input.message {
        issues.length(&["message"], m, 0, 10_000);
    }
    if let Some(m) = &input.markdown {
        issues.length(&["markdown"], m, 0, 40_000);
    }
    for (field, value) in [("source", &input.source), ("subject", &input.subject)] {
        if let Some(v) = value {
            issues.length(&[field], v, 0, 200);
        }
    }
    let has_body = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.trim().is_empty());
    if !has_body(&input.message) && !has_body(&input.markdown) {
        issues.push(
            vec!["message".into()],
            "`message` or `markdown` is required",
        );
    }
    if let Some(list) = &input.destinations {
        if list.is_empty() {
            issues.push(
                vec!["destinations".into()],
                "name at least one destination, or omit it for the default",
            );
        }
    }
    issues.into_result().map_err(ToolError::Invalid)
}

/// The destinations to deliver to: the enabled ones named, else the default one.
async fn targets(
    ctx: &ToolContext,
    named: Option<&[String]>,
) -> ToolResult<Vec<destination::Model>> {
    let base = destination::Entity::find()
        .filter(destination::Column::OrganizationId.eq(ctx.organization_id.as_str()))
        .filter(destination::Column::ArchivedAt.is_null());
    let Some(named) = named else {
        let default = base
            .filter(destination::Column::IsDefault.eq(true))
            .one(&ctx.state.db)
            .await?;
        return match default {
            Some(d) if d.enabled => Ok(vec![d]),
            Some(_) => Err(ToolError::Refused(
                "the organization's default destination is disabled; name enabled destinations in `destinations`"
                    .into(),
            )),
            None => Err(ToolError::Refused(
                "no destination named and the organization has no default destination".into(),
            )),
        };
    };
    let mut wanted = Condition::any();
    for n in named {
        wanted = wanted
            .add(destination::Column::Id.eq(n.trim()))
            .add(destination::Column::Key.eq(n.trim()));
    }
    let found = base
        .filter(wanted)
        .order_by_asc(destination::Column::Key)
        .all(&ctx.state.db)
        .await?;
    let missing: Vec<ValidationIssue> = named
        .iter()
        .enumerate()
        .filter(|(_, n)| !found.iter().any(|d| d.id == n.trim() || d.key == n.trim()))
        .map(|(i, n)| {
            ValidationIssue::new(
                vec!["destinations".into(), i.into()],
                format!("no destination `{n}` in this organization"),
            )
        })
        .collect();
    if !missing.is_empty() {
        return Err(ToolError::Invalid(missing));
    }
    let enabled: Vec<destination::Model> = found.into_iter().filter(|d| d.enabled).collect();
    if enabled.is_empty() {
        return Err(ToolError::Refused(
            "every destination named is disabled".into(),
        ));
    }
    Ok(enabled)
}

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    validate(&input)?;
    let destinations = targets(ctx, input.destinations.as_deref()).await?;
    let notification = Notification {
        message: input
            .message
            .clone()
            .or_else(|| input.markdown.clone())
            .unwrap_or_default(),
        title: input.title,
        severity: input.severity.unwrap_or_default().as_str().to_string(),
        source: input.source,
        subject: input.subject,
        payload: Value::Object(input.payload.unwrap_or_default()),
        markdown: input.markdown,
        sent_at: Utc::now(),
    };
    let deliveries = deliver_notification(
        &ctx.state.db,
        &ctx.state.secrets,
        &ctx.organization_id,
        destinations,
        &notification,
    )
    .await?;
    Ok(json!({ "deliveries": deliveries }))
}
