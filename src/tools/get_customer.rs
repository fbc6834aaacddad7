//! `svc_get_customer`: one customer with optional related sections.

use chrono::Utc;
use entity::{
    billing_change,
    fact::{self, FactStatus},
    source, user,
};
use sea_orm::{
    sea_query::NullOrdering, ColumnTrait, EntityTrait, Order, QueryFilter, QueryOrder, QuerySelect,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    common::{first_page, parse_duration, resolve_customer, ts, PageTotal, Total},
    record_counts::KeptTotal,
    records,
    timeline::{self, AlreadyRead, Channels, Newest, Window},
    ToolContext, ToolError, ToolResult,
};

/// Users shown in the `users` section, most recently active first.
pub const SECTION_USERS: u64 = 100;
/// Entries in `recentTimeline`: the latest ones within `timeframe`, oldest first.
pub const SECTION_TIMELINE: u64 = 50;
/// Active facts in `facts`, newest source first.
pub const SECTION_FACTS: u64 = 50;
/// Source list items in `sources`, newest first.
pub const SECTION_SOURCES: u64 = 20;
/// Billing changes in `revenue.history`: the latest ones, oldest first.
pub const SECTION_REVENUE_HISTORY: u64 = 100;

/// A related section of the customer.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Section {
    /// The customer's users, most recently active first (at most 100).
    Users,
    /// Current MRR and billing status with the latest 100 billing changes, oldest first.
    Revenue,
    /// The latest timeline entries within `timeframe` (at most 50), oldest first.
    RecentTimeline,
    /// Active facts, newest source first (at most 50).
    Facts,
    /// Source list items, newest first (at most 20).
    Sources,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// The customer: its id, domain or externalId (tried in that order).
    #[schemars(length(min = 1))]
    pub customer: String,
    /// Related sections to add: `users`, `revenue`, `recentTimeline`, `facts`, `sources`.
    pub include: Option<Vec<Section>>,
    /// How far back `recentTimeline` reads (`<n>h`, `<n>d` or `<n>w`; default `30d`).
    #[schemars(regex(pattern = r"^\s*[0-9]+[hdw]\s*$"))]
    pub timeframe: Option<String>,
}

