//! Pages of customers or users, most recently active first (`last_activity_at DESC NULLS
//! LAST, id DESC`), with the first page's `total`.
//!
//! Written so that each query is a plain range on an `(organization_id, [filter column,]
//! last_activity_at, id)` index:
//! - with `inactiveFor` (a time bound that keeps never-active rows), the page reads the
//!   active rows first and the never-active rows only when the active ones run out, and the
//!   total is counted as those two ranges, instead of one query whose `... OR
//!   last_activity_at IS NULL` makes the database walk every recently active row;
//! - the count runs beside the page on another pooled connection, not after it, and comes
//!   from the trigger-kept counts when the list is filtered by a stage or status alone.

use chrono::{DateTime, Utc};
use sea_orm::{
    sea_query::{Expr, ExprTrait, NullOrdering},
    ColumnTrait, Condition, DatabaseConnection, DbErr, EntityTrait, Order, QueryFilter, QueryOrder,
    QuerySelect,
};

use super::{
    common::{after_desc_nullable, count_capped, count_examined, ListRequest, Total},
    record_counts::{self, KeptTotal},
    ToolContext, ToolResult,
};

/// Which last-activity times a list keeps (`activeWithin`, `inactiveFor`).
#[derive(Debug, Default, Clone, Copy)]
pub struct ActivityRange {
    /// Active at or after this time (never-active rows do not match).
    pub since: Option<DateTime<Utc>>,
    /// Last active before this time; never-active rows match too.
    pub before: Option<DateTime<Utc>>,
}

impl ActivityRange {
    /// A time bound that keeps never-active rows: the one case read as two ranges.
    fn is_split(&self) -> bool {
        self.before.is_some() && self.since.is_none()
    }
}

/// The rows of one page (up to `limit + 1`, so the caller can tell `hasMore`) and the total.
/// `filter` holds the conditions an index serves, `residual` those checked row by row (trait
/// values, name substrings), whose total counts only the first rows `filter` selects
/// ([`count_examined`]). `kept` names the trigger-kept total to use when the list has no other
/// filter.
#[allow(clippy::too_many_arguments)]
pub async fn activity_page<E>(
    ctx: &ToolContext,
    req: &ListRequest,
    filter: Condition,
    residual: Option<Condition>,
    range: ActivityRange,
    kept: Option<KeptTotal>,
    activity: E::Column,
    id: E::Column,
) -> ToolResult<(Vec<E::Model>, Total)>
where
    E: EntityTrait,
    E::Model: Send + Sync,
{
    let db = &ctx.state.db;
    let mut bounded = filter.clone();
    if let Some(t) = range.since {
        bounded = bounded.add(activity.gte(t));
    }
    if let Some(t) = range.before {
        bounded = bounded.add(activity.lt(t));
    }
    // The two ranges of a split list: `bounded` minus its never-active rows, and those.
    let active = bounded.clone().add(activity.is_not_null());
    let never = filter.clone().add(activity.is_null());
    let with_residual = |c: &Condition| match &residual {
        Some(r) => c.clone().add(r.clone()),
        None => c.clone(),
    };
    let count = |served: Condition| {
        let residual = residual.clone();
        async move {
            match residual {
                Some(r) => count_examined::<E, _>(db, served, r).await,
                None => count_capped(db, E::find().filter(served)).await,
            }
        }
    };

    let want = req.limit + 1;
    let rows = async {
        if range.is_split() {
            let (active, never) = (with_residual(&active), with_residual(&never));
            split_page::<E>(db, req, &active, &never, want, activity, id).await
        } else {
            // One range of the activity index (or whatever index the other filters favour):
            // one query, in which SQLite's DESC order already puts NULLs last.
            let mut query = E::find().filter(with_residual(&bounded));
            if let Some(c) = &req.cursor {
                query = query.filter(after_desc_nullable(activity, id, c.time(0)?, &c.text(1)?));
            }
            Ok(query
                .order_by_with_nulls(activity, Order::Desc, NullOrdering::Last)
                .order_by(id, Order::Desc)
                .limit(want)
                .all(db)
                .await?)
        }
    };
    let total = async {
        if let Some(c) = &req.cursor {
            return Ok(c.total());
        }
        if let Some(kept) = &kept {
            return Ok(Total::exact(
                record_counts::read(db, &ctx.organization_id, kept).await?,
            ));
        }
        if range.is_split() {
            // Two ranges of the activity index, counted at once.
            let (a, n) = tokio::try_join!(count(active.clone()), count(never.clone()))?;
            Ok(a.plus(n))
        } else {
            count(bounded.clone()).await
        }
    };
    let (rows, total): (ToolResult<Vec<E::Model>>, Result<Total, DbErr>) =
        tokio::join!(rows, total);
    Ok((rows?, total?))
}

/// A page of `active` rows first and `never`-active rows after them: each one plain range of
/// the activity index, where one query with `last_activity_at < ? OR last_activity_at IS NULL`
/// would walk every recently active row first.
async fn split_page<E>(
    db: &DatabaseConnection,
    req: &ListRequest,
    active: &Condition,
    never: &Condition,
    want: u64,
    activity: E::Column,
    id: E::Column,
) -> ToolResult<Vec<E::Model>>
where
    E: EntityTrait,
    E::Model: Send + Sync,
{
    // Where the previous page ended: inside the active rows (a time) or the never-active ones.
    let (active_from, never_from) = match &req.cursor {
        None => (Some(active.clone()), never.clone()),
        Some(c) => {
            let last_id = c.text(1)?;
            match c.time(0)? {
                Some(t) => (
                    Some(
                        active.clone().add(
                            Expr::tuple([activity.into_expr(), id.into_expr()])
                                .lt(Expr::tuple([Expr::val(t), Expr::val(last_id)])),
                        ),
                    ),
                    never.clone(),
                ),
                None => (None, never.clone().add(id.lt(last_id))),
            }
        }
    };
    let mut rows = match active_from {
        Some(cond) => {
            // `NULLS LAST` although no row here is null: PostgreSQL then reads the activity
            // index in its own order instead of sorting.
            E::find()
                .filter(cond)
                .order_by_with_nulls(activity, Order::Desc, NullOrdering::Last)
                .order_by(id, Order::Desc)
                .limit(want)
                .all(db)
                .await?
        }
        None => Vec::new(),
    };
    if (rows.len() as u64) < want {
        let rest = E::find()
            .filter(never_from)
            .order_by(id, Order::Desc)
            .limit(want - rows.len() as u64)
            .all(db)
            .await?;
        rows.extend(rest);
    }
    Ok(rows)
}
