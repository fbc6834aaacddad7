//! The revenue indexes end with the lists' sort key (`last_activity_at`, `id`): a list with a
//! narrow revenue range reads its matches' sort keys from the index alone, orders them and
//! reads only the page's rows (`svc_list_customers`). They replace the same indexes without
//! the sort key; SQLite's revenue index also held `traits`, which trait filters no longer
//! read there (rare trait values come from `trait_values`, others are checked on the rows a
//! page reads).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::ConnectionTrait;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The new index's name and columns, then the name and columns of the one it replaces.
const REMADE: [(&str, &str, &str, &str); 2] = [
    (
        "ix_customers_org_mrr_activity_id",
        "organization_id, mrr_cents, last_activity_at, id",
        "ix_customers_org_mrr",
        "organization_id, mrr_cents",
    ),
    (
        "ix_customers_org_status_mrr_activity_id",
        "organization_id, billing_status, mrr_cents, last_activity_at, id",
        "ix_customers_org_status_mrr",
        "organization_id, billing_status, mrr_cents",
    ),
];

async fn replace(
    manager: &SchemaManager<'_>,
    (name, columns): (&str, &str),
    replaced: &str,
) -> Result<(), DbErr> {
    let db = manager.get_connection();
    db.execute_unprepared(&format!(
        "CREATE INDEX IF NOT EXISTS {name} ON customers ({columns})"
    ))
    .await?;
    db.execute_unprepared(&format!("DROP INDEX IF EXISTS {replaced}"))
        .await?;
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, columns, old, _) in REMADE {
            replace(manager, (name, columns), old).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let sqlite = manager.get_database_backend() == sea_orm::DbBackend::Sqlite;
        for (name, _, old, old_columns) in REMADE {
            // SQLite's revenue index held the traits too.
            let old_columns = if sqlite && old == "ix_customers_org_mrr" {
                format!("{old_columns}, traits")
            } else {
                old_columns.to_string()
            };
            replace(manager, (old, &old_columns), name).await?;
        }
        Ok(())
    }
}
