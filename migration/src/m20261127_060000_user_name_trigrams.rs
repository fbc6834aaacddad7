//! PostgreSQL: a trigram index on users' lower-cased names (the `pg_trgm` extension, as for
//! customers), so `svc_list_users` by a name substring reads the users whose names hold the
//! needle's trigrams instead of walking every user of the organization (4.1 s at 500,000 users
//! for a name that few users have). Left out where the extension cannot be created.
//!
//! SQLite's index of user names is an FTS5 table its writers fill (`name_search_by_writers`).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

use crate::m20261127_010000_customer_name_trigrams::trigram_index;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        manager
            .get_connection()
            .execute_unprepared(&trigram_index("users", "ix_users_name_trigrams"))
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        manager
            .get_connection()
            .execute_unprepared("DROP INDEX IF EXISTS ix_users_name_trigrams")
            .await?;
        Ok(())
    }
}
