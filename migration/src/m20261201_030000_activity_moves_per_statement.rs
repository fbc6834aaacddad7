//! PostgreSQL: the customers' kept counts per hour and per day of last activity
//! (`customer_activity_hours`, `customer_activity_days`) follow updates with one trigger call
//! per statement instead of one per moved customer
//! ([`crate::kept_counts::KeptByBucket::postgres_moves_per_statement`]). The ingest applier
//! moves up to 200 customers into the current hour in one statement and thousands in one
//! transaction; each row's upsert of that hour's counter row made it a new version and walked
//! the versions before it, 380 buffers read per customer updated at a million customers. The
//! counts themselves do not change. SQLite keeps its row triggers: an upsert there rewrites the
//! counter row in place.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

use crate::kept_counts::KeptByBucket;
use crate::m20261130_020000_customer_activity_counts::activity_counts;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The statements `of` gives for each activity count.
fn for_each_count(of: fn(&KeptByBucket) -> Vec<String>) -> Vec<String> {
    activity_counts(DbBackend::Postgres)
        .iter()
        .flat_map(of)
        .collect()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// One transaction: no update of customers runs between the two triggers.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::postgres_only::run(
            manager,
            &for_each_count(KeptByBucket::postgres_moves_per_statement),
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::postgres_only::run(
            manager,
            &for_each_count(KeptByBucket::postgres_moves_per_row),
        )
        .await
    }
}
