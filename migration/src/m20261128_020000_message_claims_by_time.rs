//! PostgreSQL: the `messageId` claims table keeps only the last seconds of claims (each
//! instance keeps the whole window itself, fed from this table), and every instance reads the
//! newest claims from it about once a second. A B-tree on the time a claim was made serves that
//! read and the expiry; the BRIN index it replaces loses its order once deleted rows' space is
//! reused, which a table emptied every few seconds does all the time.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        swap_index(manager, "btree").await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        swap_index(manager, "brin").await
    }
}

async fn swap_index(manager: &SchemaManager<'_>, method: &str) -> Result<(), DbErr> {
    if manager.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let db = manager.get_connection();
    db.execute_unprepared("DROP INDEX IF EXISTS ix_ingest_message_keys_first_seen_at")
        .await?;
    db.execute_unprepared(&format!(
        "CREATE INDEX ix_ingest_message_keys_first_seen_at \
         ON ingest_message_keys USING {method} (first_seen_at)"
    ))
    .await?;
    Ok(())
}
