//! Hourly counts of a customer's tracked events, kept for the customers with many of them, so
//! that a timeline's total sums whole hours instead of counting index entries.
//!
//! - The ingest applier adds each customer's tracked events (billing events left out, as the
//!   timeline leaves them) to `customers.events_counted`, in the update of the customer's last
//!   activity it makes anyway, and reads the counter back from that update.
//! - A customer whose counter reaches [`KEPT_FROM`] has its events counted per hour in
//!   `customer_event_hours`: from the events table in the transaction that reaches it, then by
//!   the applier as it adds events. So the hours are kept exactly when the counter is at
//!   [`KEPT_FROM`] or more, which is what readers check on the customer's row.
//! - The customer's row lock orders this between concurrent appliers: an applier's events are
//!   in the table before it updates the row, so the transaction that reaches the threshold
//!   either sees another's events (committed before it took the lock) or that other finds the
//!   counter past the threshold when it gets the lock, and adds its own hours.
//!
//! Events are only ever added, never removed or moved to another customer, so the counts need
//! no other writer.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use entity::{customer, customer_event_hour, event};
use sea_orm::{
    sea_query::{Expr, ExprTrait, Func, OnConflict, Query},
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect, Set,
    TransactionSession,
};

/// A customer's tracked events counted (`customers.events_counted`) from which its hours are
/// kept. Below it a window's events are counted from the index: at most this many entries for
/// a customer that ingest counted from its first event.
pub const KEPT_FROM: i64 = 1_000;

const SECONDS_PER_HOUR: i64 = 3_600;

/// Rows per multi-row insert (4 values a row, far below both databases' parameter limits).
const INSERT_CHUNK: usize = 500;

/// Whether a customer whose row counts `events_counted` has its hours kept.
pub fn kept(events_counted: i64) -> bool {
    events_counted >= KEPT_FROM
}

/// The hour `at` falls in: whole hours since 1970-01-01T00:00Z.
pub fn hour_of(at: DateTime<Utc>) -> i64 {
    at.timestamp().div_euclid(SECONDS_PER_HOUR)
}

/// When `hour` starts.
pub fn hour_start(hour: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(hour.saturating_mul(SECONDS_PER_HOUR), 0).unwrap_or(if hour < 0 {
        DateTime::<Utc>::MIN_UTC
    } else {
        DateTime::<Utc>::MAX_UTC
    })
}

/// The first hour that starts at or after `at`.
pub fn first_hour_from(at: DateTime<Utc>) -> i64 {
    let hour = hour_of(at);
    if hour_start(hour) == at {
        hour
    } else {
        hour + 1
    }
}

/// The tracked events one apply adds, per customer and per hour.
#[derive(Debug, Default)]
pub struct AddedEvents {
    customers: HashMap<String, CustomerEvents>,
}

#[derive(Debug, Default)]
struct CustomerEvents {
    organization_id: String,
    n: i64,
    hours: BTreeMap<i64, i64>,
}

impl AddedEvents {
    /// Counts one event of `customer_id`'s (billing events are not counted: the caller leaves
    /// them out).
    pub fn add(&mut self, organization_id: &str, customer_id: &str, at: DateTime<Utc>) {
        let entry = self
            .customers
            .entry(customer_id.to_string())
            .or_insert_with(|| CustomerEvents {
                organization_id: organization_id.to_string(),
                ..Default::default()
            });
        entry.n += 1;
        *entry.hours.entry(hour_of(at)).or_default() += 1;
    }

    /// How many events `customer_id` has among them.
    pub fn of(&self, customer_id: &str) -> i64 {
        self.customers.get(customer_id).map_or(0, |c| c.n)
    }

    /// Keeps the hours once the customers' counters moved: `counted` is each customer's
    /// counter after this apply's events, read back from the update that added them (which
    /// holds the customer's row until the transaction ends). A customer already at the
    /// threshold gets this apply's hours added; one that reaches it now has all its hours
    /// counted from the events table, which holds this apply's events already.
    pub async fn keep_hours<C: ConnectionTrait>(
        self,
        conn: &C,
        counted: impl IntoIterator<Item = (String, i64)>,
    ) -> Result<(), DbErr> {
        let mut added: Vec<(String, String, i64, i64)> = Vec::new();
        let mut reached = Vec::new();
        let mut customers = self.customers;
        for (customer_id, after) in counted {
            let Some(events) = customers.remove(&customer_id) else {
                continue;
            };
            if !kept(after) {
                continue;
            }
            if kept(after - events.n) {
                for (hour, n) in events.hours {
                    added.push((events.organization_id.clone(), customer_id.clone(), hour, n));
                }
            } else {
                reached.push((events.organization_id, customer_id));
            }
        }
        // One order for every writer, so two appliers adding to the same rows never wait on
        // each other in turn.
        added.sort();
        add_hours(conn, added).await?;
        for (organization_id, customer_id) in reached {
            count_hours_from_events(conn, &organization_id, &customer_id).await?;
        }
        Ok(())
    }
}

