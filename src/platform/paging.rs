//! Run lists (agent runs, automation runs): newest first, a page of `limit`, and a cursor
//! holding the last item's time and id.

use base64::Engine;
use chrono::{DateTime, Utc};

use super::PlatformResult;
use entity::StatusEnum;

/// Items per page unless `limit` says otherwise, and the most a page holds.
pub const DEFAULT_LIMIT: u32 = 20;
pub const MAX_LIMIT: u32 = 100;

/// A checked page request.
pub struct PageRequest<S> {
    /// The `status` filter (sent in any case).
    pub status: Option<S>,
    pub limit: u32,
    /// Items strictly before this (time, id) position.
    pub after: Option<(DateTime<Utc>, String)>,
}

/// A cursor: the last item's time in microseconds since 1970 and its id, `<micros>.<id>`. Any
/// text of this form is a position (an item at that time and id), so every cursor the
/// description admits is one the server takes.
pub const CURSOR_PATTERN: &str = r"^([0-9]{1,18}\.[0-9A-Za-z_-]{1,64})?$";

/// The cursor of an item at `at` with `id`.
pub fn encode_cursor(at: &DateTime<Utc>, id: &str) -> String {
    format!("{}.{id}", at.timestamp_micros())
}

fn decode_cursor(cursor: &str) -> Option<(DateTime<Utc>, String)> {
    let text = cursor;
    let (micros, id) = match text.split_once('.') {
        Some(parts) => parts,
        None => return decode_earlier_cursor(text),
    };
    let valid_id = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_id || micros.is_empty() || micros.len() > 18 {
        return None;
    }
    let at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
    Some((at, id.to_string()))
}

/// Cursors handed out before the readable form (unpadded URL-safe base64 of `micros|id`).
fn decode_earlier_cursor(cursor: &str) -> Option<(DateTime<Utc>, String)> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (micros, id) = text.split_once('|')?;
    let at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
    Some((at, id.to_string()))
}

/// Checks `status` (one of `S`'s upper-case statuses), `limit` and `cursor`; 400 naming each
/// bad one.
pub fn page_request<S: StatusEnum>(
    status: Option<&str>,
    limit: Option<u32>,
    cursor: Option<&str>,
) -> PlatformResult<PageRequest<S>> {
    let mut issues = crate::validation::Issues::default();
    let status = match status {
        Some(sent) => {
            let parsed = S::parse(sent);
            if parsed.is_none() {
                issues.push(
                    vec!["status".into()],
                    format!("must be one of {}", S::names().join(", ")),
                );
            }
            parsed
        }
        None => None,
    };
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        issues.push(
            vec!["limit".into()],
            format!("must be between 1 and {MAX_LIMIT}"),
        );
    }
    let after = match cursor.filter(|c| !c.is_empty()) {
        Some(c) => {
            let position = decode_cursor(c);
            if position.is_none() {
                issues.push(
                    vec!["cursor".into()],
                    "not a cursor from a previous page's `nextCursor`",
                );
            }
            position
        }
        None => None,
    };
    issues.into_result()?;
    Ok(PageRequest {
        status,
        limit,
        after,
    })
}
