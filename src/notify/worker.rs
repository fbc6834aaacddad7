//! Background retries of deliveries left `retrying`: claimed through a lease on the row, so
//! several instances never send the same attempt twice and a killed instance's claim expires.

use std::time::Duration;

use chrono::Utc;
use sea_orm::{
    sea_query::Expr, ColumnTrait, Condition, DatabaseConnection, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
};

use super::delivery::{attempt_entry, attempt_once, background_backoff, retry_window, Attempt};
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
        let (status, http, error, next) = match outcome {
            Attempt::Delivered(code) => (DeliveryStatus::Delivered, Some(code), None, None),
            Attempt::Permanent { http, error } => (DeliveryStatus::Failed, http, Some(error), None),
            Attempt::Retryable { http, error } => {
                if finished - row.created_at >= retry_window() {
                    (
                        DeliveryStatus::Failed,
                        http,
                        Some(format!("{error}; gave up after 24 h")),
                        None,
                    )
                } else {
                    (
                        DeliveryStatus::Retrying,
                        http,
                        Some(error),
                        Some(finished + background_backoff(attempts)),
                    )
                }
            }
        };
        nd::Entity::update_many()
            .col_expr(nd::Column::Status, Expr::value(status))
            .col_expr(nd::Column::Attempts, Expr::value(attempts))
            .col_expr(nd::Column::HttpStatus, Expr::value(http.map(i32::from)))
            .col_expr(nd::Column::Error, Expr::value(error))
            .col_expr(nd::Column::NextAttemptAt, Expr::value(next))
            .col_expr(
                nd::Column::LeaseUntil,
                Expr::value(Option::<chrono::DateTime<Utc>>::None),
            )
            .col_expr(
                nd::Column::AttemptLog,
                Expr::value(serde_json::Value::Array(log)),
            )
            .col_expr(nd::Column::UpdatedAt, Expr::value(finished))
            .filter(nd::Column::Id.eq(row.id.clone()))
            .exec(db)
            .await?;
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
