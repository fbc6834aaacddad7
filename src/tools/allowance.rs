//! The plan's tool-call allowance: every call that reaches a tool counts toward the
//! organization's calls in the current billing cycle (a calendar month, UTC).

use chrono::{DateTime, Datelike, TimeZone, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, EntityTrait, Statement};

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

/// Counts one call, or refuses it with 402 when the cycle's allowance is used up. The
/// conditional increment is one statement, so concurrent calls (also from several instances
/// on one PostgreSQL database) never push the count past the limit.
pub async fn consume(db: &DatabaseConnection, organization_id: &str) -> ToolResult<()> {
    let org = entity::organization::Entity::find_by_id(organization_id.to_string())
        .one(db)
        .await?
        .ok_or_else(|| ToolError::Internal("the key's organization no longer exists".into()))?;
    let now = Utc::now();
    let cycle = cycle_of(now);
    let backend = db.get_database_backend();
    // One statement, one write: the cycle's row is made by the first call of the cycle and
    // incremented by the others, only while under the limit.
    let limit = org.api_call_limit.unwrap_or(i64::MAX);
    let counted = if limit < 1 {
        0
    } else {
        db.execute_raw(Statement::from_sql_and_values(
            backend,
            "INSERT INTO api_usage (organization_id, cycle, calls) VALUES ($1, $2, 1) \
             ON CONFLICT (organization_id, cycle) DO UPDATE SET calls = api_usage.calls + 1 \
             WHERE api_usage.calls < $3",
            [organization_id.into(), cycle.into(), limit.into()],
        ))
        .await?
        .rows_affected()
    };
    if counted == 1 {
        Ok(())
    } else {
        Err(ToolError::LimitExceeded {
            plan: org.plan,
            limit: org.api_call_limit.unwrap_or_default(),
            reset_at: next_cycle_start_ms(now),
        })
    }
}
