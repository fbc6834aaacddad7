//! The applier: moves acknowledged batches from the journal into `events` and applies their
//! effects on visitors, users and customers, oldest first (so in order per organization), in
//! transactions that also delete them from the journal (or, when the journal is a file of its
//! own, move the applied mark past them): after a crash every acknowledged batch is applied
//! exactly once.
//!
//! Every serving instance runs one. On PostgreSQL each transaction applies one organization's
//! oldest batches under a transaction-scoped advisory lock keyed by the schema and the
//! organization (a lease): instances apply different organizations at once, and never one
//! organization's batches out of order; a killed instance's lease goes with its connection.

use std::time::Duration;

use chrono::Utc;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};
use tokio::{sync::watch, task::JoinHandle};

use super::{
    after_apply::AfterApply,
    apply_txn::ApplyTxn,
    effects,
    journal::{self, Journal, JournalEntry},
    stats::WriterLoad,
    validate::Batch,
};

/// Batches applied per transaction at most (up to 100 events each): large enough to amortize
/// the commit, small enough that other writers of the database (and, where the journal is in
/// the database, the acknowledging writer) wait at most one such transaction.
const BATCHES_PER_APPLY: u64 = 50;
/// How long the applier leaves the main file's write lock to other writers after each commit
/// (more than their 1 ms busy-handler poll).
const WRITERS_TURN: Duration = Duration::from_millis(3);
/// How often an idle applier looks for new batches (a cheap read, no lock).
const IDLE_POLL: Duration = Duration::from_millis(25);
/// While ingest is saturated ([`WriterLoad`]), the applier pauses after each group this many
/// times as long as the group took: it works a third of the time, and the acknowledging path
/// gets the CPU the rest of it. The niced threads alone still took about a seventh of the two
/// cores at the peak (docs/performance.md); the backlog grows under a saturating load either
/// way, since applying costs more CPU per event than acknowledging.
const SATURATED_PAUSE_FACTOR: u32 = 2;
/// The longest such pause: the applier keeps applying under the longest overload.
const LONGEST_SATURATED_PAUSE: Duration = Duration::from_millis(500);

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
    /// Starts the applier on the current runtime; `after` works on each group's events in its
    /// transaction (the automation engine's evaluation).
    pub fn spawn(db: DatabaseConnection, after: impl AfterApply + 'static) -> Self {
        let (stop, stopped) = watch::channel(None);
        let task = tokio::spawn(run(db, Box::new(after), stopped));
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
    mut after: Box<dyn AfterApply>,
    mut stopped: watch::Receiver<Option<tokio::time::Instant>>,
) {
    let mut failures = 0u32;
    let mut journal = None;
    let mut ahead = ReadAhead::default();
    // Made with the journal, whose kind decides how saturation is read.
    let mut ingest_load: Option<WriterLoad> = None;
    loop {
        let stop_at = *stopped.borrow();
        if stop_at.is_some_and(|at| tokio::time::Instant::now() >= at) {
            return;
        }
        let started = tokio::time::Instant::now();
        let next = if PAUSED.load(std::sync::atomic::Ordering::Relaxed) && stop_at.is_none() {
            Ok(None)
        } else {
            match &journal {
                Some(j) => apply_next_reading_ahead(j, after.as_mut(), &mut ahead).await,
                // Connections of its own to the journal file, opened on this task's runtime.
                None => Journal::of_unshared(&db).await.map(|j| {
                    ingest_load = Some(WriterLoad::new(j.shares_write_lock()));
                    journal = Some(j);
                    Some(Applied::default())
                }),
            }
        };
        match next {
            Ok(Some(_)) => {
                failures = 0;
                // Acknowledgements first while they saturate the machine (not while draining
                // for a stop: ingest has stopped then).
                if stop_at.is_none() && ingest_load.as_mut().is_some_and(WriterLoad::saturated) {
                    let pause =
                        (started.elapsed() * SATURATED_PAUSE_FACTOR).min(LONGEST_SATURATED_PAUSE);
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = stopped.changed() => {}
                    }
                }
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
        tokio::select! {
            _ = tokio::time::sleep(IDLE_POLL) => {}
            _ = stopped.changed() => {}
        }
    }
}

/// What one apply did.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Applied {
    pub batches: usize,
    pub events: usize,
    /// Seconds from the oldest applied batch's acknowledgement to this commit.
    pub lag_secs: f64,
}

/// Applies the oldest journaled batches in one transaction; `None` when there was nothing to
/// apply (or another instance holds the applier's lock).
pub async fn apply_next(
    journal: &Journal,
    after: &mut dyn AfterApply,
) -> Result<Option<Applied>, DbErr> {
    apply_next_reading_ahead(journal, after, &mut ReadAhead::disabled()).await
}

