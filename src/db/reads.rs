//! The reads of one tool call, on a connection the call holds for its length.
//!
//! On a SQLite file, the call's statements run on the calling thread through a rusqlite
//! connection of their own ([`SqliteReads`]), opened read-only on the same file. Why not sqlx's
//! pool: sqlx runs each SQLite connection on a thread of its own and passes every statement and
//! its rows across a channel, so a call making ten statements paid twenty-odd thread wake-ups;
//! with eight callers on two cores the kernel's scheduling was the largest single cost of a
//! call (docs/performance.md, Tools). A read on SQLite is a few microseconds to a few
//! milliseconds of CPU on pages mostly in memory, so running it where the call already runs
//! costs less than handing it to another thread and waiting for the answer.
//!
//! On PostgreSQL the call holds one connection of the service's pool ([`PostgresReads`]) and
//! runs its statements on it. Why not a connection per statement, as sea-orm's pool does: sqlx
//! tests a pooled connection with a round trip when it is taken and again when it is given
//! back, so each statement cost three round trips (with their wake-ups, and TLS records) where
//! one does the work; a call holding its connection pays the return's once.
//!
//! An in-memory SQLite database (which another connection cannot open) reads through the
//! service's pool.
//!
//! Rows come back as sea-orm [`QueryResult`]s, so the tools' sea-orm queries run unchanged.
//! Each value is typed by its column's declared type (the types sea-orm's migrations write:
//! `timestamp_with_timezone_text`, `json_text`, `boolean`, ...) or, for an expression, by what
//! SQLite holds. Integers come back as 64-bit values: entities read here keep their integers in
//! `i64` fields (a test reads every tool's records through it). A row's columns are kept by
//! name, so read them by name: `into_tuple` and `try_get_by_index` do not see them in the
//! order they were selected.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use chrono::{DateTime, NaiveDateTime, SecondsFormat, TimeZone, Utc};
use rusqlite::{
    types::{Value as SqlValue, ValueRef},
    OpenFlags,
};
use sea_orm::{
    sea_query::Value,
    sqlx::{
        pool::PoolConnection, postgres::PgConnectOptions, sqlite::SqliteConnectOptions, Postgres,
    },
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, ExecResult, MockDatabase,
    MockDatabaseTrait, QueryResult, RuntimeErr, Statement,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::write_txn;

/// Read connections open at once per database file: a call holds one for its length, so this
/// bounds the calls reading at once (more wait for one).
const READ_CONNECTIONS: usize = 16;

/// Prepared statements each read connection keeps (the tools' queries vary by filter).
const CACHED_STATEMENTS: usize = 128;

/// How long a call waits for a read connection before it answers that the database is busy.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a tool call's reads go.
pub enum Reads {
    /// A rusqlite connection to the SQLite file, held by this call.
    Sqlite(ReadConnection),
    /// A connection of the PostgreSQL pool, held by this call.
    Postgres(PostgresReads),
    /// The service's pool (PostgreSQL, in-memory SQLite).
    Pool(DatabaseConnection),
}

impl Reads {
    /// Has `observer` told every statement the reads of `db` run from now on: on SQLite
    /// those of the read connections taken after this, elsewhere the pool's (its metric
    /// callback). For tests and diagnostics that look at the statements tools make.
    pub async fn observe(
        db: &mut DatabaseConnection,
        observer: StatementObserver,
    ) -> Result<(), DbErr> {
        match SqliteReads::of(db).await? {
            Some(reads) => *lock(&reads.observer) = Some(observer),
            None => {
                if db.get_database_backend() == DbBackend::Postgres {
                    PostgresReads::observe(db, observer.clone());
                }
                db.set_metric_callback(move |info| observer(info.statement))
            }
        }
        Ok(())
    }

    /// A connection for one call's reads of `db`.
    pub async fn open(db: &DatabaseConnection) -> Result<Self, DbErr> {
        let backend = db.get_database_backend();
        if pool_only(backend) {
            return Ok(Reads::Pool(db.clone()));
        }
        if backend == DbBackend::Postgres {
            return Ok(Reads::Postgres(PostgresReads::acquire(db).await?));
        }
        match SqliteReads::of(db).await? {
            Some(reads) => Ok(Reads::Sqlite(reads.acquire().await?)),
            None => Ok(Reads::Pool(db.clone())),
        }
    }
}

/// `CUSTINTEL_SQLITE_READS=pool` (or `CUSTINTEL_POSTGRES_READS=pool`) sends the tools' reads
/// through the service's pool, a connection per statement, as before a call held its own: to
/// compare the two (`bench tools`). Read once per backend.
fn pool_only(backend: DbBackend) -> bool {
    static SQLITE: OnceLock<bool> = OnceLock::new();
    static POSTGRES: OnceLock<bool> = OnceLock::new();
    let (set, variable) = match backend {
        DbBackend::Postgres => (&POSTGRES, "CUSTINTEL_POSTGRES_READS"),
        _ => (&SQLITE, "CUSTINTEL_SQLITE_READS"),
    };
    *set.get_or_init(|| std::env::var(variable).is_ok_and(|v| v.eq_ignore_ascii_case("pool")))
}

/// A connection of the PostgreSQL pool held by one call; back to the pool when dropped.
pub struct PostgresReads {
    conn: tokio::sync::Mutex<PoolConnection<Postgres>>,
    /// The pool's observer when the connection was taken.
    observer: Option<StatementObserver>,
}

/// The observers of PostgreSQL pools, each found by its pool's own options (as [`Opened`]).
type PostgresObservers = Mutex<Vec<(Arc<PgConnectOptions>, StatementObserver)>>;

fn postgres_observers() -> &'static PostgresObservers {
    static OBSERVERS: OnceLock<PostgresObservers> = OnceLock::new();
    OBSERVERS.get_or_init(Default::default)
}

