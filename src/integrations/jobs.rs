//! The `jobs` rows of integrations: one scheduled sync per connection. Connections schedule and
//! unschedule their sync here; the scheduler claims and runs what is due. (Below both, so that
//! connections need not import the scheduler.)

use chrono::{DateTime, Utc};
use sea_orm::{sea_query::Expr, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde_json::json;

use super::IntegrationResult;
use entity::job::{self, JobKind, JobStatus};

pub const KIND_STRIPE_SYNC: JobKind = JobKind::StripeSync;

/// One scheduled sync per connection: its job id is derived from the connection id.
pub fn sync_job_id(connection_id: &str) -> String {
    format!("sync-{connection_id}")
}

/// Makes the connection's sync due at `run_at` (creating its job when it has none).
pub async fn schedule_sync<C: ConnectionTrait>(
    db: &C,
    org: &str,
    connection_id: &str,
    run_at: DateTime<Utc>,
) -> IntegrationResult<()> {
    let id = sync_job_id(connection_id);
    let now = Utc::now();
    job::Entity::insert(job::ActiveModel {
        id: Set(id.clone()),
        organization_id: Set(Some(org.to_string())),
        kind: Set(KIND_STRIPE_SYNC),
        payload: Set(json!({ "connectionId": connection_id })),
        status: Set(JobStatus::Pending),
        run_at: Set(run_at),
        lease_until: Set(None),
        attempts: Set(0),
        last_error: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    })
    .on_conflict_do_nothing_on([job::Column::Id])
    .exec_without_returning(db)
    .await?;
    // An existing, idle job is moved forward; a running one finishes and reschedules itself.
    job::Entity::update_many()
        .col_expr(job::Column::RunAt, Expr::value(run_at))
        .col_expr(job::Column::UpdatedAt, Expr::value(now))
        .filter(job::Column::Id.eq(id))
        .filter(job::Column::Status.eq(JobStatus::Pending))
        .exec(db)
        .await?;
    Ok(())
}

pub async fn unschedule_sync<C: ConnectionTrait>(
    db: &C,
    connection_id: &str,
) -> IntegrationResult<()> {
    job::Entity::delete_by_id(sync_job_id(connection_id))
        .exec(db)
        .await?;
    Ok(())
}
