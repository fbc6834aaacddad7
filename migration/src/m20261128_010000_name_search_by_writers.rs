//! SQLite: the trigram index of names is written by the service's writers instead of triggers,
//! and users get one beside customers'.
//!
//! - The triggers that fed `customer_name_search` are dropped: a trigger writing an FTS5 table
//!   made inserts into its table fail now and then ("no such table") on a connection that
//!   prepared them again after a schema change. The writers of names add them in the same
//!   transaction instead (`custintel::db::name_search`).
//! - `user_name_search`, an FTS5 trigram table of user names, filled from the users there are
//!   (names of three characters or more: no lookup needle is shorter), so `svc_list_users` by
//!   a name substring reads the users whose names hold it instead of walking every user of
//!   the organization.
//!
//! PostgreSQL has trigram indexes on the tables themselves (`customer_name_trigrams`,
//! `user_name_trigrams`): nothing here.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

use crate::m20261122_020100_customer_name_search::TRIGGERS;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: &str = "
DROP TRIGGER IF EXISTS customer_name_search_rename;
DROP TRIGGER IF EXISTS customer_name_search_insert;
CREATE VIRTUAL TABLE user_name_search USING fts5(
    name, user_id UNINDEXED, tokenize = 'trigram'
);
INSERT INTO user_name_search (name, user_id)
    SELECT name, id FROM users WHERE length(name) >= 3;
";

const DOWN: &str = "DROP TABLE IF EXISTS user_name_search;";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Sqlite {
            return Ok(());
        }
        manager.get_connection().execute_unprepared(UP).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Sqlite {
            return Ok(());
        }
        manager
            .get_connection()
            .execute_unprepared(&format!("{DOWN}{TRIGGERS}"))
            .await?;
        Ok(())
    }
}
