//! `svc_get_timeline`: a customer's activity across channels, oldest first.

use chrono::Utc;
use serde::Deserialize;
use serde_json::Value;

use super::{
    common::{
        list_answer, pagination, parse_duration, parse_timestamp, resolve_customer, Cursor,
        ListRequest,
    },
    timeline::{self, Channels, Position, Window},
    ToolContext, ToolError, ToolResult,
};

/// A timeline channel.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// Tracked product events other than billing.
    Product,
    /// Billing changes (ingest, syncs, webhooks) and CRM opportunities.
    Billing,
    /// Support tickets.
    Support,
    /// Calls, emails and calendar events.
    Conversation,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// The customer: its id, domain or externalId.
    #[schemars(length(min = 1))]
    pub customer: String,
    /// How far back to read (`<n>h`, `<n>d` or `<n>w`; default `30d`). Not with `after`/`before`.
    #[schemars(regex(pattern = r"^\s*[0-9]+[hdw]\s*$"))]
    pub timeframe: Option<String>,
    /// Only entries at or after this ISO 8601 time (instead of `timeframe`).
    pub after: Option<String>,
    /// Only entries before this ISO 8601 time (instead of `timeframe`).
    pub before: Option<String>,
    /// Only these channels (default all): `product`, `billing`, `support`, `conversation`.
    #[schemars(length(min = 1))]
    pub channels: Option<Vec<Channel>>,
    /// Items per page, 1 to 1000 (default 50).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// The previous page's `pagination.nextCursor`.
    pub cursor: Option<String>,
}

pub const DESCRIPTION: &str = "A customer's chronological activity (oldest first) across \
channels: `product` (tracked events), `billing` (billing changes and CRM opportunities), \
`support` (tickets) and `conversation` (calls, emails, calendar events). Bound it with \
`timeframe` (default `30d`) or `after`/`before`. Returns `{items: [{at, channel, kind, title, \
ref: {type, id}}], pagination}`; a source entry's `ref` is `{type: sourceType, id: sourceId}` \
for `svc_get_source`.";

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let req = ListRequest::new(input.limit, &input.cursor)?;
    if input.timeframe.is_some() && (input.after.is_some() || input.before.is_some()) {
        return Err(ToolError::invalid(
            "timeframe",
            "give either `timeframe` or `after`/`before`, not both",
        ));
    }
    let now = Utc::now();
    let (from, before) = if input.after.is_some() || input.before.is_some() {
        (
            input
                .after
                .as_deref()
                .map(|raw| parse_timestamp("after", raw))
                .transpose()?,
            input
                .before
                .as_deref()
                .map(|raw| parse_timestamp("before", raw))
                .transpose()?,
        )
    } else {
        let d = parse_duration("timeframe", input.timeframe.as_deref().unwrap_or("30d"))?;
        (Some(now - d), None)
    };
    let channels = match &input.channels {
        None => Channels::ALL,
        Some(list) => Channels {
            product: list.contains(&Channel::Product),
            billing: list.contains(&Channel::Billing),
            support: list.contains(&Channel::Support),
            conversation: list.contains(&Channel::Conversation),
        },
    };
    let customer = resolve_customer(ctx, &input.customer).await?;
    let window = Window::of(&customer, from, before, channels);
    let start = match &req.cursor {
        Some(c) => Some(Position {
            at: c
                .time(0)?
                .ok_or_else(|| ToolError::invalid("cursor", "not a cursor of this list"))?,
            rank: c.int(1)?,
            id: c.text(2)?,
        }),
        None => None,
    };
    let read = timeline::read(
        ctx,
        &window,
        start.as_ref(),
        req.limit + 1,
        false,
        &timeline::AlreadyRead::default(),
    )
    .await?;
    let total = match &req.cursor {
        Some(c) => c.total(),
        None => read.total(ctx, &window).await?,
    };
    let mut entries = read.entries;
    let has_more = entries.len() as u64 > req.limit;
    entries.truncate(req.limit as usize);
    let next_cursor = match entries.last() {
        Some(last) if has_more => Cursor::after(last.key(), total).encode(),
        _ => String::new(),
    };
    let items: Vec<Value> = entries.into_iter().map(|e| e.value).collect();
    Ok(list_answer(items, pagination(has_more, next_cursor, total)))
}
