//! Writes event rows: multi-row INSERTs, chunked below the databases' bound-parameter limits.
//! `messageId` repeats never get here: the acknowledging writer drops them (see `dedup`).

use chrono::{DateTime, Utc};
use entity::event;
use sea_orm::{ConnectionTrait, DbErr, Value as DbValue};
use serde_json::value::RawValue;

/// Columns per event row.
const COLUMNS: usize = 13;

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

/// Inserts rows through sea-orm in multi-row statements with their values moved in
/// ([`crate::db::RowsInsert`]). The applier writes them through each database's bulk path
/// instead: SQLite's raw handle ([`insert_events_raw`]), PostgreSQL's `COPY`
/// ([`events_copy_text`]).
pub async fn insert_events<C: ConnectionTrait>(conn: &C, rows: Vec<EventRow>) -> Result<(), DbErr> {
    let mut values = Vec::with_capacity(rows.len() * COLUMNS);
    for r in rows {
        values.extend(row_values(r));
    }
    EVENTS.exec(conn, values).await
}

/// Inserts rows on a SQLite connection's raw handle, one prepared statement stepped per row,
/// each text bound straight from the row (SQLite copies it once). The stored texts are the
/// ones sea-orm and sqlx store for the same row (timestamps as RFC 3339 with `+00:00`, `data`
/// as its JSON text): a test holds the two to each other.
pub fn insert_events_raw(conn: &rusqlite::Connection, rows: Vec<EventRow>) -> rusqlite::Result<()> {
    let mut insert = conn.prepare(&format!(
        "INSERT INTO {} VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        EVENTS.into
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

/// PostgreSQL's `COPY` of event rows, with [`events_copy_text`] as its data.
pub const EVENTS_COPY: &str = "COPY events (id, organization_id, message_id, event_type, \
    event_name, visitor_id, user_id, customer_id, url, path, occurred_at, received_at, data) \
    FROM STDIN";

/// Rows in `COPY`'s text format for [`EVENTS_COPY`]: a line per row, tab-separated columns,
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

const EVENTS: crate::db::RowsInsert = crate::db::RowsInsert {
    into: "events (id, organization_id, message_id, event_type, event_name, visitor_id, \
           user_id, customer_id, url, path, occurred_at, received_at, data)",
    width: COLUMNS,
    tail: "",
};

/// One row's values in the column order of [`EVENTS`], `data` parsed for PostgreSQL's `jsonb`.
fn row_values(r: EventRow) -> [DbValue; COLUMNS] {
    // The text is valid JSON: it was read as such.
    let data = DbValue::Json(Some(Box::new(
        serde_json::from_str(r.data.get()).unwrap_or_default(),
    )));
    [
        r.id.into(),
        r.organization_id.into(),
        r.message_id.into(),
        r.event_type.into(),
        r.event_name.into(),
        r.visitor_id.into(),
        r.user_id.into(),
        r.customer_id.into(),
        r.url.into(),
        r.path.into(),
        r.occurred_at.into(),
        r.received_at.into(),
        data,
    ]
}
