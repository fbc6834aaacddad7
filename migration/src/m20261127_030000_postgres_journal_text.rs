//! PostgreSQL: the journal keeps each batch as the text the service wrote, not as `jsonb`.
//! Converting the text into `jsonb` on the acknowledging path cost the server about 20 ms per
//! megabyte of batches (23 batches of 44 KB: 19-26 ms as `jsonb`, 2.6-3.5 ms as text, in
//! psql), a core's worth at 50,000 events/s; the journal is read back rarely (the applier
//! parses it in the service, the analytics `events` view casts what it reads). The text is
//! compressed with lz4 where the server has it.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The analytics views read the journal's column; they are made again (from the new
/// definitions) the next time the service needs them.
const DROP_ANALYTICS_VIEWS: &str =
    "DO $$ BEGIN EXECUTE format('DROP SCHEMA IF EXISTS %I CASCADE', \
     current_schema() || '_analytics'); END $$";

async fn set_type(manager: &SchemaManager<'_>, ty: &str) -> Result<(), DbErr> {
    let db = manager.get_connection();
    db.execute_unprepared(DROP_ANALYTICS_VIEWS).await?;
    db.execute_unprepared(&format!(
        "ALTER TABLE ingest_journal ALTER COLUMN batch TYPE {ty} USING batch::{ty}"
    ))
    .await?;
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        set_type(manager, "text").await?;
        // Servers built without lz4 keep their default compression.
        manager
            .get_connection()
            .execute_unprepared(
                "DO $$ BEGIN ALTER TABLE ingest_journal ALTER COLUMN batch SET COMPRESSION lz4; \
                 EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN NULL; END $$",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        set_type(manager, "jsonb").await
    }
}
