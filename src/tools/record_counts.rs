//! Exact totals kept by the `record_counts` triggers (see those migrations): users per journey
//! stage, customers per billing status (with their revenue) and per revenue band, sources per
//! source type, facts per status and source type (`STATUS:TYPE`), and customers and users per
//! indexed trait value, per organization; and each customer's users, sources, and facts per
//! status. A list filtered by nothing but those reads its `pagination.total` here instead of
//! counting every match, and `svc_get_customer` its `includeTotals`; the
//! `customer_totals` and `user_totals` analytics views read them too.
//!
//! On PostgreSQL each database backend counts in rows of its own, summed by readers, so that
//! concurrent writers never wait on one another's counter rows (nor deadlock on them);
//! [`fold`] moves the rows of backends that have ended into one row per bucket.

use chrono::{DateTime, DurationRound, Utc};
use sea_orm::{
    sea_query::{Alias, Condition, Expr, ExprTrait, Query},
    ConnectionTrait, DatabaseConnection, DbErr,
};

/// The counted rows a list's total can come from.
#[derive(Debug, Clone)]
pub struct KeptTotal {
    /// `users`, `customers`, `sources` or `facts`.
    pub record: &'static str,
    /// The buckets summed (stages, billing statuses, source types, `STATUS:TYPE`), or `None`
    /// for all of them.
    pub buckets: Option<Vec<String>>,
}

impl KeptTotal {
    /// One customer's users.
    pub fn users_of(customer_id: &str) -> Self {
        Self::of_customer("customer_users", customer_id)
    }

    /// The sources about one customer.
    pub fn sources_of(customer_id: &str) -> Self {
        Self::of_customer("customer_sources", customer_id)
    }

    /// One customer's facts in these statuses.
    pub fn facts_of(customer_id: &str, statuses: &[entity::fact::FactStatus]) -> Self {
        Self {
            record: "customer_facts",
            buckets: Some(
                statuses
                    .iter()
                    .map(|s| format!("{customer_id}:{}", s.as_str()))
                    .collect(),
            ),
        }
    }

    fn of_customer(record: &'static str, customer_id: &str) -> Self {
        Self {
            record,
            buckets: Some(vec![customer_id.to_string()]),
        }
    }
}

/// The organization's kept total.
pub async fn read<C: ConnectionTrait>(
    db: &C,
    organization_id: &str,
    kept: &KeptTotal,
) -> Result<u64, DbErr> {
    read_sum(db, &total_query(organization_id, kept)).await
}

/// The `total` a [`sum_of_counts`] query reads.
async fn read_sum<C: ConnectionTrait>(
    db: &C,
    query: &sea_orm::sea_query::SelectStatement,
) -> Result<u64, DbErr> {
    let total: i64 = match db
        .query_one_raw(db.get_database_backend().build(query))
        .await?
    {
        Some(row) => row.try_get("", "total")?,
        None => 0,
    };
    Ok(u64::try_from(total).unwrap_or(0))
}

/// The kept total as a scalar subquery, to read beside a page's rows in one statement.
pub fn total_expr(organization_id: &str, kept: &KeptTotal) -> Expr {
    use sea_orm::sea_query::QueryStatementBuilder;
    Expr::SubQuery(
        None,
        Box::new(total_query(organization_id, kept).into_sub_query_statement()),
    )
}

fn total_query(organization_id: &str, kept: &KeptTotal) -> sea_orm::sea_query::SelectStatement {
    let mut query = sum_of_counts(organization_id, kept.record);
    if let Some(buckets) = &kept.buckets {
        query.and_where(Expr::col(Alias::new("bucket")).is_in(buckets.iter().map(String::as_str)));
    }
    query
}