impl PostgresReads {
    async fn acquire(db: &DatabaseConnection) -> Result<Self, DbErr> {
        let pool = db.get_postgres_connection_pool();
        let conn = pool.acquire().await.map_err(write_txn::acquire_err)?;
        let options = pool.connect_options();
        let observer = lock(postgres_observers())
            .iter()
            .find(|(o, _)| Arc::ptr_eq(o, &options))
            .map(|(_, observer)| observer.clone());
        Ok(Self {
            conn: tokio::sync::Mutex::new(conn),
            observer,
        })
    }

    fn observe(db: &DatabaseConnection, observer: StatementObserver) {
        let options = db.get_postgres_connection_pool().connect_options();
        let mut observers = lock(postgres_observers());
        // The observers of pools since dropped (a test's database) go.
        observers.retain(|(o, _)| Arc::strong_count(o) > 1 && !Arc::ptr_eq(o, &options));
        observers.push((options, observer));
    }

    fn seen(&self, stmt: &Statement) {
        if let Some(observe) = &self.observer {
            observe(stmt);
        }
    }
}

/// The read connections of one SQLite file, opened as calls need them and kept for the next.
pub struct SqliteReads {
    file: PathBuf,
    idle: Mutex<Vec<rusqlite::Connection>>,
    permits: Arc<Semaphore>,
    observer: Mutex<Option<StatementObserver>>,
}

/// A pool's read connections, found by the pool's own options (the same `Arc` for every clone
/// of one pool, and kept here so that no later pool is mistaken for it); `None` for an
/// in-memory database.
struct Opened {
    pool: Arc<SqliteConnectOptions>,
    reads: Option<Arc<SqliteReads>>,
}

/// Told each statement a call's reads run (as sea-orm's metric callback is for the pool's).
pub type StatementObserver = Arc<dyn Fn(&Statement) + Send + Sync>;

