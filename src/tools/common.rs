//! What several tools share: customer resolution, source-type normalization, durations and
//! timestamps, and the list machinery (limits, opaque cursors, `fields` projection,
//! `pagination`).

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use chrono::{DateTime, Duration, Utc};
use entity::customer;
use sea_orm::{
    sea_query::{Expr, ExprTrait, Func, LikeExpr, SimpleExpr},
    ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, QueryFilter,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{ToolContext, ToolError, ToolResult};
use crate::db::name_search::{NamesOf, SHORTEST_INDEXED_NAME};
use crate::db::name_trigrams::rare_parts;
use crate::validation::{PathSegment, ValidationIssue};

/// Default page size of every list tool.
pub const DEFAULT_LIMIT: u32 = 50;
/// Largest page size of every list tool.
pub const MAX_LIMIT: u32 = 1000;

/// The canonical source types.
pub const SOURCE_TYPES: [&str; 5] = [
    "CALL",
    "EMAIL",
    "CALENDAR_EVENT",
    "SUPPORT_TICKET",
    "OPPORTUNITY",
];

/// Finds a customer of the caller's organization by its id, then its domain, then its
/// `externalId`; 404 when none matches.
pub async fn resolve_customer(ctx: &ToolContext, customer: &str) -> ToolResult<customer::Model> {
    let wanted = customer.trim();
    if wanted.is_empty() {
        return Err(ToolError::invalid("customer", "must not be empty"));
    }
    // One statement (a round trip is most of a small read's cost on PostgreSQL): a point
    // look-up per key, the first key that finds a customer winning.
    const BY_ID_THEN_DOMAIN_THEN_EXTERNAL_ID: &str = r#"
        SELECT * FROM (SELECT *, 0 AS resolved_by FROM "customers"
            WHERE "organization_id" = $1 AND "id" = $2 LIMIT 1) AS by_id
        UNION ALL SELECT * FROM (SELECT *, 1 AS resolved_by FROM "customers"
            WHERE "organization_id" = $1 AND "domain" = $3 LIMIT 1) AS by_domain
        UNION ALL SELECT * FROM (SELECT *, 2 AS resolved_by FROM "customers"
            WHERE "organization_id" = $1 AND "external_id" = $2 LIMIT 1) AS by_external_id
        ORDER BY resolved_by LIMIT 1"#;
    use sea_orm::ConnectionTrait;
    let db = ctx.db().await?;
    let found = customer::Entity::find()
        .from_raw_sql(sea_orm::Statement::from_sql_and_values(
            db.get_database_backend(),
            BY_ID_THEN_DOMAIN_THEN_EXTERNAL_ID,
            [
                ctx.organization_id.clone().into(),
                wanted.into(),
                wanted.to_lowercase().into(),
            ],
        ))
        .one(db)
        .await?;
    if let Some(found) = found {
        return Ok(found);
    }
    Err(ToolError::NotFound(format!(
        "no customer with id, domain or externalId `{wanted}`"
    )))
}

/// A source type filter value in canonical form: trimmed, upper-cased, `CRM` and
/// `CRM_OPPORTUNITY` meaning `OPPORTUNITY`; `None` for anything else.
pub fn normalize_source_type(raw: &str) -> Option<&'static str> {
    let upper = raw.trim().to_uppercase();
    match upper.as_str() {
        "CRM" | "CRM_OPPORTUNITY" => Some("OPPORTUNITY"),
        other => SOURCE_TYPES.iter().find(|t| **t == other).copied(),
    }
}

/// Normalizes a `sourceTypes` array, naming the index of the first unknown value.
pub fn parse_source_types(field: &str, raw: &[String]) -> ToolResult<Vec<&'static str>> {
    let mut types = Vec::new();
    for (i, value) in raw.iter().enumerate() {
        match normalize_source_type(value) {
            Some(t) => {
                if !types.contains(&t) {
                    types.push(t)
                }
            }
            None => {
                return Err(ToolError::Invalid(vec![ValidationIssue::new(
                    vec![field.into(), PathSegment::from(i)],
                    format!(
                        "unknown source type `{value}`: use one of {} (or CRM, CRM_OPPORTUNITY)",
                        SOURCE_TYPES.join(", ")
                    ),
                )]))
            }
        }
    }
    Ok(types)
}

/// A duration in the tools' form: `<n>h`, `<n>d` or `<n>w` (0 to 100,000 of the unit).
pub fn duration(raw: &str) -> Option<Duration> {
    let text = raw.trim();
    let unit = text.chars().last()?;
    let amount: i64 = text[..text.len() - unit.len_utf8()].parse().ok()?;
    if !(0..=100_000).contains(&amount) {
        return None;
    }
    match unit {
        'h' => Some(Duration::hours(amount)),
        'd' => Some(Duration::days(amount)),
        'w' => Some(Duration::weeks(amount)),
        _ => None,
    }
}

/// [`duration`] of a tool input field; the error names the field.
pub fn parse_duration(field: &str, raw: &str) -> ToolResult<Duration> {
    duration(raw).ok_or_else(|| {
        ToolError::invalid(
            field,
            format!("`{raw}` is not a duration: use a number followed by h, d or w, e.g. `30d`"),
        )
    })
}

/// An ISO 8601 timestamp (RFC 3339, or a bare date meaning its UTC midnight).
pub fn parse_timestamp(field: &str, raw: &str) -> ToolResult<DateTime<Utc>> {
    let text = raw.trim();
    if let Ok(dt) = DateTime::parse_from_rfc3339(text) {
        return Ok(dt.with_timezone(&Utc));
    }
    if let Ok(date) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        if let Some(midnight) = date.and_hms_opt(0, 0, 0) {
            return Ok(midnight.and_utc());
        }
    }
    Err(ToolError::invalid(
        field,
        format!("`{raw}` is not an ISO 8601 timestamp (e.g. `2026-10-01T15:00:00Z`)"),
    ))
}