/// `total`: the organization's counts of `record` summed, for the caller to narrow to some
/// buckets (and group by them).
fn sum_of_counts(organization_id: &str, record: &str) -> sea_orm::sea_query::SelectStatement {
    let column = |name: &str| Expr::col(Alias::new(name));
    let mut query = Query::select();
    query
        .expr_as(
            Expr::cust("CAST(COALESCE(SUM(n), 0) AS BIGINT)"),
            Alias::new("total"),
        )
        .from(Alias::new("record_counts"))
        .and_where(column("organization_id").eq(organization_id))
        .and_where(column("record").eq(record));
    query
}

/// How often [`spawn_folder`] folds the rows of ended backends.
const FOLD_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// PostgreSQL: moves the counts of backends that have ended into the bucket's shared row
/// (`shard` 0), in one statement; returns how many shared rows it wrote. Rows of live backends
/// stay: only their own backend changes them, so folding never waits on a writer. An ended
/// backend's row that is its bucket's only row besides live backends' stays too: readers sum
/// whatever rows there are, and folding it would rewrite one row as one row, which after an
/// import is nearly every customer's counts (docs/decisions.md, "Kept counts"). So after a
/// fold each bucket has at most one row besides live backends'. Instances folding at once take
/// turns on an advisory lock. A no-op on SQLite (one row per bucket).
pub async fn fold(db: &DatabaseConnection) -> Result<u64, DbErr> {
    use sea_orm::{DbBackend, Statement, TransactionTrait};
    if db.get_database_backend() != DbBackend::Postgres {
        return Ok(0);
    }
    let txn = db.begin().await?;
    txn.execute_unprepared(
        "SELECT pg_advisory_xact_lock(hashtext('custintel.record_counts.fold'))",
    )
    .await?;
    let folded = txn
        .execute_raw(Statement::from_string(
            DbBackend::Postgres,
            "WITH ended AS (
                DELETE FROM record_counts r WHERE r.shard <> 0
                AND r.shard NOT IN (SELECT pid FROM pg_stat_activity)
                AND EXISTS (
                    SELECT 1 FROM record_counts o
                    WHERE o.organization_id = r.organization_id AND o.record = r.record
                    AND o.bucket = r.bucket AND o.shard <> r.shard
                    AND (o.shard = 0 OR o.shard NOT IN (SELECT pid FROM pg_stat_activity))
                )
                RETURNING organization_id, record, bucket, n, amount
            )
            INSERT INTO record_counts (organization_id, record, bucket, shard, n, amount)
            SELECT organization_id, record, bucket, 0, SUM(n), SUM(amount) FROM ended
            GROUP BY organization_id, record, bucket
            ON CONFLICT (organization_id, record, bucket, shard) DO UPDATE
            SET n = record_counts.n + excluded.n, amount = record_counts.amount + excluded.amount",
        ))
        .await?
        .rows_affected();
    txn.commit().await?;
    Ok(folded)
}

/// Folds at start and then every [`FOLD_EVERY`] (PostgreSQL), on a task of its own.
pub fn spawn_folder(db: DatabaseConnection) -> Option<tokio::task::JoinHandle<()>> {
    if db.get_database_backend() != sea_orm::DbBackend::Postgres {
        return None;
    }
    Some(tokio::spawn(async move {
        loop {
            match fold(&db).await {
                Ok(folded) => tracing::debug!(folded, "kept counts of ended backends folded"),
                Err(e) => tracing::warn!(error = %e, "folding kept counts failed"),
            }
            tokio::time::sleep(FOLD_EVERY).await;
        }
    }))
}

