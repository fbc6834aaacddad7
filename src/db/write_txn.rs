//! A write transaction on one pooled connection that runs sea-orm's statements and, in between,
//! the backend's own bulk path: the ingest applier's insert of event rows through SQLite's raw
//! handle ([`SqliteWriteTxn::with_raw`]) or PostgreSQL's `COPY` ([`PgWriteTxn::copy_in`]).
//!
//! Why not sea-orm's transaction: it keeps its connection private, so neither bulk path could
//! reach it inside the transaction; and every value sea-orm executes is copied three times
//! (sea-orm clones the statement's values, sqlx wraps each in an `Arc`, SQLite copies the text
//! again): the SQLite applier's events insert spent about a fifth of its CPU there
//! (docs/performance.md, Ingest, ninth session). Here statements run with their values moved.

use std::sync::Arc;

use sea_orm::{
    sea_query::Values,
    sqlx::{self, Database, Postgres, Sqlite},
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, ExecResult, QueryResult, RuntimeErr,
    Statement,
};
use sea_query_sqlx::SqlxValues;
use tokio::sync::Mutex;

/// A write transaction on a connection of one of sea-orm's sqlx pools. Dropped without
/// [`Self::commit`], it rolls back before its connection is used again.
pub struct WriteTxn<DB: Database> {
    txn: Mutex<sqlx::Transaction<'static, DB>>,
}

/// SQLite's: begun with `BEGIN IMMEDIATE` (the write lock taken at once, waiting up to the busy
/// timeout, as [`super::begin_write`] does).
pub type SqliteWriteTxn = WriteTxn<Sqlite>;
/// PostgreSQL's: a plain `BEGIN` (read committed), as sea-orm's.
pub type PgWriteTxn = WriteTxn<Postgres>;

impl<DB: Database> WriteTxn<DB> {
    pub async fn commit(self) -> Result<(), DbErr> {
        self.txn.into_inner().commit().await.map_err(exec_err)
    }

    pub async fn rollback(self) -> Result<(), DbErr> {
        self.txn.into_inner().rollback().await.map_err(exec_err)
    }
}

fn begun<DB: Database>(
    txn: Result<sqlx::Transaction<'static, DB>, sqlx::Error>,
) -> Result<WriteTxn<DB>, DbErr> {
    let txn = txn.map_err(acquire_err)?;
    Ok(WriteTxn {
        txn: Mutex::new(txn),
    })
}

impl WriteTxn<Sqlite> {
    /// Begins on a connection of `db`'s pool (which must be SQLite's).
    pub async fn begin(db: &DatabaseConnection) -> Result<Self, DbErr> {
        begun(
            db.get_sqlite_connection_pool()
                .begin_with("BEGIN IMMEDIATE")
                .await,
        )
    }

    /// Runs `work` on the transaction's connection through rusqlite, on the calling thread
    /// (sqlx's worker thread waits meanwhile). Meant for short bulk writes: the thread is busy
    /// for as long as `work` runs.
    pub async fn with_raw<T>(
        &self,
        work: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> Result<T, DbErr> {
        let mut txn = self.txn.lock().await;
        let mut handle = txn.lock_handle().await.map_err(exec_err)?;
        // SAFETY: the handle is sqlx's open connection, locked for this thread until `handle`
        // drops. The rusqlite connection made from it does not own it: dropping it neither
        // closes the handle nor touches its hooks, and it is dropped (with any statement
        // `work` prepared) before `handle`.
        let raw = unsafe { rusqlite::Connection::from_handle(handle.as_raw_handle().as_ptr()) }
            .map_err(raw_err)?;
        let result = work(&raw).map_err(raw_err);
        drop(raw);
        drop(handle);
        result
    }
}

impl WriteTxn<Postgres> {
    /// Begins on a connection of `db`'s pool (which must be PostgreSQL's).
    pub async fn begin(db: &DatabaseConnection) -> Result<Self, DbErr> {
        begun(db.get_postgres_connection_pool().begin().await)
    }

