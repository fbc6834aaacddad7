//! Counts per bucket kept in `record_counts` by triggers, shared by the migrations that add
//! them: a row's bucket is an expression of the row (`{row}` standing for it), and a change
//! of `columns` (or of the organization) moves the row from one bucket to another.
//!
//! On PostgreSQL each backend counts in rows of its own (`shard` = `pg_backend_pid()`),
//! summed by readers and folded later; SQLite keeps one row per bucket.
//!
//! Migrations already applied build their SQL here, and a fresh database runs them again:
//! change what a function writes only by adding a new one, never in place.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// One kept count: `record` names its rows in `record_counts` (and its triggers), `table` is
/// what it counts.
pub struct KeptCount {
    pub record: &'static str,
    pub table: &'static str,
    /// The bucket as an expression of a row, `{row}` standing for the row.
    pub bucket: &'static str,
    /// The columns whose change moves a row to another bucket, `, `-separated.
    pub columns: &'static str,
}

impl KeptCount {
    /// Makes the triggers and writes the counts of the rows already there, in the
    /// migration's transaction (which the migration asks for), so that no write falls
    /// between the two.
    pub async fn up(&self, manager: &SchemaManager<'_>) -> Result<(), DbErr> {
        self.create_and_backfill(manager, self.create(manager.get_database_backend()))
            .await
    }

    /// Runs `triggers`, then writes the counts of the rows already there.
    async fn create_and_backfill(
        &self,
        manager: &SchemaManager<'_>,
        triggers: Vec<String>,
    ) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in triggers {
            db.execute_unprepared(&statement).await?;
        }
        db.execute_unprepared(&self.backfill(manager.get_database_backend()))
            .await?;
        Ok(())
    }

    /// Drops the triggers and the counts.
    pub async fn down(&self, manager: &SchemaManager<'_>) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in self.drop(manager.get_database_backend()) {
            db.execute_unprepared(&statement).await?;
        }
        Ok(())
    }

    fn bucket_of(&self, row: &str) -> String {
        self.bucket.replace("{row}", row)
    }

    /// The counts of the rows already there, written in the migration's transaction.
    pub fn backfill(&self, backend: DbBackend) -> String {
        let (shard, shard_value) = if backend == DbBackend::Postgres {
            (", shard", ", 0")
        } else {
            ("", "")
        };
        let Self { record, table, .. } = self;
        let counted = self.bucket_of(table);
        format!(
            "INSERT INTO record_counts (organization_id, record, bucket{shard}, n, amount) \
             SELECT organization_id, '{record}', {counted}{shard_value}, COUNT(*), 0 FROM {table} \
             GROUP BY organization_id, {counted}"
        )
    }

    /// `condition` (`{c}` standing for a column) for the organization and each bucket
    /// column, joined by `joiner`.
    fn each_bucket_column(&self, condition: &str, joiner: &str) -> String {
        std::iter::once("organization_id")
            .chain(self.columns.split(", "))
            .map(|c| condition.replace("{c}", c))
            .collect::<Vec<_>>()
            .join(joiner)
    }

    /// The statements that make the triggers.
    pub fn create(&self, backend: DbBackend) -> Vec<String> {
        if backend == DbBackend::Postgres {
            self.postgres()
        } else {
            self.sqlite()
        }
    }

    /// The statements that drop the triggers and the counts.
    pub fn drop(&self, backend: DbBackend) -> Vec<String> {
        let Self { record, table, .. } = self;
        let mut statements = if backend == DbBackend::Postgres {
            vec![
                format!("DROP TRIGGER IF EXISTS {record}_count ON {table}"),
                format!("DROP FUNCTION IF EXISTS {record}_count()"),
            ]
        } else {
            ["insert", "delete", "update"]
                .iter()
                .map(|suffix| format!("DROP TRIGGER IF EXISTS {record}_count_{suffix}"))
                .collect()
        };
        statements.push(format!(
            "DELETE FROM record_counts WHERE record = '{record}'"
        ));
        statements
    }

    /// SQLite: `row` counted in its bucket with `sign`.
    fn sqlite_change(&self, row: &str, sign: i64) -> String {
        format!(
            "INSERT INTO record_counts (organization_id, record, bucket, n, amount) \
             VALUES ({row}.organization_id, '{}', {}, {sign}, 0) \
             ON CONFLICT (organization_id, record, bucket) DO UPDATE SET n = n + excluded.n;",
            self.record,
            self.bucket_of(row)
        )
    }

    /// PostgreSQL: `row` counted in its bucket with `sign` (`-` or nothing), in the backend's
    /// own row.
    fn postgres_change(&self, row: &str, sign: &str) -> String {
        format!(
            "INSERT INTO record_counts (organization_id, record, bucket, shard, n, amount) \
             VALUES ({row}.organization_id, '{}', {}, pg_backend_pid(), {sign}1, 0) \
             ON CONFLICT (organization_id, record, bucket, shard) DO UPDATE \
             SET n = record_counts.n + excluded.n;",
            self.record,
            self.bucket_of(row)
        )
    }

    fn sqlite(&self) -> Vec<String> {
        self.sqlite_triggers(&self.each_bucket_column("old.{c} IS NOT new.{c}", " OR "))
    }

    /// SQLite: the insert and delete triggers, and the update trigger run `WHEN moved`.
    fn sqlite_triggers(&self, moved: &str) -> Vec<String> {
        let Self {
            record,
            table,
            columns,
            ..
        } = self;
        let change = |row: &str, sign: i64| self.sqlite_change(row, sign);
        vec![
            format!(
                "CREATE TRIGGER {record}_count_insert AFTER INSERT ON {table} BEGIN {} END",
                change("new", 1)
            ),
            format!(
                "CREATE TRIGGER {record}_count_delete AFTER DELETE ON {table} BEGIN {} END",
                change("old", -1)
            ),
            format!(
                "CREATE TRIGGER {record}_count_update AFTER UPDATE OF organization_id, {columns} \
                 ON {table} WHEN {moved} BEGIN {} {} END",
                change("old", -1),
                change("new", 1)
            ),
        ]
    }

    fn postgres(&self) -> Vec<String> {
        let Self {
            record,
            table,
            columns,
            ..
        } = self;
        let change = |row: &str, sign: &str| self.postgres_change(row, sign);
        let unmoved = self.each_bucket_column("OLD.{c} IS NOT DISTINCT FROM NEW.{c}", " AND ");
        let function = format!(
            "CREATE OR REPLACE FUNCTION {record}_count() RETURNS trigger LANGUAGE plpgsql AS $$
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
        );
        let trigger = format!(
            "CREATE TRIGGER {record}_count AFTER INSERT OR DELETE OR \
             UPDATE OF organization_id, {columns} ON {table} \
             FOR EACH ROW EXECUTE FUNCTION {record}_count()"
        );
        vec![function, trigger]
    }
}

