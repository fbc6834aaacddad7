//! The applier's transaction: the events of a group, their effects and the journal's applied
//! mark are written in one. On SQLite the events go in through the connection's raw handle
//! ([`crate::db::SqliteWriteTxn`]); everything else, and PostgreSQL entirely, through sea-orm.

use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, ExecResult,
    QueryResult, Statement,
};

use super::store::{self, EventRow};
use crate::db::SqliteWriteTxn;

pub enum ApplyTxn {
    Sqlite(SqliteWriteTxn),
    Orm(DatabaseTransaction),
}

impl ApplyTxn {
    /// Begins a write transaction (on SQLite with the write lock taken at once).
    pub async fn begin(db: &DatabaseConnection) -> Result<Self, DbErr> {
        Ok(match db.get_database_backend() {
            DbBackend::Sqlite => Self::Sqlite(SqliteWriteTxn::begin(db).await?),
            _ => Self::Orm(crate::db::begin_write(db).await?),
        })
    }

    pub async fn commit(self) -> Result<(), DbErr> {
        match self {
            Self::Sqlite(t) => t.commit().await,
            Self::Orm(t) => t.commit().await,
        }
    }

    pub async fn rollback(self) -> Result<(), DbErr> {
        match self {
            Self::Sqlite(t) => t.rollback().await,
            Self::Orm(t) => t.rollback().await,
        }
    }

    /// Inserts event rows, their values moved in.
    pub async fn insert_events(&self, rows: Vec<EventRow>) -> Result<(), DbErr> {
        match self {
            Self::Sqlite(t) => t.with_raw(|raw| store::insert_events_raw(raw, rows)).await,
            Self::Orm(t) => store::insert_events(t, rows).await,
        }
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for ApplyTxn {
    fn get_database_backend(&self) -> DbBackend {
        match self {
            Self::Sqlite(t) => t.get_database_backend(),
            Self::Orm(t) => t.get_database_backend(),
        }
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        match self {
            Self::Sqlite(t) => t.execute_raw(stmt).await,
            Self::Orm(t) => t.execute_raw(stmt).await,
        }
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        match self {
            Self::Sqlite(t) => t.execute_unprepared(sql).await,
            Self::Orm(t) => t.execute_unprepared(sql).await,
        }
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        match self {
            Self::Sqlite(t) => t.query_one_raw(stmt).await,
            Self::Orm(t) => t.query_one_raw(stmt).await,
        }
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        match self {
            Self::Sqlite(t) => t.query_all_raw(stmt).await,
            Self::Orm(t) => t.query_all_raw(stmt).await,
        }
    }
}