/// Wire form of a stored time.
pub fn ts(value: &DateTime<Utc>) -> String {
    crate::timestamp::format(value)
}

pub fn ts_opt(value: &Option<DateTime<Utc>>) -> Value {
    value.as_ref().map_or(Value::Null, |v| Value::String(ts(v)))
}

/// Matches a list counts one by one at most: past this many, `pagination.total` is this lower
/// bound and `pagination.totalExact` is false, so a broad filter over a large book costs a
/// bounded count instead of a walk over every match.
pub const EXACT_TOTAL_LIMIT: u64 = 10_000;

/// A list's `pagination.total`: exact, or a lower bound when there are more matches than
/// [`EXACT_TOTAL_LIMIT`] and no kept count says how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Total {
    pub count: u64,
    pub exact: bool,
}

impl Total {
    pub fn exact(count: u64) -> Self {
        Self { count, exact: true }
    }

    /// From a count of at most `EXACT_TOTAL_LIMIT + 1` matches ([`count_capped`]).
    pub fn capped(counted: u64) -> Self {
        if counted > EXACT_TOTAL_LIMIT {
            Self {
                count: EXACT_TOTAL_LIMIT,
                exact: false,
            }
        } else {
            Self::exact(counted)
        }
    }

    /// The total of two disjoint parts: exact when both are.
    pub fn plus(self, other: Total) -> Self {
        Self {
            count: self.count + other.count,
            exact: self.exact && other.exact,
        }
    }
}

/// Counts the rows `select` matches, up to one past [`EXACT_TOTAL_LIMIT`]: the database stops
/// reading at that row.
pub async fn count_capped<E, C>(db: &C, select: sea_orm::Select<E>) -> Result<Total, sea_orm::DbErr>
where
    E: EntityTrait,
    C: sea_orm::ConnectionTrait,
{
    Ok(Total::capped(
        count_up_to(db, select, EXACT_TOTAL_LIMIT + 1).await?,
    ))
}

/// Rows a count examines at most when part of its filter is one no index serves (trait values,
/// a name substring): each such row is checked, so the count's cost is bounded by this instead
/// of by the table.
pub const EXAMINED_FOR_TOTAL: u64 = 5_000;

/// Rows such a count examines when there are more than [`EXAMINED_FOR_TOTAL`] candidates: its
/// total is then a lower bound whatever it examines, and examining 5,000 (about 3 us each,
/// most of a call's time) cost `combined` 15 ms of its 20 ms target with one caller.
pub const EXAMINED_FOR_LOWER_BOUND: u64 = 1_000;

/// The total of a list filtered by `served` (conditions an index answers) and `residual`
/// (conditions checked candidate by candidate). The candidates are counted first, from the
/// index alone: at most [`EXAMINED_FOR_TOTAL`] of them are all examined and the total is exact;
/// past that, the matches among the first [`EXAMINED_FOR_LOWER_BOUND`] are a lower bound.
///
/// One statement counts the matches, over the candidates as a derived table named like the
/// table (`FROM (SELECT id, ... LIMIT n) AS "users"`), so the residual conditions read as
/// written. The derived table carries only `id` and the columns the residual reads: with none,
/// the candidates come from index entries alone.
pub async fn count_examined<E, C>(
    db: &C,
    served: sea_orm::Condition,
    residual: &CountedResidual,
) -> Result<Total, sea_orm::DbErr>
where
    E: EntityTrait,
    C: sea_orm::ConnectionTrait,
{
    let candidates =
        count_up_to(db, E::find().filter(served.clone()), EXAMINED_FOR_TOTAL + 1).await?;
    let exact = candidates <= EXAMINED_FOR_TOTAL;
    let examined = if exact {
        EXAMINED_FOR_TOTAL
    } else {
        EXAMINED_FOR_LOWER_BOUND
    };
    use sea_orm::{sea_query::Alias, QuerySelect, QueryTrait};
    let mut candidates = E::find().select_only().filter(served);
    for column in std::iter::once("id").chain(residual.columns.iter().copied()) {
        candidates = candidates.expr_as(Expr::col((E::default(), Alias::new(column))), column);
    }
    let candidates = candidates.limit(examined).into_query();
    let count = sea_orm::sea_query::Query::select()
        .expr_as(Func::count(residual.passes()), Alias::new("n"))
        .from_subquery(candidates, Alias::new(E::default().table_name()))
        .to_owned();
    let statement = db.get_database_backend().build(&count);
    let matched = match db.query_one_raw(statement).await? {
        Some(row) => row.try_get::<i64>("", "n")?,
        None => 0,
    };
    Ok(Total {
        count: u64::try_from(matched).unwrap_or(0),
        exact,
    })
}

/// The rows `select` matches, as rows of `1`: a part of [`count_capped_parts`].
pub fn rows_of<E: EntityTrait>(select: sea_orm::Select<E>) -> sea_orm::sea_query::SelectStatement {
    use sea_orm::{QuerySelect, QueryTrait};
    select.select_only().expr(Expr::val(1)).into_query()
}

/// Counts the rows of `parts` ([`rows_of`]) together, up to one past [`EXACT_TOTAL_LIMIT`], in
/// one statement: a `UNION ALL` under one `LIMIT`, whose parts both databases read in turn,
/// stopping at the limit, so a part after one that reaches it is not read at all (where
/// counting each part up to the limit and adding read them all). Put the largest part first.
pub async fn count_capped_parts<C: sea_orm::ConnectionTrait>(
    db: &C,
    parts: Vec<sea_orm::sea_query::SelectStatement>,
) -> Result<Total, sea_orm::DbErr> {
    Ok(Total::capped(
        count_parts_up_to(db, parts, EXACT_TOTAL_LIMIT + 1).await?,
    ))
}

