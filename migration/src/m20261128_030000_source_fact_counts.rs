//! `record_counts` also keeps the organization's sources per source type (`record` `sources`,
//! `bucket` the type) and facts per status and source type (`record` `facts`, `bucket`
//! `STATUS:TYPE`), kept by triggers in the same transaction as every change, as it keeps
//! customers and users. `svc_list_sources` and `svc_list_facts` filtered by source types (and
//! statuses) alone read their `pagination.total` here instead of counting up to 10,001 index
//! entries on every first page, which was most of such a call's cost on PostgreSQL.
//!
//! PostgreSQL counts in rows per backend (`shard`), folded later, as the earlier counts do.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// (table, the bucket as an expression of a row, `{row}` standing for it, the columns whose
/// change moves a row to another bucket)
const COUNTED: [(&str, &str, &str); 2] = [
    ("sources", "{row}.source_type", "source_type"),
    (
        "facts",
        "{row}.status || ':' || {row}.source_type",
        "status, source_type",
    ),
];

fn bucket(expression: &str, row: &str) -> String {
    expression.replace("{row}", row)
}

fn backfill(table: &str, expression: &str, backend: DbBackend) -> String {
    let shard = if backend == DbBackend::Postgres {
        ", shard"
    } else {
        ""
    };
    let shard_value = if backend == DbBackend::Postgres {
        ", 0"
    } else {
        ""
    };
    let counted = bucket(expression, table);
    format!(
        "INSERT INTO record_counts (organization_id, record, bucket{shard}, n, amount) \
         SELECT organization_id, '{table}', {counted}{shard_value}, COUNT(*), 0 FROM {table} \
         GROUP BY organization_id, {counted}"
    )
}

/// `condition` (`{c}` standing for a column) for the organization and each of `columns`,
/// joined by `joiner`: whether a change moved a row to another bucket, or did not.
fn each_bucket_column(columns: &str, condition: &str, joiner: &str) -> String {
    std::iter::once("organization_id")
        .chain(columns.split(", "))
        .map(|c| condition.replace("{c}", c))
        .collect::<Vec<_>>()
        .join(joiner)
}

fn sqlite_triggers(table: &str, expression: &str, columns: &str) -> Vec<String> {
    let change = |row: &str, sign: i64| {
        format!(
            "INSERT INTO record_counts (organization_id, record, bucket, n, amount) \
             VALUES ({row}.organization_id, '{table}', {}, {sign}, 0) \
             ON CONFLICT (organization_id, record, bucket) DO UPDATE SET n = n + excluded.n;",
            bucket(expression, row)
        )
    };
    let moved = each_bucket_column(columns, "old.{c} IS NOT new.{c}", " OR ");
    vec![
        format!(
            "CREATE TRIGGER {table}_count_insert AFTER INSERT ON {table} BEGIN {} END",
            change("new", 1)
        ),
        format!(
            "CREATE TRIGGER {table}_count_delete AFTER DELETE ON {table} BEGIN {} END",
            change("old", -1)
        ),
        format!(
            "CREATE TRIGGER {table}_count_update AFTER UPDATE OF organization_id, {columns} \
             ON {table} WHEN {moved} BEGIN {} {} END",
            change("old", -1),
            change("new", 1)
        ),
    ]
}

fn postgres_function(table: &str, expression: &str, columns: &str) -> String {
    let change = |row: &str, sign: &str| {
        format!(
            "INSERT INTO record_counts (organization_id, record, bucket, shard, n, amount) \
             VALUES ({row}.organization_id, '{table}', {}, pg_backend_pid(), {sign}1, 0) \
             ON CONFLICT (organization_id, record, bucket, shard) DO UPDATE \
             SET n = record_counts.n + excluded.n;",
            bucket(expression, row)
        )
    };
    let unmoved = each_bucket_column(columns, "OLD.{c} IS NOT DISTINCT FROM NEW.{c}", " AND ");
    format!(
        "CREATE OR REPLACE FUNCTION {table}_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND {unmoved} THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        {}
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        {}
    END IF;
    RETURN NULL;
END $$",
        change("OLD", "-"),
        change("NEW", "")
    )
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// One transaction on SQLite too (see the revenue totals' migration): the triggers and the
    /// counts they start from are made together, while writers of these tables wait.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let backend = manager.get_database_backend();
        for (table, expression, columns) in COUNTED {
            if backend == DbBackend::Postgres {
                db.execute_unprepared(&postgres_function(table, expression, columns))
                    .await?;
                db.execute_unprepared(&format!(
                    "CREATE TRIGGER {table}_count AFTER INSERT OR DELETE OR \
                     UPDATE OF organization_id, {columns} ON {table} \
                     FOR EACH ROW EXECUTE FUNCTION {table}_count()"
                ))
                .await?;
            } else {
                for trigger in sqlite_triggers(table, expression, columns) {
                    db.execute_unprepared(&trigger).await?;
                }
            }
            // In the migration's transaction: no write of the table falls between the
            // triggers and these counts.
            db.execute_unprepared(&backfill(table, expression, backend))
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let backend = manager.get_database_backend();
        for (table, _, _) in COUNTED {
            if backend == DbBackend::Postgres {
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
            db.execute_unprepared(&format!(
                "DELETE FROM record_counts WHERE record = '{table}'"
            ))
            .await?;
        }
        Ok(())
    }
}
