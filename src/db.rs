//! Database connection: SQLite by default (WAL), PostgreSQL by `DATABASE_URL`.

use std::time::Duration;

use migration::{Migrator, MigratorTrait};
use sea_orm::{
    sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous},
    ConnectOptions, Database, DatabaseConnection,
};

pub const DEFAULT_DATABASE_URL: &str = "sqlite://custintel.db?mode=rwc";

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
                    // Each connection keeps up to 16 MiB of pages (the default is 2 MiB), so
                    // index inserts and lookups on a growing database mostly stay in memory.
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
