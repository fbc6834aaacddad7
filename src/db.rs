//! Database connection: SQLite by default (WAL), PostgreSQL by `DATABASE_URL`.

pub mod allowance_grants;
pub mod customer_event_hours;
pub mod name_search;
pub mod name_trigrams;
pub mod postgres_sockets;
mod reads;
mod rows_insert;
mod rows_update;
pub mod statistics;
mod write_txn;

use std::time::Duration;

use migration::{Migrator, MigratorTrait};
use sea_orm::{
    sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous},
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbBackend,
    DbErr, SqliteTransactionMode, Statement, TransactionOptions, TransactionTrait,
};

pub use reads::Reads;
pub use rows_insert::RowsInsert;
pub use rows_update::RowsUpdate;
pub use write_txn::{PgWriteTxn, SqliteWriteTxn, WriteTxn};

pub const DEFAULT_DATABASE_URL: &str = "sqlite://custintel.db?mode=rwc";

/// How much of a SQLite file connections map into memory (`PRAGMA mmap_size`, 64 GiB: the
/// whole file of a book of millions of customers): reads come from the OS page cache without a
/// copy or a system call. It matters most because in WAL mode every write (a tool call's
/// allowance, the ingest applier) makes each other connection discard its own page cache at
/// its next read; pages outside the map are then read back one `pread` at a time. Mapped pages
/// count toward the process's RSS but are the page cache's, not the process's own memory. The
/// bundled SQLite is built with a cap this large (`.cargo/config.toml`).
pub const SQLITE_MMAP_BYTES: &str = "68719476736";

/// Page size of the SQLite files this creates (SQLite's default is 4 KiB). Each commit writes
/// every page it dirtied to the WAL and a checkpoint copies it again: an apply of 5,000 events
/// dirties a leaf page of the timeline indexes per user and account it names, whatever the page
/// size, so larger pages mean fewer pages, fewer splits and fewer WAL frames per row. Measured
/// gains: small for the events table (within a noisy machine's spread), clearer for journal
/// appends (docs/performance.md, Ingest, fifth session).
pub const SQLITE_PAGE_BYTES: u32 = 8192;

/// How long a PostgreSQL request waits for a pooled connection, opening one included, before
/// it fails as unavailable (503, retryable). While the server cannot be reached, opening a
/// connection is refused at once and retried until this time has passed (sqlx's pool does
/// that), so it is also how long a request takes to answer during an outage: within the 2 s
/// every route promises, with room for the request's own work around it. A request that waits
/// for a pool busy with other requests gets the same time (at 20 connections, a wait this long
/// means the instance is overloaded, and a 503 with `Retry-After` sends the client to another
/// one or back later).
pub const POSTGRES_ACQUIRE_TIMEOUT: Duration = Duration::from_millis(1500);

/// How long a SQLite request waits for a pooled connection. A SQLite file cannot go away the
/// way a server can; its connections are busy only behind long writers (an import chunk, the
/// applier under a peak), and a request waiting for one should wait rather than fail.
const SQLITE_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a pooled PostgreSQL connection is idle before it is tested when taken.
const POSTGRES_TEST_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// How long [`connect`] keeps trying to reach PostgreSQL at start: a server and its database
/// started together (containers) need not be started in order.
const POSTGRES_START_WAIT: Duration = Duration::from_secs(10);