    /// Runs `copy` (a `COPY ... FROM STDIN` statement) with `data` in the format it names;
    /// returns the rows copied. A row PostgreSQL rejects fails the whole copy, and the
    /// transaction with it.
    pub async fn copy_in(&self, copy: &str, data: &[u8]) -> Result<u64, DbErr> {
        let mut txn = self.txn.lock().await;
        let mut sink = txn.copy_in_raw(copy).await.map_err(exec_err)?;
        if let Err(e) = sink.send(data).await {
            // The connection leaves copy mode before the transaction rolls back.
            let _ = sink.abort(e.to_string()).await;
            return Err(exec_err(e));
        }
        sink.finish().await.map_err(exec_err)
    }
}

/// A connection not had from the pool: timed out or closed as sea-orm says it, else why.
pub(super) fn acquire_err(e: sqlx::Error) -> DbErr {
    match e {
        sqlx::Error::PoolTimedOut => DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout),
        sqlx::Error::PoolClosed => {
            DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::ConnectionClosed)
        }
        other => exec_err(other),
    }
}

fn exec_err(e: sqlx::Error) -> DbErr {
    DbErr::Exec(RuntimeErr::SqlxError(Arc::new(e)))
}

fn query_err(e: sqlx::Error) -> DbErr {
    DbErr::Query(RuntimeErr::SqlxError(Arc::new(e)))
}

fn raw_err(e: rusqlite::Error) -> DbErr {
    DbErr::Exec(RuntimeErr::Internal(format!("SQLite: {e}")))
}

/// The statement as sqlx runs it, its values moved in.
fn sqlx_query<DB: Database>(stmt: Statement) -> sqlx::query::Query<'static, DB, SqlxValues>
where
    SqlxValues: for<'q> sqlx::IntoArguments<DB>,
{
    let Statement { sql, values, .. } = stmt;
    sqlx::query_with(
        sqlx::AssertSqlSafe(sql),
        SqlxValues(values.unwrap_or(Values(Vec::new()))),
    )
}

/// The backends a [`WriteTxn`] runs on, by their name in sea-orm (what running a statement and
/// reading its result needs is bound where the connection trait is implemented).
pub trait WriteBackend: Database {
    const BACKEND: DbBackend;
}

impl WriteBackend for Sqlite {
    const BACKEND: DbBackend = DbBackend::Sqlite;
}

impl WriteBackend for Postgres {
    const BACKEND: DbBackend = DbBackend::Postgres;
}

#[async_trait::async_trait]
impl<DB: WriteBackend> ConnectionTrait for WriteTxn<DB>
where
    SqlxValues: for<'q> sqlx::IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::QueryResult: Into<ExecResult>,
    DB::Row: Into<QueryResult>,
{
    fn get_database_backend(&self) -> DbBackend {
        DB::BACKEND
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        execute_on::<DB>(&mut **self.txn.lock().await, stmt).await
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        execute_unprepared_on::<DB>(&mut **self.txn.lock().await, sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        query_one_on::<DB>(&mut **self.txn.lock().await, stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        query_all_on::<DB>(&mut **self.txn.lock().await, stmt).await
    }
}

// sea-orm's statements on one sqlx connection, as a [`ConnectionTrait`] runs them: a
// transaction's here, a tool call's held connection in `reads`.

pub(super) async fn execute_on<DB: Database>(
    conn: &mut DB::Connection,
    stmt: Statement,
) -> Result<ExecResult, DbErr>
where
    SqlxValues: for<'q> sqlx::IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::QueryResult: Into<ExecResult>,
{
    sqlx_query::<DB>(stmt)
        .execute(conn)
        .await
        .map(Into::into)
        .map_err(exec_err)
}

pub(super) async fn execute_unprepared_on<DB: Database>(
    conn: &mut DB::Connection,
    sql: &str,
) -> Result<ExecResult, DbErr>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::QueryResult: Into<ExecResult>,
{
    use sqlx::Executor;
    conn.execute(sqlx::AssertSqlSafe(sql.to_owned()))
        .await
        .map(Into::into)
        .map_err(exec_err)
}

pub(super) async fn query_one_on<DB: Database>(
    conn: &mut DB::Connection,
    stmt: Statement,
) -> Result<Option<QueryResult>, DbErr>
where
    SqlxValues: for<'q> sqlx::IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Row: Into<QueryResult>,
{
    sqlx_query::<DB>(stmt)
        .fetch_optional(conn)
        .await
        .map(|row| row.map(Into::into))
        .map_err(query_err)
}

pub(super) async fn query_all_on<DB: Database>(
    conn: &mut DB::Connection,
    stmt: Statement,
) -> Result<Vec<QueryResult>, DbErr>
where
    SqlxValues: for<'q> sqlx::IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Row: Into<QueryResult>,
{
    sqlx_query::<DB>(stmt)
        .fetch_all(conn)
        .await
        .map(|rows| rows.into_iter().map(Into::into).collect())
        .map_err(query_err)
}
