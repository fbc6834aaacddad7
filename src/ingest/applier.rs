//! The applier: moves acknowledged batches from the journal into `events` and applies their
//! effects on visitors, users and customers, oldest first (so in order per organization), in
//! transactions that also delete them from the journal: after a crash every acknowledged batch
//! is applied exactly once.
//!
//! Every serving instance runs one. On PostgreSQL one instance applies at a time (a
//! transaction-scoped advisory lock per schema), so several instances never apply one
//! organization's batches out of order; a killed instance's lock goes with its connection.

use std::time::Duration;

use chrono::Utc;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};
use tokio::{sync::watch, task::JoinHandle};

use super::{dedup, effects, journal, validate::Batch};

/// Batches applied per transaction at most (up to 100 events each): large enough to amortize
/// the commit, small enough that the acknowledging writer waits at most one such transaction.
const BATCHES_PER_APPLY: u64 = 50;
/// How often an idle applier looks for new batches (a cheap read, no lock).
const IDLE_POLL: Duration = Duration::from_millis(25);
/// How often expired `messageId` claims are removed (PostgreSQL).
const EXPIRE_EVERY: Duration = Duration::from_secs(60);

/// Set by `bench ingest` to measure the acknowledging path alone: appliers in this process
/// leave the journal alone while it is set (what is journaled waits, nothing is lost).
static PAUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Pauses or resumes every applier of this process (benchmarks only).
pub fn set_paused(paused: bool) {
    PAUSED.store(paused, std::sync::atomic::Ordering::Relaxed);
}

/// A running applier; [`Applier::drain`] stops it after it has applied what is journaled.
pub struct Applier {
    stop: watch::Sender<Option<tokio::time::Instant>>,
    task: JoinHandle<()>,
}

impl Applier {
    /// Starts the applier on the current runtime.
    pub fn spawn(db: DatabaseConnection, window: Duration) -> Self {
        let (stop, stopped) = watch::channel(None);
        let task = tokio::spawn(run(db, window, stopped));
        Self { stop, task }
    }

    /// Applies what is journaled, until the journal is empty or `deadline`, then stops.
    pub async fn drain(self, deadline: tokio::time::Instant) {
        let _ = self.stop.send(Some(deadline));
        let mut task = self.task;
        if tokio::time::timeout_at(deadline + Duration::from_millis(500), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }

    /// Stops at once (what is journaled stays for the next start).
    pub fn abort(self) {
        self.task.abort();
    }
}

async fn run(
    db: DatabaseConnection,
    window: Duration,
    mut stopped: watch::Receiver<Option<tokio::time::Instant>>,
) {
    let mut last_expiry = tokio::time::Instant::now();
    // The automation engine's rules, read again only when the configuration changes.
    let mut rules = crate::engine::evaluate::RulesCache::default();
    let mut failures = 0u32;
    loop {
        let stop_at = *stopped.borrow();
        if stop_at.is_some_and(|at| tokio::time::Instant::now() >= at) {
            return;
        }
        let next = if PAUSED.load(std::sync::atomic::Ordering::Relaxed) && stop_at.is_none() {
            Ok(None)
        } else {
            apply_next(&db, &mut rules).await
        };
        match next {
            Ok(Some(_)) => {
                failures = 0;
                continue;
            }
            Ok(None) => {
                failures = 0;
                if stop_at.is_some() {
                    return;
                }
            }
            Err(e) => {
                failures += 1;
                tracing::error!(error = %e, failures, "applying journaled events failed; retrying");
                let backoff = Duration::from_millis(100 * u64::from(failures.min(50)));
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stopped.changed() => {}
                }
                continue;
            }
        }
        if db.get_database_backend() == DbBackend::Postgres && last_expiry.elapsed() >= EXPIRE_EVERY
        {
            last_expiry = tokio::time::Instant::now();
            if let Err(e) = dedup::expire_shared(&db, Utc::now(), window).await {
                tracing::warn!(error = %e, "could not expire old messageId claims");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(IDLE_POLL) => {}
            _ = stopped.changed() => {}
        }
    }
}

/// What one apply did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Applied {
    pub batches: usize,
    pub events: usize,
    /// Seconds from the oldest applied batch's acknowledgement to this commit.
    pub lag_secs: f64,
}

/// Applies the oldest journaled batches in one transaction; `None` when there was nothing to
/// apply (or another instance holds the applier's lock).
pub async fn apply_next(
    db: &DatabaseConnection,
    rules: &mut crate::engine::evaluate::RulesCache,
) -> Result<Option<Applied>, DbErr> {
    // A read without the write lock first: an idle journal costs no lock.
    if journal::oldest(db, 1).await?.is_empty() {
        return Ok(None);
    }
    let txn = crate::db::begin_write(db).await?;
    if txn.get_database_backend() == DbBackend::Postgres && !applier_lock(&txn).await? {
        return Ok(None);
    }
    let entries = journal::oldest(&txn, BATCHES_PER_APPLY).await?;
    if entries.is_empty() {
        return Ok(None);
    }
    let batches: Vec<&Batch> = entries.iter().map(|e| &e.batch).collect();
    let runs_created = effects::write_batches(&txn, &batches, rules).await?;
    let seqs: Vec<i64> = entries.iter().map(|e| e.seq).collect();
    journal::remove(&txn, &seqs).await?;
    txn.commit().await?;
    if runs_created > 0 {
        crate::engine::processor::wake();
    }
    let now = Utc::now();
    let lag = |at: chrono::DateTime<Utc>| (now - at).num_milliseconds() as f64 / 1000.0;
    for batch in &batches {
        super::stats::stats().record_applied(batch.events.len() as u64, lag(batch.received_at));
    }
    let oldest = batches.iter().map(|b| b.received_at).min();
    Ok(Some(Applied {
        batches: batches.len(),
        events: batches.iter().map(|b| b.events.len()).sum(),
        lag_secs: oldest.map(lag).unwrap_or_default(),
    }))
}

/// PostgreSQL: the applier's lock for this schema, held until the transaction ends; false when
/// another instance holds it.
async fn applier_lock<C: ConnectionTrait>(conn: &C) -> Result<bool, DbErr> {
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT pg_try_advisory_xact_lock(hashtext(current_schema() || '.ingest_applier'))",
        ))
        .await?;
    Ok(match row {
        Some(r) => r.try_get_by_index::<bool>(0)?,
        None => false,
    })
}
