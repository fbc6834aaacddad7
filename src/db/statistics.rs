//! Query planner statistics kept current on both databases.
//!
//! The tools' queries are plain index ranges only when the planner knows which index is
//! selective: without statistics SQLite guesses, and at a million customers a guess that walks
//! an organization-wide index for a per-customer question costs seconds instead of a
//! millisecond. So every serving instance refreshes statistics at start and then every
//! [`REFRESH_EVERY`]:
//! - SQLite: `PRAGMA optimize` with every table checked (`0x10000`), which analyzes a table
//!   that was never analyzed or whose size changed about 25-fold since, each ANALYZE bounded by
//!   SQLite's own temporary `analysis_limit`, so a refresh of a large file takes milliseconds to
//!   a few seconds and usually does nothing.
//! - PostgreSQL: autovacuum analyzes tables as they change; a refresh adds `ANALYZE` of the
//!   tables it has never analyzed or that changed by a fifth since (a bulk load can outrun it).
//!
//! `custintel import` analyzes the tables it filled when it ends (see `ops::import`).

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};

/// How often a serving instance refreshes planner statistics.
pub const REFRESH_EVERY: Duration = Duration::from_secs(600);

/// `PRAGMA optimize` mask: 0x02 analyze tables that need it, 0x10 with a temporary analysis
/// limit, 0x10000 check every table (not only those this connection's queries used).
const SQLITE_OPTIMIZE: &str = "PRAGMA optimize=0x10012";

/// Tables PostgreSQL analyzes now: never analyzed though they hold rows, or changed by more
/// than a fifth of their rows since the last analysis.
const POSTGRES_STALE_TABLES: &str = "SELECT relname::text AS name FROM pg_stat_user_tables \
     WHERE schemaname = current_schema() AND n_live_tup > 0 AND ( \
       (last_analyze IS NULL AND last_autoanalyze IS NULL) \
       OR n_mod_since_analyze > GREATEST(1000, n_live_tup / 5))";

/// Refreshes the planner statistics that are missing or stale; answers the tables analyzed on
/// PostgreSQL (SQLite does not say which ones `optimize` analyzed).
pub async fn refresh(db: &DatabaseConnection) -> Result<Vec<String>, DbErr> {
    match db.get_database_backend() {
        DbBackend::Sqlite => {
            db.execute_unprepared(SQLITE_OPTIMIZE).await?;
            Ok(Vec::new())
        }
        DbBackend::Postgres => {
            let rows = db
                .query_all_raw(Statement::from_string(
                    DbBackend::Postgres,
                    POSTGRES_STALE_TABLES,
                ))
                .await?;
            let mut analyzed = Vec::new();
            for row in rows {
                let name: String = row.try_get("", "name")?;
                db.execute_unprepared(&format!("ANALYZE \"{}\"", name.replace('"', "\"\"")))
                    .await?;
                analyzed.push(name);
            }
            Ok(analyzed)
        }
        _ => Ok(Vec::new()),
    }
}

/// Analyzes `tables` now, whole (on SQLite within the same analysis limit `optimize` uses):
/// for a bulk load that has just filled them.
pub async fn analyze_tables(db: &DatabaseConnection, tables: &[&str]) -> Result<(), DbErr> {
    let sqlite = db.get_database_backend() == DbBackend::Sqlite;
    for table in tables {
        let quoted = format!("\"{}\"", table.replace('"', "\"\""));
        if sqlite {
            // One connection for both statements: the limit is a connection's setting.
            db.execute_unprepared(&format!(
                "PRAGMA analysis_limit=1000; ANALYZE {quoted}; PRAGMA analysis_limit=0"
            ))
            .await?;
        } else {
            db.execute_unprepared(&format!("ANALYZE {quoted}")).await?;
        }
    }
    Ok(())
}

/// Refreshes statistics at start and then every [`REFRESH_EVERY`], on a task of its own.
pub fn spawn_refresher(db: DatabaseConnection) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let started = std::time::Instant::now();
            match refresh(&db).await {
                Ok(analyzed) => tracing::debug!(
                    ms = started.elapsed().as_millis() as u64,
                    ?analyzed,
                    "planner statistics refreshed"
                ),
                Err(e) => tracing::warn!(error = %e, "refreshing planner statistics failed"),
            }
            tokio::time::sleep(REFRESH_EVERY).await;
        }
    })
}