/// The rows of `parts` ([`rows_of`]) counted together as [`count_capped_parts`] does, stopping
/// at `cap`.
pub async fn count_parts_up_to<C: sea_orm::ConnectionTrait>(
    db: &C,
    parts: Vec<sea_orm::sea_query::SelectStatement>,
    cap: u64,
) -> Result<u64, sea_orm::DbErr> {
    match capped_union(parts, cap) {
        Some(rows) => count_of(db, count_rows_expr(rows)).await,
        None => Ok(0),
    }
}

/// The rows of `parts` as one `UNION ALL` under one `LIMIT` of `cap`; `None` without parts.
fn capped_union(
    parts: Vec<sea_orm::sea_query::SelectStatement>,
    cap: u64,
) -> Option<sea_orm::sea_query::SelectStatement> {
    use sea_orm::sea_query::UnionType;
    let mut parts = parts.into_iter();
    let mut rows = parts.next()?;
    for part in parts {
        rows.union(UnionType::All, part);
    }
    rows.limit(cap);
    Some(rows)
}

/// [`count_capped_parts`] beside a kept count (`kept`, a scalar subquery) read in the same
/// statement: the kept count exactly, plus the parts' rows counted up to the limit.
pub async fn count_capped_parts_beside_kept<C: sea_orm::ConnectionTrait>(
    db: &C,
    parts: Vec<sea_orm::sea_query::SelectStatement>,
    kept: Expr,
) -> Result<Total, sea_orm::DbErr> {
    use sea_orm::sea_query::Alias;
    const KEPT: &str = "kept_total";
    const TOTAL: &str = "counted_total";
    let counted =
        capped_union(parts, EXACT_TOTAL_LIMIT + 1).map_or(Expr::val(0i64), count_rows_expr);
    let mut statement = sea_orm::sea_query::Query::select();
    statement
        .expr_as(counted, Alias::new(TOTAL))
        .expr_as(kept, Alias::new(KEPT));
    let Some(row) = db
        .query_one_raw(db.get_database_backend().build(&statement))
        .await?
    else {
        return Ok(Total::exact(0));
    };
    let kept = u64::try_from(row.try_get::<i64>("", KEPT)?).unwrap_or(0);
    let counted = u64::try_from(row.try_get::<i64>("", TOTAL)?).unwrap_or(0);
    Ok(total_of(Some(kept), counted))
}

/// `(SELECT COUNT(*) FROM (rows))`: a count as a scalar subquery.
fn count_rows_expr(rows: sea_orm::sea_query::SelectStatement) -> Expr {
    use sea_orm::sea_query::{Alias, QueryStatementBuilder};
    let count = sea_orm::sea_query::Query::select()
        .expr(Expr::cust("COUNT(*)"))
        .from_subquery(rows, Alias::new("matches"))
        .to_owned();
    Expr::SubQuery(None, Box::new(count.into_sub_query_statement()))
}

/// Counts the rows `select` matches, stopping at `cap`.
pub async fn count_up_to<E, C>(
    db: &C,
    select: sea_orm::Select<E>,
    cap: u64,
) -> Result<u64, sea_orm::DbErr>
where
    E: EntityTrait,
    C: sea_orm::ConnectionTrait,
{
    count_of(db, count_up_to_expr(select, cap)).await
}

/// The value of a count expression (a [`count_up_to_expr`], or another scalar count) read in a
/// statement of its own.
pub async fn count_of<C: sea_orm::ConnectionTrait>(
    db: &C,
    count: Expr,
) -> Result<u64, sea_orm::DbErr> {
    let count = sea_orm::sea_query::Query::select()
        .expr_as(count, sea_orm::sea_query::Alias::new("n"))
        .to_owned();
    read_count(db, db.get_database_backend().build(&count)).await
}

/// [`count_up_to`] as a scalar subquery, to read beside other values in one statement (each
/// statement is a round trip, and on PostgreSQL most of a small read's cost).
pub fn count_up_to_expr<E: EntityTrait>(select: sea_orm::Select<E>, cap: u64) -> Expr {
    let mut rows = rows_of(select);
    rows.limit(cap);
    count_rows_expr(rows)
}

/// How a first page's total is read, beside the page's rows.
pub enum PageTotal<E: EntityTrait> {
    /// The rows this selects, counted up to where totals stop being exact.
    Counted(sea_orm::Select<E>),
    /// A total kept by triggers (`record_counts::total_expr`): exact.
    Kept(Expr),
    /// A kept total plus the rows this selects, counted up to where totals stop being exact
    /// (the customers' kept activity counts and the part-hour at their range's edge).
    KeptPlusCounted(Expr, sea_orm::Select<E>),
}

impl<E: EntityTrait> PageTotal<E> {
    /// The organization's `kept` total when the list has one, else the rows `matching` selects
    /// counted.
    pub fn kept_or_counted(
        organization_id: &str,
        kept: Option<super::record_counts::KeptTotal>,
        matching: sea_orm::Select<E>,
    ) -> Self {
        match kept {
            Some(kept) => Self::kept(organization_id, &kept),
            None => Self::Counted(matching),
        }
    }

    /// The organization's `kept` total.
    pub fn kept(organization_id: &str, kept: &super::record_counts::KeptTotal) -> Self {
        Self::Kept(super::record_counts::total_expr(organization_id, kept))
    }
}

