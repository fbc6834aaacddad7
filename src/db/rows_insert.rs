//! Many rows inserted by one statement each, their values moved in: no query builder between
//! the caller's values and the driver (it would copy them twice more and format its SQL anew
//! for every statement). Writers that insert thousands of rows a second (the ingest applier's
//! events on PostgreSQL, evaluation's runs) use it.

use sea_orm::{ConnectionTrait, DbErr, Statement, Value};

/// Bound parameters per statement at most (SQLite allows 32,766, PostgreSQL 65,535).
const MAX_PARAMETERS: usize = 30_000;

/// The shape of such an insert; rows are bound per call.
pub struct RowsInsert<'a> {
    /// `table (column, ...)`.
    pub into: &'a str,
    /// Values per row.
    pub width: usize,
    /// What follows the rows: `ON CONFLICT ...`, `RETURNING ...`, or nothing.
    pub tail: &'a str,
}

impl RowsInsert<'_> {
    /// Inserts the rows whose values `values` holds one row after the other.
    pub async fn exec<C: ConnectionTrait>(
        &self,
        conn: &C,
        values: Vec<Value>,
    ) -> Result<(), DbErr> {
        for (sql, chunk) in self.statements(conn, values) {
            conn.execute_raw(Statement::from_sql_and_values(
                conn.get_database_backend(),
                sql,
                chunk,
            ))
            .await?;
        }
        Ok(())
    }

    /// Like [`RowsInsert::exec`], with a `tail` that returns one text column per inserted row
    /// (`RETURNING id`): those values.
    pub async fn returning<C: ConnectionTrait>(
        &self,
        conn: &C,
        values: Vec<Value>,
    ) -> Result<Vec<String>, DbErr> {
        let mut returned = Vec::new();
        for (sql, chunk) in self.statements(conn, values) {
            for row in conn
                .query_all_raw(Statement::from_sql_and_values(
                    conn.get_database_backend(),
                    sql,
                    chunk,
                ))
                .await?
            {
                returned.push(row.try_get_by_index::<String>(0)?);
            }
        }
        Ok(returned)
    }

    /// The statements for `values`, each with its share of them; the text of a full statement
    /// is written once.
    fn statements<C: ConnectionTrait>(
        &self,
        conn: &C,
        mut values: Vec<Value>,
    ) -> Vec<(String, Vec<Value>)> {
        let backend = conn.get_database_backend();
        let width = self.width.max(1);
        debug_assert_eq!(values.len() % width, 0, "whole rows of {}", self.into);
        let per_statement = (MAX_PARAMETERS / width).max(1);
        let sql = |rows: usize| {
            let row = format!("({})", vec!["?"; width].join(", "));
            let sql = format!(
                "INSERT INTO {} VALUES {} {}",
                self.into,
                vec![row.as_str(); rows].join(", "),
                self.tail
            );
            crate::db::placeholders(backend, &sql)
        };
        let mut full: Option<String> = None;
        let mut out = Vec::new();
        loop {
            let take = (values.len() / width).min(per_statement);
            if take == 0 {
                break;
            }
            let rest = values.split_off(take * width);
            let chunk = std::mem::replace(&mut values, rest);
            let text = if take == per_statement {
                full.get_or_insert_with(|| sql(take)).clone()
            } else {
                sql(take)
            };
            out.push((text, chunk));
        }
        out
    }
}
