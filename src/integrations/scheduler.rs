//! Background work of integrations, safe with several instances on one database: each sync is a
//! row of `jobs`, claimed with a lease (`FOR UPDATE SKIP LOCKED` on PostgreSQL, and a conditional
//! UPDATE on every backend), so no sync runs twice at once and a killed instance's sync is picked
//! up again when its lease ends. Each tick also expires connect sessions past their lifetime.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{
    sea_query::{Expr, ExprTrait, LockBehavior, LockType},
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect,
};

pub use super::jobs::{schedule_sync, sync_job_id, unschedule_sync, KIND_STRIPE_SYNC};
use super::{providers, sessions, sync, IntegrationResult, IntegrationsConfig};
use crate::crypto::SecretBox;
use entity::{
    integration_connection::{self as conn, ConnectionStatus},
    job::{self, JobStatus},
};

/// How long a claimed sync may run before another instance may take it over.
const LEASE: chrono::Duration = chrono::Duration::minutes(10);

fn claimable(now: DateTime<Utc>) -> Condition {
    Condition::any()
        .add(
            Condition::all()
                .add(job::Column::Status.eq(JobStatus::Pending))
                .add(job::Column::RunAt.lte(now)),
        )
        .add(
            Condition::all()
                .add(job::Column::Status.eq(JobStatus::Running))
                .add(job::Column::LeaseUntil.lt(now)),
        )
}

/// Claims one due sync job, or `None`. On PostgreSQL the candidate is locked with
/// `FOR UPDATE SKIP LOCKED` inside a transaction, so instances skip each other's rows; on SQLite
/// (one writer at a time) the conditional UPDATE alone decides who wins.
pub async fn claim(
    db: &DatabaseConnection,
    now: DateTime<Utc>,
) -> IntegrationResult<Option<job::Model>> {
    if db.get_database_backend() == DbBackend::Postgres {
        let txn = crate::db::begin_write(db).await?;
        let claimed = claim_on(&txn, now, true).await?;
        txn.commit().await?;
        Ok(claimed)
    } else {
        claim_on(db, now, false).await
    }
}

