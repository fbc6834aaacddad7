//! SQLite's trigram indexes of names: FTS5 tables that find the customers (`customer_name_search`)
//! and users (`user_name_search`) whose names hold a substring, so a list by name reads those
//! instead of walking every record of the organization.
//!
//! Whoever writes a new name adds it here, in the same transaction as the record. Triggers on
//! `customers` and `users` did this once; a trigger writing an FTS5 table made inserts into
//! those tables fail now and then with "no such table" on a connection that prepared them
//! again after a schema change (the statistics refresh makes one), even inside a
//! `BEGIN IMMEDIATE` transaction. The same rows written by a statement of their own never failed
//! (see docs/decisions.md).
//!
//! The indexes are append-only: a renamed record gets a row for its new name and keeps the old
//! one, and a deleted record's rows stay. Lookups take the matches as candidates and check the
//! name on the record itself, so an old row can never make a wrong answer; only a new name
//! missing here could, which is why every writer of names calls [`index_names`].
//!
//! PostgreSQL serves name substrings with trigram indexes on the tables themselves: nothing
//! to write there.

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Value};

use super::RowsInsert;

/// Which records' names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NamesOf {
    Customers,
    Users,
}

impl NamesOf {
    /// The records' table.
    pub fn records(self) -> &'static str {
        match self {
            NamesOf::Customers => "customers",
            NamesOf::Users => "users",
        }
    }

    /// The index's FTS5 table (columns `name` and [`Self::key`]).
    pub fn index(self) -> &'static str {
        match self {
            NamesOf::Customers => "customer_name_search",
            NamesOf::Users => "user_name_search",
        }
    }

    /// The index's column naming the record.
    pub fn key(self) -> &'static str {
        match self {
            NamesOf::Customers => "customer_id",
            NamesOf::Users => "user_id",
        }
    }
}

/// Names shorter than this are left out: no lookup needle is shorter (a trigram index cannot
/// look one up).
pub const SHORTEST_INDEXED_NAME: usize = 3;

/// Adds `(record id, name)` pairs, new records' names and new names of renamed ones, to the
/// index of `names`. Nothing on PostgreSQL.
pub async fn index_names<C, I, S, T>(conn: &C, names: NamesOf, pairs: I) -> Result<(), DbErr>
where
    C: ConnectionTrait,
    I: IntoIterator<Item = (S, T)>,
    S: Into<String>,
    T: Into<String>,
{
    if conn.get_database_backend() != DbBackend::Sqlite {
        return Ok(());
    }
    let mut values: Vec<Value> = Vec::new();
    for (id, name) in pairs {
        let name: String = name.into();
        if name.chars().count() < SHORTEST_INDEXED_NAME {
            continue;
        }
        values.push(name.into());
        values.push(id.into().into());
    }
    if values.is_empty() {
        return Ok(());
    }
    let into = format!("{} (name, {})", names.index(), names.key());
    RowsInsert {
        into: &into,
        width: 2,
        tail: "",
    }
    .exec(conn, values)
    .await
}
