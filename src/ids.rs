//! Ids that sort by the time they were made: events', runs' and deliveries' primary keys, so new
//! rows land at the end of their index.

use chrono::{DateTime, Utc};

/// A new row id: a UUID whose leading bits are the current Unix time in milliseconds
/// (version 7 layout), so new rows land at the end of the primary-key index instead of on a
/// random page of it; the other 74 bits are random.
pub fn time_ordered_id() -> String {
    let millis = u64::try_from(Utc::now().timestamp_millis()).unwrap_or_default();
    let random = uuid::Uuid::new_v4();
    let mut tail = [0u8; 10];
    tail.copy_from_slice(&random.as_bytes()[6..16]);
    uuid::Builder::from_unix_timestamp_millis(millis, &tail)
        .into_uuid()
        .to_string()
}

/// The smallest [`time_ordered_id`] of an instant: every id made at or after it sorts after.
pub fn time_ordered_floor(at: DateTime<Utc>) -> String {
    let millis = u64::try_from(at.timestamp_millis()).unwrap_or_default();
    uuid::Builder::from_unix_timestamp_millis(millis, &[0u8; 10])
        .into_uuid()
        .to_string()
}