/// How many records of `table` (`customers` or `users`) carry each `(key, indexed value)`
/// pair (the value as `trait_values` holds it), in the pairs' order: the `trait_values`
/// counts, read in one statement.
pub async fn trait_value_counts<'a, C: ConnectionTrait>(
    db: &C,
    organization_id: &str,
    table: &str,
    pairs: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<u64>, DbErr> {
    // The bucket as the `trait_values` counts' migration writes it.
    let buckets: Vec<String> = pairs
        .map(|(key, value)| format!("{table}:{}:{key}{value}", key.chars().count()))
        .collect();
    if buckets.is_empty() {
        return Ok(Vec::new());
    }
    let mut query = sum_of_counts(organization_id, "trait_values");
    query
        .column(Alias::new("bucket"))
        .and_where(Expr::col(Alias::new("bucket")).is_in(buckets.iter().map(String::as_str)))
        .group_by_col(Alias::new("bucket"));
    let backend = db.get_database_backend();
    let mut counted = std::collections::HashMap::new();
    for row in db.query_all_raw(backend.build(&query)).await? {
        let bucket: String = row.try_get("", "bucket")?;
        let total: i64 = row.try_get("", "total")?;
        counted.insert(bucket, u64::try_from(total).unwrap_or(0));
    }
    Ok(buckets
        .iter()
        .map(|b| counted.get(b).copied().unwrap_or(0))
        .collect())
}

/// The revenue bands of the `customer_revenue` counts (see their migrations): each label
/// (the amount's number of digits, two wide, then its first two digits, a one-digit amount's
/// followed by `0`) with the amounts it holds, `[low, high)`, in the labels' order, which is
/// the amounts' order. Built once.
fn revenue_bands() -> &'static [(String, i128, i128)] {
    static BANDS: std::sync::LazyLock<Vec<(String, i128, i128)>> =
        std::sync::LazyLock::new(build_revenue_bands);
    &BANDS
}

/// Builds [`revenue_bands`].
fn build_revenue_bands() -> Vec<(String, i128, i128)> {
    let mut bands = vec![
        ("0000".to_string(), i128::from(i64::MIN), 0),
        ("0100".to_string(), 0, 1),
    ];
    for first in 1..=9i128 {
        bands.push((format!("01{first}0"), first, first + 1));
    }
    for digits in 2..=19u32 {
        let unit = 10i128.pow(digits - 2);
        for lead in 10..=99i128 {
            if lead * unit > i128::from(i64::MAX) {
                return bands;
            }
            // The last band ends with the amounts.
            let high = Ord::min((lead + 1) * unit, i128::from(i64::MAX) + 1);
            bands.push((format!("{digits:02}{lead}"), lead * unit, high));
        }
    }
    bands
}

/// A revenue range's part `[min, max]` (either open) outside the kept bands it holds, which
/// the revenue index counts.
pub type RevenueEdge = (Option<i64>, Option<i64>);

/// The bands wholly within a revenue range: the first and last labels, and the parts of the
/// range below and above them (none when the range starts and ends on band edges).
#[derive(Debug, PartialEq)]
struct BandsWithin {
    first: String,
    last: String,
    edges: Vec<RevenueEdge>,
}

/// The bands wholly within `[min, max]`; `None` when no band lies wholly within it.
fn revenue_bands_within(min: Option<i64>, max: Option<i64>) -> Option<BandsWithin> {
    let low = i128::from(min.unwrap_or(i64::MIN));
    let high = i128::from(max.unwrap_or(i64::MAX));
    // The bands are sorted and meet, so those wholly within the range are one run of them.
    let bands = revenue_bands();
    let start = bands.partition_point(|(_, band_low, _)| *band_low < low);
    let end = bands.partition_point(|(_, _, band_high)| band_high - 1 <= high);
    let within = bands.get(start..end)?;
    let (first, first_low, _) = within.first()?;
    let (last, _, last_high) = within.last()?;
    // The bands meet, so they hold `[first_low, last_high)`; what the range holds beyond that
    // fits in an i64 on either side.
    let mut edges = Vec::new();
    if *first_low > low {
        edges.push((min, i64::try_from(first_low - 1).ok()));
    }
    if *last_high <= high {
        edges.push((i64::try_from(*last_high).ok(), max));
    }
    Some(BandsWithin {
        first: first.clone(),
        last: last.clone(),
        edges,
    })
}

/// Customers with a revenue in a range (and a billing status), in two parts: `kept`, those in
/// the kept bands wholly within the range, and `edges`, the parts of the range outside those
/// bands, which only the revenue index can count (none when the range starts and ends on band
/// edges, so `kept` is exact; the whole range when no band lies within it).
#[derive(Debug)]
pub struct RevenueRange {
    pub kept: u64,
    pub edges: Vec<RevenueEdge>,
}

