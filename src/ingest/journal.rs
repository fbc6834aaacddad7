//! The ingest journal: accepted batches as the acknowledging commit leaves them, one row per
//! batch in a table with no index but its sequence, until the applier moves their events into
//! `events` and applies their effects.
//!
//! One row per batch keeps the acknowledging commit small whatever the batch holds; the
//! `events` analytics view reads pending events out of these rows, so an acknowledged event is
//! visible at once.
//!
//! Where it is kept ([`Journal`]): on a SQLite file, in a file of its own beside the database
//! (`<file>.ingest`). SQLite has one write lock per file, and the applier holds the main file's
//! for each of its transactions; with the journal in the same file every acknowledgement waited
//! for the apply in progress (the closed-loop peak was a third of the acknowledging path's,
//! with the CPUs 30% idle). The applier then cannot delete what it applied in its own commit:
//! it moves `ingest_applied.seq` there instead, rows at or below that mark are applied ones, and
//! it deletes them after its commit. On PostgreSQL (and an in-memory SQLite database) the
//! journal is a table of the database, and the applier deletes in its transaction.

use std::{collections::HashMap, path::PathBuf, sync::OnceLock};

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, Value as DbValue};

use super::validate::Batch;

/// Where the journal's rows are.
#[derive(Clone, Debug)]
pub enum Journal {
    /// A table of the database itself (PostgreSQL, in-memory SQLite).
    InDatabase(DatabaseConnection),
    /// A SQLite file of its own beside the database's file.
    OwnFile {
        main: DatabaseConnection,
        file: DatabaseConnection,
    },
}

/// The journal file of a SQLite database file.
pub fn own_file_path(database_file: &std::path::Path) -> PathBuf {
    crate::db::beside(database_file, "ingest")
}

/// Journal files opened by this process, by path: the writer, the applier and the metrics of
/// one database share one pool.
fn opened() -> &'static tokio::sync::Mutex<HashMap<PathBuf, DatabaseConnection>> {
    static OPENED: OnceLock<tokio::sync::Mutex<HashMap<PathBuf, DatabaseConnection>>> =
        OnceLock::new();
    OPENED.get_or_init(Default::default)
}

/// The journal file's one table. `AUTOINCREMENT` keeps sequence numbers rising after the
/// applied rows are deleted: the applied mark in the main file must never meet a reused number.
const CREATE_OWN_FILE_TABLE: &str = "CREATE TABLE IF NOT EXISTS ingest_journal (\
     seq INTEGER PRIMARY KEY AUTOINCREMENT, organization_id TEXT NOT NULL, \
     received_at TEXT NOT NULL, event_count INTEGER NOT NULL, batch TEXT NOT NULL)";

impl Journal {
    /// The journal of `main`, opening (and creating) its file on first use in this process.
    pub async fn of(main: &DatabaseConnection) -> Result<Self, DbErr> {
        Self::open(main, true).await
    }

    /// As [`Journal::of`], with connections to the journal file of its own instead of the
    /// process's shared ones: the background applier's, whose connections run at the
    /// background priority (`crate::background`) and must not serve the acknowledging writer.
    pub async fn of_unshared(main: &DatabaseConnection) -> Result<Self, DbErr> {
        Self::open(main, false).await
    }

    async fn open(main: &DatabaseConnection, shared: bool) -> Result<Self, DbErr> {
        let Some(path) = crate::db::sqlite_file(main).await? else {
            return Ok(Self::InDatabase(main.clone()));
        };
        let path = own_file_path(&path);
        let file = if shared {
            let mut opened = opened().lock().await;
            match opened.get(&path) {
                Some(file) => file.clone(),
                None => {
                    let file = open_own_file(main, &path).await?;
                    opened.insert(path, file.clone());
                    file
                }
            }
        } else {
            open_own_file(main, &path).await?
        };
        Ok(Self::OwnFile {
            main: main.clone(),
            file,
        })
    }

    /// The connection the journal's rows are written and read through.
    pub fn conn(&self) -> &DatabaseConnection {
        match self {
            Self::InDatabase(db) => db,
            Self::OwnFile { file, .. } => file,
        }
    }

    /// Whether appending to the journal takes the same write lock as the database's other
    /// writers: a table of a SQLite database (in memory). A file of its own, or PostgreSQL,
    /// leaves the CPUs as what the acknowledging writer and the background share.
    pub fn shares_write_lock(&self) -> bool {
        matches!(self, Self::InDatabase(db) if db.get_database_backend() == DbBackend::Sqlite)
    }

    /// The journal's own file, when it has one.
    pub fn own_file(&self) -> Option<&DatabaseConnection> {
        match self {
            Self::InDatabase(_) => None,
            Self::OwnFile { file, .. } => Some(file),
        }
    }

