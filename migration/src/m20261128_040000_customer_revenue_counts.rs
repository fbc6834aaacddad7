//! `record_counts` also keeps the organization's customers per billing status and band of
//! monthly revenue (`record` `customer_revenue`), kept by triggers in the same transaction as
//! every change. A band is the revenue's number of digits and its first digit, written
//! `DDF` (`055` holds 50,000 to 59,999 cents; `010` holds 0; `000` every negative amount),
//! then `:` and the billing status: the labels sort as the amounts do, and a revenue range
//! holds a run of whole bands. `svc_list_customers` filtered by revenue (and a status) sums
//! the whole bands within its range: exact when the range starts and ends on band edges, and
//! otherwise a lower bound that spares counting 10,001 index entries once it passes the
//! exact-total limit. The same text computes the band on both databases, and the service
//! computes the bands' edges from this layout (`custintel::tools::record_counts`).

use sea_orm_migration::prelude::*;

use crate::kept_counts::KeptCount;

#[derive(DeriveMigrationName)]
pub struct Migration;

pub(crate) const REVENUE_BANDS: KeptCount = KeptCount {
    record: "customer_revenue",
    table: "customers",
    bucket: "CASE WHEN {row}.mrr_cents < 0 THEN '000' \
             ELSE CASE WHEN {row}.mrr_cents < 1000000000 THEN '0' ELSE '' END \
             || CAST(length(CAST({row}.mrr_cents AS TEXT)) AS TEXT) \
             || substr(CAST({row}.mrr_cents AS TEXT), 1, 1) END || ':' || {row}.billing_status",
    columns: "billing_status, mrr_cents",
};

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// One transaction: the triggers and the counts they start from are made together, while
    /// writers of customers wait.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        REVENUE_BANDS.up(manager).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        REVENUE_BANDS.down(manager).await
    }
}
