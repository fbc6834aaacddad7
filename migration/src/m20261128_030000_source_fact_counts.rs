//! `record_counts` also keeps the organization's sources per source type (`record` `sources`,
//! `bucket` the type) and facts per status and source type (`record` `facts`, `bucket`
//! `STATUS:TYPE`), kept by triggers in the same transaction as every change, as it keeps
//! customers and users. `svc_list_sources` and `svc_list_facts` filtered by source types (and
//! statuses) alone read their `pagination.total` here instead of counting up to 10,001 index
//! entries on every first page, which was most of such a call's cost on PostgreSQL.
//!
//! PostgreSQL counts in rows per backend (`shard`), folded later, as the earlier counts do.

use sea_orm_migration::prelude::*;

use crate::kept_counts::KeptCount;

#[derive(DeriveMigrationName)]
pub struct Migration;

pub(crate) const COUNTED: [KeptCount; 2] = [
    KeptCount {
        record: "sources",
        table: "sources",
        bucket: "{row}.source_type",
        columns: "source_type",
    },
    KeptCount {
        record: "facts",
        table: "facts",
        bucket: "{row}.status || ':' || {row}.source_type",
        columns: "status, source_type",
    },
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// One transaction on SQLite too (see the revenue totals' migration): the triggers and the
    /// counts they start from are made together, while writers of these tables wait.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for counted in &COUNTED {
            counted.up(manager).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for counted in &COUNTED {
            counted.down(manager).await?;
        }
        Ok(())
    }
}
