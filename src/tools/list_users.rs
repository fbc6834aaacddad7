//! `svc_list_users`: browse and filter users (the people at customers).

use chrono::Utc;
use entity::user::{Column, Entity};
use sea_orm::{
    sea_query::NullOrdering, ColumnTrait, Condition, EntityTrait, Order, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    common::{
        after_desc_nullable, check_fields, contains_ci, equals_ci, key_time_opt, parse_duration,
        resolve_customer, trait_filters, ListRequest,
    },
    records::{self, USER_FIELDS, USER_IDS},
    ToolContext, ToolResult,
};

/// A user's journey stage.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Discovered,
    SignedUp,
    Activated,
    Engaged,
    Inactive,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Discovered => "discovered",
            Stage::SignedUp => "signed_up",
            Stage::Activated => "activated",
            Stage::Engaged => "engaged",
            Stage::Inactive => "inactive",
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// Only users at this journey stage.
    pub stage: Option<Stage>,
    /// Only users active within this duration (`<n>h`, `<n>d` or `<n>w`, e.g. `7d`).
    #[schemars(regex(pattern = r"^\s*[0-9]+[hdw]\s*$"))]
    pub active_within: Option<String>,
    /// Only users not active for at least this duration (never-active users match).
    #[schemars(regex(pattern = r"^\s*[0-9]+[hdw]\s*$"))]
    pub inactive_for: Option<String>,
    /// Only users of this customer: its id, domain or externalId.
    #[schemars(length(min = 1))]
    pub customer: Option<String>,
    /// Only users whose traits hold exactly these values (one exact match per key).
    pub traits: Option<Map<String, Value>>,
    /// Only the user with this email (exact, case-insensitive).
    #[schemars(length(min = 1))]
    pub email: Option<String>,
    /// Only users whose name contains this text (case-insensitive).
    #[schemars(length(min = 1, max = 200))]
    pub name: Option<String>,
    /// Items per page, 1 to 1000 (default 50).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// The previous page's `pagination.nextCursor`.
    pub cursor: Option<String>,
    /// Only these record fields in each item (plus `id`).
    pub fields: Option<Vec<String>>,
}

pub const DESCRIPTION: &str = "Browse and filter users (the people at your customers) by \
journey stage (`discovered`, `signed_up`, `activated`, `engaged`, `inactive`), activity recency \
(`activeWithin`, `inactiveFor` as `30d`), customer (id, domain or externalId), exact trait \
values, email or a name substring. Returns `{items: [User], pagination}`, most recently active \
first.";

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let req = ListRequest::new(input.limit, &input.cursor)?;
    check_fields(&input.fields, USER_FIELDS)?;
    let now = Utc::now();
    let mut filter = Condition::all().add(Column::OrganizationId.eq(&ctx.organization_id));
    if let Some(stage) = input.stage {
        filter = filter.add(Column::Stage.eq(stage.as_str()));
    }
    if let Some(raw) = &input.active_within {
        let d = parse_duration("activeWithin", raw)?;
        filter = filter.add(Column::LastActivityAt.gte(now - d));
    }
    if let Some(raw) = &input.inactive_for {
        let d = parse_duration("inactiveFor", raw)?;
        filter = filter.add(
            Condition::any()
                .add(Column::LastActivityAt.lt(now - d))
                .add(Column::LastActivityAt.is_null()),
        );
    }
    if let Some(customer) = &input.customer {
        let found = resolve_customer(ctx, customer).await?;
        filter = filter.add(Column::CustomerId.eq(found.id));
    }
    for cond in trait_filters(ctx, "users", &input.traits)? {
        filter = filter.add(cond);
    }
    if let Some(email) = &input.email {
        filter = filter.add(equals_ci(Column::Email, email));
    }
    if let Some(name) = &input.name {
        filter = filter.add(contains_ci(Column::Name, name));
    }
    let db = &ctx.state.db;
    let total = req
        .total(|| Entity::find().filter(filter.clone()).count(db))
        .await?;
    let mut query = Entity::find().filter(filter);
    if let Some(c) = &req.cursor {
        query = query.filter(after_desc_nullable(
            Column::LastActivityAt,
            Column::Id,
            c.time(0)?,
            &c.text(1)?,
        ));
    }
    let rows = query
        .order_by_with_nulls(Column::LastActivityAt, Order::Desc, NullOrdering::Last)
        .order_by(Column::Id, Order::Desc)
        .limit(req.limit + 1)
        .all(db)
        .await?;
    Ok(super::common::page(
        rows,
        &req,
        total,
        |u| vec![key_time_opt(&u.last_activity_at), json!(u.id)],
        records::user,
        input.fields.as_deref().map(|f| (f, USER_IDS)),
    ))
}
