//! Every migration's down step undoes its up step: the whole chain rolled back leaves an empty
//! schema, and migrating again gives a database the service writes to, on both databases.

use custintel::db;
use migration::MigratorTrait;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

use crate::helpers::{fresh_db, org_in, Backend};

/// The schema's tables, views, triggers, functions and indexes, by name.
async fn schema_objects(db: &DatabaseConnection) -> Vec<String> {
    let sql = match db.get_database_backend() {
        DbBackend::Sqlite => {
            "SELECT type || ' ' || name FROM sqlite_master \
             WHERE name NOT LIKE 'sqlite_%' AND name <> 'seaql_migrations' ORDER BY 1"
        }
        _ => {
            "SELECT 'table ' || c.relname FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relname <> 'seaql_migrations' \
               AND c.relname NOT LIKE 'seaql_migrations%' \
             UNION ALL \
             SELECT 'function ' || p.proname FROM pg_proc p \
             JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema() \
             UNION ALL \
             SELECT 'type ' || t.typname FROM pg_type t \
             JOIN pg_namespace n ON n.oid = t.typnamespace \
             WHERE n.nspname = current_schema() AND t.typtype IN ('e', 'd') \
             ORDER BY 1"
        }
    };
    db.query_all_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
        .expect("list the schema")
        .iter()
        .map(|row| row.try_get_by_index::<String>(0).expect("name"))
        .collect()
}

async fn down_then_up_again(backend: Backend) {
    let Some((db, _tmp)) = fresh_db(backend).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    org_in(&db, "Before the round trip").await;
    migration::Migrator::down(&db, None)
        .await
        .expect("every migration rolls back");
    assert_eq!(
        schema_objects(&db).await,
        Vec::<String>::new(),
        "left behind by the down steps"
    );
    db::migrate(&db).await.expect("migrate again");
    // The service writes to the database migrated again, and it starts empty.
    let org = org_in(&db, "After the round trip").await;
    assert!(!org.organization_id.is_empty());
    let organizations = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT COUNT(*) FROM organizations",
        ))
        .await
        .expect("count")
        .expect("a row")
        .try_get_by_index::<i64>(0)
        .expect("count");
    assert_eq!(organizations, 1);
}

#[tokio::test]
async fn every_migration_rolls_back_and_applies_again_sqlite() {
    down_then_up_again(Backend::Sqlite).await;
}

#[tokio::test]
async fn every_migration_rolls_back_and_applies_again_postgres() {
    down_then_up_again(Backend::Postgres).await;
}
