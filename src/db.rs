//! Database connection: SQLite by default (WAL), PostgreSQL by `DATABASE_URL`.

use std::time::Duration;

use migration::{Migrator, MigratorTrait};
use sea_orm::{
    sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous},
    ConnectOptions, Database, DatabaseConnection, DatabaseTransaction, DbErr,
    SqliteTransactionMode, TransactionOptions, TransactionTrait,
};

pub const DEFAULT_DATABASE_URL: &str = "sqlite://custintel.db?mode=rwc";

/// How much of a SQLite file connections map into memory (`PRAGMA mmap_size`): scans of large
/// tables then read the OS page cache directly. Mapped pages count toward the process's RSS
/// but are the page cache's, not the process's own memory.
pub const SQLITE_MMAP_BYTES: &str = "1073741824";

/// Connects; `schema` selects a PostgreSQL schema (tests use one per test).
pub async fn connect(url: &str, schema: Option<&str>) -> anyhow::Result<DatabaseConnection> {
    let mut opts = ConnectOptions::new(url.to_string());
    opts.connect_timeout(Duration::from_secs(10))
        .acquire_timeout(Duration::from_secs(10))
        .sqlx_logging(false);
    if url.starts_with("sqlite:") {
        // One SQLite writer at a time; a modest pool keeps readers concurrent under WAL.
        opts.max_connections(8)
            .min_connections(1)
            .map_sqlx_sqlite_opts(|o| {
                // WAL keeps readers concurrent with the writer; NORMAL sync in WAL mode loses
                // nothing on a process crash (only on power loss), and every pooled connection
                // gets these settings, not just the first.
                o.journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(SQLITE_BUSY_TIMEOUT)
                    .foreign_keys(true)
                    // Reads come from a shared memory map of the file instead of a read() per
                    // page, and each connection keeps up to 16 MiB of pages (default 2 MiB).
                    .pragma("mmap_size", SQLITE_MMAP_BYTES)
                    .pragma("cache_size", "-16384")
                    .pragma("temp_store", "memory")
            });
    } else {
        opts.max_connections(20);
    }
    if let Some(schema) = schema {
        opts.set_schema_search_path(schema.to_string());
    }
    let db = Database::connect(opts).await?;
    Ok(db)
}

/// How long a SQLite writer waits for the write lock before giving up. Writers queue for it
/// (one at a time); this bounds the wait behind a long import chunk or a large ingest group.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Applies pending migrations.
pub async fn migrate(db: &DatabaseConnection) -> anyhow::Result<()> {
    Migrator::up(db, None).await?;
    Ok(())
}
