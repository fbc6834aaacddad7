use sea_orm_migration::{prelude::*, schema::*};

/// `destinations.managed_by`: `UI` (platform actions) or `CODE` (`custintel apply`), as signals
/// and automations already have. Existing destinations are `UI`.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("destinations")
                    .add_column(string("managed_by").default("UI"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("destinations")
                    .drop_column("managed_by")
                    .to_owned(),
            )
            .await
    }
}
