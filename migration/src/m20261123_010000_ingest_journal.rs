use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

/// Ingest acknowledges after appending accepted batches to `ingest_journal` (no index but its
/// sequence), and applies their effects behind the acknowledgement, moving the events into
/// `events` in the same transaction that deletes them from the journal.
///
/// `messageId` repeats are dropped within a window instead of forever, so the unique
/// `(organization_id, message_id)` index on `events` goes: on SQLite the window is kept in
/// memory (rebuilt at start from the last window's events), on PostgreSQL in
/// `ingest_message_ids`, which every instance shares.
#[derive(DeriveMigrationName)]
pub struct Migration;

const UNIQUE_MESSAGE_ID: &str = "ux_events_organization_id_message_id";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("ingest_journal")
                    .if_not_exists()
                    .col(big_integer("seq").primary_key().auto_increment())
                    .col(string("organization_id"))
                    .col(timestamp_with_time_zone("received_at"))
                    .col(integer("event_count"))
                    .col(json_binary("batch"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("ingest_message_ids")
                    .if_not_exists()
                    .col(string("organization_id"))
                    .col(string("message_id"))
                    .col(timestamp_with_time_zone("first_seen_at"))
                    .primary_key(Index::create().col("organization_id").col("message_id"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_ingest_message_ids_first_seen_at")
                    .table("ingest_message_ids")
                    .col("first_seen_at")
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            // Repeats of what is already stored stay repeats after the upgrade.
            manager
                .get_connection()
                .execute_unprepared(
                    "INSERT INTO ingest_message_ids (organization_id, message_id, first_seen_at) \
                     SELECT organization_id, message_id, min(received_at) FROM events \
                     WHERE message_id IS NOT NULL GROUP BY organization_id, message_id \
                     ON CONFLICT DO NOTHING",
                )
                .await?;
        }
        manager
            .drop_index(
                Index::drop()
                    .name(UNIQUE_MESSAGE_ID)
                    .table("events")
                    .if_exists()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("ingest_message_ids").to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table("ingest_journal").to_owned())
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(UNIQUE_MESSAGE_ID)
                    .table("events")
                    .col("organization_id")
                    .col("message_id")
                    .unique()
                    .to_owned(),
            )
            .await
    }
}