pub const DESCRIPTION: &str = "Full details of one customer, found by id, domain or externalId, \
with optional related sections in `include`: `users`, `revenue` (MRR, billing status and its \
history), `recentTimeline` (latest activity within `timeframe`, default `30d`), `facts` (active \
facts with provenance) and `sources` (recent calls, emails, meetings, tickets, opportunities). \
Each section holds at most 100 items (users 100, recentTimeline 50, facts 50, sources 20, \
revenue.history the latest 100 changes); `includeTotals` says how many there are in all per \
section (`{users: 5000, facts: 12}`: exact for users, facts and sources; `revenue` and \
`recentTimeline` are counted up to 10,000, past which `includeTotalsExact` marks the section \
false) and the list tools page through the rest. Returns the Customer record \
with one extra key per included section; 404 when no customer matches.";

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let timeframe = parse_duration("timeframe", input.timeframe.as_deref().unwrap_or("30d"))?;
    let c = resolve_customer(ctx, &input.customer).await?;
    let mut out = records::customer(&c);
    let include = input.include.unwrap_or_default();
    let db = ctx.db().await?;
    let org = &ctx.organization_id;
    let obj = out
        .as_object_mut()
        .ok_or_else(|| ToolError::Internal("customer record is not an object".into()))?;
    let mut totals = Map::new();
    let mut exact = Map::new();
    let mut total = |section: &str, t: Total| {
        totals.insert(section.into(), json!(t.count));
        exact.insert(section.into(), json!(t.exact));
    };
    // What the revenue and sources sections read, newest first, for `recentTimeline`: the
    // sources section reads as many as the timeline shows when both are included.
    let mut billing_newest_first = Vec::new();
    let mut sources_newest_first = Vec::new();
    let sources_read = if include.contains(&Section::RecentTimeline) {
        SECTION_SOURCES.max(SECTION_TIMELINE)
    } else {
        SECTION_SOURCES
    };
    if include.contains(&Section::Users) {
        let users = user::Entity::find()
            .filter(user::Column::OrganizationId.eq(org))
            .filter(user::Column::CustomerId.eq(&c.id));
        let kept = KeptTotal::users_of(&c.id);
        let (rows, count) =
            first_and_total(db, users, PageTotal::kept(org, &kept), SECTION_USERS, |q| {
                q.order_by_with_nulls(
                    user::Column::LastActivityAt,
                    Order::Desc,
                    NullOrdering::Last,
                )
                .order_by(user::Column::Id, Order::Desc)
            })
            .await?;
        obj.insert("users".into(), rows.iter().map(records::user).collect());
        total("users", count);
    }
    if include.contains(&Section::Revenue) {
        let changes = billing_change::Entity::find()
            .filter(billing_change::Column::OrganizationId.eq(org))
            .filter(billing_change::Column::CustomerId.eq(&c.id));
        let counted = PageTotal::Counted(changes.clone());
        let (rows, count) = first_and_total(db, changes, counted, SECTION_REVENUE_HISTORY, |q| {
            q.order_by(billing_change::Column::At, Order::Desc)
                .order_by(billing_change::Column::Id, Order::Desc)
        })
        .await?;
        let history: Vec<Value> = rows
            .iter()
            .rev()
            .map(|b| json!({ "at": ts(&b.at), "billingStatus": b.billing_status.as_str(), "mrrCents": b.mrr_cents }))
            .collect();
        let mut revenue =
            json!({ "mrrCents": c.mrr_cents, "billingStatus": c.billing_status.as_str() });
        revenue["history"] = Value::Array(history);
        obj.insert("revenue".into(), revenue);
        total("revenue", count);
        billing_newest_first = rows;
    }
    if include.contains(&Section::Facts) {
        let facts = fact::Entity::find()
            .filter(fact::Column::OrganizationId.eq(org))
            .filter(fact::Column::CustomerId.eq(&c.id))
            .filter(fact::Column::Status.eq(FactStatus::Active));
        let kept = KeptTotal::facts_of(&c.id, &[FactStatus::Active]);
        let (rows, count) =
            first_and_total(db, facts, PageTotal::kept(org, &kept), SECTION_FACTS, |q| {
                q.order_by(fact::Column::SourceOccurredAt, Order::Desc)
                    .order_by(fact::Column::Id, Order::Desc)
            })
            .await?;
        obj.insert("facts".into(), rows.iter().map(records::fact).collect());
        total("facts", count);
    }
    if include.contains(&Section::Sources) {
        let sources = source::Entity::find()
            .filter(source::Column::OrganizationId.eq(org))
            .filter(source::Column::CustomerId.eq(&c.id));
        let kept = KeptTotal::sources_of(&c.id);
        let (rows, count) = first_and_total(
            db,
            sources,
            PageTotal::kept(org, &kept),
            sources_read,
            |q| {
                q.order_by(source::Column::OccurredAt, Order::Desc)
                    .order_by(source::Column::Id, Order::Desc)
            },
        )
        .await?;
        obj.insert(
            "sources".into(),
            rows.iter()
                .take(SECTION_SOURCES as usize)
                .map(records::source_item)
                .collect(),
        );
        total("sources", count);
        sources_newest_first = rows;
    }
    if include.contains(&Section::RecentTimeline) {
        let window = Window::of(&c, Some(Utc::now() - timeframe), None, Channels::ALL);
        // The billing changes and sources the sections above read are the newest of the
        // customer's: the timeline takes its latest ones from them where they suffice.
        let known = AlreadyRead {
            billing: include.contains(&Section::Revenue).then(|| Newest {
                rows: &billing_newest_first,
                all: (billing_newest_first.len() as u64) < SECTION_REVENUE_HISTORY,
            }),
            sources: include.contains(&Section::Sources).then(|| Newest {
                rows: &sources_newest_first,
                all: (sources_newest_first.len() as u64) < sources_read,
            }),
        };
        let read = timeline::read(ctx, &window, None, SECTION_TIMELINE, true, &known).await?;
        let count = read.total(ctx, &window).await?;
        obj.insert(
            "recentTimeline".into(),
            read.entries.into_iter().map(|e| e.value).collect(),
        );
        total("recentTimeline", count);
    }
    if !include.is_empty() {
        obj.insert("includeTotals".into(), Value::Object(totals));
        obj.insert("includeTotalsExact".into(), Value::Object(exact));
    }
    Ok(out)
}

/// A section's first `limit` rows of those `matching` selects, in the order `order` gives, and
/// `total`, in one statement.
async fn first_and_total<E>(
    db: &crate::db::Reads,
    matching: sea_orm::Select<E>,
    total: PageTotal<E>,
    limit: u64,
    order: impl FnOnce(sea_orm::Select<E>) -> sea_orm::Select<E>,
) -> Result<(Vec<E::Model>, Total), sea_orm::DbErr>
where
    E: EntityTrait,
    E::Model: Send + Sync,
{
    first_page(db, order(matching).limit(limit), total).await
}