impl SqliteReads {
    /// The read connections of `db`'s pool, made on its first use; `None` on PostgreSQL and
    /// for an in-memory database. Every request asks: a lock and a pointer comparison per
    /// pool open in the process.
    async fn of(db: &DatabaseConnection) -> Result<Option<Arc<SqliteReads>>, DbErr> {
        static OPENED: OnceLock<Mutex<Vec<Opened>>> = OnceLock::new();
        if db.get_database_backend() != DbBackend::Sqlite {
            return Ok(None);
        }
        let pool = db.get_sqlite_connection_pool().connect_options();
        let opened = OPENED.get_or_init(Default::default);
        let find = |opened: &[Opened]| {
            opened
                .iter()
                .find(|o| Arc::ptr_eq(&o.pool, &pool))
                .map(|o| o.reads.clone())
        };
        if let Some(known) = find(&lock(opened)) {
            return Ok(known);
        }
        let reads = super::sqlite_file(db).await?.map(|file| {
            Arc::new(SqliteReads {
                file,
                idle: Mutex::new(Vec::new()),
                permits: Arc::new(Semaphore::new(READ_CONNECTIONS)),
                observer: Mutex::new(None),
            })
        });
        let mut opened = lock(opened);
        if let Some(known) = find(&opened) {
            return Ok(known);
        }
        // The read connections of pools since dropped (a test's database) are closed.
        opened.retain(|o| Arc::strong_count(&o.pool) > 1);
        opened.push(Opened {
            pool,
            reads: reads.clone(),
        });
        Ok(reads)
    }

    async fn acquire(self: Arc<Self>) -> Result<ReadConnection, DbErr> {
        let permit = tokio::time::timeout(ACQUIRE_TIMEOUT, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout))?
            .map_err(|_| DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::ConnectionClosed))?;
        let idle = lock(&self.idle).pop();
        let conn = match idle {
            Some(conn) => conn,
            None => open_read_connection(&self.file).map_err(|e| {
                DbErr::Conn(RuntimeErr::Internal(format!(
                    "cannot open {} for reading: {e}",
                    self.file.display()
                )))
            })?,
        };
        let observer = lock(&self.observer).clone();
        Ok(ReadConnection {
            conn: Mutex::new(Some(conn)),
            observer,
            home: self,
            _permit: permit,
        })
    }
}

/// The settings of the service's own SQLite connections that matter to a reader (`src/db.rs`),
/// and `query_only`: this connection never writes.
fn open_read_connection(file: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        file,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(super::SQLITE_BUSY_TIMEOUT)?;
    // Plans that do not depend on bound values. Without this, SQLite (3.51) plans a statement
    // with a bound `LIMIT ?` for the value bound, and so prepares it again each time a new
    // value is bound: every statement of every call was re-parsed and re-planned (a tenth of a
    // call's CPU), the statement cache notwithstanding. The tools' plans use no bound value
    // (their patterns start with `%`, the partial indexes' conditions are literals).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    conn.execute_batch(&format!(
        "PRAGMA query_only = 1; PRAGMA mmap_size = {}; PRAGMA cache_size = -16384; \
         PRAGMA temp_store = memory;",
        super::SQLITE_MMAP_BYTES
    ))?;
    conn.set_prepared_statement_cache_capacity(CACHED_STATEMENTS);
    Ok(conn)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One read connection held by a call; back to its file's idle connections when dropped.
