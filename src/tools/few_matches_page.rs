//! Pages of customers or users whose candidates are known to be few (a rare trait value, a
//! narrow revenue range, a name the name index finds in few customers), most recently active
//! first like every other page of those lists.
//!
//! Walking the activity index for such a list reads past every non-matching row until a page
//! is found (at a match in a thousand, 50,000 rows for a page of 50), and an index on the rare
//! filter gives its matches in the wrong order. So the matches' sort keys (`id`,
//! `last_activity_at`) are read at once through the filter's index, ordered here, and only the
//! page's rows are read: the cost follows the number of candidates, which the caller has
//! counted (at most [`super::common::FEW_MATCHES`]) before choosing this path.
//!
//! On PostgreSQL the database orders them itself: one statement reads the matches through the
//! filter's index, counts them and keeps the page's (a bounded sort), where sending every
//! match's key to the service and reading the page's rows again by primary key cost a second
//! statement and a decoded row per match. When that index holds every condition and the sort
//! keys ([`MatchKeys::InIndex`], a revenue range), the statement sorts the keys alone, read
//! from the index without the rows, and reads only the page's rows: reading each match's row
//! (one scattered page each) was most of the time.

use std::{cmp::Ordering, collections::HashMap};

use chrono::{DateTime, Utc};
use sea_orm::{
    sea_query::{Alias, Asterisk, Expr, ExprTrait, NullOrdering, Query, SimpleExpr},
    ColumnTrait, Condition, ConnectionTrait, DbBackend, EntityTrait, FromQueryResult, ModelTrait,
    Order, QueryFilter, QuerySelect, QueryTrait,
};

use super::{
    common::{models_and_count, CountedResidual, ListRequest, Total},
    ToolContext, ToolError, ToolResult,
};

/// Where a few-matches list's sort keys can be read from (PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKeys {
    /// In the rows: the matches' rows are read anyway (candidates from a trait or name index,
    /// conditions checked on the row), so the page is sorted from them.
    InRows,
    /// In one index with every condition of `served` (a revenue range's index ends with the
    /// activity time and the id): the keys are sorted without reading the matches' rows, and
    /// the page's rows are read by id.
    InIndex,
}

/// A page's sort key: last activity (`None`: never active) and id.
type SortKey = (Option<DateTime<Utc>>, String);

#[derive(sea_orm::FromQueryResult)]
struct KeyRow {
    at: Option<DateTime<Utc>>,
    id: String,
    /// 1 where the row passes the conditions `served` does not imply, null otherwise.
    matched: Option<i64>,
}