/// The rows of a first page and its list's total, in one statement: the total is a scalar
/// subquery of no row's values, which both databases evaluate once (each statement is a round
/// trip, most of a small read's cost on PostgreSQL). When the page has no row, neither has the
/// list, and the total is 0.
pub async fn first_page<E, C>(
    db: &C,
    page: sea_orm::Select<E>,
    total: PageTotal<E>,
) -> Result<(Vec<E::Model>, Total), sea_orm::DbErr>
where
    E: EntityTrait,
    C: sea_orm::ConnectionTrait,
{
    use sea_orm::{QuerySelect, QueryTrait};
    const TOTAL: &str = "counted_total";
    const KEPT: &str = "kept_total";
    let (kept, counted) = match total {
        PageTotal::Counted(matching) => (None, Some(matching)),
        PageTotal::Kept(kept) => (Some(kept), None),
        PageTotal::KeptPlusCounted(kept, matching) => (Some(kept), Some(matching)),
    };
    let mut page = page.expr_as(counted_expr(counted), TOTAL);
    let has_kept = kept.is_some();
    if let Some(kept) = kept {
        page = page.expr_as(kept, KEPT);
    }
    let rows = db
        .query_all_raw(db.get_database_backend().build(&page.into_query()))
        .await?;
    let (models, counted) = models_and_count::<E>(&rows, TOTAL)?;
    let kept_total = match (has_kept, rows.first()) {
        (true, Some(row)) => Some(u64::try_from(row.try_get::<i64>("", KEPT)?).unwrap_or(0)),
        (true, None) => Some(0),
        (false, _) => None,
    };
    Ok((models, total_of(kept_total, counted)))
}

/// A list's total from its kept part (exact) and its counted part (capped).
fn total_of(kept: Option<u64>, counted: u64) -> Total {
    match kept {
        Some(kept) => Total::exact(kept).plus(Total::capped(counted)),
        None => Total::capped(counted),
    }
}

/// The rows `matching` selects counted up to where totals stop being exact, as a scalar
/// subquery; 0 without rows to count.
fn counted_expr<E: EntityTrait>(matching: Option<sea_orm::Select<E>>) -> Expr {
    match matching {
        Some(matching) => count_up_to_expr(matching, EXACT_TOTAL_LIMIT + 1),
        None => Expr::val(0i64),
    }
}

/// A kept total plus the rows `matching` selects (if any) counted up to where totals stop
/// being exact, in one statement.
pub async fn kept_plus_counted<E, C>(
    db: &C,
    kept: Expr,
    matching: Option<sea_orm::Select<E>>,
) -> Result<Total, sea_orm::DbErr>
where
    E: EntityTrait,
    C: sea_orm::ConnectionTrait,
{
    use sea_orm::sea_query::{Alias, Query};
    let mut query = Query::select();
    query
        .expr_as(counted_expr(matching), Alias::new("counted_total"))
        .expr_as(kept, Alias::new("kept_total"));
    let row = db
        .query_one_raw(db.get_database_backend().build(&query))
        .await?
        .ok_or_else(|| sea_orm::DbErr::RecordNotFound("a total".into()))?;
    let kept: i64 = row.try_get("", "kept_total")?;
    let counted: i64 = row.try_get("", "counted_total")?;
    Ok(total_of(
        Some(u64::try_from(kept).unwrap_or(0)),
        u64::try_from(counted).unwrap_or(0),
    ))
}

/// The models of a page's `rows` and the count each of them carries in the column `count` (0
/// without rows): a page and its total read in one statement.
pub fn models_and_count<E: EntityTrait>(
    rows: &[sea_orm::QueryResult],
    count: &str,
) -> Result<(Vec<E::Model>, u64), sea_orm::DbErr> {
    use sea_orm::FromQueryResult;
    let mut counted = 0;
    let mut models = Vec::with_capacity(rows.len());
    for row in rows {
        counted = row.try_get::<i64>("", count)?;
        models.push(E::Model::from_query_result(row, "")?);
    }
    Ok((models, u64::try_from(counted).unwrap_or(0)))
}

/// A page's rows (`page`: the list's rows after the cursor, ordered and limited) and the
/// list's total: the cursor's on a later page; on a first page, `total` read in the page's own
/// statement ([`first_page`]).
pub async fn rows_and_total<E, C>(
    db: &C,
    req: &ListRequest,
    page: sea_orm::Select<E>,
    total: PageTotal<E>,
) -> Result<(Vec<E::Model>, Total), sea_orm::DbErr>
where
    E: EntityTrait,
    C: sea_orm::ConnectionTrait,
{
    match &req.cursor {
        Some(c) => Ok((page.all(db).await?, c.total())),
        None => first_page(db, page, total).await,
    }
}

/// The count a `SELECT COUNT(*) AS n ...` statement answers.
async fn read_count<C: sea_orm::ConnectionTrait>(
    db: &C,
    statement: sea_orm::Statement,
) -> Result<u64, sea_orm::DbErr> {
    let n: i64 = match db.query_one_raw(statement).await? {
        Some(row) => row.try_get("", "n")?,
        None => 0,
    };
    Ok(u64::try_from(n).unwrap_or(0))
}

/// The position after the last item of a page: the sort key of that item, plus the number of
/// matches counted on the first page (later pages reuse it instead of counting again).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cursor {
    /// Sort key of the last item returned.
    pub k: Vec<Value>,
    /// Total matches, counted for the first page.
    pub t: u64,
    /// Whether `t` is a lower bound (absent: exact).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lower: bool,
}

impl Cursor {
    /// The cursor after the item whose sort key is `k`, carrying the first page's total.
    pub fn after(k: Vec<Value>, total: Total) -> Self {
        Self {
            k,
            t: total.count,
            lower: !total.exact,
        }
    }

