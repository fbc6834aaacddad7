use sea_orm_migration::{prelude::*, schema::*};

/// `svc_query` on PostgreSQL: which organization a query backend (by `pg_backend_pid()`) may
/// read. The service writes a row before running a caller's SQL on a connection of the query
/// role; the analytics views filter on it. The query role can neither read nor write it.
/// (Unused on SQLite, where the organization is a literal in per-connection TEMP views.)
#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("query_sessions")
                    .col(integer("backend_pid").primary_key())
                    .col(string("organization_id"))
                    .col(timestamp_with_time_zone("created_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("query_sessions").to_owned())
            .await
    }
}
