//! `record_counts` also keeps each customer's users (`record` `customer_users`, `bucket` the
//! customer's id, empty for users of no customer), sources (`customer_sources`, the same) and
//! facts per status (`customer_facts`, `bucket` `CUSTOMER_ID:STATUS`), kept by triggers in the
//! same transaction as every change, as the organization's totals are.
//!
//! `svc_get_customer`'s `includeTotals` and the lists of one customer's users, sources and
//! facts read their totals here. Counted instead, a customer with thousands of users or
//! sources had its index entries counted (up to 10,001) on every such call; on PostgreSQL
//! the users' entries also sent the count to the table, since activity updates keep the
//! users' pages from being all-visible. That was most of those calls' time.
//!
//! PostgreSQL counts in rows per backend and per statement, as the earlier counts do.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

use crate::kept_counts::{postgres_per_row, postgres_per_statement, KeptCount};

#[derive(DeriveMigrationName)]
pub struct Migration;

pub(crate) const PER_CUSTOMER: [KeptCount; 3] = [
    KeptCount {
        record: "customer_users",
        table: "users",
        bucket: "COALESCE({row}.customer_id, '')",
        columns: "customer_id",
    },
    KeptCount {
        record: "customer_sources",
        table: "sources",
        bucket: "COALESCE({row}.customer_id, '')",
        columns: "customer_id",
    },
    KeptCount {
        record: "customer_facts",
        table: "facts",
        bucket: "{row}.customer_id || ':' || {row}.status",
        columns: "customer_id, status",
    },
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// One transaction: the triggers and the counts they start from are made together, while
    /// writers of these tables wait.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let postgres = manager.get_database_backend() == DbBackend::Postgres;
        for counted in &PER_CUSTOMER {
            counted.up(manager).await?;
            if postgres {
                let KeptCount {
                    record,
                    table,
                    bucket,
                    columns,
                } = counted;
                for statement in postgres_per_statement(record, table, bucket, "0", columns) {
                    manager
                        .get_connection()
                        .execute_unprepared(&statement)
                        .await?;
                }
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let postgres = manager.get_database_backend() == DbBackend::Postgres;
        for counted in &PER_CUSTOMER {
            if postgres {
                for statement in postgres_per_row(counted.record, counted.table, counted.columns) {
                    manager
                        .get_connection()
                        .execute_unprepared(&statement)
                        .await?;
                }
            }
            counted.down(manager).await?;
        }
        Ok(())
    }
}