    /// The first page's total.
    pub fn total(&self) -> Total {
        Total {
            count: self.t,
            exact: !self.lower,
        }
    }

    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Reads a `cursor` input; a cursor this service did not hand out is a 400 on `cursor`.
    pub fn decode(raw: &str) -> ToolResult<Self> {
        let invalid = || {
            ToolError::invalid(
                "cursor",
                "not a cursor of this list: pass the previous page's `nextCursor` unchanged",
            )
        };
        let bytes = URL_SAFE_NO_PAD.decode(raw.trim()).map_err(|_| invalid())?;
        serde_json::from_slice(&bytes).map_err(|_| invalid())
    }

    /// The `i`th key as a timestamp (`null` stays `None`).
    pub fn time(&self, i: usize) -> ToolResult<Option<DateTime<Utc>>> {
        match self.k.get(i) {
            Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => DateTime::parse_from_rfc3339(s)
                .map(|d| Some(d.with_timezone(&Utc)))
                .map_err(|_| ToolError::invalid("cursor", "not a cursor of this list")),
            _ => Err(ToolError::invalid("cursor", "not a cursor of this list")),
        }
    }

    pub fn text(&self, i: usize) -> ToolResult<String> {
        match self.k.get(i) {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(ToolError::invalid("cursor", "not a cursor of this list")),
        }
    }

    pub fn int(&self, i: usize) -> ToolResult<i64> {
        self.k
            .get(i)
            .and_then(Value::as_i64)
            .ok_or_else(|| ToolError::invalid("cursor", "not a cursor of this list"))
    }
}

/// The common inputs of a list, checked.
pub struct ListRequest {
    pub limit: u64,
    pub cursor: Option<Cursor>,
}

impl ListRequest {
    pub fn new(limit: Option<u32>, cursor: &Option<String>) -> ToolResult<Self> {
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ToolError::invalid(
                "limit",
                format!("must be between 1 and {MAX_LIMIT}"),
            ));
        }
        let cursor = match cursor.as_deref() {
            None | Some("") => None,
            Some(raw) => Some(Cursor::decode(raw)?),
        };
        Ok(Self {
            limit: limit as u64,
            cursor,
        })
    }
}

/// Builds `{items, pagination}` from up to `limit + 1` fetched rows.
pub fn page<T>(
    mut rows: Vec<T>,
    req: &ListRequest,
    total: Total,
    key_of: impl Fn(&T) -> Vec<Value>,
    render: impl Fn(&T) -> Value,
    fields: Option<(&[String], &[&str])>,
) -> Value {
    let has_more = rows.len() as u64 > req.limit;
    rows.truncate(req.limit as usize);
    let next_cursor = match rows.last() {
        Some(last) if has_more => Cursor::after(key_of(last), total).encode(),
        _ => String::new(),
    };
    let items: Vec<Value> = rows
        .iter()
        .map(|row| {
            let item = render(row);
            match fields {
                Some((wanted, ids)) => project(item, wanted, ids),
                None => item,
            }
        })
        .collect();
    list_answer(items, pagination(has_more, next_cursor, total))
}

/// A list tool's answer, `{items, pagination}`: built from its parts rather than with
/// `json!`, which would write every item out and read it back.
pub fn list_answer(items: Vec<Value>, pagination: Value) -> Value {
    let mut answer = Map::new();
    answer.insert("items".into(), Value::Array(items));
    answer.insert("pagination".into(), pagination);
    Value::Object(answer)
}

/// The `pagination` object of a list tool's answer.
pub fn pagination(has_more: bool, next_cursor: String, total: Total) -> Value {
    json!({
        "hasMore": has_more,
        "nextCursor": next_cursor,
        "total": total.count,
        "totalExact": total.exact,
    })
}

/// Keeps only `wanted` fields of a record, plus its identifiers.
pub fn project(item: Value, wanted: &[String], ids: &[&str]) -> Value {
    match item {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| ids.contains(&k.as_str()) || wanted.iter().any(|w| w == k))
                .collect::<Map<String, Value>>(),
        ),
        other => other,
    }
}

/// Checks a `fields` input against a record's field names.
pub fn check_fields(fields: &Option<Vec<String>>, known: &[&str]) -> ToolResult<()> {
    if let Some(list) = fields {
        for (i, f) in list.iter().enumerate() {
            if !known.contains(&f.as_str()) {
                return Err(ToolError::Invalid(vec![ValidationIssue::new(
                    vec!["fields".into(), PathSegment::from(i)],
                    format!("unknown field `{f}`: use any of {}", known.join(", ")),
                )]));
            }
        }
    }
    Ok(())
}

/// `lower(column) LIKE %needle%`, with the needle's own wildcards escaped.
pub fn contains_ci<C: ColumnTrait>(column: C, needle: &str) -> SimpleExpr {
    let escaped = needle
        .trim()
        .to_lowercase()
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    Expr::expr(Func::lower(column.into_expr()))
        .like(LikeExpr::new(format!("%{escaped}%")).escape('\\'))
}

/// `lower(column) = lower(value)`.
pub fn equals_ci<C: ColumnTrait>(column: C, value: &str) -> SimpleExpr {
    Expr::expr(Func::lower(column.into_expr())).eq(value.trim().to_lowercase())
}

/// The needle as the name indexes look it up (trimmed, lower-cased), or `None` where they
/// cannot help: needles under three characters (trigram lookups need three), needles with
/// `LIKE` wildcards or escapes.
fn indexed_needle(needle: &str) -> Option<String> {
    let needle = needle.trim().to_lowercase();
    if needle.chars().count() < SHORTEST_INDEXED_NAME || needle.contains(['%', '_', '\\']) {
        return None;
    }
    Some(needle)
}