/// The next group of a journal file, read and parsed while the current group is written to the
/// main file: the applier's two halves then use both cores instead of taking turns on one.
#[derive(Default)]
struct ReadAhead {
    disabled: bool,
    /// The applied mark the read started from, and the read.
    next: Option<(i64, JoinHandle<Result<Vec<JournalEntry>, DbErr>>)>,
}

impl ReadAhead {
    fn disabled() -> Self {
        Self {
            disabled: true,
            next: None,
        }
    }

    /// The batches after `mark`: the read started earlier if it started from `mark` (another
    /// process may have moved the mark meanwhile) and found some, a new read otherwise (an
    /// empty read-ahead may be older than batches journaled since: reading again now keeps an
    /// applier that keeps up from waiting a poll interval for them).
    async fn read(
        &mut self,
        file: &DatabaseConnection,
        mark: i64,
    ) -> Result<Vec<JournalEntry>, DbErr> {
        if let Some((after, reading)) = self.next.take() {
            if after == mark {
                match reading.await {
                    Ok(Ok(entries)) if !entries.is_empty() => return Ok(entries),
                    Ok(Err(e)) => return Err(e),
                    _ => {}
                }
            } else {
                reading.abort();
            }
        }
        journal::read_after(file, mark, BATCHES_PER_APPLY).await
    }

    /// Starts reading the batches after `last`, the mark the group being written moves to.
    fn start(&mut self, file: &DatabaseConnection, last: i64) {
        if self.disabled {
            return;
        }
        let file = file.clone();
        self.next = Some((
            last,
            tokio::spawn(async move { journal::read_after(&file, last, BATCHES_PER_APPLY).await }),
        ));
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        if let Some((_, reading)) = self.next.take() {
            reading.abort();
        }
    }
}

async fn apply_next_reading_ahead(
    journal: &Journal,
    after: &mut dyn AfterApply,
    ahead: &mut ReadAhead,
) -> Result<Option<Applied>, DbErr> {
    let (entries, runs_created) = match journal {
        Journal::InDatabase(db) => {
            let Some(applied) = apply_in_database(db, after).await? else {
                return Ok(None);
            };
            applied
        }
        Journal::OwnFile { main, file } => {
            let Some(applied) = apply_from_own_file(main, file, after, ahead).await? else {
                return Ok(None);
            };
            applied
        }
    };
    if runs_created > 0 {
        after.committed(runs_created);
    }
    let now = Utc::now();
    let lag = |at: chrono::DateTime<Utc>| (now - at).num_milliseconds() as f64 / 1000.0;
    for entry in &entries {
        super::stats::stats().record_applied(
            entry.batch.events.len() as u64,
            lag(entry.batch.received_at),
        );
    }
    let oldest = entries.iter().map(|e| e.batch.received_at).min();
    Ok(Some(Applied {
        batches: entries.len(),
        events: entries.iter().map(|e| e.batch.events.len()).sum(),
        lag_secs: oldest.map(lag).unwrap_or_default(),
    }))
}

/// The journal is a table of the database: read, apply and delete in one transaction (under
/// the applier's lock on PostgreSQL).
async fn apply_in_database(
    db: &DatabaseConnection,
    after: &mut dyn AfterApply,
) -> Result<Option<(Vec<JournalEntry>, usize)>, DbErr> {
    // A read without the write lock first: an idle journal costs no lock.
    if !journal::has_rows(db).await? {
        return Ok(None);
    }
    let txn = ApplyTxn::begin(db).await?;
    let mut entries = if txn.get_database_backend() == DbBackend::Postgres {
        let Some(organization_id) = lease_an_organization(&txn).await? else {
            return Ok(None);
        };
        journal::oldest_of(&txn, &organization_id, BATCHES_PER_APPLY).await?
    } else {
        journal::oldest(&txn, BATCHES_PER_APPLY).await?
    };
    if entries.is_empty() {
        return Ok(None);
    }
    let mut batches: Vec<&mut Batch> = entries.iter_mut().map(|e| &mut e.batch).collect();
    let runs_created = effects::write_batches(&txn, &mut batches, after).await?;
    let seqs: Vec<i64> = entries.iter().map(|e| e.seq).collect();
    journal::remove(&txn, &seqs).await?;
    txn.commit().await?;
    Ok(Some((entries, runs_created)))
}

