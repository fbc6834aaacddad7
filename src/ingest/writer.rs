//! The acknowledging writer (group commit): one task takes accepted batches from every
//! concurrent request, drops `messageId` repeats within the window, appends what is left to the
//! journal in one transaction, commits, and only then answers each request. One fsync-bound
//! commit serves many requests; nothing is acknowledged before it is durable; the effects
//! follow behind (see `applier`, which finds the journaled batches by itself).

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicBool, Ordering, Ordering::Relaxed},
        Arc,
    },
    time::Duration,
};

use chrono::Utc;
use sea_orm::{DatabaseConnection, DbBackend, DbErr};
use tokio::sync::{mpsc, oneshot};

use super::{
    dedup, journal,
    validate::{AcceptedEvent, Batch},
    window::{self, shared::SharedWindow, LocalWindow},
};

/// Batches that may wait for the writer before senders wait too (backpressure).
pub const QUEUE_BATCHES: usize = 1_024;
/// Most events written in one transaction.
pub const MAX_GROUP_EVENTS: usize = 20_000;
/// After a write found the database unreachable, batches that come within this time are
/// refused at once instead of each waiting for the database in turn: the writer is one task, so
/// batches queued behind a write that waits for a connection (up to the pool's acquire timeout)
/// would otherwise wait that long once per write ahead of them. The first batch after it tries
/// the database again.
const UNREACHABLE_FAST_FAIL: Duration = Duration::from_millis(500);

/// Why a batch was not written; nothing of it was acknowledged.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    /// The database could not be reached (retryable).
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// The database answers, but the batch could not be taken in time (retryable).
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    Failed(String),
}

impl From<DbErr> for WriteError {
    fn from(err: DbErr) -> Self {
        WriteError::from(&err)
    }
}

impl From<&DbErr> for WriteError {
    fn from(err: &DbErr) -> Self {
        if crate::db::is_unavailable(err) {
            WriteError::Unavailable(err.to_string())
        } else {
            WriteError::Failed(err.to_string())
        }
    }
}

/// A batch waiting to be written, and where to send how many of its events count as processed.
pub struct Job {
    pub batch: Batch,
    /// The batch's journal text ([`journal::encode`]), made by the request; the writer encodes
    /// a batch again only if it dropped repeats from it.
    pub encoded: Option<String>,
    pub reply: oneshot::Sender<Result<usize, WriteError>>,
}

/// A job in a group: the batch loses its repeats before it is journaled; the count is what
/// the request reports (a dropped repeat counts as processed).
struct Pending {
    job: Job,
    processed: usize,
    /// The events dropped as repeats, kept until the group commits: if it fails, each batch is
    /// written again on its own, and a copy dropped because another batch of the group had it
    /// must be back in case that batch fails alone.
    dropped: Vec<AcceptedEvent>,
}

impl Pending {
    /// The batch as it came, before repeats were dropped from it.
    fn restore(&mut self) {
        if self.dropped.is_empty() {
            return;
        }
        let events = &mut self.job.batch.events;
        events.append(&mut self.dropped);
        events.sort_by_key(|event| event.index);
        self.job.encoded = None;
    }
}

/// How repeats are found: in memory on SQLite (one serving process per file); on PostgreSQL
/// in the instance's own window, then by a claim in the shared `ingest_message_keys` table,
/// where the copies sent to two instances at once meet.
enum Repeats {
    Memory(LocalWindow),
    Shared {
        window: Duration,
        own: SharedWindow,
        timing: window::shared::SharedTiming,
    },
}

/// Whether the writer has loaded its `messageId` window (and takes batches), and while it has
/// not, why the last try failed: readiness reports it.
#[derive(Default)]
pub struct WindowLoading {
    loaded: AtomicBool,
    failure: std::sync::Mutex<Option<String>>,
}

impl WindowLoading {
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// Why the last try to load failed, while the window is not loaded.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    fn failed(&self, what: &str, err: &DbErr) {
        tracing::error!(error = %err, "{what}; retrying");
        // Our own errors' text, without the driver's "Custom Error" prefix.
        let reason = match err {
            DbErr::Custom(reason) => reason.clone(),
            other => other.to_string(),
        };
        if let Ok(mut failure) = self.failure.lock() {
            *failure = Some(format!("{what}: {reason}"));
        }
    }

    fn done(&self) {
        if let Ok(mut failure) = self.failure.lock() {
            *failure = None;
        }
        self.loaded.store(true, Ordering::Release);
    }
}

