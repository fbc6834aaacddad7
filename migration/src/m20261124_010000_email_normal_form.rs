use std::collections::BTreeMap;

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, QueryResult};

/// Emails of users and workspace users in one normal form (trimmed, lower-case, as ingest and
/// import write them), so a lookup by email is `email = ?` through the `(organization_id,
/// email)` indexes (`ix_users_organization_id_email`, `ux_workspace_users_organization_id_email`)
/// instead of a `lower(email) = ?` scan of the organization.
///
/// The normal form is computed here in Rust, not with SQL `lower()`: SQLite's `lower()` folds
/// ASCII only, and the writers use Rust's `to_lowercase`.
///
/// Collapsing duplicates: users have no unique email, so two users whose emails differ only in
/// case both keep their row (they may carry different events and visitors; merging people is
/// not a migration's call). Workspace users are unique by email per organization and are
/// referenced by nothing else: of the rows that collapse, the oldest (then smallest id) keeps
/// the email and the others are deleted.
///
/// Also adds `ix_facts_org_source` (`organization_id`, `source_type`, `source_id`): the import
/// looks facts up by their evidence source in bulk.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// Rows read per round trip.
const PAGE: u64 = 5_000;

const FACTS_BY_SOURCE: &str = "ix_facts_org_source";

/// The normal form of a stored email (keep in step with `custintel::import::normalize_email`).
fn normalize(email: &str) -> String {
    email.trim().to_lowercase()
}

fn text(row: &QueryResult, column: &str) -> Result<String, DbErr> {
    row.try_get::<String>("", column)
}

async fn normalize_users(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    let db = manager.get_connection();
    let mut after = String::new();
    loop {
        let page = db
            .query_all(
                Query::select()
                    .columns(["id", "email"])
                    .from("users")
                    .and_where(Expr::col("id").gt(after.clone()))
                    .and_where(Expr::col("email").is_not_null())
                    .order_by("id", Order::Asc)
                    .limit(PAGE),
            )
            .await?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = text(last, "id")?;
        for row in &page {
            let email = text(row, "email")?;
            let normal = normalize(&email);
            if normal == email {
                continue;
            }
            // An email that is only whitespace is no email.
            let value: Option<String> = (!normal.is_empty()).then_some(normal);
            db.execute(
                Query::update()
                    .table("users")
                    .value("email", value)
                    .and_where(Expr::col("id").eq(text(row, "id")?)),
            )
            .await?;
        }
    }
}

async fn normalize_workspace_users(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    let db = manager.get_connection();
    // Workspace users are an organization's own people: few rows, read at once.
    let rows = db
        .query_all(
            Query::select()
                .columns(["id", "organization_id", "email"])
                .from("workspace_users")
                .order_by("created_at", Order::Asc)
                .order_by("id", Order::Asc),
        )
        .await?;
    // (organization, normal email) -> rows in age order, each (id, stored email).
    let mut groups: BTreeMap<(String, String), Vec<(String, String)>> = BTreeMap::new();
    for row in &rows {
        let email = text(row, "email")?;
        groups
            .entry((text(row, "organization_id")?, normalize(&email)))
            .or_default()
            .push((text(row, "id")?, email));
    }
    for ((_, normal), members) in groups {
        let mut members = members.into_iter();
        let Some((keeper, stored)) = members.next() else {
            continue;
        };
        for (duplicate, _) in members {
            db.execute(
                Query::delete()
                    .from_table("workspace_users")
                    .and_where(Expr::col("id").eq(duplicate)),
            )
            .await?;
        }
        if stored != normal {
            db.execute(
                Query::update()
                    .table("workspace_users")
                    .value("email", normal)
                    .and_where(Expr::col("id").eq(keeper)),
            )
            .await?;
        }
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        normalize_users(manager).await?;
        normalize_workspace_users(manager).await?;
        manager
            .create_index(
                Index::create()
                    .name(FACTS_BY_SOURCE)
                    .table("facts")
                    .col("organization_id")
                    .col("source_type")
                    .col("source_id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // The normal form stays: the original spelling of an email is not kept anywhere.
        manager
            .drop_index(
                Index::drop()
                    .name(FACTS_BY_SOURCE)
                    .table("facts")
                    .to_owned(),
            )
            .await
    }
}
