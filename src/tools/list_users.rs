//! `svc_list_users`: browse and filter users (the people at customers).

use chrono::Utc;
use entity::user::{Column, Entity};
use sea_orm::{ColumnTrait, Condition};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    activity_page::{activity_page, ActivityRange, KnownTotal},
    common::{
        carries_traits, check_fields, filter_by_name, key_time_opt, parse_duration,
        rare_trait_candidates, resolve_customer, ListRequest, Residuals,
    },
    few_matches_page::{few_matches_page, MatchKeys},
    record_counts::KeptTotal,
    records::{self, USER_FIELDS, USER_IDS},
    ToolContext, ToolResult,
};
use crate::db::name_search::NamesOf;

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
    let mut range = ActivityRange::default();
    if let Some(raw) = &input.active_within {
        range.since = Some(now - parse_duration("activeWithin", raw)?);
    }
    if let Some(raw) = &input.inactive_for {
        range.before = Some(now - parse_duration("inactiveFor", raw)?);
    }
    let customer_id = match &input.customer {
        Some(customer) => Some(resolve_customer(ctx, customer).await?.id),
        None => None,
    };
    if let Some(id) = &customer_id {
        filter = filter.add(Column::CustomerId.eq(id));
    }
    // Filtered by nothing but the counted column (and traits): a total may be known without
    // counting the list.
    let unbounded = input.active_within.is_none()
        && input.inactive_for.is_none()
        && input.email.is_none()
        && input.name.is_none();
    let no_other_filter = unbounded && input.customer.is_none();
    let trait_alone = no_other_filter && input.stage.is_none();
    let traits = rare_trait_candidates(ctx, "users", &input.traits, trait_alone).await?;
    let mut residuals = Residuals::of_traits(ctx, "users", &input.traits, &traits)?;
    if input.traits.as_ref().is_some_and(|t| !t.is_empty()) {
        // Users without traits match no trait filter: walk only those with some (an index of
        // their own), past the trait-less users ingest makes, who lead the activity order.
        filter = filter.add(carries_traits(ctx.state.db.get_database_backend()));
    }
    let rare_trait = traits.candidates;
    if let Some(email) = &input.email {
        // Stored emails are in one normal form: an equality the (organization, email) index serves.
        filter = filter.add(Column::Email.eq(super::common::normalize_email(email)));
    }
    let name = input.name.as_deref();
    let named = filter_by_name(
        ctx,
        NamesOf::Users,
        Column::Name,
        name,
        &mut filter,
        &mut residuals,
    )
    .await?;
    // Filtered by the counted column alone (or by a customer alone), the total is kept; by
    // one trait value alone, the trait index counted it.
    let no_traits = input.traits.as_ref().is_none_or(Map::is_empty);
    let kept = (no_other_filter && no_traits).then(|| {
        KnownTotal::Kept(KeptTotal {
            record: "users",
            buckets: input.stage.map(|b| vec![b.as_str().to_string()]),
        })
    });
    let customer_alone = unbounded && input.stage.is_none() && no_traits;
    let kept = kept.or_else(|| {
        let id = customer_id.as_deref().filter(|_| customer_alone)?;
        Some(KnownTotal::Kept(KeptTotal::users_of(id)))
    });
    let known = kept.or(traits.counted_alone.map(KnownTotal::Counted));
    let (residual, counted_residual, unimplied) = residuals.split();
    // A rare trait value or a rare name: read the few users, then order them.
    let few = match rare_trait {
        Some(candidates) => Some(filter.clone().add(candidates)),
        // A name the name index finds in few users: walking the activity index instead would
        // test every user of the organization against them.
        None => named.then(|| filter.clone()),
    };
    let (rows, total) = match few {
        Some(served) => {
            let served = served.add(range.condition(Column::LastActivityAt));
            few_matches_page::<Entity>(
                ctx,
                &req,
                served,
                residual,
                unimplied,
                MatchKeys::InRows,
                traits.counted_alone,
                Column::LastActivityAt,
                Column::Id,
            )
            .await?
        }
        None => {
            activity_page::<Entity>(
                ctx,
                &req,
                filter,
                None,
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
        |u| vec![key_time_opt(&u.last_activity_at), json!(u.id)],
        records::user,
        input.fields.as_deref().map(|f| (f, USER_IDS)),
    ))
}