async fn claim_on<C: ConnectionTrait>(
    db: &C,
    now: DateTime<Utc>,
    lock: bool,
) -> IntegrationResult<Option<job::Model>> {
    let mut query = job::Entity::find()
        .filter(job::Column::Kind.eq(KIND_STRIPE_SYNC))
        .filter(claimable(now))
        .order_by_asc(job::Column::RunAt);
    if lock {
        query = query.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
    let Some(candidate) = query.one(db).await? else {
        return Ok(None);
    };
    let lease_until = now + LEASE;
    let claimed = job::Entity::update_many()
        .col_expr(job::Column::Status, Expr::value(JobStatus::Running))
        .col_expr(job::Column::LeaseUntil, Expr::value(Some(lease_until)))
        .col_expr(
            job::Column::Attempts,
            Expr::col(job::Column::Attempts).add(1),
        )
        .col_expr(job::Column::UpdatedAt, Expr::value(now))
        .filter(job::Column::Id.eq(candidate.id.clone()))
        .filter(claimable(now))
        .exec(db)
        .await?;
    if claimed.rows_affected != 1 {
        return Ok(None);
    }
    Ok(Some(job::Model {
        status: JobStatus::Running,
        lease_until: Some(lease_until),
        attempts: candidate.attempts + 1,
        ..candidate
    }))
}

/// Releases a finished job and makes it due again after the sync interval.
async fn release(
    db: &DatabaseConnection,
    job: &job::Model,
    error: Option<String>,
    next_run: DateTime<Utc>,
) -> IntegrationResult<()> {
    job::Entity::update_many()
        .col_expr(job::Column::Status, Expr::value(JobStatus::Pending))
        .col_expr(job::Column::LeaseUntil, Expr::value(None::<DateTime<Utc>>))
        .col_expr(job::Column::RunAt, Expr::value(next_run))
        .col_expr(job::Column::LastError, Expr::value(error.clone()))
        .col_expr(
            job::Column::Attempts,
            if error.is_none() {
                Expr::value(0)
            } else {
                Expr::col(job::Column::Attempts)
            },
        )
        .col_expr(job::Column::UpdatedAt, Expr::value(Utc::now()))
        .filter(job::Column::Id.eq(job.id.clone()))
        .filter(job::Column::Status.eq(JobStatus::Running))
        .exec(db)
        .await?;
    Ok(())
}

/// Whether the job's connection is still connected.
async fn connection_alive(db: &DatabaseConnection, connection_id: &str) -> IntegrationResult<bool> {
    Ok(conn::Entity::find_by_id(connection_id.to_string())
        .filter(conn::Column::Status.eq(ConnectionStatus::Connected))
        .one(db)
        .await?
        .is_some())
}

/// Gives every connected provider with a sync a job (connections made before this version, or
/// whose job was lost).
async fn ensure_jobs(db: &DatabaseConnection, now: DateTime<Utc>) -> IntegrationResult<()> {
    let syncing: Vec<&str> = providers::PROVIDERS
        .iter()
        .filter(|p| p.has_sync())
        .map(|p| p.id)
        .collect();
    let rows = conn::Entity::find()
        .filter(conn::Column::Status.eq(ConnectionStatus::Connected))
        .filter(conn::Column::Provider.is_in(syncing))
        .all(db)
        .await?;
    for row in rows {
        let exists = job::Entity::find_by_id(sync_job_id(&row.id))
            .one(db)
            .await?
            .is_some();
        if !exists {
            schedule_sync(db, &row.organization_id, &row.id, now).await?;
        }
    }
    Ok(())
}

/// One pass: expire sessions, then run every due sync.
pub async fn tick(
    db: &DatabaseConnection,
    secrets: &SecretBox,
    config: &IntegrationsConfig,
) -> IntegrationResult<usize> {
    let now = Utc::now();
    sessions::expire_due(db, now).await?;
    ensure_jobs(db, now).await?;
    let mut ran = 0;
    while let Some(job) = claim(db, Utc::now()).await? {
        let connection_id = job
            .payload
            .get("connectionId")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string();
        // A job can outlive its connection (a disconnect racing a sweep that read the connection
        // just before): such a job is dropped here instead of running or rescheduling forever.
        if !connection_alive(db, &connection_id).await? {
            job::Entity::delete_by_id(job.id.clone()).exec(db).await?;
            continue;
        }
        let outcome = sync::run_stripe_sync(db, secrets, config, &connection_id).await;
        let error = outcome.err().map(|e| e.to_string());
        if let Some(e) = &error {
            tracing::warn!(connection = %connection_id, error = %e, "Stripe sync failed");
        }
        let next = Utc::now()
            + chrono::Duration::from_std(config.sync_interval)
                .unwrap_or(chrono::Duration::seconds(900));
        // A disconnect while this ran deleted the job row; releasing it then changes nothing.
        release(db, &job, error, next).await?;
        ran += 1;
    }
    Ok(ran)
}

/// The running scheduler; dropping it stops it.
pub struct SchedulerHandle(tokio::task::JoinHandle<()>);

impl SchedulerHandle {
    /// Stops the loop and waits until its task has ended, so nothing it started is still running.
    pub async fn stop(mut self) {
        let task = std::mem::replace(&mut self.0, tokio::spawn(async {}));
        task.abort();
        let _ = task.await;
    }
}

impl Drop for SchedulerHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the scheduler loop on the current runtime.
pub fn spawn(
    db: DatabaseConnection,
    secrets: SecretBox,
    config: IntegrationsConfig,
) -> SchedulerHandle {
    let tick_every: Duration = config.scheduler_tick;
    SchedulerHandle(tokio::spawn(async move {
        loop {
            if let Err(e) = tick(&db, &secrets, &config).await {
                tracing::warn!(error = %e, "integration scheduler tick failed");
            }
            tokio::time::sleep(tick_every).await;
        }
    }))
}
