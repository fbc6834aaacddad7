//! `record_counts` also keeps the sum of `mrr_cents` of the customers in each billing status,
//! in the same transaction as every change, so totals by status (the `customer_totals`
//! analytics view) read a handful of rows instead of every customer. The customers' triggers
//! are remade to follow revenue changes as well as status changes.
//!
//! On PostgreSQL each backend counts in rows of its own (`shard` = its `pg_backend_pid()`),
//! which readers sum: with one row per bucket, two transactions that each changed users of
//! several stages (a multi-row import, a delete) locked the same counter rows in different
//! orders and deadlocked. A maintenance task folds the rows of backends that have ended into
//! `shard` 0 (`custintel::tools::record_counts::fold`). SQLite has one writer at a time and
//! keeps one row per bucket.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

const BACKFILL: &str = "UPDATE record_counts SET amount = COALESCE((SELECT SUM(c.mrr_cents) \
     FROM customers AS c WHERE c.organization_id = record_counts.organization_id \
     AND c.billing_status = record_counts.bucket), 0) WHERE record = 'customers'";

/// The bucket of `row` (`old` or `new`) counted `sign` times (1 or -1).
fn sqlite_change(row: &str, sign: i64) -> String {
    format!(
        "INSERT INTO record_counts (organization_id, record, bucket, n, amount) \
         VALUES ({row}.organization_id, 'customers', {row}.billing_status, {sign}, \
         {sign} * {row}.mrr_cents) \
         ON CONFLICT (organization_id, record, bucket) DO UPDATE SET n = n + excluded.n, \
         amount = amount + excluded.amount;"
    )
}

fn sqlite_triggers() -> Vec<String> {
    vec![
        format!(
            "CREATE TRIGGER customers_count_insert AFTER INSERT ON customers BEGIN {} END",
            sqlite_change("new", 1)
        ),
        format!(
            "CREATE TRIGGER customers_count_delete AFTER DELETE ON customers BEGIN {} END",
            sqlite_change("old", -1)
        ),
        format!(
            "CREATE TRIGGER customers_count_update AFTER UPDATE OF organization_id, \
             billing_status, mrr_cents ON customers \
             WHEN old.organization_id IS NOT new.organization_id \
             OR old.billing_status IS NOT new.billing_status \
             OR old.mrr_cents IS NOT new.mrr_cents BEGIN {} {} END",
            sqlite_change("old", -1),
            sqlite_change("new", 1)
        ),
    ]
}

/// PostgreSQL: the counting function of `table`, whose rows fall in buckets by `column` and
/// add `amount` (an expression of the row, `{row}` standing for `OLD` or `NEW`) to the sum.
fn postgres_function(table: &str, column: &str, amount: &str) -> String {
    let change = |row: &str, sign: &str| {
        format!(
            "INSERT INTO record_counts (organization_id, record, bucket, shard, n, amount) \
             VALUES ({row}.organization_id, '{table}', {row}.{column}, pg_backend_pid(), \
             {sign}1, {sign}{}) \
             ON CONFLICT (organization_id, record, bucket, shard) DO UPDATE \
             SET n = record_counts.n + excluded.n, amount = record_counts.amount + excluded.amount;",
            amount.replace("{row}", row)
        )
    };
    let compared = if amount == "0" {
        String::new()
    } else {
        format!(
            " AND {} IS NOT DISTINCT FROM {}",
            amount.replace("{row}", "OLD"),
            amount.replace("{row}", "NEW")
        )
    };
    format!(
        "CREATE OR REPLACE FUNCTION {table}_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.organization_id IS NOT DISTINCT FROM NEW.organization_id
       AND OLD.{column} IS NOT DISTINCT FROM NEW.{column}{compared} THEN
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

const POSTGRES_SHARDS: [&str; 3] = [
    "ALTER TABLE record_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE record_counts DROP CONSTRAINT record_counts_pkey",
    "ALTER TABLE record_counts ADD PRIMARY KEY (organization_id, record, bucket, shard)",
];

const POSTGRES_TRIGGER: &str = "CREATE TRIGGER customers_count AFTER INSERT OR DELETE OR \
     UPDATE OF organization_id, billing_status, mrr_cents ON customers \
     FOR EACH ROW EXECUTE FUNCTION customers_count()";

const SQLITE_TRIGGERS: [&str; 3] = ["insert", "delete", "update"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// One transaction on SQLite too: otherwise each statement may run on another pooled
    /// connection, and one still reading an older snapshot of the schema finds a trigger
    /// this migration has just dropped ("already exists").
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared(
            "ALTER TABLE record_counts ADD COLUMN amount BIGINT NOT NULL DEFAULT 0",
        )
        .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            for statement in POSTGRES_SHARDS {
                db.execute_unprepared(statement).await?;
            }
            db.execute_unprepared(&postgres_function("users", "stage", "0"))
                .await?;
            db.execute_unprepared(&postgres_function(
                "customers",
                "billing_status",
                "{row}.mrr_cents",
            ))
            .await?;
            db.execute_unprepared("DROP TRIGGER IF EXISTS customers_count ON customers")
                .await?;
            db.execute_unprepared(POSTGRES_TRIGGER).await?;
        } else {
            for suffix in SQLITE_TRIGGERS {
                db.execute_unprepared(&format!("DROP TRIGGER IF EXISTS customers_count_{suffix}"))
                    .await?;
            }
            for trigger in sqlite_triggers() {
                db.execute_unprepared(&trigger).await?;
            }
        }
        // The migration's one transaction keeps writers of customers out until it commits
        // (SQLite's write lock; PostgreSQL's lock for `CREATE TRIGGER`), so the sums computed
        // here and the triggers' changes after it neither miss nor repeat a write.
        db.execute_unprepared(BACKFILL).await?;
        Ok(())
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        // The earlier triggers ignore `amount`; leaving the column and these triggers in
        // place keeps counts exact for the earlier migrations' down steps.
        Ok(())
    }
}
