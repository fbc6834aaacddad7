//! Indexes of user names by trigram, so `svc_list_users` by a name substring reads the users
//! whose names hold it instead of walking every user of the organization (4.1 s at 500,000
//! users for a name that few users have).
//!
//! - SQLite: an FTS5 trigram table, `user_name_search`, fed by triggers as `customer_name_search`
//!   is: a row for every new user and every new name, never deleted (the table cannot find a
//!   user's row without a trigram search, which costs milliseconds for a common name). Lookups
//!   take its matches as candidates and re-check the name on `users`, so an old name never
//!   matches. Names under three characters are left out: no lookup needle is that short.
//! - PostgreSQL: a trigram index on `lower(name)` (the `pg_trgm` extension, as for customers),
//!   which serves the `LIKE` itself; left out where the extension cannot be created.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

use crate::m20261127_010000_customer_name_trigrams::trigram_index;

#[derive(DeriveMigrationName)]
pub struct Migration;

const SQLITE_UP: &str = "
CREATE VIRTUAL TABLE user_name_search USING fts5(
    name, user_id UNINDEXED, tokenize = 'trigram'
);
INSERT INTO user_name_search (name, user_id)
    SELECT name, id FROM users WHERE length(name) >= 3;
CREATE TRIGGER user_name_search_insert AFTER INSERT ON users
WHEN length(new.name) >= 3 BEGIN
    INSERT INTO user_name_search (name, user_id) VALUES (new.name, new.id);
END;
CREATE TRIGGER user_name_search_rename AFTER UPDATE OF name ON users
WHEN old.name IS NOT new.name AND length(new.name) >= 3 BEGIN
    INSERT INTO user_name_search (name, user_id) VALUES (new.name, new.id);
END;
";

const SQLITE_DOWN: &str = "
DROP TRIGGER IF EXISTS user_name_search_rename;
DROP TRIGGER IF EXISTS user_name_search_insert;
DROP TABLE IF EXISTS user_name_search;
";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // On PostgreSQL as the customers' trigram index: the extension where it can be had.
        let up = match manager.get_database_backend() {
            DbBackend::Sqlite => SQLITE_UP.to_string(),
            DbBackend::Postgres => trigram_index("users", "ix_users_name_trigrams"),
            _ => return Ok(()),
        };
        manager.get_connection().execute_unprepared(&up).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let down = match manager.get_database_backend() {
            DbBackend::Sqlite => SQLITE_DOWN,
            DbBackend::Postgres => "DROP INDEX IF EXISTS ix_users_name_trigrams",
            _ => return Ok(()),
        };
        manager.get_connection().execute_unprepared(down).await?;
        Ok(())
    }
}
