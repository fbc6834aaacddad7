use sea_orm_migration::prelude::*;

/// Indexes for the tool gateway's lists: each serves one list order (newest or most recently
/// active first, ties broken by id) without sorting, alone or after an equality filter.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// (index name, table, columns)
const INDEXES: [(&str, &str, &[&str]); 7] = [
    (
        "ix_customers_org_activity_id",
        "customers",
        &["organization_id", "last_activity_at", "id"],
    ),
    (
        "ix_customers_org_status_activity_id",
        "customers",
        &[
            "organization_id",
            "billing_status",
            "last_activity_at",
            "id",
        ],
    ),
    (
        "ix_users_org_activity_id",
        "users",
        &["organization_id", "last_activity_at", "id"],
    ),
    (
        "ix_users_org_stage_activity_id",
        "users",
        &["organization_id", "stage", "last_activity_at", "id"],
    ),
    (
        "ix_facts_org_occurred_id",
        "facts",
        &["organization_id", "source_occurred_at", "id"],
    ),
    (
        "ix_sources_org_occurred_id",
        "sources",
        &["organization_id", "occurred_at", "id"],
    ),
    (
        "ix_workspace_users_org_name_id",
        "workspace_users",
        &["organization_id", "name", "id"],
    ),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, table, columns) in INDEXES {
            let mut index = Index::create();
            index.name(name).table(table);
            for column in columns {
                index.col(*column);
            }
            manager.create_index(index.to_owned()).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, table, _) in INDEXES {
            manager
                .drop_index(Index::drop().name(name).table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