/// [`RevenueRange`] of `[min, max]` (and `billing_status`) from the kept revenue bands.
pub async fn customers_in_revenue_range<C: ConnectionTrait>(
    db: &C,
    organization_id: &str,
    billing_status: Option<&str>,
    min: Option<i64>,
    max: Option<i64>,
) -> Result<RevenueRange, DbErr> {
    let Some(within) = revenue_bands_within(min, max) else {
        return Ok(RevenueRange {
            kept: 0,
            edges: vec![(min, max)],
        });
    };
    let column = |name: &str| Expr::col(Alias::new(name));
    let mut query = sum_of_counts(organization_id, "customer_revenue");
    query
        .and_where(column("bucket").gte(within.first))
        // `;` sorts right after the `:` that ends each label.
        .and_where(column("bucket").lt(format!("{};", within.last)));
    if let Some(status) = billing_status {
        // The status follows the four-character label and its `:`.
        let status_of_bucket = sea_orm::sea_query::Func::cust(Alias::new("substr"))
            .arg(column("bucket"))
            .arg(6);
        query.and_where(Expr::expr(status_of_bucket).eq(status));
    }
    Ok(RevenueRange {
        kept: read_sum(db, &query).await?,
        edges: within.edges,
    })
}

/// The customers' kept counts per hour and per day of their last activity (see their
/// migration): labels of the time in UTC, `never` for customers never active, sorted as the
/// times are and before `never`.
const ACTIVITY_HOURS: &str = "customer_activity_hours";
const ACTIVITY_DAYS: &str = "customer_activity_days";
const NEVER_ACTIVE: &str = "never";

fn hour_label(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H").to_string()
}

fn day_label(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d").to_string()
}

/// The start of `t`'s hour and of its day.
fn floor_hour(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(chrono::TimeDelta::hours(1)).unwrap_or(t)
}

fn floor_day(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(chrono::TimeDelta::days(1)).unwrap_or(t)
}

/// The first whole hour and whole day at or after `t`.
fn ceil_hour(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_round_up(chrono::TimeDelta::hours(1))
        .unwrap_or(t)
}

fn ceil_day(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_round_up(chrono::TimeDelta::days(1)).unwrap_or(t)
}

/// A total of customers by last activity: `kept` sums the whole days and hours of the range
/// from the kept counts, and the organization's customers `edge` selects (active in part of one
/// hour at the range's edge; `None` when the range starts or ends on a whole hour) are to be
/// counted from the rows.
pub struct ActivityTotal {
    pub kept: Expr,
    pub edge: Option<sea_orm::Condition>,
}

