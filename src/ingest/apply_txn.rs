//! The applier's transaction: the events of a group, their effects and the journal's applied
//! mark are written in one. The events go in through each database's bulk path (SQLite's raw
//! handle, PostgreSQL's `COPY`, see [`crate::db::WriteTxn`]), everything else through sea-orm's
//! statements on the same connection.

use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, ExecResult, QueryResult, Statement,
};

use super::store::{self, EventRow};
use crate::db::{PgWriteTxn, SqliteWriteTxn};

pub enum ApplyTxn {
    Sqlite(SqliteWriteTxn),
    Postgres(PgWriteTxn),
}

impl ApplyTxn {
    /// Begins a write transaction (on SQLite with the write lock taken at once).
    pub async fn begin(db: &DatabaseConnection) -> Result<Self, DbErr> {
        Ok(match db.get_database_backend() {
            DbBackend::Sqlite => Self::Sqlite(SqliteWriteTxn::begin(db).await?),
            DbBackend::Postgres => Self::Postgres(PgWriteTxn::begin(db).await?),
            other => {
                return Err(DbErr::BackendNotSupported {
                    db: other.as_str(),
                    ctx: "the ingest applier",
                })
            }
        })
    }

    pub async fn commit(self) -> Result<(), DbErr> {
        match self {
            Self::Sqlite(t) => t.commit().await,
            Self::Postgres(t) => t.commit().await,
        }
    }

    pub async fn rollback(self) -> Result<(), DbErr> {
        match self {
            Self::Sqlite(t) => t.rollback().await,
            Self::Postgres(t) => t.rollback().await,
        }
    }

    /// Inserts event rows, their values moved in.
    pub async fn insert_events(&self, rows: Vec<EventRow>) -> Result<(), DbErr> {
        match self {
            Self::Sqlite(t) => t.with_raw(|raw| store::insert_events_raw(raw, rows)).await,
            Self::Postgres(t) => store::copy_events(t, rows).await,
        }
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for ApplyTxn {
    fn get_database_backend(&self) -> DbBackend {
        match self {
            Self::Sqlite(t) => t.get_database_backend(),
            Self::Postgres(t) => t.get_database_backend(),
        }
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        match self {
            Self::Sqlite(t) => t.execute_raw(stmt).await,
            Self::Postgres(t) => t.execute_raw(stmt).await,
        }
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        match self {
            Self::Sqlite(t) => t.execute_unprepared(sql).await,
            Self::Postgres(t) => t.execute_unprepared(sql).await,
        }
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        match self {
            Self::Sqlite(t) => t.query_one_raw(stmt).await,
            Self::Postgres(t) => t.query_one_raw(stmt).await,
        }
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        match self {
            Self::Sqlite(t) => t.query_all_raw(stmt).await,
            Self::Postgres(t) => t.query_all_raw(stmt).await,
        }
    }
}
