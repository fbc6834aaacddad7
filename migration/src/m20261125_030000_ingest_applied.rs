use sea_orm_migration::{prelude::*, schema::*};

/// `ingest_applied`: one row, the sequence number of the last journal batch the applier moved
/// into `events`. On a SQLite file the journal is a file of its own beside the database (its
/// write lock is not the main file's), so the applier's commit cannot delete the batches it
/// applied: it moves this mark in the same commit instead, and the journal's rows at or below
/// it are applied ones, deleted afterwards. PostgreSQL keeps the journal in the database and
/// never moves the mark.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("ingest_applied")
                    .if_not_exists()
                    .col(integer("id").primary_key())
                    .col(big_integer("seq"))
                    .to_owned(),
            )
            .await?;
        manager
            .get_connection()
            .execute_unprepared("INSERT INTO ingest_applied (id, seq) VALUES (1, 0)")
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("ingest_applied").to_owned())
            .await
    }
}
