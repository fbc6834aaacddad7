//! The plan's tool-call allowance: every call that reaches a tool counts toward the
//! organization's calls in the current billing cycle (a calendar month, UTC).
//!
//! Where the counts are kept ([`usage_db`]): on a SQLite file, in a file of its own beside the
//! database (`<file>.usage`). In WAL mode a connection that finds the database changed since
//! its last read discards its page cache and unmaps the file, so one write to the main file
//! per tool call made every other connection read its pages back for nearly every query (a
//! third of the CPU time of `svc_get_customer` at a million customers went to that). A count
//! in another file changes nothing the readers hold. On PostgreSQL (and an in-memory SQLite
//! database) the counts are the database's `api_usage` table.

use std::{collections::HashMap, path::PathBuf, sync::OnceLock};

use chrono::{DateTime, Datelike, TimeZone, Utc};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, EntityTrait, QuerySelect, Statement,
};

use super::{ToolError, ToolResult};

/// The cycle a moment falls in, as `YYYY-MM`.
pub fn cycle_of(at: DateTime<Utc>) -> String {
    format!("{:04}-{:02}", at.year(), at.month())
}

/// Unix milliseconds of the start of the cycle after the one `at` falls in.
pub fn next_cycle_start_ms(at: DateTime<Utc>) -> i64 {
    let (year, month) = if at.month() == 12 {
        (at.year() + 1, 1)
    } else {
        (at.year(), at.month() + 1)
    };
    Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0)
        .single()
        .map_or(0, |t| t.timestamp_millis())
}

/// Counts one call, or refuses it with 402 when the cycle's allowance is used up. Calls are
/// counted in blocks ([`crate::db::allowance_grants`]); a block is counted by one conditional
/// statement, so concurrent calls (also from several instances on one PostgreSQL database)
/// never push the count past the limit.
pub async fn consume(ctx: &super::ToolContext) -> ToolResult<()> {
    let now = Utc::now();
    let cycle = cycle_of(now);
    let shared = ctx.state.allowance.of(&ctx.organization_id, &cycle);
    // The organization's calls on this instance take turns here only while a block is counted
    // that they have to wait for (the first, and after the limit came near).
    let mut block = shared.lock().await;
    if block.take_one() {
        if let Some(size) = block.begin_refill() {
            // A quarter of the block is left: this call counts the next one while the others
            // go on with what is left. Its own call is counted already, so a failure here is
            // not its failure: the next call that finds the block empty counts one.
            drop(block);
            let counted = async {
                let counts = usage_db(&ctx.state.db).await?;
                count_block(ctx, &counts, &cycle, size).await
            }
            .await;
            let mut block = shared.lock().await;
            match counted {
                Ok(counted) => block.end_refill(size, counted),
                Err(e) => {
                    tracing::debug!(error = %e, "could not count the next block of tool calls");
                    block.end_refill(size, None);
                }
            }
        }
        return Ok(());
    }
    let counts = usage_db(&ctx.state.db).await?;
    ctx.state.allowance.start_sweeping(&counts);
    let mut size = block.wanted();
    let mut counted = count_block(ctx, &counts, &cycle, size).await?;
    if counted.is_none() && size > 1 {
        // Less than a block is left: this call alone, exactly.
        size = 1;
        counted = count_block(ctx, &counts, &cycle, size).await?;
    }
    if let Some(headroom) = counted {
        block.granted(size, headroom);
        return Ok(());
    }
    block.refused();
    drop(block);
    let org = plan_of(ctx).await?;
    Err(ToolError::LimitExceeded {
        plan: org.plan,
        limit: org.api_call_limit.unwrap_or_default(),
        reset_at: next_cycle_start_ms(now),
    })
}

/// Adds `size` calls to the organization's count in `cycle` if the limit allows all of them;
/// answers what the limit leaves after them, or `None` (nothing counted).
async fn count_block(
    ctx: &super::ToolContext,
    counts: &DatabaseConnection,
    cycle: &str,
    size: u64,
) -> ToolResult<Option<u64>> {
    let organization_id = ctx.organization_id.as_str();
    let size = i64::try_from(size).unwrap_or(i64::MAX);
    let backend = counts.get_database_backend();
    if backend == DbBackend::Postgres {
        // One statement reads the organization's limit and counts the block. It commits
        // without waiting for its WAL to reach the disk (`synchronous_commit` off for this
        // statement's own transaction alone): the organization's blocks update one row, whose
        // lock is held until the commit returns. A crash of the server may forget the last
        // fraction of a second of counts; it never counts a call twice, and every other write
        // keeps its durable commit. It runs on the call's own connection, which its reads then
        // use (no second connection taken from the pool).
        let row = ctx
            .db()
            .await?
            .query_one_raw(Statement::from_sql_and_values(
                backend,
                "INSERT INTO api_usage (organization_id, cycle, calls) SELECT o.id, $2, $3 \
                 FROM organizations AS o, (SELECT set_config('synchronous_commit', 'off', true)) \
                 AS unflushed WHERE o.id = $1 AND COALESCE(o.api_call_limit, $4) >= $3 \
                 ON CONFLICT (organization_id, cycle) DO UPDATE SET calls = api_usage.calls + $3 \
                 WHERE api_usage.calls <= (SELECT COALESCE(l.api_call_limit, $4) \
                 FROM organizations AS l WHERE l.id = $1) - $3 \
                 RETURNING (SELECT COALESCE(l.api_call_limit, $4) \
                 FROM organizations AS l WHERE l.id = $1) - calls",
                [
                    organization_id.into(),
                    cycle.into(),
                    size.into(),
                    i64::MAX.into(),
                ],
            ))
            .await?;
        return Ok(match row {
            Some(row) => Some(row.try_get_by_index::<i64>(0)?.max(0) as u64),
            None => None,
        });
    }
    // SQLite: the counts are in a file of their own, so the limit is read first (a read on the
    // calling thread, no round trip).
    let limit = plan_of(ctx).await?.api_call_limit.unwrap_or(i64::MAX);
    if limit < size {
        return Ok(None);
    }
    // One statement, one write: the cycle's row is made by the first block of the cycle and
    // added to by the others, only while the limit allows the whole block.
    let row = counts
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            "INSERT INTO api_usage (organization_id, cycle, calls) VALUES ($1, $2, $3) \
             ON CONFLICT (organization_id, cycle) DO UPDATE \
             SET calls = api_usage.calls + $3 WHERE api_usage.calls <= $4 - $3 \
             RETURNING calls",
            [
                organization_id.into(),
                cycle.into(),
                size.into(),
                limit.into(),
            ],
        ))
        .await?;
    Ok(match row {
        Some(row) => Some(limit.saturating_sub(row.try_get_by_index::<i64>(0)?).max(0) as u64),
        None => None,
    })
}

