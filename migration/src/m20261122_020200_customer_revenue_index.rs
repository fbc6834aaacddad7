use sea_orm_migration::prelude::*;

/// `svc_list_customers` by `minMrrCents`/`maxMrrCents` counts every match for
/// `pagination.total`. Without an index on revenue that count reads every customer row of the
/// organization. On SQLite the index also carries `traits`, so a revenue filter combined with
/// a `traits` filter is counted from index entries alone. PostgreSQL gets revenue only: a
/// B-tree entry there is limited to about 2.7 kB, which a large `traits` object could exceed.
#[derive(DeriveMigrationName)]
pub struct Migration;

const NAME: &str = "ix_customers_org_mrr";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mut index = Index::create();
        index
            .name(NAME)
            .table("customers")
            .col("organization_id")
            .col("mrr_cents");
        if manager.get_database_backend() == sea_orm::DbBackend::Sqlite {
            index.col("traits");
        }
        manager.create_index(index.to_owned()).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(Index::drop().name(NAME).table("customers").to_owned())
            .await
    }
}