    /// Rows after `seq`, applied or not, in order, at most `limit` (rebuilding the `messageId`
    /// window counts a batch twice at worst).
    pub async fn read_after(&self, seq: i64, limit: u64) -> Result<Vec<JournalEntry>, DbErr> {
        read_after(self.conn(), seq, limit).await
    }

    /// The journaled batch of `organization_id` that holds the event `event_id`, with the
    /// event's position in it: an acknowledged event whose effects are not applied yet (or,
    /// on a file of its own, were applied a moment ago and not yet deleted).
    pub async fn find_event(
        &self,
        organization_id: &str,
        event_id: &str,
    ) -> Result<Option<(Batch, usize)>, DbErr> {
        let conn = self.conn();
        let backend = conn.get_database_backend();
        // The journal has no index but its sequence: this reads the organization's pending
        // batches, which the applier keeps few.
        let sql = match backend {
            DbBackend::Postgres => {
                "SELECT batch FROM ingest_journal AS j WHERE j.organization_id = ? \
                 AND j.batch::jsonb -> 'events' @> jsonb_build_array(jsonb_build_object('id', ?::text)) \
                 ORDER BY j.seq LIMIT 1"
            }
            _ => {
                "SELECT batch FROM ingest_journal AS j WHERE j.organization_id = ? \
                 AND EXISTS (SELECT 1 FROM json_each(j.batch, '$.events') AS e \
                 WHERE json_extract(e.value, '$.id') = ?) ORDER BY j.seq LIMIT 1"
            }
        };
        let row = conn
            .query_one_raw(Statement::from_sql_and_values(
                backend,
                crate::db::placeholders(backend, sql),
                [organization_id.into(), event_id.into()],
            ))
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let text: String = row.try_get_by_index(0)?;
        let batch: Batch = serde_json::from_str(&text)
            .map_err(|e| DbErr::Custom(format!("a journaled batch cannot be read: {e}")))?;
        let at = batch.events.iter().position(|e| e.id == event_id);
        Ok(at.map(|at| (batch, at)))
    }

    /// What is waiting for the applier, for everyone or one organization.
    pub async fn backlog(&self, organization_id: Option<&str>) -> Result<Backlog, DbErr> {
        match self {
            Self::InDatabase(db) => count_after(db, 0, organization_id).await,
            Self::OwnFile { main, file } => {
                count_after(file, applied_through(main).await?, organization_id).await
            }
        }
    }
}

/// Opens (and prepares) the journal file at `path` beside `main`.
async fn open_own_file(
    main: &DatabaseConnection,
    path: &std::path::Path,
) -> Result<DatabaseConnection, DbErr> {
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let file = crate::db::connect(&url, None)
        .await
        .map_err(|e| DbErr::Custom(format!("cannot open the ingest journal {url}: {e}")))?;
    prepare_own_file(main, &file).await?;
    Ok(file)
}

/// Creates the journal file's table, keeps its sequence above the applied mark (a journal file
/// lost or deleted must not hand out numbers the mark already covers), and moves in batches an
/// earlier version left in the main file's `ingest_journal` (copied, then deleted: a stop
/// between the two copies them again, which `INSERT OR IGNORE` by `seq` absorbs).
async fn prepare_own_file(
    main: &DatabaseConnection,
    file: &DatabaseConnection,
) -> Result<(), DbErr> {
    file.execute_unprepared(CREATE_OWN_FILE_TABLE).await?;
    let mark = applied_through(main).await?;
    file.execute_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "INSERT INTO sqlite_sequence (name, seq) SELECT 'ingest_journal', ? \
         WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'ingest_journal')",
        [mark.into()],
    ))
    .await?;
    file.execute_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "UPDATE sqlite_sequence SET seq = ? WHERE name = 'ingest_journal' AND seq < ?",
        [mark.into(), mark.into()],
    ))
    .await?;
    loop {
        let rows = main
            .query_all_raw(Statement::from_string(
                DbBackend::Sqlite,
                "SELECT seq, organization_id, received_at, event_count, batch \
                 FROM ingest_journal ORDER BY seq LIMIT 500",
            ))
            .await?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        let last: i64 = last.try_get_by_index(0)?;
        let txn = crate::db::begin_write(file).await?;
        for row in &rows {
            let values: Vec<DbValue> = vec![
                row.try_get_by_index::<i64>(0)?.into(),
                row.try_get_by_index::<String>(1)?.into(),
                row.try_get_by_index::<DateTime<Utc>>(2)?.into(),
                row.try_get_by_index::<i32>(3)?.into(),
                row.try_get_by_index::<String>(4)?.into(),
            ];
            txn.execute_raw(Statement::from_sql_and_values(
                DbBackend::Sqlite,
                "INSERT OR IGNORE INTO ingest_journal \
                 (seq, organization_id, received_at, event_count, batch) VALUES (?, ?, ?, ?, ?)",
                values,
            ))
            .await?;
        }
        txn.commit().await?;
        main.execute_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            "DELETE FROM ingest_journal WHERE seq <= ?",
            [last.into()],
        ))
        .await?;
    }
}

