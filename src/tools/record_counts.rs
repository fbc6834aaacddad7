//! Exact totals kept by the `record_counts` triggers (see those migrations): users per journey
//! stage, customers per billing status (with their revenue), sources per source type and facts
//! per status and source type (`STATUS:TYPE`), per organization. A list filtered by nothing but
//! those reads its `pagination.total` here instead of counting every match; the
//! `customer_totals` and `user_totals` analytics views read them too.
//!
//! On PostgreSQL each database backend counts in rows of its own, summed by readers, so that
//! concurrent writers never wait on one another's counter rows (nor deadlock on them);
//! [`fold`] moves the rows of backends that have ended into one row per bucket.

use sea_orm::{
    sea_query::{Alias, Expr, ExprTrait, Query},
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

/// The organization's kept total.
pub async fn read<C: ConnectionTrait>(
    db: &C,
    organization_id: &str,
    kept: &KeptTotal,
) -> Result<u64, DbErr> {
    let query = total_query(organization_id, kept);
    let backend = db.get_database_backend();
    let total: i64 = match db.query_one_raw(backend.build(&query)).await? {
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
    let column = |name: &str| Expr::col(Alias::new(name));
    let mut query = Query::select();
    query
        .expr_as(
            Expr::cust("CAST(COALESCE(SUM(n), 0) AS BIGINT)"),
            Alias::new("total"),
        )
        .from(Alias::new("record_counts"))
        .and_where(column("organization_id").eq(organization_id))
        .and_where(column("record").eq(kept.record));
    if let Some(buckets) = &kept.buckets {
        query.and_where(column("bucket").is_in(buckets.iter().map(String::as_str)));
    }
    query
}

/// How often [`spawn_folder`] folds the rows of ended backends.
const FOLD_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// PostgreSQL: moves the counts of backends that have ended into the bucket's shared row
/// (`shard` 0), in one statement; returns how many rows it folded. Rows of live backends stay:
/// only their own backend changes them, so folding never waits on a writer. Instances folding
/// at once take turns on an advisory lock. A no-op on SQLite (one row per bucket).
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
                DELETE FROM record_counts WHERE shard <> 0
                AND shard NOT IN (SELECT pid FROM pg_stat_activity)
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