/// PostgreSQL: the rows a statement inserts or deletes counted once per bucket, by triggers
/// `FOR EACH STATEMENT` over the statement's transition table (`inserted` / `deleted`),
/// instead of one upsert of a counter row per row. Updates stay with the row trigger
/// `{record}_count` (made UPDATE-only here), which moves a changed row between buckets. The
/// counted rows' `amount` (an expression of the row, `{row}` standing for it) is summed.
pub fn postgres_per_statement(
    record: &str,
    table: &str,
    bucket: &str,
    amount: &str,
    columns: &str,
) -> Vec<String> {
    let mut statements = vec![
        format!("DROP TRIGGER IF EXISTS {record}_count ON {table}"),
        format!(
            "CREATE TRIGGER {record}_count AFTER UPDATE OF organization_id, {columns} \
             ON {table} FOR EACH ROW EXECUTE FUNCTION {record}_count()"
        ),
    ];
    statements.extend(postgres_inserted_and_deleted(record, table, bucket, amount));
    statements
}

/// PostgreSQL: the statement triggers of [`postgres_per_statement`] that count a statement's
/// inserted and deleted rows, without the row trigger for updates.
fn postgres_inserted_and_deleted(
    record: &str,
    table: &str,
    bucket: &str,
    amount: &str,
) -> Vec<String> {
    let mut statements = Vec::new();
    for (event, alias, sign) in [("INSERT", "inserted", ""), ("DELETE", "deleted", "-")] {
        let counted_bucket = bucket.replace("{row}", alias);
        let counted_amount = amount.replace("{row}", alias);
        statements.push(format!(
            "CREATE OR REPLACE FUNCTION {record}_count_{alias}() RETURNS trigger \
             LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO record_counts (organization_id, record, bucket, shard, n, amount)
    SELECT organization_id, '{record}', {counted_bucket}, pg_backend_pid(), {sign}COUNT(*),
           {sign}CAST(COALESCE(SUM({counted_amount}), 0) AS BIGINT)
    FROM {alias} GROUP BY 1, 3
    ON CONFLICT (organization_id, record, bucket, shard) DO UPDATE
    SET n = record_counts.n + excluded.n, amount = record_counts.amount + excluded.amount;
    RETURN NULL;
END $$"
        ));
        let transition = if event == "INSERT" { "NEW" } else { "OLD" };
        statements.push(format!(
            "CREATE TRIGGER {record}_count_{alias} AFTER {event} ON {table} \
             REFERENCING {transition} TABLE AS {alias} FOR EACH STATEMENT \
             EXECUTE FUNCTION {record}_count_{alias}()"
        ));
    }
    statements
}