/// Connects; `schema` selects a PostgreSQL schema (tests use one per test).
pub async fn connect(url: &str, schema: Option<&str>) -> anyhow::Result<DatabaseConnection> {
    let mut opts = ConnectOptions::new(url.to_string());
    // sea-orm's sqlx pool reads its connect timeout as the acquire timeout too: one value.
    let acquire_timeout = if url.starts_with("sqlite:") {
        SQLITE_ACQUIRE_TIMEOUT
    } else {
        POSTGRES_ACQUIRE_TIMEOUT
    };
    opts.connect_timeout(acquire_timeout)
        .acquire_timeout(acquire_timeout)
        .sqlx_logging(false);
    if url.starts_with("sqlite:") {
        // One SQLite writer at a time; a modest pool keeps readers concurrent under WAL.
        opts.max_connections(8)
            .min_connections(1)
            .map_sqlx_sqlite_opts(|o| {
                // WAL keeps readers concurrent with the writer; NORMAL sync in WAL mode loses
                // nothing on a process crash (only on power loss), and every pooled connection
                // gets these settings, not just the first.
                // The page size applies to a database this creates (an existing file keeps its
                // own): see SQLITE_PAGE_BYTES.
                o.page_size(SQLITE_PAGE_BYTES)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(SQLITE_BUSY_TIMEOUT)
                    .foreign_keys(true)
                    // Reads come from a shared memory map of the file instead of a read() per
                    // page, and each connection keeps up to 16 MiB of pages (default 2 MiB).
                    .pragma("mmap_size", SQLITE_MMAP_BYTES)
                    .pragma("cache_size", "-16384")
                    .pragma("temp_store", "memory")
                    // Checkpoints run on their own connection (`spawn_wal_checkpointer`), off
                    // the writers; a committing writer checkpoints only past this backstop.
                    .pragma("wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)
            })
            .map_sqlx_sqlite_pool_opts(with_busy_handler);
    } else {
        opts.max_connections(20);
        // sqlx tests a connection with a round trip each time one is taken from the pool (and
        // again when it is given back). A connection in use within the last second is not
        // tested again: under load that round trip was one of every three a statement made.
        // One idle longer is tested, so one the server or the network dropped meanwhile (a
        // restart, an outage) is replaced before a request reaches it.
        opts.test_before_acquire_if_idle_for(POSTGRES_TEST_IF_IDLE_FOR);
        // The session's settings travel with the connection's start-up message (no statement
        // of their own): the server's side of a dead peer's limits, and the schema.
        let search_path = schema.map(|s| format!("\"{}\"", s.replace('"', "")));
        opts.map_sqlx_postgres_opts(move |pg| {
            let pg = pg.options(postgres_sockets::server_settings());
            match &search_path {
                Some(search_path) => pg.options([("search_path", search_path)]),
                None => pg,
            }
        });
        // Each new connection of the pool sets the socket options sqlx does not (Nagle's
        // algorithm off, a dead peer noticed in seconds: see `postgres_sockets`). sqlx keeps
        // one hook per pool, and this one replaces sea-orm's, which would only repeat the
        // schema's search path.
        let port = postgres_port(url);
        opts.map_sqlx_postgres_pool_opts(move |pool| {
            pool.after_connect(move |_, _| {
                Box::pin(async move {
                    if let Some(port) = port {
                        postgres_sockets::configure_towards(port);
                    }
                    Ok(())
                })
            })
        });
    }
    if let Some(schema) = schema {
        opts.set_schema_search_path(schema.to_string());
    }
    let started = std::time::Instant::now();
    let sqlite = url.starts_with("sqlite:");
    loop {
        match Database::connect(opts.clone()).await {
            Ok(db) => return Ok(db),
            Err(e) if !sqlite && unreachable(&e) && started.elapsed() < POSTGRES_START_WAIT => {
                tracing::warn!(error = %e, "the database cannot be reached yet; retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The TCP port of a PostgreSQL URL (`None` for a Unix socket's).
pub fn postgres_port(url: &str) -> Option<u16> {
    let options: sea_orm::sqlx::postgres::PgConnectOptions = url.parse().ok()?;
    (!options.get_host().starts_with('/')).then(|| options.get_port())
}

/// Connections of the background pool on SQLite (the applier, the processor's batches in
/// flight, schedule ticks).
const BACKGROUND_CONNECTIONS: u32 = 6;

/// A second pool over the same SQLite file, with the same settings, opened lazily. Background
/// work uses one ([`crate::background`]): each SQLite connection has a worker thread of its
/// own, started by the thread that opens it, so connections opened on the background runtime
/// run at its priority while the request handlers' pool keeps the normal one. Only for a
/// database in a file (a second pool of an in-memory one would be another database).
pub fn second_sqlite_pool(db: &DatabaseConnection) -> DatabaseConnection {
    let options = db.get_sqlite_connection_pool().connect_options();
    let pool = with_busy_handler(
        sea_orm::sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(BACKGROUND_CONNECTIONS)
            .acquire_timeout(Duration::from_secs(10)),
    )
    .connect_lazy_with((*options).clone());
    sea_orm::SqlxSqliteConnector::from_sqlx_sqlite_pool(pool)
}

/// Rows of `E` with these ids that belong to `organization_id`. The ids alone go to the
/// database and the organization is checked on the rows: given `organization_id = ? AND id
/// IN (...)`, SQLite (which keeps no statistics here) walks every row of the organization
/// through an organization index instead of probing the primary key (150 ms per import chunk
/// at 100,000 customers).
pub async fn find_by_ids_in_organization<E, C, I>(
    conn: &C,
    id: E::Column,
    ids: I,
    organization_id: &str,
    organization_of: fn(&E::Model) -> &str,
) -> Result<Vec<E::Model>, DbErr>
where
    E: sea_orm::EntityTrait,
    C: sea_orm::ConnectionTrait,
    I: IntoIterator,
    I::Item: Into<sea_orm::Value>,
{
    use sea_orm::{ColumnTrait, QueryFilter};
    const IDS_PER_QUERY: usize = 500;
    let ids: Vec<sea_orm::Value> = ids.into_iter().map(Into::into).collect();
    let mut found = Vec::new();
    for chunk in ids.chunks(IDS_PER_QUERY) {
        found.extend(
            E::find()
                .filter(id.is_in(chunk.iter().cloned()))
                .all(conn)
                .await?
                .into_iter()
                .filter(|row| organization_of(row) == organization_id),
        );
    }
    Ok(found)
}

/// Installs [`install_busy_handler`] on each connection a SQLite pool opens.
fn with_busy_handler(
    pool: sea_orm::sqlx::sqlite::SqlitePoolOptions,
) -> sea_orm::sqlx::sqlite::SqlitePoolOptions {
    pool.after_connect(|conn, _| {
        Box::pin(async move {
            let mut handle = conn.lock_handle().await?;
            install_busy_handler(handle.as_raw_handle());
            Ok(())
        })
    })
}

/// How long a SQLite writer waits for the write lock before giving up. Writers queue for it
/// (one at a time); this bounds the wait behind a long import chunk or a large ingest group.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a SQLite writer that waits for the write lock tries again.
const SQLITE_BUSY_POLL: Duration = Duration::from_millis(1);

/// Replaces SQLite's built-in busy handler on a connection with one that tries for the write
/// lock every millisecond, up to [`SQLITE_BUSY_TIMEOUT`]. SQLite does not queue writers: the
/// built-in handler sleeps 1, 2, 5, 10 ... and then 100 ms between tries, so a writer behind a
/// 60 ms transaction woke up to 18 ms after the lock was free, and one that had waited a
/// quarter of a second slept 100 ms at a time while the import or the applier took the lock
/// again. (Runs on the connection's own worker thread, so the sleep blocks nothing else.)
fn install_busy_handler(db: std::ptr::NonNull<libsqlite3_sys::sqlite3>) {
    extern "C" fn retry(
        _: *mut std::os::raw::c_void,
        tries: std::os::raw::c_int,
    ) -> std::os::raw::c_int {
        let waited = SQLITE_BUSY_POLL * u32::try_from(tries).unwrap_or(u32::MAX);
        if waited >= SQLITE_BUSY_TIMEOUT {
            return 0;
        }
        std::thread::sleep(SQLITE_BUSY_POLL);
        1
    }
    // SAFETY: `db` is the open connection sqlx hands to `after_connect`, locked for us; the
    // handler keeps no pointer and its argument is unused.
    unsafe {
        libsqlite3_sys::sqlite3_busy_handler(db.as_ptr(), Some(retry), std::ptr::null_mut());
    }
}

/// What a caller is told when the database could not be reached (503, retryable): the
/// driver's own words stay in the log.
pub const UNAVAILABLE_MESSAGE: &str = "the database is unavailable, retry";

/// Whether a database error means the database could not be reached (no connection, pool
/// exhausted or closed, a connection lost in the middle of a statement, a server shutting down
/// or starting up) rather than a fault of the request: every route answers those 503,
/// retryable, instead of 500.
pub fn is_unavailable(err: &DbErr) -> bool {
    match err {
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => true,
        DbErr::Exec(sea_orm::RuntimeErr::SqlxError(e))
        | DbErr::Query(sea_orm::RuntimeErr::SqlxError(e)) => is_unavailable_sqlx(e),
        _ => false,
    }
}

/// Whether connecting failed because the server could not be reached (not, say, a refused
/// password or an unknown database, which waiting does not mend).
fn unreachable(err: &DbErr) -> bool {
    match err {
        DbErr::ConnectionAcquire(_) => true,
        DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e)) => is_unavailable_sqlx(e),
        _ => false,
    }
}

/// [`is_unavailable`] for an error of sqlx itself (code that uses a connection of its own).
pub fn is_unavailable_sqlx(err: &sea_orm::sqlx::Error) -> bool {
    use sea_orm::sqlx::Error;
    match err {
        Error::Io(_)
        | Error::Tls(_)
        | Error::PoolTimedOut
        | Error::PoolClosed
        | Error::WorkerCrashed => true,
        // PostgreSQL's class 08 (connection exception), 57P01-57P03 (shutting down, crashed,
        // starting up) and 53300 (too many connections).
        Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03" | "53300")
        }),
        _ => false,
    }
}

/// What a request is told when PostgreSQL refuses its text for holding U+0000 (see
/// [`is_nul_character`]).
pub const NUL_CHARACTER_REFUSED: &str =
    "text must not contain the NUL character (U+0000): PostgreSQL cannot store it";

/// Whether PostgreSQL refused a write because a text or JSON value held U+0000 (`22021`: a NUL
/// byte in text; `22P05`: `\u0000` in `jsonb`). It is the request's fault, not the server's:
/// every route answers it 400. (SQLite stores the character.)
pub fn is_nul_character(err: &DbErr) -> bool {
    let (DbErr::Exec(sea_orm::RuntimeErr::SqlxError(e))
    | DbErr::Query(sea_orm::RuntimeErr::SqlxError(e))) = err
    else {
        return false;
    };
    e.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "22021" || code == "22P05")
}

/// Begins a transaction that writes. On SQLite it takes the write lock at `BEGIN`
/// (`BEGIN IMMEDIATE`), waiting up to the busy timeout for it: a deferred transaction that
/// reads first and writes later fails at once with `SQLITE_BUSY`/`SQLITE_BUSY_SNAPSHOT` when
/// another connection wrote in between, whatever the timeout, and that failure would reach the
/// caller as a 5xx. PostgreSQL ignores the mode (row locks and MVCC already handle it).
pub async fn begin_write<C>(db: &C) -> Result<DatabaseTransaction, DbErr>
where
    C: TransactionTrait<Transaction = DatabaseTransaction>,
{
    db.begin_with_options(TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..Default::default()
    })
    .await
}