pub struct ReadConnection {
    conn: Mutex<Option<rusqlite::Connection>>,
    /// The file's observer when the connection was taken.
    observer: Option<StatementObserver>,
    home: Arc<SqliteReads>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for ReadConnection {
    fn drop(&mut self) {
        if let Some(conn) = lock(&self.conn).take() {
            lock(&self.home.idle).push(conn);
        }
    }
}

impl ReadConnection {
    /// The rows of `stmt`, each typed by its column's declared type.
    fn rows(&self, stmt: Statement, at_most: Option<usize>) -> Result<Vec<QueryResult>, DbErr> {
        if let Some(observe) = &self.observer {
            observe(&stmt);
        }
        let guard = lock(&self.conn);
        let conn = guard
            .as_ref()
            .ok_or_else(|| DbErr::Custom("the read connection was returned".into()))?;
        let params = stmt
            .values
            .as_ref()
            .map(|v| v.0.iter().map(to_sql).collect::<Result<Vec<_>, _>>())
            .transpose()?
            .unwrap_or_default();
        let started = std::time::Instant::now();
        let mut prepared = conn.prepare_cached(&stmt.sql).map_err(query_err)?;
        let columns: Vec<(String, Declared)> = prepared
            .columns()
            .iter()
            .map(|c| (c.name().to_string(), Declared::of(c.decl_type())))
            .collect();
        let mut rows = prepared
            .query(rusqlite::params_from_iter(params))
            .map_err(query_err)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(query_err)? {
            let mut values = BTreeMap::new();
            for (i, (name, declared)) in columns.iter().enumerate() {
                let value = row.get_ref(i).map_err(query_err)?;
                values.insert(name.clone(), declared.value(value)?);
            }
            out.push(values);
            if at_most.is_some_and(|n| out.len() >= n) {
                break;
            }
        }
        drop(rows);
        // For `RUST_LOG=custintel::db::reads=debug`: a statement run for the first time was
        // just prepared (the cache did not hold it); one re-prepared was planned again. Its
        // virtual machine steps and full-scan steps measure its work whatever the machine's
        // other load (the counters are reset for the next run).
        if tracing::enabled!(tracing::Level::DEBUG) {
            use rusqlite::StatementStatus as S;
            tracing::debug!(
                runs = prepared.get_status(S::Run),
                reprepared = prepared.get_status(S::RePrepare),
                vm_steps = prepared.reset_status(S::VmStep),
                fullscan_steps = prepared.reset_status(S::FullscanStep),
                rows = out.len(),
                elapsed_us = started.elapsed().as_micros() as u64,
                sql = %stmt.sql,
                "read"
            );
        }
        // sea-orm makes rows of named values into its `QueryResult` only through its mock
        // database (the proxy driver's way does not build with this sea-query): handed the
        // rows, it answers them to one statement.
        let mut answer = MockDatabase::new(DbBackend::Sqlite).append_query_results([out]);
        answer.query(0, Statement::from_string(DbBackend::Sqlite, String::new()))
    }
}

/// What a result column holds, from its declared type (`None` for an expression).
#[derive(Debug, Clone, Copy)]
enum Declared {
    Timestamp,
    Json,
    Boolean,
    Text,
    /// An integer, a real, a blob or an expression: by what SQLite holds.
    Stored,
}

impl Declared {
    fn of(decl: Option<&str>) -> Self {
        let Some(decl) = decl else {
            return Declared::Stored;
        };
        let decl = decl.to_ascii_lowercase();
        match decl.as_str() {
            "timestamp_with_timezone_text" | "timestamp_text" | "datetime_text" => {
                Declared::Timestamp
            }
            "json_text" | "jsonb_text" => Declared::Json,
            "boolean" | "bool" => Declared::Boolean,
            "text" | "enum_text" | "uuid_text" => Declared::Text,
            d if d.starts_with("varchar") || d.starts_with("char") => Declared::Text,
            _ => Declared::Stored,
        }
    }