/// The journal is a file of its own (SQLite): its batches are read and parsed before the main
/// file's write lock is taken, applied in one transaction that moves the applied mark past
/// them, and deleted from the journal file after that commit (a stop in between leaves rows the
/// mark already covers: they are skipped, and deleted by the next apply). The next group is
/// read while this one is written (`ahead`).
async fn apply_from_own_file(
    main: &DatabaseConnection,
    file: &DatabaseConnection,
    after: &mut dyn AfterApply,
    ahead: &mut ReadAhead,
) -> Result<Option<(Vec<JournalEntry>, usize)>, DbErr> {
    let started = std::time::Instant::now();
    let mark = journal::applied_through(main).await?;
    let mut entries = ahead.read(file, mark).await?;
    let Some(last) = entries.last().map(|e| e.seq) else {
        return Ok(None);
    };
    let read = started.elapsed();
    // Batches journaled after `last` are read meanwhile; a group that fails or loses a race
    // leaves the mark elsewhere, and that read is then dropped (`ReadAhead::read`).
    ahead.start(file, last);
    let txn = ApplyTxn::begin(main).await?;
    let locked = started.elapsed();
    if !journal::advance_applied(&txn, mark, last).await? {
        // Another process applied these meanwhile; read again from its mark.
        txn.rollback().await?;
        return Ok(Some((Vec::new(), 0)));
    }
    let mut batches: Vec<&mut Batch> = entries.iter_mut().map(|e| &mut e.batch).collect();
    let runs_created = effects::write_batches(&txn, &mut batches, after).await?;
    let written = started.elapsed();
    txn.commit().await?;
    let committed = started.elapsed();
    if let Err(e) = journal::remove_through(file, last).await {
        // Harmless: the mark covers them, the next apply deletes them.
        tracing::warn!(error = %e, "could not delete applied batches from the journal");
    }
    tracing::debug!(
        batches = entries.len(),
        read_ms = read.as_secs_f64() * 1e3,
        lock_wait_ms = (locked - read).as_secs_f64() * 1e3,
        write_ms = (written - locked).as_secs_f64() * 1e3,
        commit_ms = (committed - written).as_secs_f64() * 1e3,
        remove_ms = (started.elapsed() - committed).as_secs_f64() * 1e3,
        "applied from the journal file"
    );
    // SQLite does not queue writers: one waiting for the main file's lock tries every
    // millisecond, and an applier with a backlog would begin its next transaction before that
    // try (the automation processor waited for whole ingest phases). Leave it a chance.
    tokio::time::sleep(WRITERS_TURN).await;
    Ok(Some((entries, runs_created)))
}

/// Organizations whose batches wait, oldest first, that a transaction tries to lease.
const LEASE_CANDIDATES: i64 = 16;

/// PostgreSQL: leases the organization with the oldest waiting batch that no other applier
/// holds, until the transaction ends; `None` when every waiting organization is being applied,
/// or when the schema's applier lock is held exclusively (which stops every applier: an
/// applier holds it shared).
async fn lease_an_organization<C: ConnectionTrait>(conn: &C) -> Result<Option<String>, DbErr> {
    let candidates = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            // The waiting organizations one index probe each (a loose scan of the journal's
            // `(organization_id, seq)` index), each ranked by its oldest batch, another probe.
            "WITH RECURSIVE gate AS (SELECT pg_try_advisory_xact_lock_shared(\
             hashtext(current_schema() || '.ingest_applier')) AS open), \
             waiting(organization_id) AS ( \
               (SELECT organization_id FROM ingest_journal, gate WHERE gate.open \
                ORDER BY organization_id LIMIT 1) \
               UNION ALL \
               SELECT (SELECT j.organization_id FROM ingest_journal j \
                       WHERE j.organization_id > w.organization_id \
                       ORDER BY j.organization_id LIMIT 1) \
               FROM waiting w WHERE w.organization_id IS NOT NULL) \
             SELECT w.organization_id FROM waiting w WHERE w.organization_id IS NOT NULL \
             ORDER BY (SELECT min(j.seq) FROM ingest_journal j \
                       WHERE j.organization_id = w.organization_id) \
             LIMIT $1",
            [LEASE_CANDIDATES.into()],
        ))
        .await?;
    for row in candidates {
        let organization_id: String = row.try_get_by_index(0)?;
        // One lock at a time: a filter in the query above could take several.
        let leased = conn
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!(
                    "SELECT pg_try_advisory_xact_lock({})",
                    crate::db::IDENTITIES_LOCK
                ),
                [organization_id.clone().into()],
            ))
            .await?
            .map(|r| r.try_get_by_index::<bool>(0))
            .transpose()?
            .unwrap_or(false);
        if leased {
            return Ok(Some(organization_id));
        }
    }
    Ok(None)
}