/// Makes the write transactions of one organization that name the same `scope` take turns, for
/// work that reads before it writes what the read decides (a new resource's key, from the keys
/// already taken). On PostgreSQL a transaction-level advisory lock on the pair, held until the
/// commit or rollback; on SQLite [`begin_write`]'s write lock serializes them already.
pub async fn take_turns<C: ConnectionTrait>(txn: &C, scope: &str, org: &str) -> Result<(), DbErr> {
    advisory_xact_lock(txn, "hashtext($1)", format!("custintel.{scope}.{org}")).await
}

/// PostgreSQL: waits for the transaction-level advisory lock `keys` (SQL of the lock's key or
/// key pair, over the one parameter `$1` = `value`); nothing on SQLite, whose
/// [`begin_write`] serializes writers already.
async fn advisory_xact_lock<C: ConnectionTrait>(
    txn: &C,
    keys: &str,
    value: String,
) -> Result<(), DbErr> {
    take_advisory_xact_lock(txn, "pg_advisory_xact_lock", keys, value).await
}

/// `function` (`pg_advisory_xact_lock` or its `_shared` form) of `keys`, `$1` bound to `value`.
async fn take_advisory_xact_lock<C: ConnectionTrait>(
    txn: &C,
    function: &str,
    keys: &str,
    value: String,
) -> Result<(), DbErr> {
    if txn.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        format!("SELECT {function}({keys})"),
        [value.into()],
    ))
    .await?;
    Ok(())
}