/// The applied mark: every journal row at or below it is in `events` (own-file journals).
pub async fn applied_through<C: ConnectionTrait>(main: &C) -> Result<i64, DbErr> {
    let row = main
        .query_one_raw(Statement::from_string(
            main.get_database_backend(),
            "SELECT seq FROM ingest_applied WHERE id = 1",
        ))
        .await?;
    Ok(match row {
        Some(r) => r.try_get_by_index(0)?,
        None => 0,
    })
}

/// Moves the applied mark from `from` to `to` in the caller's transaction; false when it is no
/// longer at `from` (another process applied meanwhile: nothing may be applied twice).
pub async fn advance_applied<C: ConnectionTrait>(
    main: &C,
    from: i64,
    to: i64,
) -> Result<bool, DbErr> {
    let backend = main.get_database_backend();
    let done = main
        .execute_raw(Statement::from_sql_and_values(
            backend,
            crate::db::placeholders(
                backend,
                "UPDATE ingest_applied SET seq = ? WHERE id = 1 AND seq = ?",
            ),
            [to.into(), from.into()],
        ))
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Deletes the rows at or below the applied mark `seq` (own-file journals, after the commit
/// that moved the mark).
pub async fn remove_through<C: ConnectionTrait>(file: &C, seq: i64) -> Result<(), DbErr> {
    file.execute_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "DELETE FROM ingest_journal WHERE seq <= ?",
        [seq.into()],
    ))
    .await?;
    Ok(())
}

/// Batches per multi-row INSERT (4 parameters each).
const ROWS_PER_INSERT: usize = 500;

/// A journal row: its place in the order of acceptance and the batch.
#[derive(Debug, Clone)]
pub struct JournalEntry {
    pub seq: i64,
    pub batch: Batch,
}

/// A batch's JSON text as the journal stores it.
pub fn encode(batch: &Batch) -> Result<String, DbErr> {
    serde_json::to_string(batch).map_err(|e| DbErr::Custom(format!("cannot encode a batch: {e}")))
}

/// Appends batches (in the caller's transaction). Empty batches are not written.
pub async fn append<C: ConnectionTrait>(conn: &C, batches: &[&Batch]) -> Result<(), DbErr> {
    let mut encoded = Vec::with_capacity(batches.len());
    for batch in batches {
        encoded.push((*batch, encode(batch)?));
    }
    let rows: Vec<(&Batch, &str)> = encoded.iter().map(|(b, t)| (*b, t.as_str())).collect();
    append_encoded(conn, &rows).await
}

/// Whether [`append_encoded`] writes these batches in one statement: outside a transaction,
/// that statement is then a transaction of its own.
pub fn fits_one_statement(rows: &[(&Batch, &str)]) -> bool {
    rows.iter().filter(|(b, _)| !b.events.is_empty()).count() <= ROWS_PER_INSERT
}

/// Appends batches with their [`encode`]d text (in the caller's transaction, or, when they
/// [`fits_one_statement`], atomically by themselves). Empty batches are not written.
pub async fn append_encoded<C: ConnectionTrait>(
    conn: &C,
    rows: &[(&Batch, &str)],
) -> Result<(), DbErr> {
    let backend = conn.get_database_backend();
    let rows: Vec<&(&Batch, &str)> = rows.iter().filter(|(b, _)| !b.events.is_empty()).collect();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let mut sql = String::from(
            "INSERT INTO ingest_journal (organization_id, received_at, event_count, batch) VALUES ",
        );
        let mut values: Vec<DbValue> = Vec::with_capacity(chunk.len() * 4);
        for (i, (batch, text)) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push(',');
            }
            sql.push_str("(?, ?, ?, ?)");
            values.push(batch.organization_id.clone().into());
            values.push(batch.received_at.into());
            values.push(i32::try_from(batch.events.len()).unwrap_or(i32::MAX).into());
            values.push((*text).into());
        }
        conn.execute_raw(Statement::from_sql_and_values(
            backend,
            crate::db::placeholders(backend, &sql),
            values,
        ))
        .await?;
    }
    Ok(())
}

/// The oldest rows of a journal kept in the database, in the order they were accepted, at
/// most `limit` of them (read in the applier's transaction).
pub async fn oldest<C: ConnectionTrait>(conn: &C, limit: u64) -> Result<Vec<JournalEntry>, DbErr> {
    read_after(conn, 0, limit).await
}

