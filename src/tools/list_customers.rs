//! `svc_list_customers`: browse and filter customers.

use chrono::Utc;
use entity::customer::{Column, Entity};
use sea_orm::{
    sea_query::{Expr, ExprTrait},
    ColumnTrait, Condition, DbBackend, EntityTrait, QueryFilter,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    activity_page::{activity_page, ActivityRange, KnownTotal},
    common::{
        check_fields, count_parts_up_to, filter_by_name, key_time_opt, parse_duration,
        rare_trait_candidates, rows_of, ListRequest, Residuals, Total, EXACT_TOTAL_LIMIT,
        FEW_MATCHES,
    },
    few_matches_page::{few_matches_page, MatchKeys},
    record_counts::{self, KeptTotal},
    records::{self, CUSTOMER_FIELDS, CUSTOMER_IDS},
    ToolContext, ToolResult,
};
use crate::db::name_search::NamesOf;

pub use entity::customer::BillingStatus;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// Only customers with this billing status.
    pub billing_status: Option<BillingStatus>,
    /// Only customers active within this duration (`<n>h`, `<n>d` or `<n>w`, e.g. `7d`).
    #[schemars(regex(pattern = r"^\s*[0-9]+[hdw]\s*$"))]
    pub active_within: Option<String>,
    /// Only customers not active for at least this duration (never-active customers match).
    #[schemars(regex(pattern = r"^\s*[0-9]+[hdw]\s*$"))]
    pub inactive_for: Option<String>,
    /// Only customers with at least this monthly recurring revenue, in cents.
    #[schemars(range(min = 0))]
    pub min_mrr_cents: Option<i64>,
    /// Only customers with at most this monthly recurring revenue, in cents.
    #[schemars(range(min = 0))]
    pub max_mrr_cents: Option<i64>,
    /// Only customers whose traits hold exactly these values (one exact match per key).
    pub traits: Option<Map<String, Value>>,
    /// Only customers whose name contains this text (case-insensitive).
    #[schemars(length(min = 1, max = 200))]
    pub name: Option<String>,
    /// Items per page, 1 to 1000 (default 50).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// The previous page's `pagination.nextCursor`.
    pub cursor: Option<String>,
    /// Only these record fields in each item (plus `id`), to keep large lists small.
    pub fields: Option<Vec<String>>,
}

