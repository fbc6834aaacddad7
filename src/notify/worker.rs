//! Background retries of deliveries left `retrying`: claimed through a lease on the row, so
//! several instances never send the same attempt twice and a killed instance's claim expires.

use std::time::Duration;

use chrono::Utc;
use sea_orm::{
    sea_query::Expr, ColumnTrait, Condition, DatabaseConnection, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
};

use super::delivery::{
    attempt_entry, attempt_once, record_attempts_of, retry_window, Attempt, Attempted,
};
use crate::crypto::SecretBox;
use entity::{
    destination,
    notification_delivery::{self as nd, DeliveryStatus},
};

const LEASE: i64 = 120;
const BATCH: u64 = 50;

/// Runs every due retry once; returns how many were attempted.
pub async fn run_due(
    db: &DatabaseConnection,
    secrets: &SecretBox,
) -> Result<usize, sea_orm::DbErr> {
    let now = Utc::now();
    let due = nd::Entity::find()
        .filter(nd::Column::Status.eq(DeliveryStatus::Retrying))
        .filter(nd::Column::NextAttemptAt.lte(now))
        .filter(
            Condition::any()
                .add(nd::Column::LeaseUntil.is_null())
                .add(nd::Column::LeaseUntil.lt(now)),
        )
        .order_by_asc(nd::Column::NextAttemptAt)
        .limit(BATCH)
        .all(db)
        .await?;
    let mut attempted = 0;
    for row in due {
        // Claim: only the instance whose conditional update changes the row may send.
        let claimed = nd::Entity::update_many()
            .col_expr(
                nd::Column::LeaseUntil,
                Expr::value(Some(now + chrono::Duration::seconds(LEASE))),
            )
            .filter(nd::Column::Id.eq(row.id.clone()))
            .filter(nd::Column::Status.eq(DeliveryStatus::Retrying))
            .filter(nd::Column::Attempts.eq(row.attempts))
            .filter(
                Condition::any()
                    .add(nd::Column::LeaseUntil.is_null())
                    .add(nd::Column::LeaseUntil.lt(now)),
            )
            .exec(db)
            .await?;
        if claimed.rows_affected != 1 {
            continue;
        }
        attempted += 1;
        let dest = destination::Entity::find_by_id(row.destination_id.clone())
            .filter(destination::Column::OrganizationId.eq(row.organization_id.clone()))
            .one(db)
            .await?;
        let attempted_at = Utc::now();
        let outcome = match &dest {
            Some(d) if d.enabled && d.archived_at.is_none() => {
                let message_id = format!("msg_{}", row.id.replace('-', ""));
                attempt_once(secrets, d, &message_id, &row.payload).await
            }
            _ => Attempt::Permanent {
                http: None,
                error: "the destination was disabled or removed".into(),
            },
        };
        let attempts = row.attempts + 1;
        let finished = Utc::now();
        let mut log = match &row.attempt_log {
            Some(serde_json::Value::Array(items)) => items.clone(),
            _ => Vec::new(),
        };
        log.push(attempt_entry(attempted_at, &outcome));
        let (mut status, http_status, mut error) = outcome.outcome();
        if status == DeliveryStatus::Retrying && finished - row.created_at >= retry_window() {
            status = DeliveryStatus::Failed;
            error = error.map(|e| format!("{e}; gave up after 24 h"));
        }
        // Recorded as every attempt is: the next try after the backoff for `attempts`.
        let done = Attempted {
            delivery_id: row.id,
            destination_id: row.destination_id,
            status,
            attempts,
            http_status,
            error,
            log,
        };
        record_attempts_of(db, std::slice::from_ref(&done)).await?;
    }
    Ok(attempted)
}

/// Polls for due retries every `tick` until the process ends.
pub fn spawn(
    db: DatabaseConnection,
    secrets: SecretBox,
    tick: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(tick);
        loop {
            interval.tick().await;
            if let Err(e) = run_due(&db, &secrets).await {
                tracing::warn!(error = %e, "notification retry pass failed");
            }
        }
    })
}
