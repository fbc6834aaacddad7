//! The ingest journal: accepted batches as the acknowledging commit leaves them, one row per
//! batch in a table with no index but its sequence, until the applier moves their events into
//! `events` and applies their effects (in the transaction that deletes them from here).
//!
//! One row per batch keeps the acknowledging commit small whatever the batch holds; the
//! `events` analytics view reads pending events out of these rows, so an acknowledged event is
//! visible at once.

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, Value as DbValue};

use super::validate::Batch;

/// Batches per multi-row INSERT (4 parameters each).
const ROWS_PER_INSERT: usize = 500;

/// A journal row: its place in the order of acceptance and the batch.
#[derive(Debug, Clone)]
pub struct JournalEntry {
    pub seq: i64,
    pub batch: Batch,
}

/// Appends batches (in the caller's transaction). Empty batches are not written.
pub async fn append<C: ConnectionTrait>(conn: &C, batches: &[&Batch]) -> Result<(), DbErr> {
    let backend = conn.get_database_backend();
    // PostgreSQL keeps the batch as jsonb (the events view expands it there); the text is cast.
    let json_param = match backend {
        DbBackend::Postgres => "CAST(? AS jsonb)",
        _ => "?",
    };
    let batches: Vec<&&Batch> = batches.iter().filter(|b| !b.events.is_empty()).collect();
    for chunk in batches.chunks(ROWS_PER_INSERT) {
        let mut sql = String::from(
            "INSERT INTO ingest_journal (organization_id, received_at, event_count, batch) VALUES ",
        );
        let mut values: Vec<DbValue> = Vec::with_capacity(chunk.len() * 4);
        for (i, batch) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push(',');
            }
            sql.push_str("(?, ?, ?, ");
            sql.push_str(json_param);
            sql.push(')');
            let text = serde_json::to_string(batch)
                .map_err(|e| DbErr::Custom(format!("cannot encode a batch: {e}")))?;
            values.push(batch.organization_id.clone().into());
            values.push(batch.received_at.into());
            values.push(i32::try_from(batch.events.len()).unwrap_or(i32::MAX).into());
            values.push(text.into());
        }
        conn.execute_raw(Statement::from_sql_and_values(
            backend,
            super::dedup::placeholders(backend, &sql),
            values,
        ))
        .await?;
    }
    Ok(())
}

/// The oldest pending batches, in the order they were accepted, at most `limit` of them.
pub async fn oldest<C: ConnectionTrait>(conn: &C, limit: u64) -> Result<Vec<JournalEntry>, DbErr> {
    read(conn, 0, limit).await
}

/// Pending batches after `seq`, in order, at most `limit`.
pub async fn read_after<C: ConnectionTrait>(
    conn: &C,
    seq: i64,
    limit: u64,
) -> Result<Vec<JournalEntry>, DbErr> {
    read(conn, seq, limit).await
}

async fn read<C: ConnectionTrait>(
    conn: &C,
    after: i64,
    limit: u64,
) -> Result<Vec<JournalEntry>, DbErr> {
    let backend = conn.get_database_backend();
    let batch = match backend {
        DbBackend::Postgres => "batch::text",
        _ => "batch",
    };
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            backend,
            super::dedup::placeholders(
                backend,
                &format!(
                    "SELECT seq, {batch} FROM ingest_journal WHERE seq > ? ORDER BY seq LIMIT ?"
                ),
            ),
            [
                after.into(),
                i64::try_from(limit).unwrap_or(i64::MAX).into(),
            ],
        ))
        .await?;
    let mut entries = Vec::with_capacity(rows.len());
    for row in rows {
        let seq: i64 = row.try_get_by_index(0)?;
        let text: String = row.try_get_by_index(1)?;
        let batch: Batch = serde_json::from_str(&text)
            .map_err(|e| DbErr::Custom(format!("journal entry {seq} cannot be read: {e}")))?;
        entries.push(JournalEntry { seq, batch });
    }
    Ok(entries)
}

/// Removes applied batches (in the transaction that applied them).
pub async fn remove<C: ConnectionTrait>(conn: &C, seqs: &[i64]) -> Result<(), DbErr> {
    let backend = conn.get_database_backend();
    for chunk in seqs.chunks(ROWS_PER_INSERT) {
        let marks = vec!["?"; chunk.len()].join(", ");
        let values: Vec<DbValue> = chunk.iter().map(|s| (*s).into()).collect();
        conn.execute_raw(Statement::from_sql_and_values(
            backend,
            super::dedup::placeholders(
                backend,
                &format!("DELETE FROM ingest_journal WHERE seq IN ({marks})"),
            ),
            values,
        ))
        .await?;
    }
    Ok(())
}

/// What is waiting for the applier: batches, events, and when the oldest was received.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Backlog {
    pub batches: i64,
    pub events: i64,
    pub oldest_received_at: Option<DateTime<Utc>>,
}

/// The journal's backlog, for everyone or one organization.
pub async fn backlog<C: ConnectionTrait>(
    conn: &C,
    organization_id: Option<&str>,
) -> Result<Backlog, DbErr> {
    let backend = conn.get_database_backend();
    let (filter, values): (&str, Vec<DbValue>) = match organization_id {
        Some(org) => (" WHERE organization_id = ?", vec![org.into()]),
        None => ("", vec![]),
    };
    let row = conn
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            super::dedup::placeholders(
                backend,
                &format!(
                    "SELECT count(*), CAST(coalesce(sum(event_count), 0) AS BIGINT), \
                     min(received_at) FROM ingest_journal{filter}"
                ),
            ),
            values,
        ))
        .await?;
    let Some(row) = row else {
        return Ok(Backlog::default());
    };
    Ok(Backlog {
        batches: row.try_get_by_index(0)?,
        events: row.try_get_by_index(1)?,
        oldest_received_at: row.try_get_by_index(2)?,
    })
}