/// PostgreSQL's advisory lock pair for one organization's identities (`$1` is its id): the
/// ingest applier leases an organization by taking it (`pg_try_advisory_xact_lock`), and a
/// writer that finds or creates customers by key outside the applier waits for it
/// ([`hold_identities`]), so neither creates a customer the other is creating.
pub const IDENTITIES_LOCK: &str = "hashtext(current_schema() || '.ingest_applier'), hashtext($1)";

/// Holds an organization's identities for the rest of the transaction: customers and users
/// found by key and created when missing, as the ingest applier does. On PostgreSQL it waits
/// for [`IDENTITIES_LOCK`]; on SQLite [`begin_write`]'s write lock serializes writers already.
pub async fn hold_identities<C: ConnectionTrait>(txn: &C, org: &str) -> Result<(), DbErr> {
    advisory_xact_lock(txn, IDENTITIES_LOCK, org.to_string()).await
}

/// As [`hold_identities`], shared with other transactions that hold them this way: for writers
/// that have made sure among themselves that they find and create records by different keys
/// (one import's chunks written at once). The applier and every [`hold_identities`] wait for
/// all of them, and they for it.
pub async fn share_identities<C: ConnectionTrait>(txn: &C, org: &str) -> Result<(), DbErr> {
    take_advisory_xact_lock(
        txn,
        "pg_advisory_xact_lock_shared",
        IDENTITIES_LOCK,
        org.to_string(),
    )
    .await
}

/// The scope of [`take_turns`] for writes of signals, destinations and automations: their keys
/// are unique in an organization, and `custintel apply` compares a whole configuration.
pub const CONFIGURATION: &str = "configuration";

