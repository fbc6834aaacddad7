use sea_orm_migration::prelude::*;

/// One connection per organization and provider, even when two connects race.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name("ux_integration_connections_organization_id_provider")
                    .table("integration_connections")
                    .col("organization_id")
                    .col("provider")
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("ux_integration_connections_organization_id_provider")
                    .table("integration_connections")
                    .to_owned(),
            )
            .await
    }
}