/// `"records"."id" IN (the ids whose name the index matches)` when the index finds at most
/// [`FEW_MATCHES`] records for the needle: the list then reads those and orders them. `None`
/// for a common needle: the index's matches would all be read first (half a second for a
/// needle every name holds at 500,000 users), where walking the list in its order and testing
/// each name finds a page soon.
///
/// The index is looked up once: its matches come back as ids (it yields them one by one, so
/// the limit stops a common needle early), and the page and its count take them as one JSON
/// array (so the statements' text does not vary with their number) instead of each looking
/// the needle up again. On SQLite the index is the FTS5 table of `names` (of every
/// organization; it may hold old names, so the caller still checks the name on each
/// record); on PostgreSQL the trigram index of the organization's records themselves, asked
/// for the needle's rare parts ([`crate::db::name_trigrams`]).
async fn few_name_candidates(
    ctx: &ToolContext,
    names: NamesOf,
    needle: &str,
) -> Result<Option<SimpleExpr>, sea_orm::DbErr> {
    let Some(needle) = indexed_needle(needle) else {
        return Ok(None);
    };
    let db = ctx.db().await?;
    let backend = db.get_database_backend();
    let limit = FEW_MATCHES as i64 + 1;
    let lookup = match backend {
        DbBackend::Postgres => {
            // The index is asked for the needle's rare parts; the whole needle is checked on
            // each row it finds.
            let common = ctx.state.name_trigrams.of(&ctx.state.db, names);
            let pattern = rare_parts(&needle, &common).unwrap_or_else(|| format!("%{needle}%"));
            sea_orm::Statement::from_sql_and_values(
                backend,
                format!(
                    "SELECT id AS k FROM \"{}\" WHERE organization_id = $1 \
                     AND lower(name) LIKE $2 AND strpos(lower(name), $3) > 0 LIMIT $4",
                    names.records()
                ),
                [
                    ctx.organization_id.as_str().into(),
                    pattern.into(),
                    needle.into(),
                    limit.into(),
                ],
            )
        }
        _ => sea_orm::Statement::from_sql_and_values(
            backend,
            format!(
                "SELECT {key} AS k FROM {index} WHERE name LIKE ? LIMIT ?",
                key = names.key(),
                index = names.index()
            ),
            [format!("%{needle}%").into(), limit.into()],
        ),
    };
    let rows = db.query_all_raw(lookup).await?;
    if rows.len() as u64 > FEW_MATCHES {
        return Ok(None);
    }
    let mut ids = rows
        .iter()
        .map(|row| row.try_get::<String>("", "k"))
        .collect::<Result<Vec<_>, _>>()?;
    // A renamed record has a row for each of its names (SQLite's index).
    ids.sort_unstable();
    ids.dedup();
    let ids = Value::from(ids).to_string();
    let among = match backend {
        DbBackend::Postgres => "SELECT jsonb_array_elements_text(CAST($1 AS jsonb))",
        _ => "SELECT value FROM json_each(?)",
    };
    Ok(Some(Expr::cust_with_values(
        format!("\"{}\".\"id\" IN ({among})", names.records()),
        [ids],
    )))
}

/// A list's name filter, if any (a case-insensitive substring of `column`). Where the name
/// index finds few records ([`few_name_candidates`]), those become the candidates in `filter`
/// and this returns `true` (the list then has few matches). Otherwise, on PostgreSQL, the
/// substring is a condition of `filter`, which the trigram index on `lower(name)` serves in
/// the count as in the page. On SQLite the substring is always a residual checked on each
/// candidate (its index may hold old names); on PostgreSQL the few candidates are checked too.
pub async fn filter_by_name<C: ColumnTrait>(
    ctx: &ToolContext,
    names: NamesOf,
    column: C,
    needle: Option<&str>,
    filter: &mut sea_orm::Condition,
    residuals: &mut Residuals,
) -> ToolResult<bool> {
    let Some(needle) = needle else {
        return Ok(false);
    };
    let add = |filter: &mut sea_orm::Condition, cond: SimpleExpr| {
        *filter = std::mem::replace(filter, sea_orm::Condition::all()).add(cond);
    };
    let postgres =
        sea_orm::ConnectionTrait::get_database_backend(&ctx.state.db) == DbBackend::Postgres;
    if !postgres {
        residuals.add(contains_ci(column, needle), "name");
    }
    let few = few_name_candidates(ctx, names, needle).await?;
    match few {
        Some(candidates) => {
            add(filter, candidates);
            if postgres {
                // The name is checked again on each candidate (renamed since the lookup?), in a
                // form the trigram index does not serve, so the planner reads the candidates by
                // id instead of searching the index a second time.
                let strpos = Func::cust(sea_orm::sea_query::Alias::new("strpos"))
                    .arg(Func::lower(column.into_expr()))
                    .arg(needle.trim().to_lowercase());
                add(filter, Expr::expr(strpos).gt(0));
            }
            Ok(true)
        }
        None => {
            if postgres {
                add(filter, contains_ci(column, needle));
            }
            Ok(false)
        }
    }
}