pub const DESCRIPTION: &str = "Browse and filter customers (accounts) by billing status, \
activity recency (`activeWithin`, `inactiveFor` as `30d`, `12h`, `2w`), monthly revenue \
(`minMrrCents`, `maxMrrCents`), exact trait values or a name substring. Returns \
`{items: [Customer], pagination}`, most recently active first; pass `pagination.nextCursor` \
as `cursor` for the next page.";

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let req = ListRequest::new(input.limit, &input.cursor)?;
    check_fields(&input.fields, CUSTOMER_FIELDS)?;
    let now = Utc::now();
    // The conditions an index serves beside the organization's: a rare trait's candidates name
    // the organization themselves.
    let mut beside_organization = Condition::all();
    if let Some(status) = input.billing_status {
        beside_organization = beside_organization.add(Column::BillingStatus.eq(status));
    }
    let mut range = ActivityRange::default();
    if let Some(raw) = &input.active_within {
        range.since = Some(now - parse_duration("activeWithin", raw)?);
    }
    if let Some(raw) = &input.inactive_for {
        range.before = Some(now - parse_duration("inactiveFor", raw)?);
    }
    let revenue =
        (input.min_mrr_cents.is_some() || input.max_mrr_cents.is_some()).then_some(Revenue {
            min: input.min_mrr_cents,
            max: input.max_mrr_cents,
        });
    // Filtered by nothing but the counted column (and traits): a total may be known without
    // counting the list.
    let no_other_filter = input.active_within.is_none()
        && input.inactive_for.is_none()
        && input.min_mrr_cents.is_none()
        && input.max_mrr_cents.is_none()
        && input.name.is_none();
    let trait_alone = no_other_filter && input.billing_status.is_none();
    let traits = rare_trait_candidates(ctx, "customers", &input.traits, trait_alone).await?;
    let mut residuals = Residuals::of_traits(ctx, "customers", &input.traits, &traits)?;
    let name = input.name.as_deref();
    let named = filter_by_name(
        ctx,
        NamesOf::Customers,
        Column::Name,
        name,
        &mut beside_organization,
        &mut residuals,
    )
    .await?;
    let mut filter = Condition::all()
        .add(Column::OrganizationId.eq(&ctx.organization_id))
        .add(beside_organization.clone());
    // Few matches (a rare trait value, a narrow revenue range, a name the name index finds in
    // few customers): read those, then order them. Walking the activity index instead would
    // test every customer of the organization against the few the name index found.
    let rare_trait = traits.candidates;
    // A revenue range beside nothing but a billing status: its count is the list's total too,
    // so it is counted to where totals stop being exact, once.
    let revenue_alone = input.active_within.is_none()
        && input.inactive_for.is_none()
        && input.name.is_none()
        && input.traits.as_ref().is_none_or(Map::is_empty);
    let mut revenue_total = None;
    // Counted to choose the path (and, alone, for the total): a name the index found in few
    // customers takes the few-matches path whatever the range holds. The kept revenue bands
    // answer first: exactly for a range on their edges, and otherwise with a lower bound that,
    // once past the limit at hand, makes the count unneeded. Else the range's edges outside
    // those bands are counted from the revenue index, up to what the limit still needs (the
    // whole range when no band lies within it).
    let narrow_revenue = match (&rare_trait, &revenue) {
        (None, Some(revenue)) if !named => {
            let in_range = record_counts::customers_in_revenue_range(
                ctx.db().await?,
                &ctx.organization_id,
                input.billing_status.map(BillingStatus::as_str),
                revenue.min,
                revenue.max,
            )
            .await?;
            let kept = in_range.kept;
            let exact = in_range.edges.is_empty();
            let kept_plus_edges = |limit: u64| {
                let edges = in_range
                    .edges
                    .iter()
                    .map(|&(min, max)| {
                        rows_of(
                            Entity::find()
                                .filter(filter.clone().add(Revenue { min, max }.indexed())),
                        )
                    })
                    .collect();
                async move {
                    let db = ctx.db().await?;
                    let edges =
                        count_parts_up_to(db, edges, (limit + 1).saturating_sub(kept)).await?;
                    Ok::<_, super::ToolError>(kept + edges)
                }
            };
            let matches = if revenue_alone {
                if exact || kept > EXACT_TOTAL_LIMIT {
                    revenue_total = Some(Total { count: kept, exact });
                    kept
                } else {
                    let n = kept_plus_edges(Ord::max(EXACT_TOTAL_LIMIT, FEW_MATCHES)).await?;
                    revenue_total = Some(Total::capped(n));
                    n
                }
            } else if exact || kept > FEW_MATCHES {
                kept
            } else {
                kept_plus_edges(FEW_MATCHES).await?
            };
            matches <= FEW_MATCHES
        }
        _ => false,
    };
    let few = (rare_trait.is_some() || narrow_revenue || named).then(|| {
        // Without the plain organization condition beside a rare trait's candidates: on
        // PostgreSQL they come from a GIN index keyed by organization, and a prepared
        // statement's generic plan would otherwise AND in a bitmap of every customer of the
        // organization (90-190 ms at a million, against 4 ms).
        let mut served = match rare_trait {
            Some(candidates) => beside_organization.clone().add(candidates),
            None => filter.clone(),
        };
        if let Some(revenue) = &revenue {
            served = served.add(revenue.indexed());
        }
        served
    });
    // Filtered by the counted column alone, the total is kept; by one trait value alone, the
    // trait index counted it; by a revenue range (and a status) alone, it was counted above.
    let kept = (no_other_filter && input.traits.as_ref().is_none_or(Map::is_empty)).then(|| {
        KnownTotal::Kept(KeptTotal {
            record: "customers",
            buckets: input.billing_status.map(|b| vec![b.as_str().to_string()]),
        })
    });
    // Filtered by `activeWithin` or `inactiveFor` alone: the whole hours and days of the range
    // are kept, and only the part-hour at its edge is counted.
    let activity_alone = input.billing_status.is_none()
        && revenue.is_none()
        && name.is_none()
        && input.traits.as_ref().is_none_or(Map::is_empty);
    let by_activity = activity_alone
        .then(|| {
            record_counts::customers_by_activity(&ctx.organization_id, range.since, range.before)
        })
        .flatten()
        .map(|total| KnownTotal::KeptPlus(total.kept, total.edge));
    // A few-matches list's total when known already: one trait value alone, or a revenue range
    // (and a status) alone.
    let few_total = traits.counted_alone.or(revenue_total);
    let known = kept
        .or(traits.counted_alone.map(KnownTotal::Counted))
        .or(revenue_total.map(KnownTotal::Counted))
        .or(by_activity);
    let (residual, counted_residual, unimplied) = residuals.split();
    // A revenue range alone (with a status or activity bound; a narrow range is never beside a
    // rare trait or a name the name index found): the revenue indexes hold every condition and
    // the sort keys.
    let keys = if narrow_revenue && residual.is_none() {
        MatchKeys::InIndex
    } else {
        MatchKeys::InRows
    };
    let (rows, total) = match (few, revenue) {
        (Some(few), _) => {
            let served = few.add(range.condition(Column::LastActivityAt));
            few_matches_page::<Entity>(
                ctx,
                &req,
                served,
                residual,
                unimplied,
                keys,
                few_total,
                Column::LastActivityAt,
                Column::Id,
            )
            .await?
        }
        (None, revenue) => {
            // Many matches: walking the activity index finds a page soon, while the revenue
            // index would read and sort every match. The page checks the revenue range on
            // the activity index's entries ([`Revenue::walked`]); the total counts it through
            // the revenue index.
            let counted = revenue.as_ref().map(|r| filter.clone().add(r.indexed()));
            if let Some(r) = &revenue {
                filter = filter.add(r.walked(ctx.state.db.get_database_backend()));
            }
            activity_page::<Entity>(
                ctx,
                &req,
                filter,
                counted,
                residual,
                counted_residual,
                range,
                known,
                Column::LastActivityAt,
                Column::Id,
            )
            .await?
        }
    };
    Ok(super::common::page(
        rows,
        &req,
        total,
        |c| vec![key_time_opt(&c.last_activity_at), json!(c.id)],
        records::customer,
        input.fields.as_deref().map(|f| (f, CUSTOMER_IDS)),
    ))
}

