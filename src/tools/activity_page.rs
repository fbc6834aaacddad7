//! Pages of customers or users, most recently active first (`last_activity_at DESC NULLS
//! LAST, id DESC`), with the first page's `total`.
//!
//! Written so that each query is a plain range on an `(organization_id, [filter column,]
//! last_activity_at, id)` index:
//! - with `inactiveFor` (a time bound that keeps never-active rows) and on every page after
//!   the first, the page reads the active rows first and the never-active rows only when the
//!   active ones run out, and the total is counted as two ranges, instead of one query whose
//!   `... OR last_activity_at IS NULL` makes the database walk every recently active row;
//! - the count runs beside the page on another pooled connection, not after it, and comes
//!   from the trigger-kept counts when the list is filtered by a stage or status alone.

use chrono::{DateTime, Utc};
use sea_orm::{
    sea_query::{Expr, ExprTrait, NullOrdering, SimpleExpr},
    ColumnTrait, Condition, ConnectionTrait, DbBackend, DbErr, EntityTrait, IdenStatic, Order,
    QueryFilter, QueryOrder, QuerySelect,
};

use super::{
    common::{self, count_capped, count_examined, CountedResidual, ListRequest, PageTotal, Total},
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
    /// The range as one condition on `activity`, for a list read another way than by walking
    /// its activity index.
    pub fn condition<C: ColumnTrait>(&self, activity: C) -> Condition {
        let mut cond = Condition::all();
        if let Some(t) = self.since {
            cond = cond.add(activity.gte(t));
        }
        if let Some(t) = self.before {
            cond = cond.add(Condition::any().add(activity.lt(t)).add(activity.is_null()));
        }
        cond
    }

    /// `cond` within the range's time bounds, never-active rows left out (the split pages read
    /// those apart).
    fn bound<C: ColumnTrait>(&self, mut cond: Condition, activity: C) -> Condition {
        if let Some(t) = self.since {
            cond = cond.add(activity.gte(t));
        }
        if let Some(t) = self.before {
            cond = cond.add(activity.lt(t));
        }
        cond
    }

    /// A time bound that keeps never-active rows: the one case read as two ranges.
    fn is_split(&self) -> bool {
        self.before.is_some() && self.since.is_none()
    }
}

/// A list's total known without counting the list's own rows.
#[derive(Debug, Clone)]
pub enum KnownTotal {
    /// Kept by the `record_counts` triggers: a list filtered by a stage or status alone.
    Kept(KeptTotal),
    /// Already counted: the records with one trait value (from the trait index), or the
    /// customers in a revenue range (from its index).
    Counted(Total),
    /// Kept in part (the whole hours and days of an activity range) and the rest, the rows of
    /// this condition when there is one, to be counted.
    KeptPlus(Expr, Option<Condition>),
}