/// WAL pages after which a committing writer checkpoints itself (SQLite's default is 1,000):
/// a backstop for processes that run no [`spawn_wal_checkpointer`] (the CLI's `import`), or
/// for a checkpointer that falls behind. 16,384 pages of 4 KiB bound the WAL near 64 MiB.
const WAL_AUTOCHECKPOINT_PAGES: &str = "16384";

/// How often the checkpointer copies committed WAL pages into the database file.
const WAL_CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// How a checkpointer keeps a WAL short.
#[derive(Debug, Clone, Copy)]
pub enum WalUpkeep {
    /// Copy committed pages into the database file, waiting for no reader or writer.
    Passive,
    /// As `Passive`, and once the WAL holds more than this many pages, empty it (`TRUNCATE`:
    /// it waits for readers of older snapshots and holds writers back meanwhile, a copy of a
    /// few pages and an fsync). For a file whose writers never pause: a WAL starts over only
    /// when a writer finds it wholly copied, which under a steady stream of commits does not
    /// happen, so it grew by the size of every commit (140 MB of tool-call counts in two
    /// minutes of 8 callers), and a WAL that starts over keeps its file's size.
    TruncatePast(i64),
}

/// SQLite: checkpoints the WAL every [`WAL_CHECKPOINT_EVERY`] on a connection of its own
/// (`PRAGMA wal_checkpoint(PASSIVE)`: it waits for no reader or writer), so the copying into
/// the database file and its fsync happen beside the writers instead of inside the commit of
/// whichever writer crossed SQLite's 1,000-page default: that writer held the write lock
/// meanwhile, and every other writer waited. `None` on PostgreSQL.
pub fn spawn_wal_checkpointer(
    db: &DatabaseConnection,
    upkeep: WalUpkeep,
) -> Option<tokio::task::JoinHandle<()>> {
    if db.get_database_backend() != sea_orm::DbBackend::Sqlite {
        return None;
    }
    let db = db.clone();
    let checkpoint = move |mode: &'static str| {
        let db = db.clone();
        async move {
            let row = db
                .query_one_raw(sea_orm::Statement::from_string(
                    sea_orm::DbBackend::Sqlite,
                    format!("PRAGMA wal_checkpoint({mode})"),
                ))
                .await?;
            // (busy, pages in the WAL, pages copied); -1 pages when the file is not in WAL mode.
            Ok::<i64, DbErr>(match row {
                Some(row) => row.try_get_by_index(1)?,
                None => 0,
            })
        }
    };
    Some(tokio::spawn(async move {
        let mut failures = 0u32;
        loop {
            tokio::time::sleep(WAL_CHECKPOINT_EVERY).await;
            let mut done = checkpoint("PASSIVE").await;
            if let (Ok(pages), WalUpkeep::TruncatePast(limit)) = (&done, upkeep) {
                if *pages > limit {
                    done = checkpoint("TRUNCATE").await;
                }
            }
            match done {
                Ok(_) => failures = 0,
                Err(e) => {
                    failures += 1;
                    // Writers still checkpoint past the backstop; say so once, not 4 times a second.
                    if failures == 1 {
                        tracing::warn!(error = %e, "WAL checkpoint failed; retrying");
                    }
                }
            }
        }
    }))
}

/// Applies pending migrations.
pub async fn migrate(db: &DatabaseConnection) -> anyhow::Result<()> {
    Migrator::up(db, None).await?;
    Ok(())
}

/// The file of a SQLite database; `None` on PostgreSQL and for an in-memory database.
pub async fn sqlite_file(db: &DatabaseConnection) -> Result<Option<std::path::PathBuf>, DbErr> {
    if db.get_database_backend() != sea_orm::DbBackend::Sqlite {
        return Ok(None);
    }
    let row = db
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Sqlite,
            "SELECT file FROM pragma_database_list WHERE name = 'main'",
        ))
        .await?;
    let file: Option<String> = match row {
        Some(r) => r.try_get_by_index(0)?,
        None => None,
    };
    Ok(file.filter(|f| !f.is_empty()).map(std::path::PathBuf::from))
}

/// A file kept beside a SQLite database file: its name with `.{suffix}` added (the ingest
/// journal's, the tool-call allowance's).
pub fn beside(database_file: &std::path::Path, suffix: &str) -> std::path::PathBuf {
    let mut name = database_file.as_os_str().to_os_string();
    name.push(".");
    name.push(suffix);
    std::path::PathBuf::from(name)
}

/// Rewrites `?` placeholders as `$n` for PostgreSQL.
pub fn placeholders(backend: sea_orm::DbBackend, sql: &str) -> String {
    if backend != sea_orm::DbBackend::Postgres {
        return sql.to_string();
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}