/// The caller's organization's plan and limit.
async fn plan_of(ctx: &super::ToolContext) -> ToolResult<Plan> {
    use entity::organization::Column;
    entity::organization::Entity::find_by_id(ctx.organization_id.clone())
        .select_only()
        .columns([Column::Plan, Column::ApiCallLimit])
        .into_model::<Plan>()
        .one(ctx.db().await?)
        .await?
        .ok_or_else(|| ToolError::Internal("the key's organization no longer exists".into()))
}

/// What the allowance needs of the organization.
#[derive(sea_orm::FromQueryResult)]
struct Plan {
    plan: String,
    api_call_limit: Option<i64>,
}

/// The usage file of a SQLite database file.
pub fn own_file_path(database_file: &std::path::Path) -> PathBuf {
    crate::db::beside(database_file, "usage")
}

/// Where `main`'s counts are kept: its usage file, opened (and created) on first use in this
/// process, or `main` itself on PostgreSQL and for an in-memory database. Found once per
/// database and remembered: the allowance is on every tool call's path.
pub async fn usage_db(main: &DatabaseConnection) -> Result<DatabaseConnection, DbErr> {
    /// By the name the pool was opened with: the usage file's pool, or `None` for an
    /// in-memory database.
    static OPENED: OnceLock<tokio::sync::Mutex<HashMap<PathBuf, Option<DatabaseConnection>>>> =
        OnceLock::new();
    if main.get_database_backend() != DbBackend::Sqlite {
        return Ok(main.clone());
    }
    let opened_as = main
        .get_sqlite_connection_pool()
        .connect_options()
        .get_filename()
        .to_path_buf();
    let mut opened = OPENED.get_or_init(Default::default).lock().await;
    if let Some(usage) = opened.get(&opened_as) {
        return Ok(usage.clone().unwrap_or_else(|| main.clone()));
    }
    let Some(path) = crate::db::sqlite_file(main).await? else {
        opened.insert(opened_as, None);
        return Ok(main.clone());
    };
    let url = format!("sqlite://{}?mode=rwc", own_file_path(&path).display());
    let file = crate::db::connect(&url, None)
        .await
        .map_err(|e| DbErr::Custom(format!("cannot open the usage file {url}: {e}")))?;
    prepare_own_file(main, &file).await?;
    // Every call writes a page to this file, and calls may never pause (see `TruncatePast`).
    // Started here, at the first use, so an earlier version's counts are still moved in by the
    // first call after an upgrade.
    let _ = crate::db::spawn_wal_checkpointer(&file, crate::db::WalUpkeep::TruncatePast(64));
    opened.insert(opened_as, Some(file.clone()));
    Ok(file)
}

/// Creates the usage file's table and moves in the counts an earlier version kept in the main
/// file's `api_usage` (copied, keeping the larger count where the file has one, then deleted:
/// a stop between the two copies them again, which the larger-count rule absorbs).
async fn prepare_own_file(
    main: &DatabaseConnection,
    file: &DatabaseConnection,
) -> Result<(), DbErr> {
    file.execute_unprepared(
        "CREATE TABLE IF NOT EXISTS api_usage (organization_id TEXT NOT NULL, \
         cycle TEXT NOT NULL, calls INTEGER NOT NULL, PRIMARY KEY (organization_id, cycle))",
    )
    .await?;
    let earlier = main
        .query_all_raw(Statement::from_string(
            DbBackend::Sqlite,
            "SELECT organization_id, cycle, calls FROM api_usage",
        ))
        .await?;
    if earlier.is_empty() {
        return Ok(());
    }
    for row in &earlier {
        let (org, cycle, calls): (String, String, i64) = (
            row.try_get_by_index(0)?,
            row.try_get_by_index(1)?,
            row.try_get_by_index(2)?,
        );
        file.execute_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            "INSERT INTO api_usage (organization_id, cycle, calls) VALUES (?, ?, ?) \
             ON CONFLICT (organization_id, cycle) DO UPDATE SET \
             calls = max(api_usage.calls, excluded.calls)",
            [org.into(), cycle.into(), calls.into()],
        ))
        .await?;
    }
    main.execute_unprepared("DELETE FROM api_usage").await?;
    Ok(())
}