/// One exact trait match: the JSON value under `key` in the `traits` column equals `value`.
/// Each backend has its own JSON operators and placeholder style.
///
/// On PostgreSQL the equality is wrapped in `COALESCE(..., FALSE)` (the same rows: a missing
/// key is no match either way). PostgreSQL keeps no statistics on the values inside `traits`
/// and takes an equality on them for a match in 200, while a value that is not rare (a rare
/// one's records come from the trait index) matches far more: with that estimate it read and
/// sorted every customer the other filters select (11,000 rows, 57 ms) rather than walk the
/// activity index to the page's 51 matches (155 rows, 1.7 ms). A `COALESCE` it takes for a
/// match in two, and walks.
pub fn trait_equals(
    backend: DbBackend,
    table: &str,
    key: &str,
    value: &Value,
) -> ToolResult<SimpleExpr> {
    let json_text = serde_json::to_string(value).map_err(|e| ToolError::Internal(e.to_string()))?;
    Ok(match backend {
        DbBackend::Postgres => Expr::cust_with_values(
            format!("COALESCE((\"{table}\".\"traits\" -> $1) = CAST($2 AS jsonb), FALSE)"),
            [key.to_string(), json_text],
        ),
        _ => {
            // SQLite's `->` answers the value's minified JSON text; quoting the key keeps dots
            // and brackets in trait names literal.
            let path = format!("$.\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
            Expr::cust_with_values(
                format!("(\"{table}\".\"traits\" -> ?) = json(?)"),
                [path, json_text],
            )
        }
    })
}

/// `"users"."traits" <> '{}'`: the users that carry some trait, written as the condition of
/// their activity index (`ix_users_org_traited_activity_id`), which each database must find in
/// a query to use that index.
pub fn carries_traits(backend: DbBackend) -> SimpleExpr {
    match backend {
        DbBackend::Postgres => Expr::cust("\"users\".\"traits\" <> '{}'::jsonb"),
        _ => Expr::cust("\"users\".\"traits\" <> '{}'"),
    }
}

/// A trait value carried by at most this many records is rare: a list filtered by it reads
/// its records from the trait index (`trait_values`) instead of checking traits row by row.
pub const RARE_TRAIT_RECORDS: u64 = FEW_MATCHES;

/// Matches a filter may have for its list to be read by
/// [`super::few_matches_page::few_matches_page`].
pub const FEW_MATCHES: u64 = 5_000;

/// A trait filter value as the trait index holds it: strings of up to 200 characters and
/// booleans (see the `trait_values` migration); `None` for values it does not hold.
fn indexed_trait_value(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if s.chars().count() <= 200 => Some(format!("s:{s}")),
        Value::Bool(b) => Some(format!("b:{b}")),
        _ => None,
    }
}

/// For a `traits` filter of `table` (`customers` or `users`): `"table"."id" IN (the records
/// with the rarest of its values)` when that value is carried by at most
/// [`RARE_TRAIT_RECORDS`] records, so the list reads those few; none when every value is
/// common (walking the list in its order then finds a page soon) or not indexed. The trait
/// conditions themselves still decide. One indexed value that is the list's only filter
/// (`only_filter`) also gets its count.
pub async fn rare_trait_candidates(
    ctx: &ToolContext,
    table: &'static str,
    traits: &Option<Map<String, Value>>,
    only_filter: bool,
) -> ToolResult<TraitLookup> {
    let db = ctx.db().await?;
    let backend = sea_orm::ConnectionTrait::get_database_backend(db);
    let pairs: Vec<(&String, &Value)> = traits.iter().flat_map(|m| m.iter()).collect();
    // One trait value as the list's only filter takes its exact total from the kept counts.
    let alone = only_filter && pairs.len() == 1;
    let indexed: Vec<(&String, String, &Value)> = pairs
        .into_iter()
        .filter_map(|(key, value)| Some((key, indexed_trait_value(value)?, value)))
        .collect();
    let counts = super::record_counts::trait_value_counts(
        db,
        &ctx.organization_id,
        table,
        indexed
            .iter()
            .map(|(key, value, _)| (key.as_str(), value.as_str())),
    )
    .await?;
    let mut rarest: Option<(u64, String, String, &Value)> = None;
    let mut counted_alone = None;
    for ((key, indexed, value), n) in indexed.into_iter().zip(counts) {
        if alone {
            counted_alone = Some(Total::exact(n));
        }
        if n <= RARE_TRAIT_RECORDS && rarest.as_ref().is_none_or(|(m, ..)| n < *m) {
            rarest = Some((n, key.clone(), indexed, value));
        }
    }
    let rarest_key = rarest.as_ref().map(|(_, key, ..)| key.clone());
    let candidates = rarest.map(|(_, key, indexed, value)| {
        if backend == DbBackend::Postgres && table == "customers" {
            return customers_with_trait(&ctx.organization_id, key, value);
        }
        let sql = format!(
            "\"{table}\".\"id\" IN (SELECT record_id FROM trait_values WHERE organization_id = ? \
             AND record = ? AND trait_key = ? AND trait_value = ?)"
        );
        Expr::cust_with_values(
            crate::db::placeholders(backend, &sql),
            [ctx.organization_id.clone(), table.to_string(), key, indexed],
        )
    });
    Ok(TraitLookup {
        rarest_key,
        candidates,
        counted_alone,
    })
}

/// PostgreSQL: the organization's customers whose trait `key` is `value` (a string or a
/// boolean), as the GIN index `ix_customers_org_traits` serves it: a bitmap of their rows,
/// read a page each, where the trait index's ids cost a probe of the primary key each (four
/// pages). For such values, containment at the top level is equality, so these are exactly
/// the customers the trait index holds for it.
fn customers_with_trait(organization_id: &str, key: String, value: &Value) -> SimpleExpr {
    // The index's expression, written as its migration writes it, for the planner to match.
    Expr::cust_with_values(
        "jsonb_set(CAST('{}' AS jsonb), ARRAY[CAST(\"customers\".\"organization_id\" AS text)], \
         \"customers\".\"traits\") @> CAST($1 AS jsonb)",
        [json!({ organization_id: { key: value } }).to_string()],
    )
}

/// What the trait index says about a `traits` filter.
pub struct TraitLookup {
    /// `"table"."id" IN (...)` the records with its rarest value, when that is rare.
    pub candidates: Option<SimpleExpr>,
    /// The trait whose value the candidates are: they all carry it (the triggers keep the
    /// index exact), so a count of the candidates need not check that trait again.
    pub rarest_key: Option<String>,
    /// The records with its one value, when that indexed value is the list's only filter
    /// (exact, from the kept counts): the list's total.
    pub counted_alone: Option<Total>,
}

