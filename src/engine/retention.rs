//! How long signal hits are kept: long enough for every window that reads them back (`ALL` and
//! `AT_LEAST` windows, patterns' `within`, schedule digests since the previous run), and at
//! least [`MIN_RETENTION_DAYS`]. Older hits are deleted in bounded chunks by any instance's
//! processor (deleting twice is harmless).

use chrono::{Duration, Utc};
use entity::{automation, signal, signal_hit};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};
use serde_json::Value;

use super::config::parse_span;

/// Hits younger than this are always kept (a weekly digest that missed a few ticks still reads
/// its signals).
pub const MIN_RETENTION_DAYS: i64 = 90;
/// Rows deleted per statement, so a long backlog never holds the write lock for long.
const CHUNK: u64 = 5_000;

/// The longest duration any trigger or pattern of the stored configuration names.
fn longest_window(values: impl Iterator<Item = Value>) -> Duration {
    fn walk(v: &Value, longest: &mut Duration) {
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    if matches!(k.as_str(), "window" | "within" | "every") {
                        if let Some(d) = child.as_str().and_then(parse_span) {
                            *longest = (*longest).max(d);
                        }
                    }
                    walk(child, longest);
                }
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, longest)),
            _ => {}
        }
    }
    let mut longest = Duration::days(MIN_RETENTION_DAYS);
    for v in values {
        walk(&v, &mut longest);
    }
    longest
}

/// Deletes hits older than every window in use; returns how many.
pub async fn sweep<C: ConnectionTrait>(conn: &C) -> Result<u64, DbErr> {
    let triggers: Vec<Value> = automation::Entity::find()
        .select_only()
        .column(automation::Column::TriggerJson)
        .filter(automation::Column::ArchivedAt.is_null())
        .into_tuple()
        .all(conn)
        .await?;
    let definitions: Vec<Value> = signal::Entity::find()
        .select_only()
        .column(signal::Column::Definition)
        .filter(signal::Column::ArchivedAt.is_null())
        .into_tuple()
        .all(conn)
        .await?;
    let keep = longest_window(triggers.into_iter().chain(definitions));
    let cutoff = Utc::now() - keep;
    let mut deleted = 0;
    loop {
        let ids: Vec<String> = signal_hit::Entity::find()
            .select_only()
            .column(signal_hit::Column::Id)
            .filter(signal_hit::Column::At.lt(cutoff))
            .limit(CHUNK)
            .into_tuple()
            .all(conn)
            .await?;
        if ids.is_empty() {
            return Ok(deleted);
        }
        deleted += signal_hit::Entity::delete_many()
            .filter(signal_hit::Column::Id.is_in(ids))
            .exec(conn)
            .await?
            .rows_affected;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_longest_window_in_use_or_ninety_days() {
        assert_eq!(longest_window(std::iter::empty()), Duration::days(90));
        let configs = vec![
            json!({"window": "7d"}),
            json!({"pattern": {"type": "count", "within": "20w"}}),
        ];
        assert_eq!(longest_window(configs.into_iter()), Duration::weeks(20));
    }
}