    /// The value as sea-orm's row expects it for a field of this column's type; a null is
    /// the typed null, which an `Option` field reads as `None`.
    fn value(self, v: ValueRef<'_>) -> Result<Value, DbErr> {
        Ok(match (self, v) {
            (Declared::Timestamp, ValueRef::Null) => Value::ChronoDateTimeUtc(None),
            (Declared::Json, ValueRef::Null) => Value::Json(None),
            (Declared::Boolean, ValueRef::Null) => Value::Bool(None),
            (Declared::Text, ValueRef::Null) => Value::String(None),
            (Declared::Stored, ValueRef::Null) => Value::String(None),
            (Declared::Timestamp, ValueRef::Text(t)) => {
                Value::ChronoDateTimeUtc(Some(parse_time(utf8(t)?)?))
            }
            (Declared::Timestamp, ValueRef::Integer(secs)) => {
                Value::ChronoDateTimeUtc(Some(Utc.timestamp_opt(secs, 0).single().ok_or_else(
                    || type_err(format!("{secs} is not a time in seconds since 1970")),
                )?))
            }
            (Declared::Json, ValueRef::Text(t)) => Value::Json(Some(
                serde_json::from_slice(t).map_err(|e| type_err(format!("stored JSON: {e}")))?,
            )),
            (Declared::Boolean, ValueRef::Integer(i)) => Value::Bool(Some(i != 0)),
            (_, ValueRef::Integer(i)) => Value::BigInt(Some(i)),
            (_, ValueRef::Real(f)) => Value::Double(Some(f)),
            (_, ValueRef::Text(t)) => Value::String(Some(utf8(t)?.to_string())),
            (_, ValueRef::Blob(b)) => Value::Bytes(Some(b.to_vec())),
        })
    }
}

fn utf8(bytes: &[u8]) -> Result<&str, DbErr> {
    std::str::from_utf8(bytes).map_err(|e| type_err(format!("stored text: {e}")))
}

/// A stored time in the forms sqlx reads back (RFC 3339 as sqlx writes it, and SQLite's own
/// `YYYY-MM-DD HH:MM:SS[.fff]` forms).
fn parse_time(text: &str) -> Result<DateTime<Utc>, DbErr> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    for format in ["%F %T%.f%:z", "%F %T%.fZ", "%FT%T%.f%:z", "%F %R%:z"] {
        if let Ok(t) = DateTime::parse_from_str(text, format) {
            return Ok(t.with_timezone(&Utc));
        }
    }
    for format in ["%F %T%.f", "%FT%T%.f", "%F %R", "%FT%R"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Ok(Utc.from_utc_datetime(&t));
        }
    }
    Err(type_err(format!("`{text}` is not a stored time")))
}

/// A statement's value as sqlx would bind it on SQLite, so that comparisons with stored values
/// hold the same (times as RFC 3339 text, JSON as text, booleans as 0 and 1).
fn to_sql(v: &Value) -> Result<SqlValue, DbErr> {
    fn or_null<T>(v: &Option<T>, f: impl FnOnce(&T) -> SqlValue) -> SqlValue {
        v.as_ref().map_or(SqlValue::Null, f)
    }
    Ok(match v {
        Value::Bool(b) => or_null(b, |b| SqlValue::Integer(i64::from(*b))),
        Value::TinyInt(i) => or_null(i, |i| SqlValue::Integer(i64::from(*i))),
        Value::SmallInt(i) => or_null(i, |i| SqlValue::Integer(i64::from(*i))),
        Value::Int(i) => or_null(i, |i| SqlValue::Integer(i64::from(*i))),
        Value::BigInt(i) => or_null(i, |i| SqlValue::Integer(*i)),
        Value::TinyUnsigned(i) => or_null(i, |i| SqlValue::Integer(i64::from(*i))),
        Value::SmallUnsigned(i) => or_null(i, |i| SqlValue::Integer(i64::from(*i))),
        Value::Unsigned(i) => or_null(i, |i| SqlValue::Integer(i64::from(*i))),
        Value::BigUnsigned(Some(i)) => SqlValue::Integer(
            i64::try_from(*i).map_err(|_| type_err(format!("{i} is beyond SQLite's integers")))?,
        ),
        Value::BigUnsigned(None) => SqlValue::Null,
        Value::Float(f) => or_null(f, |f| SqlValue::Real(f64::from(*f))),
        Value::Double(f) => or_null(f, |f| SqlValue::Real(*f)),
        Value::String(s) => or_null(s, |s| SqlValue::Text(s.to_string())),
        Value::Char(c) => or_null(c, |c| SqlValue::Text(c.to_string())),
        Value::Bytes(b) => or_null(b, |b| SqlValue::Blob(b.to_vec())),
        Value::Json(j) => or_null(j, |j| SqlValue::Text(j.to_string())),
        Value::ChronoDateTimeUtc(t) => or_null(t, |t| SqlValue::Text(rfc3339(t))),
        Value::ChronoDateTimeWithTimeZone(t) => or_null(t, |t| SqlValue::Text(rfc3339(t))),
        Value::ChronoDateTimeLocal(t) => or_null(t, |t| SqlValue::Text(rfc3339(t))),
        Value::ChronoDateTime(t) => {
            or_null(t, |t| SqlValue::Text(t.format("%F %T%.f").to_string()))
        }
        Value::ChronoDate(d) => or_null(d, |d| SqlValue::Text(d.format("%F").to_string())),
        Value::ChronoTime(t) => or_null(t, |t| SqlValue::Text(t.format("%T%.f").to_string())),
        Value::Uuid(u) => or_null(u, |u| SqlValue::Blob(u.as_bytes().to_vec())),
        other => {
            return Err(type_err(format!(
                "a value of this kind is not read on SQLite: {other:?}"
            )))
        }
    })
}

