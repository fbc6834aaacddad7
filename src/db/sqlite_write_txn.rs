//! A SQLite write transaction on one pooled connection that can also hand out the connection's
//! raw handle, for the ingest applier's bulk insert of event rows.
//!
//! Why not sea-orm's transaction: every value sea-orm executes is copied three times (sea-orm
//! clones the statement's values, sqlx wraps each in an `Arc`, SQLite copies the text again),
//! and the applier's events insert spent about a fifth of its CPU there
//! (docs/performance.md, Ingest, ninth session). sea-orm's transaction keeps its connection
//! private, so the insert could not reach the raw handle inside it. Here the same connection
//! runs sea-orm's statements (with their values moved, not cloned) and, in between, rusqlite
//! statements on its handle, all in one transaction.

use std::sync::Arc;

use sea_orm::{
    sea_query::Values,
    sqlx::{self, Sqlite},
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, ExecResult, QueryResult, RuntimeErr,
    Statement,
};
use sea_query_sqlx::SqlxValues;
use tokio::sync::Mutex;

/// A write transaction begun with `BEGIN IMMEDIATE` (the write lock taken at once, waiting up to
/// the busy timeout, as [`super::begin_write`] does). Dropped without [`Self::commit`], it rolls
/// back before its connection is used again.
pub struct SqliteWriteTxn {
    txn: Mutex<sqlx::Transaction<'static, Sqlite>>,
}

impl SqliteWriteTxn {
    /// Begins on a connection of `db`'s pool (which must be SQLite's).
    pub async fn begin(db: &DatabaseConnection) -> Result<Self, DbErr> {
        let txn = db
            .get_sqlite_connection_pool()
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| match e {
                sqlx::Error::PoolTimedOut => {
                    DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout)
                }
                sqlx::Error::PoolClosed => {
                    DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::ConnectionClosed)
                }
                other => exec_err(other),
            })?;
        Ok(Self {
            txn: Mutex::new(txn),
        })
    }

    pub async fn commit(self) -> Result<(), DbErr> {
        self.txn.into_inner().commit().await.map_err(exec_err)
    }

    pub async fn rollback(self) -> Result<(), DbErr> {
        self.txn.into_inner().rollback().await.map_err(exec_err)
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
fn sqlx_query(stmt: Statement) -> sqlx::query::Query<'static, Sqlite, SqlxValues> {
    let Statement { sql, values, .. } = stmt;
    sqlx::query_with(
        sqlx::AssertSqlSafe(sql),
        SqlxValues(values.unwrap_or(Values(Vec::new()))),
    )
}

#[async_trait::async_trait]
impl ConnectionTrait for SqliteWriteTxn {
    fn get_database_backend(&self) -> DbBackend {
        DbBackend::Sqlite
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        let mut txn = self.txn.lock().await;
        sqlx_query(stmt)
            .execute(&mut **txn)
            .await
            .map(Into::into)
            .map_err(exec_err)
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        use sqlx::Executor;
        let mut txn = self.txn.lock().await;
        txn.execute(sqlx::AssertSqlSafe(sql.to_owned()))
            .await
            .map(Into::into)
            .map_err(exec_err)
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        let mut txn = self.txn.lock().await;
        sqlx_query(stmt)
            .fetch_optional(&mut **txn)
            .await
            .map(|row| row.map(Into::into))
            .map_err(query_err)
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        let mut txn = self.txn.lock().await;
        sqlx_query(stmt)
            .fetch_all(&mut **txn)
            .await
            .map(|rows| rows.into_iter().map(Into::into).collect())
            .map_err(query_err)
    }
}