/// A list's conditions checked row by row (no index holds them): trait values and name
/// substrings, in two forms. A page checks them on the rows it reads anyway. A count
/// ([`count_examined`]) checks them on thousands of candidates, where reading each row to
/// test its traits was most of a call's time: on SQLite a trait value the trait index holds is
/// there a probe of that index by the candidate's id, which the candidates' own index entries
/// give, and only the other conditions read the row. The triggers keep the index exact, so both
/// forms select the same records.
pub struct Residuals {
    /// What a page's rows must pass.
    all: sea_orm::Condition,
    /// The same, as a count checks it.
    counted: CountedResidual,
    /// The count's conditions without the trait whose rare value the list's candidates are
    /// ([`TraitLookup::rarest_key`]): what a count of those candidates still has to check.
    unimplied: CountedResidual,
}

/// Conditions a count checks on each candidate, and the columns of the candidates' rows they
/// read besides `id` (none: the candidates' index entries are enough).
#[derive(Clone)]
pub struct CountedResidual {
    pub condition: sea_orm::Condition,
    pub columns: Vec<&'static str>,
}

impl CountedResidual {
    /// `CASE WHEN <conditions> THEN 1 END`: 1 for a candidate that passes, null otherwise.
    pub fn passes(&self) -> SimpleExpr {
        sea_orm::sea_query::CaseStatement::new()
            .case(self.condition.clone(), Expr::val(1i64))
            .into()
    }

    fn new() -> Self {
        Self {
            condition: sea_orm::Condition::all(),
            columns: Vec::new(),
        }
    }

    fn add(&mut self, cond: SimpleExpr, column: Option<&'static str>) {
        let all = std::mem::replace(&mut self.condition, sea_orm::Condition::all());
        self.condition = all.add(cond);
        if let Some(c) = column.filter(|c| !self.columns.contains(c)) {
            self.columns.push(c);
        }
    }
}

impl Residuals {
    /// The `traits` filter object's conditions.
    pub fn of_traits(
        ctx: &ToolContext,
        table: &'static str,
        traits: &Option<Map<String, Value>>,
        lookup: &TraitLookup,
    ) -> ToolResult<Self> {
        let backend = ctx.state.db.get_database_backend();
        let mut me = Self {
            all: sea_orm::Condition::all(),
            counted: CountedResidual::new(),
            unimplied: CountedResidual::new(),
        };
        for (key, value) in traits.iter().flat_map(|m| m.iter()) {
            let cond = trait_equals(backend, table, key, value)?;
            // The probe is SQLite's: PostgreSQL runs it as a subplan of its own per candidate,
            // and 5,000 of them took 75-105 ms there against 23 ms for testing the rows.
            let probed = indexed_trait_value(value).filter(|_| backend == DbBackend::Sqlite);
            let (counted, column) = match probed {
                Some(indexed) => (
                    trait_index_probe(backend, &ctx.organization_id, table, key, indexed),
                    None,
                ),
                None => (cond.clone(), Some("traits")),
            };
            if lookup.rarest_key.as_deref() != Some(key.as_str()) {
                me.unimplied.add(counted.clone(), column);
            }
            me.counted.add(counted, column);
            me.all = me.all.add(cond);
        }
        Ok(me)
    }

    /// Adds a condition no index implies, which reads the row's `column`.
    pub fn add(&mut self, cond: SimpleExpr, column: &'static str) {
        let all = std::mem::replace(&mut self.all, sea_orm::Condition::all());
        self.all = all.add(cond.clone());
        self.counted.add(cond.clone(), Some(column));
        self.unimplied.add(cond, Some(column));
    }

    /// (`all`, as a count checks it, the count's `unimplied`), each `None` when empty.
    pub fn split(
        self,
    ) -> (
        Option<sea_orm::Condition>,
        Option<CountedResidual>,
        Option<CountedResidual>,
    ) {
        let some = |c: CountedResidual| (!c.condition.is_empty()).then_some(c);
        (
            (!self.all.is_empty()).then_some(self.all),
            some(self.counted),
            some(self.unimplied),
        )
    }
}

/// `EXISTS (...)`: the trait index holds this value of `key` for the record `"table"."id"`.
fn trait_index_probe(
    backend: DbBackend,
    organization_id: &str,
    table: &str,
    key: &str,
    indexed: String,
) -> SimpleExpr {
    let sql = format!(
        "EXISTS (SELECT 1 FROM trait_values WHERE organization_id = ? AND record = ? \
         AND trait_key = ? AND trait_value = ? AND record_id = \"{table}\".\"id\")"
    );
    Expr::cust_with_values(
        crate::db::placeholders(backend, &sql),
        [
            organization_id.to_string(),
            table.to_string(),
            key.to_string(),
            indexed,
        ],
    )
}

/// The keyset condition after `(t, id0)` in `ORDER BY column DESC, id DESC` (not null).
pub fn after_desc<C: ColumnTrait>(
    column: C,
    id_column: C,
    at: DateTime<Utc>,
    id: &str,
) -> sea_orm::Condition {
    use sea_orm::Condition;
    Condition::any()
        .add(column.lt(at))
        .add(Condition::all().add(column.eq(at)).add(id_column.lt(id)))
}

/// A time as a cursor key, at full precision so the keyset condition finds the same row.
pub fn key_time(value: &DateTime<Utc>) -> Value {
    Value::String(value.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
}

pub fn key_time_opt(value: &Option<DateTime<Utc>>) -> Value {
    value.as_ref().map_or(Value::Null, key_time)
}

/// The one form emails are stored and looked up in: trimmed and lower-case (as ingest writes
/// them), so a lookup is an equality through the `(organization_id, email)` index.
pub fn normalize_email(raw: &str) -> String {
    raw.trim().to_lowercase()
}