fn rfc3339<Tz: TimeZone>(t: &DateTime<Tz>) -> String
where
    Tz::Offset: std::fmt::Display,
{
    t.to_rfc3339_opts(SecondsFormat::AutoSi, false)
}

fn query_err(e: rusqlite::Error) -> DbErr {
    DbErr::Query(RuntimeErr::Internal(format!("SQLite: {e}")))
}

fn type_err(message: String) -> DbErr {
    DbErr::Type(message)
}

#[async_trait::async_trait]
impl ConnectionTrait for Reads {
    fn get_database_backend(&self) -> DbBackend {
        match self {
            Reads::Sqlite(_) => DbBackend::Sqlite,
            Reads::Postgres(_) => DbBackend::Postgres,
            Reads::Pool(db) => db.get_database_backend(),
        }
    }

    /// Reads only on SQLite: a tool that writes writes through the service's pool. On
    /// PostgreSQL a call's own bookkeeping (its count toward the plan's allowance) writes here.
    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        match self {
            Reads::Sqlite(_) => Err(DbErr::Custom(format!(
                "a write on a tool call's read connection: {}",
                stmt.sql
            ))),
            Reads::Postgres(held) => {
                held.seen(&stmt);
                write_txn::execute_on::<Postgres>(&mut **held.conn.lock().await, stmt).await
            }
            Reads::Pool(db) => db.execute_raw(stmt).await,
        }
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        match self {
            Reads::Sqlite(_) => Err(DbErr::Custom(format!(
                "a write on a tool call's read connection: {sql}"
            ))),
            Reads::Postgres(held) => {
                write_txn::execute_unprepared_on::<Postgres>(&mut **held.conn.lock().await, sql)
                    .await
            }
            Reads::Pool(db) => db.execute_unprepared(sql).await,
        }
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        match self {
            Reads::Sqlite(conn) => Ok(conn.rows(stmt, Some(1))?.into_iter().next()),
            Reads::Postgres(held) => {
                held.seen(&stmt);
                write_txn::query_one_on::<Postgres>(&mut **held.conn.lock().await, stmt).await
            }
            Reads::Pool(db) => db.query_one_raw(stmt).await,
        }
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        match self {
            Reads::Sqlite(conn) => conn.rows(stmt, None),
            Reads::Postgres(held) => {
                held.seen(&stmt);
                write_txn::query_all_on::<Postgres>(&mut **held.conn.lock().await, stmt).await
            }
            Reads::Pool(db) => db.query_all_raw(stmt).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_times_read_in_every_form_sqlx_reads() {
        let want = Utc.with_ymd_and_hms(2026, 11, 27, 14, 5, 6).unwrap();
        for text in [
            "2026-11-27T14:05:06+00:00",
            "2026-11-27T14:05:06Z",
            "2026-11-27 14:05:06",
            "2026-11-27 14:05:06.000",
            "2026-11-27T16:05:06+02:00",
        ] {
            assert_eq!(parse_time(text).unwrap(), want, "{text}");
        }
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn values_bind_as_sqlx_binds_them() {
        let t = Utc.with_ymd_and_hms(2026, 11, 27, 14, 5, 6).unwrap();
        assert_eq!(
            to_sql(&Value::ChronoDateTimeUtc(Some(t))).unwrap(),
            SqlValue::Text("2026-11-27T14:05:06+00:00".into())
        );
        assert_eq!(
            to_sql(&Value::Bool(Some(true))).unwrap(),
            SqlValue::Integer(1)
        );
        assert_eq!(to_sql(&Value::String(None)).unwrap(), SqlValue::Null);
    }
}
