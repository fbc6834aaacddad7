//! Engagement events: active and total time per engagement session.

use chrono::{DateTime, Duration, Utc};
use entity::engagement_session;

use super::{Group, SessionState};

/// An engagement session ends after this long without events.
pub const SESSION_IDLE: Duration = Duration::minutes(30);

/// Adds active and total time to the session, starting a new one after 30 idle minutes (the
/// group holds the latest stored row of every session it names).
pub(super) fn add_engagement(
    group: &mut Group,
    org: &str,
    session_id: &str,
    visitor_id: Option<&str>,
    active_ms: i64,
    total_ms: i64,
    at: DateTime<Utc>,
) {
    let key = (org.to_string(), session_id.to_string());
    let continues = group.sessions.get(&key).is_some_and(|s| {
        at <= s.row.last_seen_at + SESSION_IDLE && at >= s.row.started_at - SESSION_IDLE
    });
    if continues {
        if let Some(s) = group.sessions.get_mut(&key) {
            s.row.active_time_ms = s.row.active_time_ms.saturating_add(active_ms);
            s.row.total_time_ms = s.row.total_time_ms.saturating_add(total_ms);
            s.row.last_seen_at = s.row.last_seen_at.max(at);
            s.row.started_at = s.row.started_at.min(at);
            if s.row.visitor_id.is_none() {
                s.row.visitor_id = visitor_id.map(str::to_string);
            }
            s.dirty = true;
        }
        return;
    }
    let fresh = SessionState {
        row: engagement_session::Model {
            id: uuid::Uuid::new_v4().to_string(),
            organization_id: org.to_string(),
            session_id: session_id.to_string(),
            visitor_id: visitor_id.map(str::to_string),
            active_time_ms: active_ms,
            total_time_ms: total_ms,
            started_at: at,
            last_seen_at: at,
        },
        dirty: true,
    };
    if let Some(previous) = group.sessions.insert(key, fresh) {
        if previous.dirty {
            group.closed_sessions.push(previous);
        }
    }
}
