//! The kept revenue bands (`record_counts` `customer_revenue`) by the amount's first two
//! digits instead of its first one: `0612` holds 120,000 to 129,999 cents. A revenue range
//! that does not start and end on a band's edge counts its parts outside the bands wholly
//! within it from the index; with first-digit bands a range such as 100,000 to 120,000 cents
//! lay inside one band (100,000 to 199,999) and was counted whole. The label is always four
//! characters: the number of digits, two wide, and the first two digits (a one-digit amount
//! followed by `0`: `0150` holds 5); `0000` every negative amount. Then `:` and the billing
//! status, as before. The service computes the bands' edges from this layout
//! (`custintel::tools::record_counts`).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

use crate::kept_counts::{postgres_per_statement, KeptCount};
use crate::m20261128_040000_customer_revenue_counts::REVENUE_BANDS;

#[derive(DeriveMigrationName)]
pub struct Migration;

pub(crate) const FINER_REVENUE_BANDS: KeptCount = KeptCount {
    record: "customer_revenue",
    table: "customers",
    bucket: "CASE WHEN {row}.mrr_cents < 0 THEN '0000' \
             ELSE CASE WHEN {row}.mrr_cents < 1000000000 THEN '0' ELSE '' END \
             || CAST(length(CAST({row}.mrr_cents AS TEXT)) AS TEXT) \
             || substr(CAST({row}.mrr_cents AS TEXT) || '0', 1, 2) END || ':' || {row}.billing_status",
    columns: "billing_status, mrr_cents",
};

/// Replaces the triggers and counts of `from` with those of `to` (same record), in the
/// migration's transaction: on PostgreSQL, inserts and deletes counted per statement as the
/// other kept counts are.
async fn replace(
    manager: &SchemaManager<'_>,
    from: &KeptCount,
    to: &KeptCount,
) -> Result<(), DbErr> {
    let backend = manager.get_database_backend();
    let db = manager.get_connection();
    let mut statements = Vec::new();
    if backend == DbBackend::Postgres {
        for alias in ["inserted", "deleted"] {
            statements.push(format!(
                "DROP TRIGGER IF EXISTS {}_count_{alias} ON {}",
                from.record, from.table
            ));
        }
    }
    statements.extend(from.drop(backend));
    statements.extend(to.create(backend));
    if backend == DbBackend::Postgres {
        statements.extend(postgres_per_statement(
            to.record, to.table, to.bucket, "0", to.columns,
        ));
    }
    statements.push(to.backfill(backend));
    for statement in statements {
        db.execute_unprepared(&statement).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// One transaction: writers of customers wait while the triggers and counts change.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        replace(manager, &REVENUE_BANDS, &FINER_REVENUE_BANDS).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        replace(manager, &FINER_REVENUE_BANDS, &REVENUE_BANDS).await
    }
}