/// Starts the writer task on the current runtime; it ends when every sender is dropped.
/// `loading` says once the `messageId` window is loaded and batches are taken.
pub fn spawn(
    db: DatabaseConnection,
    window: Duration,
    loading: Arc<WindowLoading>,
) -> mpsc::Sender<Job> {
    let (tx, rx) = mpsc::channel(QUEUE_BATCHES);
    tokio::spawn(run(db, rx, window, loading));
    tx
}

async fn run(
    db: DatabaseConnection,
    mut rx: mpsc::Receiver<Job>,
    window: Duration,
    loading: Arc<WindowLoading>,
) {
    // Requests wait (in the queue) until the journal is open and the window rebuilt.
    let mut delay = Duration::from_millis(200);
    let journal = loop {
        match journal::Journal::of(&db).await {
            Ok(journal) => break journal,
            Err(e) => {
                loading.failed("could not open the ingest journal", &e);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    };
    let mut repeats = match db.get_database_backend() {
        DbBackend::Postgres => {
            let timing = window::shared::SharedTiming::from_env().unwrap_or_default();
            let own = loop {
                match SharedWindow::open(&db, &journal, window, timing).await {
                    Ok(own) => break own,
                    Err(e) => {
                        loading.failed("could not rebuild the messageId window", &e);
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(5));
                    }
                }
            };
            let (messages, runs, bytes) = own.describe();
            tracing::info!(messages, runs, bytes, "messageId window loaded");
            Repeats::Shared {
                window,
                own,
                timing,
            }
        }
        _ => {
            // Requests wait (in the queue) until the window is rebuilt: a repeat of a batch
            // acknowledged before a restart must still be recognised.
            let memory = loop {
                let loaded = match window::for_database(&db, window).await {
                    Ok(mut memory) => memory
                        .load(&db, &journal, dedup::message_key)
                        .await
                        .map(|()| memory),
                    Err(e) => Err(e),
                };
                match loaded {
                    Ok(memory) => break memory,
                    Err(e) => {
                        loading.failed("could not rebuild the messageId window", &e);
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(5));
                    }
                }
            };
            tracing::info!(
                messages = memory.len(),
                runs = memory.run_count(),
                bytes = memory.memory_bytes(),
                "messageId window loaded"
            );
            Repeats::Memory(memory)
        }
    };
    loading.done();
    // Until when batches are refused without trying, after the database was found unreachable.
    let mut unreachable_until: Option<std::time::Instant> = None;
    while let Some(first) = rx.recv().await {
        let mut events = first.batch.events.len();
        let mut jobs = vec![first];
        while events < MAX_GROUP_EVENTS {
            match rx.try_recv() {
                Ok(job) => {
                    events += job.batch.events.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        // A request that is gone (its client hung up) is told nothing: its events are not
        // written, so a retry of it cannot store them twice.
        jobs.retain(|job| !job.reply.is_closed());
        // A batch that waited too long is refused (the client retries): the window's replay
        // at start relies on every acknowledged batch having arrived shortly before it was
        // recorded.
        let oldest = Utc::now() - window::MAX_QUEUE_WAIT;
        let (stale, fresh): (Vec<Job>, Vec<Job>) = jobs
            .into_iter()
            .partition(|job| job.batch.received_at < oldest);
        jobs = fresh;
        for job in stale {
            let _ = job.reply.send(Err(WriteError::Busy(
                "the batch waited too long for the writer".into(),
            )));
        }
        if jobs.is_empty() {
            continue;
        }
        if let Repeats::Shared { own, .. } = &repeats {
            if !own.is_current() {
                // Messages another instance took may have left the shared table unread.
                let behind = WriteError::Busy(
                    "the messageId window is catching up with the other instances".into(),
                );
                for job in jobs {
                    let _ = job.reply.send(Err(behind.clone()));
                }
                continue;
            }
        }
        if unreachable_until.is_some_and(|until| std::time::Instant::now() < until) {
            let refused =
                WriteError::Unavailable("not tried: the last write could not reach it".into());
            for job in jobs {
                let _ = job.reply.send(Err(refused.clone()));
            }
            continue;
        }
        let mut group: Vec<Pending> = jobs
            .into_iter()
            .map(|job| Pending {
                processed: job.batch.events.len(),
                job,
                dropped: Vec::new(),
            })
            .collect();
        let started = std::time::Instant::now();
        let written = write_group(journal.conn(), &mut repeats, &mut group).await;
        if written.is_ok() {
            unreachable_until = None;
        }
        match written {
            Ok(()) => answer(group, Ok(())),
            Err(err @ WriteError::Failed(_)) if group.len() > 1 => {
                // One batch must not fail its neighbours: write each on its own, as it came
                // (the window forgot what the failed group recorded, so repeats are dropped
                // afresh, and a copy goes in with the first batch that is written).
                tracing::warn!(error = %err, batches = group.len(), "group write failed; retrying batches one by one");
                let mut unreachable = None;
                for mut pending in group {
                    if let Some(err) = &unreachable {
                        answer(vec![pending], Err(WriteError::clone(err)));
                        continue;
                    }
                    pending.restore();
                    let mut one = vec![pending];
                    let result = write_group(journal.conn(), &mut repeats, &mut one).await;
                    if let Err(err @ WriteError::Unavailable(_)) = &result {
                        unreachable = Some(err.clone());
                    }
                    answer(one, result);
                }
                if unreachable.is_some() {
                    unreachable_until = Some(std::time::Instant::now() + UNREACHABLE_FAST_FAIL);
                }
            }
            Err(err) => {
                if let WriteError::Unavailable(_) = &err {
                    tracing::warn!(error = %err, batches = group.len(), "the database is unreachable: batches refused");
                    unreachable_until = Some(std::time::Instant::now() + UNREACHABLE_FAST_FAIL);
                }
                answer(group, Err(err))
            }
        }
        super::stats::stats()
            .writer_busy_us
            .fetch_add(started.elapsed().as_micros() as u64, Relaxed);
        let window_bytes = match &mut repeats {
            Repeats::Memory(memory) => {
                memory.sweep(Utc::now());
                memory.memory_bytes()
            }
            Repeats::Shared { own, .. } => own.sweep(Utc::now()),
        };
        super::stats::stats()
            .window_bytes
            .store(window_bytes as u64, Relaxed);
    }
}

fn answer(group: Vec<Pending>, result: Result<(), WriteError>) {
    for pending in group {
        let reply = match &result {
            Ok(()) => Ok(pending.processed),
            Err(e) => Err(e.clone()),
        };
        let _ = pending.job.reply.send(reply);
    }
}

/// Drops the group's repeats from its batches and journals the rest in one transaction on
/// `db`, the journal's connection (the database itself on PostgreSQL, whose `messageId` claims
/// commit with the journal rows).
async fn write_group(
    db: &DatabaseConnection,
    repeats: &mut Repeats,
    group: &mut [Pending],
) -> Result<(), WriteError> {
    let mut recorded = Vec::new();
    let written = journal_group(db, repeats, group, &mut recorded).await;
    if written.is_err() {
        if let Repeats::Memory(memory) = repeats {
            memory.forget(&recorded);
        }
    }
    written
}

/// [`write_group`]'s work; `recorded`: the messages the in-memory window recorded as new,
/// which it forgets if this fails.
async fn journal_group(
    db: &DatabaseConnection,
    repeats: &mut Repeats,
    group: &mut [Pending],
    recorded: &mut Vec<dedup::MessageKey>,
) -> Result<(), WriteError> {
    let now = Utc::now();
    // Where the writer's time goes, for `RUST_LOG=custintel::ingest::writer=debug`.
    let started = std::time::Instant::now();
    let txn = match repeats {
        Repeats::Memory(memory) => {
            // A second copy within the group is found as the first copy's record.
            for pending in group.iter_mut() {
                retain_fresh(pending, |org, id| {
                    let key = dedup::message_key(org, id);
                    let new = memory.check_and_record(key, now);
                    if new {
                        recorded.push(key);
                    }
                    new
                });
            }
            None
        }
        Repeats::Shared { window, own, .. } => {
            // Each message is hashed once: its key is checked against this instance's window,
            // and what the window does not know is claimed in the shared table.
            let mut unknown: Vec<Vec<dedup::ClaimKey>> = Vec::with_capacity(group.len());
            for pending in group.iter_mut() {
                let batch = &pending.job.batch;
                let keys: Vec<dedup::ClaimKey> = batch
                    .events
                    .iter()
                    .filter_map(|e| e.message_id.as_deref())
                    .map(|id| dedup::shared_key_bytes(&batch.organization_id, id))
                    .collect();
                let known = own.known(&keys, now);
                let mut flags = known.iter();
                retain_fresh(pending, |_, _| !flags.next().copied().unwrap_or(false));
                unknown.push(
                    keys.into_iter()
                        .zip(known)
                        .filter(|(_, known)| !known)
                        .map(|(k, _)| k)
                        .collect(),
                );
            }
            let txn = crate::db::begin_write(db).await?;
            // Distinct messages of the group, first copy wins; the table answers which are new.
            let mut distinct = HashSet::new();
            let claims: Vec<dedup::ClaimKey> = unknown
                .iter()
                .flatten()
                .filter(|k| distinct.insert(**k))
                .copied()
                .collect();
            let mut new = dedup::claim_shared(&txn, claims, *window).await?;
            for (pending, keys) in group.iter_mut().zip(unknown) {
                let mut keys = keys.iter();
                retain_fresh(pending, |_, _| keys.next().is_some_and(|k| new.remove(k)));
            }
            Some(txn)
        }
    };
    let checked = started.elapsed();
    // Batches that lost repeats (or came without their text) are encoded here; the others
    // were encoded by their requests, in parallel, off this one task.
    for pending in group.iter_mut() {
        if pending.job.encoded.is_none() && !pending.job.batch.events.is_empty() {
            pending.job.encoded = Some(journal::encode(&pending.job.batch)?);
        }
    }
    let rows: Vec<(&Batch, &str)> = group
        .iter()
        .filter_map(|p| Some((&p.job.batch, p.job.encoded.as_deref()?)))
        .collect();
    let encoded = started.elapsed();
    // One statement is a transaction of its own: a group that fits one needs no BEGIN and
    // COMMIT round trips to the driver's thread, which took as long as the insert itself.
    let txn = match txn {
        None if !journal::fits_one_statement(&rows) => Some(crate::db::begin_write(db).await?),
        txn => txn,
    };
    match txn {
        Some(txn) => {
            journal::append_encoded(&txn, &rows).await?;
            if let Repeats::Shared { timing, .. } = repeats {
                if started.elapsed() > timing.longest_write() {
                    // Its claims would commit after the other instances read past their time:
                    // not committed (rolled back as the transaction drops), the client retries.
                    return Err(WriteError::Busy(
                        "the database took too long to take the batch".into(),
                    ));
                }
            }
            txn.commit().await?;
        }
        None => journal::append_encoded(db, &rows).await?,
    }
    let committed = started.elapsed();
    let journaled: usize = rows.iter().map(|(b, _)| b.events.len()).sum();
    let received: usize = group.iter().map(|p| p.processed).sum();
    let counters = super::stats::stats();
    counters.journaled.fetch_add(journaled as u64, Relaxed);
    counters
        .repeats
        .fetch_add(received.saturating_sub(journaled) as u64, Relaxed);
    tracing::debug!(
        batches = rows.len(),
        repeats_ms = checked.as_secs_f64() * 1e3,
        encode_ms = (encoded - checked).as_secs_f64() * 1e3,
        append_ms = (committed - encoded).as_secs_f64() * 1e3,
        "group journaled"
    );
    Ok(())
}

/// Keeps the events `is_new` lets through (events without a `messageId` always pass) and sets
/// the others aside; a batch that lost some loses its request-made text too.
fn retain_fresh(pending: &mut Pending, mut is_new: impl FnMut(&str, &str) -> bool) {
    let batch = &mut pending.job.batch;
    let org = batch.organization_id.clone();
    let before = pending.dropped.len();
    pending.dropped.extend(
        batch
            .events
            .extract_if(.., |event| match &event.message_id {
                Some(id) => !is_new(&org, id),
                None => false,
            }),
    );
    if pending.dropped.len() != before {
        pending.job.encoded = None;
    }
}
