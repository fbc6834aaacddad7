//! `svc_list_sources`: source records (calls, emails, calendar events, tickets, opportunities).

use entity::source::{Column, Entity};
use sea_orm::{ColumnTrait, Condition, EntityTrait, Order, QueryFilter, QueryOrder, QuerySelect};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    common::{
        after_desc, check_fields, key_time, parse_source_types, parse_timestamp, resolve_customer,
        rows_and_total, ListRequest, PageTotal,
    },
    record_counts::KeptTotal,
    records::{self, SOURCE_IDS, SOURCE_ITEM_FIELDS},
    ToolContext, ToolError, ToolResult,
};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// Only sources about this customer: its id, domain or externalId.
    #[schemars(length(min = 1))]
    pub customer: Option<String>,
    /// Only these source types: `CALL`, `EMAIL`, `CALENDAR_EVENT`, `SUPPORT_TICKET`,
    /// `OPPORTUNITY` (trimmed, case-insensitive; `CRM` and `CRM_OPPORTUNITY` mean `OPPORTUNITY`).
    pub source_types: Option<Vec<String>>,
    /// Only sources that occurred at or after this ISO 8601 time.
    pub after: Option<String>,
    /// Only sources that occurred before this ISO 8601 time.
    pub before: Option<String>,
    /// Items per page, 1 to 1000 (default 50).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// The previous page's `pagination.nextCursor`.
    pub cursor: Option<String>,
    /// Only these record fields in each item (plus `sourceType` and `sourceId`).
    pub fields: Option<Vec<String>>,
}

pub const DESCRIPTION: &str = "List source records (calls, emails, calendar events, support \
tickets, CRM opportunities), filtered by `customer`, `sourceTypes`, `after` and `before`. Returns \
`{items: [Source], pagination}`, newest first; items carry a `snippet` (at most 280 characters) \
instead of the body: open one with `svc_get_source`.";

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let req = ListRequest::new(input.limit, &input.cursor)?;
    check_fields(&input.fields, SOURCE_ITEM_FIELDS)?;
    let mut filter = Condition::all().add(Column::OrganizationId.eq(&ctx.organization_id));
    let types = input
        .source_types
        .as_ref()
        .map(|raw| parse_source_types("sourceTypes", raw))
        .transpose()?;
    if let Some(types) = &types {
        filter = filter.add(Column::SourceType.is_in(types.clone()));
    }
    // Filtered by source types alone (or not at all), the total is kept per type; by a
    // customer alone, per customer.
    let unbounded = input.after.is_none() && input.before.is_none();
    let by_type = (unbounded && input.customer.is_none()).then(|| KeptTotal {
        record: "sources",
        buckets: types
            .as_ref()
            .map(|t| t.iter().map(|t| t.to_string()).collect()),
    });
    if let Some(raw) = &input.after {
        filter = filter.add(Column::OccurredAt.gte(parse_timestamp("after", raw)?));
    }
    if let Some(raw) = &input.before {
        filter = filter.add(Column::OccurredAt.lt(parse_timestamp("before", raw)?));
    }
    let mut kept = by_type;
    if let Some(customer) = &input.customer {
        let found = resolve_customer(ctx, customer).await?;
        if unbounded && types.is_none() {
            kept = Some(KeptTotal::sources_of(&found.id));
        }
        filter = filter.add(Column::CustomerId.eq(found.id));
    }
    let db = ctx.db().await?;
    let matching = Entity::find().filter(filter);
    let mut query = matching.clone();
    if let Some(c) = &req.cursor {
        let at = c
            .time(0)?
            .ok_or_else(|| ToolError::invalid("cursor", "not a cursor of this list"))?;
        query = query.filter(after_desc(Column::OccurredAt, Column::Id, at, &c.text(1)?));
    }
    let page = query
        .order_by(Column::OccurredAt, Order::Desc)
        .order_by(Column::Id, Order::Desc)
        .limit(req.limit + 1);
    let total = PageTotal::kept_or_counted(&ctx.organization_id, kept, matching);
    let (rows, total) = rows_and_total(db, &req, page, total).await?;
    Ok(super::common::page(
        rows,
        &req,
        total,
        |s| vec![key_time(&s.occurred_at), json!(s.id)],
        records::source_item,
        input.fields.as_deref().map(|f| (f, SOURCE_IDS)),
    ))
}
