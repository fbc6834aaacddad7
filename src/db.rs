//! Database connection: SQLite by default (WAL), PostgreSQL by `DATABASE_URL`.

use std::time::Duration;

use migration::{Migrator, MigratorTrait};
use sea_orm::{
    sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous},
    ConnectOptions, Database, DatabaseConnection,
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
                    .busy_timeout(Duration::from_secs(10))
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

/// Applies pending migrations.
pub async fn migrate(db: &DatabaseConnection) -> anyhow::Result<()> {
    Migrator::up(db, None).await?;
    Ok(())
}
