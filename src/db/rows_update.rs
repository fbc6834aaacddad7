//! Many rows updated by one statement each: `UPDATE t SET ... FROM (VALUES (...), ...) AS v
//! WHERE t.key = v.column1`. A batch of runs or deliveries would otherwise send one UPDATE per
//! row while it holds SQLite's one write lock, and every other writer waits for all of them.
//! `VALUES` names its columns `column1`, `column2` ... on SQLite and PostgreSQL alike.

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, Value};

/// Bound parameters per statement at most (SQLite allows 32,766, PostgreSQL 65,535).
const MAX_PARAMETERS: usize = 30_000;

/// The shape of such an update; rows are bound per call of [`RowsUpdate::exec`].
pub struct RowsUpdate<'a> {
    pub table: &'a str,
    /// The PostgreSQL type of each value column, the key (`column1`) first. Parameters are cast
    /// to them, so a `NULL` or a JSON value lands in its column with the column's type.
    pub types: &'a [&'a str],
    /// The `SET` list, naming the values `v.column2` ... (and the row's own columns qualified
    /// by the table's name, for values kept with `COALESCE`).
    pub set: &'a str,
    /// Conditions beside the key's, joined with `AND` (empty for none).
    pub and_where: &'a str,
}

impl RowsUpdate<'_> {
    /// Updates the rows whose key is the first value of each of `rows` (each holding one value
    /// per type); returns how many rows changed.
    pub async fn exec<C: ConnectionTrait>(
        &self,
        conn: &C,
        rows: Vec<Vec<Value>>,
    ) -> Result<u64, DbErr> {
        let backend = conn.get_database_backend();
        let width = self.types.len();
        let per_statement = (MAX_PARAMETERS / width.max(1)).max(1);
        let mut changed = 0;
        let mut rows = rows.into_iter().peekable();
        while rows.peek().is_some() {
            let mut tuples = Vec::new();
            let mut values = Vec::new();
            for row in rows.by_ref().take(per_statement) {
                debug_assert_eq!(row.len(), width, "one value per column of {}", self.table);
                let placeholders: Vec<String> = self
                    .types
                    .iter()
                    .enumerate()
                    .map(|(i, ty)| match backend {
                        DbBackend::Postgres => format!("${}::{ty}", values.len() + i + 1),
                        _ => "?".to_string(),
                    })
                    .collect();
                tuples.push(format!("({})", placeholders.join(", ")));
                values.extend(row);
            }
            let extra = if self.and_where.is_empty() {
                String::new()
            } else {
                format!(" AND ({})", self.and_where)
            };
            let sql = format!(
                "UPDATE {table} SET {set} FROM (VALUES {tuples}) AS v WHERE {table}.id = v.column1{extra}",
                table = self.table,
                set = self.set,
                tuples = tuples.join(", "),
            );
            changed += conn
                .execute_raw(Statement::from_sql_and_values(backend, sql, values))
                .await?
                .rows_affected();
        }
        Ok(changed)
    }
}
