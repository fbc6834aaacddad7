//! `svc_list_facts`: stored customer facts with their evidence.

use entity::fact::{Column, Entity, FactStatus};
use sea_orm::{ColumnTrait, Condition, EntityTrait, Order, QueryFilter, QueryOrder, QuerySelect};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    common::{
        after_desc, check_fields, key_time, parse_source_types, parse_timestamp, resolve_customer,
        rows_and_total, ListRequest, PageTotal,
    },
    record_counts::KeptTotal,
    records::{self, FACT_FIELDS, FACT_IDS},
    ToolContext, ToolResult,
};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// Only facts about this customer: its id, domain or externalId.
    #[schemars(length(min = 1))]
    pub customer: Option<String>,
    /// Only facts with one of these statuses (default `["ACTIVE"]`).
    #[schemars(length(min = 1))]
    pub status: Option<Vec<FactStatus>>,
    /// Only facts from these source types: `CALL`, `EMAIL`, `CALENDAR_EVENT`, `SUPPORT_TICKET`,
    /// `OPPORTUNITY` (trimmed, case-insensitive; `CRM` and `CRM_OPPORTUNITY` mean `OPPORTUNITY`).
    pub source_types: Option<Vec<String>>,
    /// Only facts whose source occurred at or after this ISO 8601 time.
    pub after: Option<String>,
    /// Items per page, 1 to 1000 (default 50).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// The previous page's `pagination.nextCursor`.
    pub cursor: Option<String>,
    /// Only these record fields in each item (plus `id`).
    pub fields: Option<Vec<String>>,
}

pub const DESCRIPTION: &str = "Browse stored customer facts and their evidence: each fact \
carries its provenance (`sourceType`, `sourceId`, `sourceOccurredAt`, the verbatim \
`sourceQuote`, `permalink`). Filter by `customer`, `status` (default `[\"ACTIVE\"]`), \
`sourceTypes` and `after` (on the source's time). Returns `{items: [Fact], pagination}`, newest \
source first. Open the evidence with `svc_get_source`.";

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let req = ListRequest::new(input.limit, &input.cursor)?;
    check_fields(&input.fields, FACT_FIELDS)?;
    let mut filter = Condition::all().add(Column::OrganizationId.eq(&ctx.organization_id));
    let statuses = match &input.status {
        Some(list) => list.clone(),
        None => vec![FactStatus::Active],
    };
    filter = filter.add(Column::Status.is_in(statuses.clone()));
    let types = input
        .source_types
        .as_ref()
        .map(|raw| parse_source_types("sourceTypes", raw))
        .transpose()?;
    if let Some(types) = &types {
        filter = filter.add(Column::SourceType.is_in(types.clone()));
    }
    // Filtered by statuses and source types alone, the total is kept per status and type.
    let kept = match (&types, input.after.is_none() && input.customer.is_none()) {
        (Some(types), true) => Some(KeptTotal {
            record: "facts",
            buckets: Some(
                statuses
                    .iter()
                    .flat_map(|s| types.iter().map(move |t| format!("{}:{t}", s.as_str())))
                    .collect(),
            ),
        }),
        _ => None,
    };
    if let Some(raw) = &input.after {
        filter = filter.add(Column::SourceOccurredAt.gte(parse_timestamp("after", raw)?));
    }
    let mut kept = kept;
    if let Some(customer) = &input.customer {
        let found = resolve_customer(ctx, customer).await?;
        // Of one customer by statuses alone, the total is kept per customer and status.
        if types.is_none() && input.after.is_none() {
            kept = Some(KeptTotal::facts_of(&found.id, &statuses));
        }
        filter = filter.add(Column::CustomerId.eq(found.id));
    }
    let db = ctx.db().await?;
    let matching = Entity::find().filter(filter);
    let mut query = matching.clone();
    if let Some(c) = &req.cursor {
        let at = c
            .time(0)?
            .ok_or_else(|| super::ToolError::invalid("cursor", "not a cursor of this list"))?;
        query = query.filter(after_desc(
            Column::SourceOccurredAt,
            Column::Id,
            at,
            &c.text(1)?,
        ));
    }
    let page = query
        .order_by(Column::SourceOccurredAt, Order::Desc)
        .order_by(Column::Id, Order::Desc)
        .limit(req.limit + 1);
    let total = PageTotal::kept_or_counted(&ctx.organization_id, kept, matching);
    let (rows, total) = rows_and_total(db, &req, page, total).await?;
    Ok(super::common::page(
        rows,
        &req,
        total,
        |f| vec![key_time(&f.source_occurred_at), json!(f.id)],
        records::fact,
        input.fields.as_deref().map(|f| (f, FACT_IDS)),
    ))
}