/// Undoes [`postgres_per_statement`]: the row trigger counts every change again.
pub fn postgres_per_row(record: &str, table: &str, columns: &str) -> Vec<String> {
    let mut statements = Vec::new();
    for alias in ["inserted", "deleted"] {
        statements.push(format!(
            "DROP TRIGGER IF EXISTS {record}_count_{alias} ON {table}"
        ));
        statements.push(format!("DROP FUNCTION IF EXISTS {record}_count_{alias}()"));
    }
    statements.push(format!("DROP TRIGGER IF EXISTS {record}_count ON {table}"));
    statements.push(format!(
        "CREATE TRIGGER {record}_count AFTER INSERT OR DELETE OR UPDATE OF organization_id, \
         {columns} ON {table} FOR EACH ROW EXECUTE FUNCTION {record}_count()"
    ));
    statements
}

/// A kept count whose bucket is coarser than the column it is computed from (a time counted
/// by the hour): most updates of the column leave the row in its bucket, so an update is
/// counted only when the bucket changes, tested in the trigger's `WHEN` (no trigger call for
/// the others). Inserts and deletes are counted as [`KeptCount`] counts them on SQLite, and per
/// statement ([`postgres_per_statement`]) on PostgreSQL.
pub struct KeptByBucket {
    pub count: KeptCount,
}

impl KeptByBucket {
    /// Makes the triggers and writes the counts of the rows already there, in the migration's
    /// transaction.
    pub async fn up(&self, manager: &SchemaManager<'_>) -> Result<(), DbErr> {
        let triggers = self.create(manager.get_database_backend());
        self.count.create_and_backfill(manager, triggers).await
    }

    /// Drops the triggers and the counts.
    pub async fn down(&self, manager: &SchemaManager<'_>) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let backend = manager.get_database_backend();
        let KeptCount { record, table, .. } = &self.count;
        let mut statements = Vec::new();
        if backend == DbBackend::Postgres {
            for suffix in ["", "_inserted", "_deleted", "_updated"] {
                statements.push(format!(
                    "DROP TRIGGER IF EXISTS {record}_count{suffix} ON {table}"
                ));
            }
            for suffix in ["_moved", "_inserted", "_deleted", "_updated"] {
                statements.push(format!("DROP FUNCTION IF EXISTS {record}_count{suffix}()"));
            }
            statements.push(format!(
                "DELETE FROM record_counts WHERE record = '{record}'"
            ));
        } else {
            statements = self.count.drop(backend);
        }
        for statement in statements {
            db.execute_unprepared(&statement).await?;
        }
        Ok(())
    }

    /// The update trigger's condition: the row changed organization or bucket.
    fn moved(&self, old: &str, new: &str, distinct: &str) -> String {
        let count = &self.count;
        format!(
            "{old}.organization_id {distinct} {new}.organization_id OR ({}) {distinct} ({})",
            count.bucket_of(old),
            count.bucket_of(new)
        )
    }