/// `a` before `b` in `last_activity_at DESC NULLS LAST, id DESC`.
fn list_order(a: &SortKey, b: &SortKey) -> Ordering {
    let by_time = match (&a.0, &b.0) {
        (Some(x), Some(y)) => y.cmp(x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    by_time.then_with(|| b.1.cmp(&a.1))
}

/// The page after `req.cursor` (up to `limit + 1` rows, so the caller can tell `hasMore`) of
/// the rows `served` selects that also pass `residual`, and the first page's total. `served`
/// holds the conditions an index answers, the one that makes the matches few among them;
/// `residual` those checked row by row (trait values, a name substring), and
/// `counted_residual` those of them `served` does not already imply, in the form a count
/// checks (none: every row `served` selects matches).
///
/// `known` is the first page's total when the caller knows it already (kept counts of a trait
/// value, a counted revenue range): then PostgreSQL does not count the matches again (the
/// keys' path below counts them anyway, as it reads them all).
///
/// Elsewhere than PostgreSQL, the keys are read with whether each row matches, so the total is
/// the number of matching keys (exact: every candidate was read) and the page reads only
/// matching rows.
#[allow(clippy::too_many_arguments)]
pub async fn few_matches_page<E>(
    ctx: &ToolContext,
    req: &ListRequest,
    served: Condition,
    residual: Option<Condition>,
    counted_residual: Option<CountedResidual>,
    keys: MatchKeys,
    known: Option<Total>,
    activity: E::Column,
    id: E::Column,
) -> ToolResult<(Vec<E::Model>, Total)>
where
    E: EntityTrait,
    E::Model: Send + Sync,
{
    let db = ctx.db().await?;
    if db.get_database_backend() == DbBackend::Postgres {
        let total = match (&req.cursor, known) {
            (Some(c), _) => Some(c.total()),
            (None, known) => known,
        };
        return sorted_by_database::<E>(db, req, served, residual, keys, total, activity, id).await;
    }
    let matched: SimpleExpr = match &counted_residual {
        Some(r) => r.passes(),
        None => Expr::val(1i64),
    };
    // Read by column name: a read connection's rows are not positional (see db::Reads).
    let mut keys: Vec<SortKey> = E::find()
        .select_only()
        .column_as(activity, "at")
        .column_as(id, "id")
        .expr_as(matched, "matched")
        .filter(served)
        .into_model::<KeyRow>()
        .all(db)
        .await?
        .into_iter()
        .filter(|k| k.matched == Some(1))
        .map(|k| (k.at, k.id))
        .collect();
    keys.sort_by(list_order);
    let total = match &req.cursor {
        Some(c) => c.total(),
        None => Total::exact(keys.len() as u64),
    };

    let start = match &req.cursor {
        Some(c) => {
            let after: SortKey = (c.time(0)?, c.text(1)?);
            keys.partition_point(|k| list_order(k, &after) != Ordering::Greater)
        }
        None => 0,
    };
    // The page's rows in the list's order, read a page of keys at a time. The keys are matches
    // already; the rows are checked again, and one changed since its key was read is skipped
    // and the next chunk read.
    let want = req.limit as usize + 1;
    let mut rows = Vec::with_capacity(want);
    for keys in keys[start..].chunks(want) {
        let mut query = E::find().filter(id.is_in(keys.iter().map(|(_, id)| id.clone())));
        if let Some(r) = &residual {
            query = query.filter(r.clone());
        }
        let mut by_id: HashMap<String, E::Model> = HashMap::new();
        for row in query.all(db).await? {
            let key = match row.get(id) {
                sea_orm::Value::String(Some(s)) => s.to_string(),
                other => {
                    return Err(ToolError::Internal(format!(
                        "a list's id is not text: {other:?}"
                    )))
                }
            };
            by_id.insert(key, row);
        }
        rows.extend(
            keys.iter()
                .filter_map(|(_, id)| by_id.remove(id))
                .take(want - rows.len()),
        );
        if rows.len() == want {
            break;
        }
    }
    Ok((rows, total))
}

/// PostgreSQL: the page after `req.cursor` of the rows `served` and `residual` select, ordered
/// and limited by the database, and the list's total: `known` when given (a later page's, or
/// one the caller knows), else the matches counted in the same statement (`COUNT(*) OVER ()`,
/// exact).
///
/// The matches are a derived table named like the table, ordered outside it. Something in it
/// must keep PostgreSQL from merging the two, so the matches are read the cheapest way to read
/// them all (the filter's index) and then sorted: written as one query, the planner walked the
/// organization's activity index in the list's order to spare the sort (the plan test caught
/// it with a revenue range, whose columns that index also holds). The count's window function
/// does; without a count, `OFFSET 0` does, where counting anyway kept every match's row in the
/// window's store before the sort (0.5 of 1.7 ms for a rare trait's 1,000 customers at a
/// million).
/// With [`MatchKeys::InIndex`] the derived table holds only the keys (and the count), and the
/// page's rows are joined to it by id.
#[allow(clippy::too_many_arguments)]
async fn sorted_by_database<E>(
    db: &crate::db::Reads,
    req: &ListRequest,
    served: Condition,
    residual: Option<Condition>,
    keys: MatchKeys,
    known: Option<Total>,
    activity: E::Column,
    id: E::Column,
) -> ToolResult<(Vec<E::Model>, Total)>
where
    E: EntityTrait,
    E::Model: Send + Sync,
{
    const MATCHES: &str = "few_matches";
    let mut page = E::find().filter(served);
    if let Some(r) = residual {
        page = page.filter(r);
    }
    if let Some(c) = &req.cursor {
        let last_id = c.text(1)?;
        // After the cursor in `activity DESC NULLS LAST, id DESC`; checked on the few matches,
        // so an `OR` that no index range serves costs nothing.
        // The same row comparison as the activity walk's later pages (`split_page`).
        page = page.filter(match c.time(0)? {
            Some(t) => Condition::any()
                .add(
                    Expr::tuple([activity.into_expr(), id.into_expr()])
                        .lt(Expr::tuple([Expr::val(t), Expr::val(last_id)])),
                )
                .add(activity.is_null()),
            None => Condition::all().add(activity.is_null()).add(id.lt(last_id)),
        });
    }
    if keys == MatchKeys::InIndex {
        page = page.select_only().column(id).column(activity);
    }
    let matches = match known {
        None => page
            .expr_as(Expr::cust("COUNT(*) OVER ()"), MATCHES)
            .into_query(),
        Some(_) => page.offset(0).into_query(),
    };
    let ordered = Query::select()
        .column(Asterisk)
        .from_subquery(matches, Alias::new(E::default().table_name()))
        .order_by_with_nulls(activity, Order::Desc, NullOrdering::Last)
        .order_by(id, Order::Desc)
        .limit(req.limit + 1)
        .to_owned();
    let page = match keys {
        MatchKeys::InRows => ordered,
        MatchKeys::InIndex => {
            let keys = Alias::new("page_keys");
            let mut joined = Query::select();
            joined.column((E::default(), Asterisk));
            if known.is_none() {
                joined.column((keys.clone(), Alias::new(MATCHES)));
            }
            joined
                .from_subquery(ordered, keys.clone())
                .inner_join(
                    E::default(),
                    Expr::col((E::default(), id)).equals((keys.clone(), id)),
                )
                .order_by_with_nulls((keys.clone(), activity), Order::Desc, NullOrdering::Last)
                .order_by((keys, id), Order::Desc)
                // The keys' limit again: a page statement ends with its limit, as the plan
                // test reads it.
                .limit(req.limit + 1)
                .to_owned()
        }
    };
    let rows = db
        .query_all_raw(db.get_database_backend().build(&page))
        .await?;
    match known {
        Some(total) => {
            let models = rows
                .iter()
                .map(|row| E::Model::from_query_result(row, ""))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((models, total))
        }
        None => {
            let (models, matches) = models_and_count::<E>(&rows, MATCHES)?;
            Ok((models, Total::exact(matches)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Option<DateTime<Utc>> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn order_is_most_recent_first_never_active_last_then_id_descending() {
        let mut keys: Vec<SortKey> = vec![
            (None, "a".into()),
            (at("2026-01-01T00:00:00Z"), "a".into()),
            (at("2026-02-01T00:00:00Z"), "a".into()),
            (None, "b".into()),
            (at("2026-01-01T00:00:00Z"), "b".into()),
        ];
        keys.sort_by(list_order);
        assert_eq!(
            keys,
            vec![
                (at("2026-02-01T00:00:00Z"), "a".into()),
                (at("2026-01-01T00:00:00Z"), "b".into()),
                (at("2026-01-01T00:00:00Z"), "a".into()),
                (None, "b".into()),
                (None, "a".into()),
            ]
        );
    }
}
