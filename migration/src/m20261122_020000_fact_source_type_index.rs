use sea_orm_migration::prelude::*;

/// `svc_list_facts` by `sourceTypes` across all customers counts every match for
/// `pagination.total`; without this index that count read every fact row of the organization.
/// With it the count reads only index entries: one range per (source type, status) pair.
#[derive(DeriveMigrationName)]
pub struct Migration;

const NAME: &str = "ix_facts_org_source_type_status";

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
                    .col("status")
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
