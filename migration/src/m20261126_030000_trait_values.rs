//! An index of customers' and users' trait values, so a filter on a rare trait value (a
//! segment a thousandth of the book is in) reads its few matches instead of checking every
//! customer's traits row by row in activity order.
//!
//! `trait_values` holds one row per string or boolean trait of up to 200 characters:
//! `(organization_id, record, trait_key, trait_value, record_id)`, the value as `s:<text>` or
//! `b:true` / `b:false` (one unambiguous form both databases write alike; numbers, arrays,
//! objects and long texts are left to the row-by-row check). Triggers keep it in the same
//! transaction as every insert, delete and change of traits; a change that leaves the traits
//! as they were does nothing. Lookups only narrow the candidates: the tools still check each
//! candidate's traits, so the index can never make a wrong answer, only a faster one.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

const RECORDS: [&str; 2] = ["customers", "users"];

const SQLITE_TABLE: &str = "CREATE TABLE trait_values (
    organization_id TEXT NOT NULL,
    record TEXT NOT NULL,
    trait_key TEXT NOT NULL,
    trait_value TEXT NOT NULL,
    record_id TEXT NOT NULL,
    PRIMARY KEY (organization_id, record, trait_key, trait_value, record_id)
) WITHOUT ROWID";

const POSTGRES_TABLE: &str = "CREATE TABLE trait_values (
    organization_id VARCHAR NOT NULL,
    record VARCHAR NOT NULL,
    trait_key VARCHAR NOT NULL,
    trait_value VARCHAR NOT NULL,
    record_id VARCHAR NOT NULL,
    PRIMARY KEY (organization_id, record, trait_key, trait_value, record_id)
)";

/// SQLite: the trait pairs of `traits` (a column of `row`) as `json_each` rows `j`.
fn sqlite_each(row: &str) -> String {
    format!(
        "json_each(CASE WHEN json_valid({row}.traits) AND json_type({row}.traits) = 'object' \
         THEN {row}.traits ELSE '{{}}' END) AS j"
    )
}

/// SQLite: the indexed form of a `json_each` row `j`'s value, and which rows are indexed.
const SQLITE_VALUE: &str = "CASE j.type WHEN 'text' THEN 's:' || j.value \
     WHEN 'true' THEN 'b:true' ELSE 'b:false' END";
const SQLITE_INDEXED: &str = "j.type IN ('text', 'true', 'false') AND length(j.value) <= 200";

/// SQLite: the indexed `(key, value)` pairs of a trigger's row (`new` or `old`).
fn sqlite_pairs(row: &str) -> String {
    format!(
        "SELECT j.key AS trait_key, {SQLITE_VALUE} AS trait_value FROM {} WHERE {SQLITE_INDEXED}",
        sqlite_each(row)
    )
}

fn sqlite_statements(table: &str) -> Vec<String> {
    let insert = |row: &str| {
        format!(
            "INSERT OR IGNORE INTO trait_values \
             SELECT {row}.organization_id, '{table}', p.trait_key, p.trait_value, {row}.id \
             FROM ({}) AS p;",
            sqlite_pairs(row)
        )
    };
    let delete = |row: &str| {
        format!(
            "DELETE FROM trait_values WHERE organization_id = {row}.organization_id \
             AND record = '{table}' AND (trait_key, trait_value, record_id) IN \
             (SELECT p.trait_key, p.trait_value, {row}.id FROM ({}) AS p);",
            sqlite_pairs(row)
        )
    };
    vec![
        format!(
            "INSERT OR IGNORE INTO trait_values \
             SELECT t.organization_id, '{table}', j.key, {SQLITE_VALUE}, t.id \
             FROM {table} AS t, {} WHERE {SQLITE_INDEXED}",
            sqlite_each("t")
        ),
        format!(
            "CREATE TRIGGER {table}_traits_insert AFTER INSERT ON {table} BEGIN {} END",
            insert("new")
        ),
        format!(
            "CREATE TRIGGER {table}_traits_delete AFTER DELETE ON {table} BEGIN {} END",
            delete("old")
        ),
        format!(
            "CREATE TRIGGER {table}_traits_update AFTER UPDATE OF organization_id, traits \
             ON {table} WHEN old.traits IS NOT new.traits \
             OR old.organization_id IS NOT new.organization_id BEGIN {} {} END",
            delete("old"),
            insert("new")
        ),
    ]
}

/// PostgreSQL: the indexed `(key, value)` pairs of a jsonb object `traits`.
pub(crate) fn postgres_pairs(traits: &str) -> String {
    format!(
        "SELECT j.key AS trait_key, CASE jsonb_typeof(j.value) \
         WHEN 'string' THEN 's:' || (j.value #>> '{{}}') ELSE 'b:' || j.value::text END \
         AS trait_value \
         FROM jsonb_each(CASE WHEN jsonb_typeof({traits}) = 'object' THEN {traits} \
         ELSE '{{}}'::jsonb END) AS j \
         WHERE jsonb_typeof(j.value) IN ('string', 'boolean') \
         AND length(j.value #>> '{{}}') <= 200"
    )
}

fn postgres_statements(table: &str) -> Vec<String> {
    vec![
        format!(
            "INSERT INTO trait_values \
             SELECT t.organization_id, '{table}', p.trait_key, p.trait_value, t.id \
             FROM {table} AS t, LATERAL ({}) AS p ON CONFLICT DO NOTHING",
            postgres_pairs("t.traits")
        ),
        format!(
            "CREATE FUNCTION {table}_traits() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.organization_id IS NOT DISTINCT FROM NEW.organization_id
       AND OLD.traits IS NOT DISTINCT FROM NEW.traits THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        DELETE FROM trait_values AS v USING ({old}) AS p
            WHERE v.organization_id = OLD.organization_id AND v.record = '{table}'
            AND v.trait_key = p.trait_key AND v.trait_value = p.trait_value
            AND v.record_id = OLD.id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO trait_values
            SELECT NEW.organization_id, '{table}', p.trait_key, p.trait_value, NEW.id
            FROM ({new}) AS p
            ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$",
            old = postgres_pairs("OLD.traits"),
            new = postgres_pairs("NEW.traits"),
        ),
        format!(
            "CREATE TRIGGER {table}_traits AFTER INSERT OR DELETE OR UPDATE OF organization_id, \
             traits ON {table} FOR EACH ROW EXECUTE FUNCTION {table}_traits()"
        ),
    ]
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let postgres = manager.get_database_backend() == DbBackend::Postgres;
        db.execute_unprepared(if postgres {
            POSTGRES_TABLE
        } else {
            SQLITE_TABLE
        })
        .await?;
        for table in RECORDS {
            let statements = if postgres {
                postgres_statements(table)
            } else {
                sqlite_statements(table)
            };
            for statement in statements {
                db.execute_unprepared(&statement).await?;
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let postgres = manager.get_database_backend() == DbBackend::Postgres;
        for table in RECORDS {
            if postgres {
                db.execute_unprepared(&format!("DROP TRIGGER IF EXISTS {table}_traits ON {table}"))
                    .await?;
                db.execute_unprepared(&format!("DROP FUNCTION IF EXISTS {table}_traits()"))
                    .await?;
            } else {
                for suffix in ["insert", "delete", "update"] {
                    db.execute_unprepared(&format!(
                        "DROP TRIGGER IF EXISTS {table}_traits_{suffix}"
                    ))
                    .await?;
                }
            }
        }
        db.execute_unprepared("DROP TABLE IF EXISTS trait_values")
            .await?;
        Ok(())
    }
}
