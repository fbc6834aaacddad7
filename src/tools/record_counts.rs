//! Exact totals kept by the `record_counts` triggers (see that migration): users per journey
//! stage and customers per billing status, per organization. A list filtered by nothing but
//! those reads its `pagination.total` here instead of counting every match.

use sea_orm::{
    sea_query::{Alias, Expr, ExprTrait, Query},
    ConnectionTrait, DatabaseConnection, DbErr,
};

/// The counted rows a list's total can come from.
#[derive(Debug, Clone)]
pub struct KeptTotal {
    /// `users` or `customers`.
    pub record: &'static str,
    /// One stage or billing status, or `None` for all of them.
    pub bucket: Option<&'static str>,
}

/// The organization's kept total.
pub async fn read(
    db: &DatabaseConnection,
    organization_id: &str,
    kept: &KeptTotal,
) -> Result<u64, DbErr> {
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
    if let Some(bucket) = kept.bucket {
        query.and_where(column("bucket").eq(bucket));
    }
    let backend = db.get_database_backend();
    let total: i64 = match db.query_one_raw(backend.build(&query)).await? {
        Some(row) => row.try_get("", "total")?,
        None => 0,
    };
    Ok(u64::try_from(total).unwrap_or(0))
}