/// The rows of one page (up to `limit + 1`, so the caller can tell `hasMore`) and the total.
/// `filter` holds the conditions an index serves, `residual` those checked row by row (trait
/// values, name substrings), and `counted_residual` the same as a count checks them, which
/// counts only the first rows `filter` selects ([`count_examined`]). `known` is the total when
/// it is known already: kept by triggers, or counted by the caller (one trait value in the
/// trait index, a revenue range in its index) when that was the list's only filter.
/// `counted`, when given, replaces `filter` in the total: the same conditions written so an
/// index serves the count, where `filter` writes one so that no index serves it and the page
/// walks the activity index (a wide revenue range: see `svc_list_customers`).
#[allow(clippy::too_many_arguments)]
pub async fn activity_page<E>(
    ctx: &ToolContext,
    req: &ListRequest,
    filter: Condition,
    counted: Option<Condition>,
    residual: Option<Condition>,
    counted_residual: Option<CountedResidual>,
    range: ActivityRange,
    known: Option<KnownTotal>,
    activity: E::Column,
    id: E::Column,
) -> ToolResult<(Vec<E::Model>, Total)>
where
    E: EntityTrait,
    E::Model: Send + Sync,
{
    let db = ctx.db().await?;
    let backend = db.get_database_backend();
    // A condition within the range, and the two ranges of a split list: that minus its
    // never-active rows, and those.
    let ranges = |base: &Condition| {
        let bounded = range.bound(base.clone(), activity);
        let active = bounded.clone().add(activity.is_not_null());
        let never = base.clone().add(never_active::<E>(backend, activity));
        (bounded, active, never)
    };
    let (bounded, active, never) = ranges(&filter);
    let with_residual = |c: &Condition| match &residual {
        Some(r) => c.clone().add(r.clone()),
        None => c.clone(),
    };
    // The same ranges for the total, from `counted` when given.
    let (counted_bounded, counted_active, counted_never) = match &counted {
        Some(c) => ranges(c),
        None => (bounded.clone(), active.clone(), never.clone()),
    };
    let count = |served: Condition| {
        let residual = counted_residual.clone();
        async move {
            match residual {
                Some(r) => count_examined::<E, _>(db, served, &r).await,
                None => count_capped(db, E::find().filter(served)).await,
            }
        }
    };

    let want = req.limit + 1;
    let first_page = || {
        E::find()
            .order_by_with_nulls(activity, Order::Desc, NullOrdering::Last)
            .order_by(id, Order::Desc)
            .limit(want)
    };
    if req.cursor.is_none()
        && !range.is_split()
        && matches!(known, None | Some(KnownTotal::KeptPlus(..)))
        && residual.is_none()
        && counted_residual.is_none()
    {
        // A first page whose total is a plain count (or a kept total and a count): both in
        // one statement (a round trip was most of a small list's cost on PostgreSQL).
        let total = match known {
            Some(KnownTotal::KeptPlus(kept, Some(edge))) => {
                PageTotal::KeptPlusCounted(kept, E::find().filter(edge))
            }
            Some(KnownTotal::KeptPlus(kept, None)) => PageTotal::Kept(kept),
            _ => PageTotal::Counted(E::find().filter(counted_bounded)),
        };
        return Ok(common::first_page(db, first_page().filter(bounded), total).await?);
    }
    let rows = async {
        // Never-active rows follow the active ones unless the range starts at a time.
        let never_rows = range.since.is_none().then(|| with_residual(&never));
        if range.is_split() || req.cursor.is_some() {
            // Two plain ranges: a cursor's `(time, id) < (t, id0) OR time IS NULL` as one
            // condition is not a range, and the database would walk the page's rows from the
            // start of the index.
            let active = with_residual(&active);
            split_page::<E>(db, req, &active, never_rows.as_ref(), want, activity, id).await
        } else {
            // The first page: one range of the activity index (or whatever index the other
            // filters favour), in which SQLite's DESC order already puts NULLs last.
            Ok(first_page().filter(with_residual(&bounded)).all(db).await?)
        }
    };
    let total = async {
        if let Some(c) = &req.cursor {
            return Ok(c.total());
        }
        match &known {
            Some(KnownTotal::Kept(kept)) => {
                return Ok(Total::exact(
                    record_counts::read(db, &ctx.organization_id, kept).await?,
                ))
            }
            Some(KnownTotal::Counted(total)) => return Ok(*total),
            Some(KnownTotal::KeptPlus(kept, edge)) => {
                let matching = edge.as_ref().map(|e| E::find().filter(e.clone()));
                return common::kept_plus_counted(db, kept.clone(), matching).await;
            }
            None => {}
        }
        if range.is_split() {
            if counted_residual.is_none() {
                // Two ranges of the activity index in one count, which stops reading once the
                // active rows reach the limit.
                let parts = vec![
                    common::rows_of(E::find().filter(counted_active)),
                    common::rows_of(E::find().filter(counted_never)),
                ];
                return common::count_capped_parts(db, parts).await;
            }
            // Each range's candidates examined, at once.
            let (a, n) = tokio::try_join!(count(counted_active), count(counted_never))?;
            Ok(a.plus(n))
        } else {
            count(counted_bounded).await
        }
    };
    let (rows, total): (ToolResult<Vec<E::Model>>, Result<Total, DbErr>) =
        tokio::join!(rows, total);
    Ok((rows?, total?))
}

/// `activity IS NULL`, the never-active rows. On SQLite with a hint of how many rows that is
/// (`likelihood(..., 0.5)`): its statistics hold the average rows per value of an index's
/// columns, which for a column of distinct times says that a `NULL` is one row or two, so
/// the organization's activity index looked as good as a customer's (one row either way) for
/// that customer's never-active users, and the planner took it and walked every never-active
/// user of the organization. With the hint, a null is a large share of the rows an index's
/// other columns select, and the index naming the customer wins. PostgreSQL keeps the share
/// of nulls in its statistics.
fn never_active<E: EntityTrait>(backend: DbBackend, activity: E::Column) -> SimpleExpr {
    match backend {
        DbBackend::Sqlite => Expr::cust(format!(
            "likelihood(\"{}\".\"{}\" IS NULL, 0.5)",
            E::default().table_name(),
            activity.as_str()
        )),
        _ => activity.is_null(),
    }
}

/// A page of `active` rows first and `never`-active rows after them (when the list keeps
/// those): each one plain range of the activity index, where one query with
/// `last_activity_at < ? OR last_activity_at IS NULL` would walk every recently active row
/// first.
async fn split_page<E>(
    db: &crate::db::Reads,
    req: &ListRequest,
    active: &Condition,
    never: Option<&Condition>,
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
        None => (Some(active.clone()), never.cloned()),
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
                    never.cloned(),
                ),
                None => (None, never.map(|n| n.clone().add(id.lt(last_id)))),
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
    if let Some(never_from) = never_from.filter(|_| (rows.len() as u64) < want) {
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