/// A `minMrrCents` / `maxMrrCents` filter.
struct Revenue {
    min: Option<i64>,
    max: Option<i64>,
}

impl Revenue {
    /// The range as the revenue indexes serve it.
    fn indexed(&self) -> Condition {
        let mut cond = Condition::all();
        if let Some(min) = self.min {
            cond = cond.add(Column::MrrCents.gte(min));
        }
        if let Some(max) = self.max {
            cond = cond.add(Column::MrrCents.lte(max));
        }
        cond
    }

    /// The range as the page walking the activity index checks it, on the index's entries
    /// (which end with the revenue). On SQLite as an expression (`mrr_cents + 0`), which no
    /// index serves, so the planner keeps to the activity order: SQLite evaluates it on the
    /// entry. PostgreSQL checks only plain column conditions on an index's entries (an
    /// expression needs the row), and with its statistics keeps to the activity order for a
    /// wide range.
    fn walked(&self, backend: DbBackend) -> Condition {
        if backend == DbBackend::Postgres {
            return self.indexed();
        }
        let walked = || Expr::col((entity::customer::Entity, Column::MrrCents)).add(0);
        let mut cond = Condition::all();
        if let Some(min) = self.min {
            cond = cond.add(walked().gte(min));
        }
        if let Some(max) = self.max {
            cond = cond.add(walked().lte(max));
        }
        cond
    }
}
