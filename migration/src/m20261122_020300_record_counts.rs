use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// Exact counts of users by journey stage and customers by billing status, per organization,
/// kept by triggers in the same transaction as every insert, delete and change of those rows.
/// The list tools answer `pagination.total` from them when a list is filtered by nothing else,
/// instead of counting hundreds of thousands of index entries on every first page.
#[derive(DeriveMigrationName)]
pub struct Migration;

const TABLE: &str = "
CREATE TABLE record_counts (
    organization_id VARCHAR NOT NULL,
    record VARCHAR NOT NULL,
    bucket VARCHAR NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (organization_id, record, bucket)
)";

/// (table, counted column)
const COUNTED: [(&str, &str); 2] = [("users", "stage"), ("customers", "billing_status")];

fn backfill(table: &str, column: &str) -> String {
    format!(
        "INSERT INTO record_counts (organization_id, record, bucket, n) \
         SELECT organization_id, '{table}', {column}, COUNT(*) FROM {table} \
         GROUP BY organization_id, {column}"
    )
}

fn sqlite_triggers(table: &str, column: &str) -> Vec<String> {
    let add = |row: &str| {
        format!(
            "INSERT INTO record_counts (organization_id, record, bucket, n) \
             VALUES ({row}.organization_id, '{table}', {row}.{column}, 1) \
             ON CONFLICT (organization_id, record, bucket) DO UPDATE SET n = n + 1;"
        )
    };
    let remove = |row: &str| {
        format!(
            "UPDATE record_counts SET n = n - 1 WHERE organization_id = {row}.organization_id \
             AND record = '{table}' AND bucket = {row}.{column};"
        )
    };
    vec![
        format!(
            "CREATE TRIGGER {table}_count_insert AFTER INSERT ON {table} BEGIN {} END",
            add("new")
        ),
        format!(
            "CREATE TRIGGER {table}_count_delete AFTER DELETE ON {table} BEGIN {} END",
            remove("old")
        ),
        format!(
            "CREATE TRIGGER {table}_count_update AFTER UPDATE OF organization_id, {column} \
             ON {table} WHEN old.organization_id IS NOT new.organization_id \
             OR old.{column} IS NOT new.{column} BEGIN {} {} END",
            remove("old"),
            add("new")
        ),
    ]
}

fn postgres_triggers(table: &str, column: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE FUNCTION {table}_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.organization_id IS NOT DISTINCT FROM NEW.organization_id
       AND OLD.{column} IS NOT DISTINCT FROM NEW.{column} THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE record_counts SET n = n - 1 WHERE organization_id = OLD.organization_id
            AND record = '{table}' AND bucket = OLD.{column};
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO record_counts (organization_id, record, bucket, n)
            VALUES (NEW.organization_id, '{table}', NEW.{column}, 1)
            ON CONFLICT (organization_id, record, bucket)
            DO UPDATE SET n = record_counts.n + 1;
    END IF;
    RETURN NULL;
END $$"
        ),
        format!(
            "CREATE TRIGGER {table}_count AFTER INSERT OR DELETE OR UPDATE OF organization_id, \
             {column} ON {table} FOR EACH ROW EXECUTE FUNCTION {table}_count()"
        ),
    ]
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let postgres = manager.get_database_backend() == DbBackend::Postgres;
        db.execute_unprepared(TABLE).await?;
        for (table, column) in COUNTED {
            db.execute_unprepared(&backfill(table, column)).await?;
            let triggers = if postgres {
                postgres_triggers(table, column)
            } else {
                sqlite_triggers(table, column)
            };
            for statement in triggers {
                db.execute_unprepared(&statement).await?;
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let postgres = manager.get_database_backend() == DbBackend::Postgres;
        for (table, _) in COUNTED {
            if postgres {
                db.execute_unprepared(&format!("DROP TRIGGER IF EXISTS {table}_count ON {table}"))
                    .await?;
                db.execute_unprepared(&format!("DROP FUNCTION IF EXISTS {table}_count()"))
                    .await?;
            } else {
                for suffix in ["insert", "delete", "update"] {
                    db.execute_unprepared(&format!(
                        "DROP TRIGGER IF EXISTS {table}_count_{suffix}"
                    ))
                    .await?;
                }
            }
        }
        db.execute_unprepared("DROP TABLE IF EXISTS record_counts")
            .await?;
        Ok(())
    }
}
