//! Query planner statistics kept current on both databases.
//!
//! The tools' queries are plain index ranges only when the planner knows which index is
//! selective: without statistics SQLite guesses, and at a million customers a guess that walks
//! an organization-wide index for a per-customer question costs seconds instead of a
//! millisecond. So every serving instance refreshes statistics at start and then every
//! [`REFRESH_EVERY`]:
//! - SQLite: the tables `PRAGMA optimize` names (every table checked: one never analyzed, or
//!   whose size changed about 25-fold since) are analyzed whole, one index per statement.
//!   Whole, because `optimize`'s own sampled analysis (its temporary `analysis_limit`) reads
//!   the first entries of each index, which all belong to one organization: it estimated 1,085
//!   rows per organization where one had 100,000, and with that the planner walked an
//!   organization's index in order instead of searching one customer's rows. One index per
//!   statement, because an ANALYZE holds the write lock while it reads: each index's hold is
//!   short (about a second for 5 million users), and writers wait between them.
//! - PostgreSQL: autovacuum analyzes tables as they change; a refresh adds `ANALYZE` of the
//!   tables it has never analyzed or that changed by a fifth since (a bulk load can outrun it).
//!
//! `custintel import` analyzes the tables it filled when it ends, and on PostgreSQL vacuums
//! them ([`after_bulk_load`]; see `crate::import`).

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};

/// How often a serving instance refreshes planner statistics.
pub const REFRESH_EVERY: Duration = Duration::from_secs(600);

/// `PRAGMA optimize` mask: 0x01 only say which ANALYZE it would run, 0x02 for tables that need
/// it, 0x10000 checking every table (not only those this connection's queries used). It judges
/// from the statistics this connection loaded, which another pooled connection's ANALYZE left
/// stale: `ANALYZE sqlite_schema` first reloads them, in the same call (one connection).
const SQLITE_TABLES_TO_ANALYZE: &str = "ANALYZE sqlite_schema; PRAGMA optimize=0x10003";

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
            let mut tables = Vec::new();
            for row in db
                .query_all_raw(Statement::from_string(
                    DbBackend::Sqlite,
                    SQLITE_TABLES_TO_ANALYZE,
                ))
                .await?
            {
                // Rows read `ANALYZE "main"."users"`.
                let line: String = row.try_get_by_index(0)?;
                if let Some(target) = line.trim().strip_prefix("ANALYZE ") {
                    let table = target.rsplit('.').next().unwrap_or(target);
                    tables.push(table.trim().trim_matches('"').to_string());
                }
            }
            let names: Vec<&str> = tables.iter().map(String::as_str).collect();
            analyze_tables(db, &names).await?;
            Ok(tables)
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
                db.execute_unprepared(&format!("ANALYZE {}", quote(&name)))
                    .await?;
                analyzed.push(name);
            }
            Ok(analyzed)
        }
        _ => Ok(Vec::new()),
    }
}

/// After a bulk load that has just filled `tables`: their planner statistics, and on
/// PostgreSQL their visibility map too (`VACUUM (ANALYZE)`). Until a table's pages are marked
/// all-visible, an index-only scan visits the row of every index entry it reads, so a list's
/// count over an index reads the table: at a million customers, a revenue list's capped count
/// took 25-48 ms, and 19.7 ms p50 for the whole call once the table was vacuumed (0.8 s for
/// a million customers, about 9 s for every table of an 8.5-million-line book). Autovacuum
/// gets there in time (and may be off); an import should not wait for it. Runs outside any
/// transaction, as `VACUUM` must.
pub async fn after_bulk_load(db: &DatabaseConnection, tables: &[&str]) -> Result<(), DbErr> {
    if db.get_database_backend() == DbBackend::Postgres {
        if !tables.is_empty() {
            db.execute_unprepared(&format!("VACUUM (ANALYZE) {}", quoted_list(tables)))
                .await?;
        }
        return Ok(());
    }
    analyze_tables(db, tables).await
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `"a", "b"`.
fn quoted_list(tables: &[&str]) -> String {
    tables
        .iter()
        .map(|t| quote(t))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Analyzes `tables` now, whole: after a bulk load that has just filled them, or for what
/// [`refresh`] finds stale. On SQLite one index per statement (see the module doc).
pub async fn analyze_tables<C: ConnectionTrait>(db: &C, tables: &[&str]) -> Result<(), DbErr> {
    if db.get_database_backend() != DbBackend::Sqlite {
        // One statement: PostgreSQL samples each table (30,000 rows at most) without blocking
        // writers.
        if !tables.is_empty() {
            db.execute_unprepared(&format!("ANALYZE {}", quoted_list(tables)))
                .await?;
        }
        return Ok(());
    }
    for table in tables {
        let indexes = db
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Sqlite,
                "SELECT name FROM pragma_index_list(?)",
                [(*table).into()],
            ))
            .await?;
        if indexes.is_empty() {
            // A table without an index: its row count is all ANALYZE records.
            db.execute_unprepared(&format!("ANALYZE {}", quote(table)))
                .await?;
        }
        for index in indexes {
            let name: String = index.try_get("", "name")?;
            db.execute_unprepared(&format!("ANALYZE {}", quote(&name)))
                .await?;
        }
    }
    if !tables.is_empty() {
        reload_everywhere(db).await?;
    }
    Ok(())
}

/// SQLite: makes every connection to the file, in this process or another, load the new
/// statistics. A connection reads them with the schema, and reads the schema again only when
/// the schema's version changed, which an `ANALYZE` does not do once the statistics table
/// exists: without this, a serving instance's pooled connections kept planning with the
/// statistics (or their absence) they opened with. A table made and dropped changes it.
async fn reload_everywhere<C: ConnectionTrait>(db: &C) -> Result<(), DbErr> {
    db.execute_unprepared(
        "CREATE TABLE IF NOT EXISTS statistics_reload (x INTEGER); DROP TABLE statistics_reload",
    )
    .await?;
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
