//! Writes event rows through each database's bulk path: a prepared statement stepped per row on
//! SQLite's raw handle, `COPY` on PostgreSQL, both in the applier's transaction.
//! `messageId` repeats never get here: the acknowledging writer drops them (see `dedup`).

use chrono::{DateTime, Utc};
use entity::event;
use sea_orm::DbErr;
use serde_json::value::RawValue;

use crate::db::PgWriteTxn;

/// The columns both paths write, in the order they write them.
const EVENT_COLUMNS: &str = "id, organization_id, message_id, event_type, event_name, \
    visitor_id, user_id, customer_id, url, path, occurred_at, received_at, data";

/// One `events` row.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub id: String,
    pub organization_id: String,
    pub message_id: Option<String>,
    pub event_type: String,
    pub event_name: Option<String>,
    pub visitor_id: Option<String>,
    pub user_id: Option<String>,
    pub customer_id: Option<String>,
    pub url: String,
    pub path: String,
    pub occurred_at: DateTime<Utc>,
    pub received_at: DateTime<Utc>,
    /// The type-specific fields as JSON text (SQLite stores exactly this text).
    pub data: Box<RawValue>,
}

impl From<event::Model> for EventRow {
    fn from(m: event::Model) -> Self {
        Self {
            id: m.id,
            organization_id: m.organization_id,
            message_id: m.message_id,
            event_type: m.event_type,
            event_name: m.event_name,
            visitor_id: m.visitor_id,
            user_id: m.user_id,
            customer_id: m.customer_id,
            url: m.url,
            path: m.path,
            occurred_at: m.occurred_at,
            received_at: m.received_at,
            // A `Value` always serializes (its keys are strings).
            data: serde_json::value::to_raw_value(&m.data).unwrap_or_default(),
        }
    }
}

/// Inserts rows on a SQLite connection's raw handle, one prepared statement stepped per row,
/// each text bound straight from the row (SQLite copies it once). The stored texts are the
/// ones sea-orm and sqlx store for the same row (timestamps as RFC 3339 with `+00:00`, `data`
/// as its JSON text): a test holds the two to each other.
pub fn insert_events_raw(conn: &rusqlite::Connection, rows: Vec<EventRow>) -> rusqlite::Result<()> {
    let mut insert = conn.prepare(&format!(
        "INSERT INTO events ({EVENT_COLUMNS}) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
    ))?;
    let mut received = LastFormatted::default();
    for r in rows {
        let received_at = received.of(r.received_at, stored_timestamp);
        insert.execute(rusqlite::params![
            r.id,
            r.organization_id,
            r.message_id,
            r.event_type,
            r.event_name,
            r.visitor_id,
            r.user_id,
            r.customer_id,
            r.url,
            r.path,
            stored_timestamp(r.occurred_at),
            received_at,
            r.data.get(),
        ])?;
    }
    Ok(())
}

/// Inserts rows with PostgreSQL's `COPY`, in the transaction's text format ([`events_copy_text`]).
pub async fn copy_events(txn: &PgWriteTxn, rows: Vec<EventRow>) -> Result<(), DbErr> {
    if rows.is_empty() {
        return Ok(());
    }
    let copy = format!("COPY events ({EVENT_COLUMNS}) FROM STDIN");
    txn.copy_in(&copy, &events_copy_text(rows)).await?;
    Ok(())
}

/// Rows in `COPY`'s text format, columns as [`EVENT_COLUMNS`]: a line per row, tab-separated columns,
/// `\N` for NULL. PostgreSQL parses each value as its column's type would from the same text a
/// parameter carries: timestamps to the microsecond, truncated as sqlx binds them (so both paths
/// store the same instant), and `data` as the JSON text the event was read as (`jsonb` parses
/// it, as from a parameter). The JSON was read without U+0000 (validation refuses it), which
/// PostgreSQL's text cannot hold.
pub fn events_copy_text(rows: Vec<EventRow>) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.len() * 320);
    let mut received = LastFormatted::default();
    for r in rows {
        let received_at = received.of(r.received_at, copy_timestamp);
        for (i, value) in [
            Some(r.id.as_str()),
            Some(&r.organization_id),
            r.message_id.as_deref(),
            Some(&r.event_type),
            r.event_name.as_deref(),
            r.visitor_id.as_deref(),
            r.user_id.as_deref(),
            r.customer_id.as_deref(),
            Some(&r.url),
            Some(&r.path),
            Some(&copy_timestamp(r.occurred_at)),
            Some(received_at),
            Some(r.data.get()),
        ]
        .into_iter()
        .enumerate()
        {
            if i > 0 {
                out.push(b'\t');
            }
            match value {
                None => out.extend_from_slice(b"\\N"),
                Some(text) => copy_escaped(&mut out, text),
            }
        }
        out.push(b'\n');
    }
    out
}

/// `text` as a value of `COPY`'s text format: backslash, tab, newline and carriage return
/// escaped, every other byte as it is (the data is UTF-8, as the connection's encoding).
fn copy_escaped(out: &mut Vec<u8>, text: &str) {
    for &b in text.as_bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

/// A timestamp as `COPY`'s text for `timestamptz`, truncated to the microsecond.
fn copy_timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// The last timestamp formatted and its text: a batch's events share its `received_at`, which is
/// formatted once per batch, not per event.
#[derive(Default)]
struct LastFormatted(Option<(DateTime<Utc>, String)>);

impl LastFormatted {
    fn of(&mut self, at: DateTime<Utc>, format: fn(DateTime<Utc>) -> String) -> &str {
        if self.0.as_ref().is_none_or(|(last, _)| *last != at) {
            self.0 = Some((at, format(at)));
        }
        self.0
            .as_ref()
            .map(|(_, text)| text.as_str())
            .unwrap_or_default()
    }
}

/// A timestamp as sqlx stores a `DateTime<Utc>` in SQLite.
fn stored_timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false)
}