/// The organization's customers active at or after `since` (`activeWithin`), or last active
/// before `before` or never (`inactiveFor`), from the kept counts; `None` for both bounds at
/// once (a range within the kept hours' edges on both sides is left to a count).
pub fn customers_by_activity(
    organization_id: &str,
    since: Option<DateTime<Utc>>,
    before: Option<DateTime<Utc>>,
) -> Option<ActivityTotal> {
    use sea_orm::sea_query::QueryStatementBuilder;
    let bucket = || Expr::col(Alias::new("bucket"));
    // Labels in `[from, to)`.
    let between = |from: String, to: &str| {
        Condition::all()
            .add(bucket().gte(from))
            .add(bucket().lt(to))
    };
    let sum = |record: &str, range: Condition| {
        let mut query = sum_of_counts(organization_id, record);
        query.cond_where(range);
        Expr::SubQuery(None, Box::new(query.into_sub_query_statement()))
    };
    let (hours, days, edge) = match (since, before) {
        (Some(t), None) => {
            let (hour, day) = (ceil_hour(t), ceil_day(t));
            (
                // The hours before the first whole day; the days from it on.
                between(hour_label(hour), &hour_label(day)),
                between(day_label(day), NEVER_ACTIVE),
                (t < hour).then_some((t, hour)),
            )
        }
        (None, Some(t)) => {
            let (hour, day) = (floor_hour(t), floor_day(t));
            (
                // The days before the last whole day, and the customers never active; the
                // hours of that day before the last whole hour.
                between(hour_label(day), &hour_label(hour)),
                Condition::any()
                    .add(bucket().lt(day_label(day)))
                    .add(bucket().eq(NEVER_ACTIVE)),
                (hour < t).then_some((hour, t)),
            )
        }
        _ => return None,
    };
    let edge = edge.map(|(from, to)| {
        use entity::customer::Column;
        use sea_orm::ColumnTrait;
        sea_orm::Condition::all()
            .add(Column::OrganizationId.eq(organization_id))
            .add(Column::LastActivityAt.gte(from))
            .add(Column::LastActivityAt.lt(to))
    });
    Some(ActivityTotal {
        kept: sum(ACTIVITY_HOURS, hours).add(sum(ACTIVITY_DAYS, days)),
        edge,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The band of an amount as the migration's triggers write it.
    fn label(amount: i64) -> String {
        if amount < 0 {
            return "0000".into();
        }
        let text = format!("{amount}0");
        format!("{:02}{}", text.len() - 1, &text[..2])
    }

    #[test]
    fn bands_follow_the_triggers_labels_in_order() {
        let bands = revenue_bands();
        for pair in bands.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{pair:?}");
            assert_eq!(pair[0].2, pair[1].1, "the bands meet: {pair:?}");
        }
        for amount in [
            -5,
            0,
            1,
            9,
            10,
            19,
            20,
            99,
            100,
            49_999,
            50_000,
            59_999,
            999_999_999,
            1_000_000_000,
            i64::MAX,
        ] {
            let (name, low, high) = bands
                .iter()
                .find(|(_, low, high)| (*low..*high).contains(&i128::from(amount)))
                .unwrap();
            assert_eq!(*name, label(amount), "{amount} in [{low}, {high})");
        }
        assert_eq!(bands.last().unwrap().2 - 1, i128::from(i64::MAX));
    }

    #[test]
    fn a_range_sums_the_bands_wholly_within_it() {
        let within = |min, max| revenue_bands_within(min, max).map(|b| (b.first, b.last, b.edges));
        let bands = |first: &str, last: &str, edges: Vec<RevenueEdge>| {
            Some((first.to_string(), last.to_string(), edges))
        };
        assert_eq!(within(Some(50_000), None), bands("0550", "1992", vec![]));
        assert_eq!(within(None, None), bands("0000", "1992", vec![]));
        assert_eq!(within(Some(0), Some(0)), bands("0100", "0100", vec![]));
        assert_eq!(within(Some(5), Some(9)), bands("0150", "0190", vec![]));
        assert_eq!(within(Some(150_000), None), bands("0615", "1992", vec![]));
        assert_eq!(
            within(Some(10_000), Some(29_999)),
            bands("0510", "0529", vec![])
        );
        assert_eq!(
            within(Some(10_000), Some(30_000)),
            bands("0510", "0529", vec![(Some(30_000), Some(30_000))])
        );
        assert_eq!(
            within(Some(2_000), Some(49_999)),
            bands("0420", "0549", vec![])
        );
        assert_eq!(
            within(Some(2_550), Some(120_000)),
            bands(
                "0426",
                "0611",
                vec![(Some(2_550), Some(2_599)), (Some(120_000), Some(120_000))]
            )
        );
        assert_eq!(
            within(Some(100_000), Some(120_000)),
            bands("0610", "0611", vec![(Some(120_000), Some(120_000))]),
            "a range of the benchmark's, once counted whole"
        );
        assert_eq!(within(None, Some(-3)), None, "the band below 0 ends at -1");
        assert_eq!(within(Some(150_500), Some(150_900)), None);
        assert_eq!(within(Some(5), Some(4)), None);
    }
}