    /// PostgreSQL: updates counted once per bucket by a trigger `FOR EACH STATEMENT` over the
    /// statement's old and new rows (`moved_from`, `moved_to`), in place of the row trigger,
    /// which upserted the same counter rows once per moved row. A statement that moves many
    /// rows into one bucket (the applier's activity updates, 200 customers a statement, all
    /// into the current hour) made that counter row a version per row within one transaction,
    /// each upsert walking the versions before it. A statement trigger on updates cannot name
    /// its columns, so it runs after every update of the table and finds the moved rows itself.
    pub fn postgres_moves_per_statement(&self) -> Vec<String> {
        let KeptCount { record, table, .. } = &self.count;
        let moved = self.moved("o", "m", "IS DISTINCT FROM");
        let (from, to) = (self.count.bucket_of("o"), self.count.bucket_of("m"));
        vec![
            format!("DROP TRIGGER IF EXISTS {record}_count ON {table}"),
            format!(
                "CREATE OR REPLACE FUNCTION {record}_count_updated() RETURNS trigger \
                 LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO record_counts (organization_id, record, bucket, shard, n, amount)
    SELECT organization_id, '{record}', bucket, pg_backend_pid(), SUM(n), 0
    FROM (
        SELECT o.organization_id, {from} AS bucket, -1 AS n
        FROM moved_from AS o JOIN moved_to AS m ON m.id = o.id WHERE {moved}
        UNION ALL
        SELECT m.organization_id, {to}, 1
        FROM moved_from AS o JOIN moved_to AS m ON m.id = o.id WHERE {moved}
    ) AS moves
    GROUP BY 1, 3 HAVING SUM(n) <> 0
    ON CONFLICT (organization_id, record, bucket, shard) DO UPDATE
    SET n = record_counts.n + excluded.n;
    RETURN NULL;
END $$"
            ),
            format!(
                "CREATE TRIGGER {record}_count_updated AFTER UPDATE ON {table} \
                 REFERENCING OLD TABLE AS moved_from NEW TABLE AS moved_to \
                 FOR EACH STATEMENT EXECUTE FUNCTION {record}_count_updated()"
            ),
        ]
    }

    /// Undoes [`Self::postgres_moves_per_statement`]: the row trigger counts updates again.
    pub fn postgres_moves_per_row(&self) -> Vec<String> {
        let KeptCount {
            record,
            table,
            columns,
            ..
        } = &self.count;
        vec![
            format!("DROP TRIGGER IF EXISTS {record}_count_updated ON {table}"),
            format!("DROP FUNCTION IF EXISTS {record}_count_updated()"),
            format!(
                "CREATE TRIGGER {record}_count AFTER UPDATE OF organization_id, {columns} \
                 ON {table} FOR EACH ROW WHEN ({}) EXECUTE FUNCTION {record}_count_moved()",
                self.moved("OLD", "NEW", "IS DISTINCT FROM"),
            ),
        ]
    }

    fn create(&self, backend: DbBackend) -> Vec<String> {
        let KeptCount {
            record,
            table,
            bucket,
            columns,
        } = &self.count;
        if backend != DbBackend::Postgres {
            return self
                .count
                .sqlite_triggers(&self.moved("old", "new", "IS NOT"));
        }
        let mut statements = vec![
            format!(
                "CREATE OR REPLACE FUNCTION {record}_count_moved() RETURNS trigger \
                 LANGUAGE plpgsql AS $$
BEGIN
    {}
    {}
    RETURN NULL;
END $$",
                self.count.postgres_change("OLD", "-"),
                self.count.postgres_change("NEW", "")
            ),
            format!(
                "CREATE TRIGGER {record}_count AFTER UPDATE OF organization_id, {columns} \
                 ON {table} FOR EACH ROW WHEN ({}) EXECUTE FUNCTION {record}_count_moved()",
                self.moved("OLD", "NEW", "IS DISTINCT FROM"),
            ),
        ];
        statements.extend(postgres_inserted_and_deleted(record, table, bucket, "0"));
        statements
    }
}
