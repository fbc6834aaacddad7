use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// SQLite: a trigram full-text index of customer names, so `svc_list_customers` by a name
/// substring reads the few matching customers instead of every customer of the organization.
///
/// The index is append-only by design: a row for every new customer and every new name (added
/// by triggers here, by the writers of names since `name_search_by_writers`), never deleted
/// (an FTS5 table cannot delete by `customer_id` without a scan, and its rowids cannot mirror
/// the customers' because VACUUM may renumber those). Lookups take
/// the index's matches as candidates and re-check the name on `customers`, so a stale row
/// (an old name, a deleted customer) can never produce a wrong result.
///
/// PostgreSQL scans with `LIKE` as before (no extension is assumed to be installable).
#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: &str = "
CREATE VIRTUAL TABLE customer_name_search USING fts5(
    name, customer_id UNINDEXED, tokenize = 'trigram'
);
INSERT INTO customer_name_search (name, customer_id) SELECT name, id FROM customers;
";

/// The triggers that fed the index until its writers did (`name_search_by_writers`).
pub const TRIGGERS: &str = "
CREATE TRIGGER customer_name_search_insert AFTER INSERT ON customers BEGIN
    INSERT INTO customer_name_search (name, customer_id) VALUES (new.name, new.id);
END;
CREATE TRIGGER customer_name_search_rename AFTER UPDATE OF name ON customers
WHEN old.name IS NOT new.name BEGIN
    INSERT INTO customer_name_search (name, customer_id) VALUES (new.name, new.id);
END;
";

const DOWN: &str = "
DROP TRIGGER IF EXISTS customer_name_search_rename;
DROP TRIGGER IF EXISTS customer_name_search_insert;
DROP TABLE IF EXISTS customer_name_search;
";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Sqlite {
            return Ok(());
        }
        manager
            .get_connection()
            .execute_unprepared(&format!("{UP}{TRIGGERS}"))
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Sqlite {
            return Ok(());
        }
        manager.get_connection().execute_unprepared(DOWN).await?;
        Ok(())
    }
}