/// Adds `(organization, customer, hour, n)` rows to the kept hours.
async fn add_hours<C: ConnectionTrait>(
    conn: &C,
    rows: Vec<(String, String, i64, i64)>,
) -> Result<(), DbErr> {
    use customer_event_hour::Column as H;
    for chunk in rows.chunks(INSERT_CHUNK) {
        let models = chunk.iter().map(|(organization_id, customer_id, hour, n)| {
            customer_event_hour::ActiveModel {
                organization_id: Set(organization_id.clone()),
                customer_id: Set(customer_id.clone()),
                hour: Set(*hour),
                n: Set(*n),
            }
        });
        customer_event_hour::Entity::insert_many(models)
            .on_conflict(
                OnConflict::columns([H::OrganizationId, H::CustomerId, H::Hour])
                    .value(
                        H::N,
                        Expr::col((customer_event_hour::Entity, H::N)).add(Expr::col((
                            sea_orm::sea_query::Alias::new("excluded"),
                            H::N,
                        ))),
                    )
                    .to_owned(),
            )
            .exec_without_returning(conn)
            .await?;
    }
    Ok(())
}

/// Writes a customer's hours from its stored events, replacing any kept before.
async fn count_hours_from_events<C: ConnectionTrait>(
    conn: &C,
    organization_id: &str,
    customer_id: &str,
) -> Result<(), DbErr> {
    let times: Vec<DateTime<Utc>> = event::Entity::find()
        .select_only()
        .column(event::Column::OccurredAt)
        .filter(tracked_events_of(organization_id, customer_id))
        .into_tuple()
        .all(conn)
        .await?;
    let mut hours: BTreeMap<i64, i64> = BTreeMap::new();
    for at in times {
        *hours.entry(hour_of(at)).or_default() += 1;
    }
    customer_event_hour::Entity::delete_many()
        .filter(customer_event_hour::Column::OrganizationId.eq(organization_id))
        .filter(customer_event_hour::Column::CustomerId.eq(customer_id))
        .exec(conn)
        .await?;
    let rows = hours
        .into_iter()
        .map(|(hour, n)| {
            (
                organization_id.to_string(),
                customer_id.to_string(),
                hour,
                n,
            )
        })
        .collect();
    add_hours(conn, rows).await
}

/// The events a timeline counts for a customer: its events but billing ones.
pub fn tracked_events_of(organization_id: &str, customer_id: &str) -> sea_orm::Condition {
    sea_orm::Condition::all()
        .add(event::Column::OrganizationId.eq(organization_id))
        .add(event::Column::CustomerId.eq(customer_id))
        // Billing events reach the timeline as the billing changes they caused.
        .add(event::Column::EventType.ne("billing"))
}

/// Brings an organization's counters and kept hours to what the applier keeps, from the events
/// stored: for rows written to the events table other than through ingest (the benchmark's
/// load writes its events straight there, as ingest would have stored them). Each customer
/// with [`KEPT_FROM`] events or more is counted in a transaction of its own, holding its row.
/// Returns how many customers have their hours kept.
pub async fn count_from_stored_events<C>(db: &C, organization_id: &str) -> Result<usize, DbErr>
where
    C: ConnectionTrait + sea_orm::TransactionTrait,
{
    let busy: Vec<(String, i64)> = event::Entity::find()
        .select_only()
        .column(event::Column::CustomerId)
        .column_as(Expr::expr(Func::count(Expr::col(event::Column::Id))), "n")
        .filter(event::Column::OrganizationId.eq(organization_id))
        .filter(event::Column::CustomerId.is_not_null())
        .filter(event::Column::EventType.ne("billing"))
        .group_by(event::Column::CustomerId)
        .having(Expr::expr(Func::count(Expr::col(event::Column::Id))).gte(KEPT_FROM))
        .into_tuple()
        .all(db)
        .await?;
    for (customer_id, n) in &busy {
        let txn = db.begin().await?;
        txn.execute(
            Query::update()
                .table(customer::Entity)
                .value(customer::Column::EventsCounted, *n)
                .and_where(customer::Column::Id.eq(customer_id.as_str()))
                .and_where(customer::Column::OrganizationId.eq(organization_id)),
        )
        .await?;
        count_hours_from_events(&txn, organization_id, customer_id).await?;
        txn.commit().await?;
    }
    Ok(busy.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn hours_are_whole_hours_since_1970() {
        assert_eq!(hour_of(at("1970-01-01T00:59:59.999Z")), 0);
        assert_eq!(hour_of(at("1970-01-01T01:00:00Z")), 1);
        assert_eq!(hour_of(at("1969-12-31T23:59:59Z")), -1);
        let h = hour_of(at("2026-11-30T14:03:05.25Z"));
        assert_eq!(hour_start(h), at("2026-11-30T14:00:00Z"));
        assert_eq!(first_hour_from(at("2026-11-30T14:00:00Z")), h);
        assert_eq!(first_hour_from(at("2026-11-30T14:00:00.000001Z")), h + 1);
    }

    #[test]
    fn added_events_count_per_customer_and_hour() {
        let mut added = AddedEvents::default();
        added.add("o", "c1", at("2026-11-30T14:03:00Z"));
        added.add("o", "c1", at("2026-11-30T14:59:00Z"));
        added.add("o", "c1", at("2026-11-30T15:00:00Z"));
        added.add("o", "c2", at("2026-11-30T15:00:00Z"));
        assert_eq!(added.of("c1"), 3);
        assert_eq!(added.of("c2"), 1);
        assert_eq!(added.of("c3"), 0);
        let c1 = &added.customers["c1"];
        assert_eq!(c1.hours.values().copied().collect::<Vec<_>>(), [2, 1]);
    }
}
