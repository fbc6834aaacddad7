use sea_orm_migration::prelude::*;

/// `custintel import` finds a chunk's stored facts by their evidence (source type and id).
/// Without this index that look-up read every fact of the named source types (the index on
/// source type and status stops there), so each chunk of fact lines read all the facts
/// imported before it.
#[derive(DeriveMigrationName)]
pub struct Migration;

const NAME: &str = "ix_facts_organization_id_source_type_source_id";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name(NAME)
                    .table("facts")
                    .col("organization_id")
                    .col("source_type")
                    .col("source_id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(Index::drop().name(NAME).table("facts").to_owned())
            .await
    }
}
