use sea_orm_migration::prelude::*;

/// SQLite: drops `customers`' `(organization_id, last_activity_at)` index, from the first
/// schema. The activity index the lists walk (`ix_customers_org_activity_id`: organization,
/// activity, id, revenue) starts with the same columns in the same order and serves every
/// query this one could; meanwhile every change of a customer's activity (each applied event
/// of a customer, each import line) moved an entry in this one too. PostgreSQL keeps it: its
/// activity index runs the other way (`DESC NULLS LAST`) and is wider, and without this one
/// the counts of customers inactive for a while read the plan test's table whole.
#[derive(DeriveMigrationName)]
pub struct Migration;

const PREFIX_ONLY: &str = "ix_customers_organization_id_last_activity_at";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != sea_orm::DbBackend::Sqlite {
            return Ok(());
        }
        manager
            .drop_index(
                Index::drop()
                    .name(PREFIX_ONLY)
                    .table("customers")
                    .if_exists()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != sea_orm::DbBackend::Sqlite {
            return Ok(());
        }
        manager
            .create_index(
                Index::create()
                    .name(PREFIX_ONLY)
                    .table("customers")
                    .col("organization_id")
                    .col("last_activity_at")
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }
}
