//! `record_counts` also keeps how many customers and users carry each indexed trait value
//! (`record` `trait_values`, `bucket` the record's table, the key's length in characters, the
//! key and the value as `trait_values` holds it: `customers:4:plan` then `s:pro`, unambiguous
//! whatever the key holds), kept by
//! triggers on `trait_values` (which the customers' and users' own triggers keep) in the same
//! transaction as every change. `svc_list_customers` and `svc_list_users` read them to find
//! a filter's rarest value and, for one value alone, the list's exact total, instead of
//! counting up to 10,001 index entries per value.

use sea_orm_migration::prelude::*;

use crate::kept_counts::KeptCount;

#[derive(DeriveMigrationName)]
pub struct Migration;

pub(crate) const TRAIT_VALUES: KeptCount = KeptCount {
    record: "trait_values",
    table: "trait_values",
    bucket: "{row}.record || ':' || CAST(length({row}.trait_key) AS TEXT) || ':' \
             || {row}.trait_key || {row}.trait_value",
    columns: "record, trait_key, trait_value",
};

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// One transaction: the triggers and the counts they start from are made together, while
    /// writers of traits wait.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        TRAIT_VALUES.up(manager).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        TRAIT_VALUES.down(manager).await
    }
}
