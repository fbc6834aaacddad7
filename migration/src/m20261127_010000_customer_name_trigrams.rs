//! PostgreSQL: a trigram index on customers' lower-cased names, so a name filter
//! (`lower(name) LIKE '%needle%'`) reads the customers whose names hold the needle's trigrams
//! instead of every customer of the organization. It needs the `pg_trgm` extension (shipped
//! with PostgreSQL, trusted: a database owner may create it); where the extension cannot be
//! created the index is left out and the filter works as before, by reading the organization's
//! customers. SQLite has its own trigram index (`customer_name_search`).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::ConnectionTrait;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Creates the extension in `public` (not in the schema being migrated: dropping that schema
/// would take the extension, and every other schema's index on it, along) unless it is
/// installed already, then the index with the operator class of wherever the extension is.
/// Every failure (no such extension, no right to create it, a concurrent creation) leaves the
/// index out rather than the migration failed.
pub(crate) fn trigram_index(table: &str, index: &str) -> String {
    format!(
        r#"
DO $$
DECLARE
    trgm_schema name;
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public;
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'pg_trgm is not available (%): {table} get no trigram index', SQLERRM;
    END;
    SELECT n.nspname INTO trgm_schema
        FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pg_trgm';
    IF trgm_schema IS NOT NULL THEN
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS {index} ON {table} '
            'USING gin (lower(name) %I.gin_trgm_ops)',
            trgm_schema);
    END IF;
END
$$;
"#
    )
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != sea_orm::DbBackend::Postgres {
            return Ok(());
        }
        manager
            .get_connection()
            .execute_unprepared(&trigram_index("customers", "ix_customers_name_trigrams"))
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != sea_orm::DbBackend::Postgres {
            return Ok(());
        }
        // The extension stays: other schemas of the database may use it.
        manager
            .get_connection()
            .execute_unprepared("DROP INDEX IF EXISTS ix_customers_name_trigrams")
            .await?;
        Ok(())
    }
}
