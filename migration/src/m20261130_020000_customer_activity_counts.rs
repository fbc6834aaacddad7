//! `record_counts` also keeps the organization's customers per hour and per day of their last
//! activity (`record` `customer_activity_hours`, labels `2026-11-30T14`; and
//! `customer_activity_days`, labels `2026-11-30`; both in UTC, `never` for customers never
//! active), kept by triggers in the same transaction as every change. The labels sort as the
//! times do, and before `never`. `svc_list_customers` filtered by `activeWithin` or
//! `inactiveFor` alone sums the whole days and hours within its range and counts only the
//! customers of the part-hour at its edge, instead of counting up to 10,001 index entries
//! (with a total that was then a lower bound).
//!
//! An activity update moves a customer to another bucket at most once an hour: the triggers
//! run only then (their `WHEN` compares the buckets), so the many updates within an hour cost
//! one comparison each. The label is computed by each database's own date function, so the
//! same time gets the same label on both; the service computes the range's edges from this
//! layout (`custintel::tools::record_counts`).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

use crate::kept_counts::{KeptByBucket, KeptCount};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The kept counts on `backend`: per hour, then per day.
pub(crate) fn activity_counts(backend: DbBackend) -> [KeptByBucket; 2] {
    let postgres = backend == DbBackend::Postgres;
    let counted = |record, postgres_label, sqlite_label| KeptByBucket {
        count: KeptCount {
            record,
            table: "customers",
            bucket: if postgres {
                postgres_label
            } else {
                sqlite_label
            },
            columns: "last_activity_at",
        },
    };
    [
        counted(
            "customer_activity_hours",
            "COALESCE(to_char({row}.last_activity_at AT TIME ZONE 'UTC', \
             'YYYY-MM-DD\"T\"HH24'), 'never')",
            "COALESCE(strftime('%Y-%m-%dT%H', {row}.last_activity_at), 'never')",
        ),
        counted(
            "customer_activity_days",
            "COALESCE(to_char({row}.last_activity_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), \
             'never')",
            "COALESCE(strftime('%Y-%m-%d', {row}.last_activity_at), 'never')",
        ),
    ]
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// One transaction: the triggers and the counts they start from are made together, while
    /// writers of customers wait.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for counted in activity_counts(manager.get_database_backend()) {
            counted.up(manager).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for counted in activity_counts(manager.get_database_backend()) {
            counted.down(manager).await?;
        }
        Ok(())
    }
}