/// Whether a journal kept in the database holds any row (read without its batches).
pub async fn has_rows<C: ConnectionTrait>(conn: &C) -> Result<bool, DbErr> {
    let row = conn
        .query_one_raw(Statement::from_string(
            conn.get_database_backend(),
            // In the key's order: the rows applied and deleted at the table's head are skipped
            // in the index, where a plain scan would read their pages until a vacuum.
            "SELECT 1 FROM ingest_journal ORDER BY seq LIMIT 1",
        ))
        .await?;
    Ok(row.is_some())
}

/// PostgreSQL: the oldest rows of one organization, at most `limit` (read in the applier's
/// transaction, under its lease of the organization).
pub async fn oldest_of<C: ConnectionTrait>(
    conn: &C,
    organization_id: &str,
    limit: u64,
) -> Result<Vec<JournalEntry>, DbErr> {
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT seq, batch FROM ingest_journal WHERE organization_id = $1 ORDER BY seq LIMIT $2",
            [
                organization_id.into(),
                i64::try_from(limit).unwrap_or(i64::MAX).into(),
            ],
        ))
        .await?;
    entries_of(rows)
}

/// Rows after `after`, oldest first, at most `limit` (on an own-file journal, `after` is the
/// applied mark).
pub async fn read_after<C: ConnectionTrait>(
    conn: &C,
    after: i64,
    limit: u64,
) -> Result<Vec<JournalEntry>, DbErr> {
    let backend = conn.get_database_backend();
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            backend,
            crate::db::placeholders(
                backend,
                "SELECT seq, batch FROM ingest_journal WHERE seq > ? ORDER BY seq LIMIT ?",
            ),
            [
                after.into(),
                i64::try_from(limit).unwrap_or(i64::MAX).into(),
            ],
        ))
        .await?;
    entries_of(rows)
}

fn entries_of(rows: Vec<sea_orm::QueryResult>) -> Result<Vec<JournalEntry>, DbErr> {
    let mut entries = Vec::with_capacity(rows.len());
    for row in rows {
        let seq: i64 = row.try_get_by_index(0)?;
        let text: String = row.try_get_by_index(1)?;
        let batch: Batch = serde_json::from_str(&text)
            .map_err(|e| DbErr::Custom(format!("journal entry {seq} cannot be read: {e}")))?;
        entries.push(JournalEntry { seq, batch });
    }
    Ok(entries)
}

/// Removes applied batches (in the transaction that applied them).
pub async fn remove<C: ConnectionTrait>(conn: &C, seqs: &[i64]) -> Result<(), DbErr> {
    let backend = conn.get_database_backend();
    for chunk in seqs.chunks(ROWS_PER_INSERT) {
        let marks = vec!["?"; chunk.len()].join(", ");
        let values: Vec<DbValue> = chunk.iter().map(|s| (*s).into()).collect();
        conn.execute_raw(Statement::from_sql_and_values(
            backend,
            crate::db::placeholders(
                backend,
                &format!("DELETE FROM ingest_journal WHERE seq IN ({marks})"),
            ),
            values,
        ))
        .await?;
    }
    Ok(())
}

/// What is waiting for the applier: batches, events, and when the oldest was received.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Backlog {
    pub batches: i64,
    pub events: i64,
    pub oldest_received_at: Option<DateTime<Utc>>,
}

/// The backlog of the journal of `main`, for everyone or one organization.
pub async fn backlog(
    main: &DatabaseConnection,
    organization_id: Option<&str>,
) -> Result<Backlog, DbErr> {
    Journal::of(main).await?.backlog(organization_id).await
}

async fn count_after<C: ConnectionTrait>(
    conn: &C,
    after: i64,
    organization_id: Option<&str>,
) -> Result<Backlog, DbErr> {
    let backend = conn.get_database_backend();
    let (filter, values): (&str, Vec<DbValue>) = match organization_id {
        Some(org) => (
            " WHERE seq > ? AND organization_id = ?",
            vec![after.into(), org.into()],
        ),
        None => (" WHERE seq > ?", vec![after.into()]),
    };
    let row = conn
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            crate::db::placeholders(
                backend,
                &format!(
                    "SELECT count(*), CAST(coalesce(sum(event_count), 0) AS BIGINT), \
                     min(received_at) FROM ingest_journal{filter}"
                ),
            ),
            values,
        ))
        .await?;
    let Some(row) = row else {
        return Ok(Backlog::default());
    };
    Ok(Backlog {
        batches: row.try_get_by_index(0)?,
        events: row.try_get_by_index(1)?,
        oldest_received_at: row.try_get_by_index(2)?,
    })
}
