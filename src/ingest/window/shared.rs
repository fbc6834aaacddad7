//! The `messageId` window of a PostgreSQL database, which several instances serve at once.
//!
//! Every instance keeps the whole window itself, in the same bounded memory as SQLite's
//! ([`LocalWindow`], its runs in a directory of its own), and the database keeps only the last
//! few seconds of claims (`ingest_message_keys`, [`SharedTiming::kept`]). A batch's messages are
//! checked against the instance's own window first; those it does not know are claimed in the
//! table, in the transaction that journals the batch, where copies sent to two instances at
//! once meet: the second waits for the first's commit and finds its claim. Each instance reads
//! the claims every instance made into its own window about once a second, before the table
//! forgets them.
//!
//! So the table the acknowledging path writes to stays small (the seconds the instances need
//! to read it) whatever the window's length and rate: a claim is an insert into a B-tree that
//! stays in the server's cache, instead of a random insert into one that holds the whole window
//! (864 million keys for a day at 10,000 events/s).
//!
//! The claims are read by the server's clock: a claim is stamped with its transaction's start
//! (`now()`), read once it is older than [`SharedTiming::grace`], and a write whose transaction
//! lasted longer than [`SharedTiming::longest_write`] is not committed (the batch is refused,
//! the client retries), so no claim commits after the readers passed its time. An instance
//! whose reading fell behind refuses batches (503) until it has caught up, and one that fell
//! behind the table's expiry (stopped, or cut off from the database) first records what it
//! missed from the stored events and the journal, as every instance does at start.

use std::{
    fs::File,
    path::PathBuf,
    sync::{Arc, Mutex, Weak},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};

use super::{published, LocalWindow};
use crate::ingest::{dedup, journal::Journal};

/// How long claims stay in the shared table by default.
pub const DEFAULT_KEPT: Duration = Duration::from_secs(30);

/// The shared table's timing, all derived from how long it keeps a claim.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SharedTiming {
    /// How long a claim stays in the shared table (`CUSTINTEL_DEDUP_SHARED_SPAN`).
    pub kept: Duration,
}

impl Default for SharedTiming {
    fn default() -> Self {
        Self { kept: DEFAULT_KEPT }
    }
}

impl SharedTiming {
    /// `CUSTINTEL_DEDUP_SHARED_SPAN` (`<n>s|m|h|d|w`, at least 3 s), else the default 30 s.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var("CUSTINTEL_DEDUP_SHARED_SPAN") {
            Ok(v) if !v.trim().is_empty() => dedup::parse_window(&v)
                .ok()
                .filter(|d| d.as_secs() >= 3)
                .map(|kept| Self { kept })
                .ok_or_else(|| format!("`{v}` is not a span of 3s or more (e.g. 30s)")),
            _ => Ok(Self::default()),
        }
    }

    /// How old a claim is before the instances read it: longer than any transaction that
    /// commits one lasts.
    pub fn grace(&self) -> Duration {
        self.kept / 3
    }

    /// The longest an acknowledging transaction may last and still commit.
    pub fn longest_write(&self) -> Duration {
        self.kept / 6
    }

    /// How long after its last read of the claims an instance still trusts its window: the
    /// claims it has not read yet are then still in the table.
    fn trusted_for(&self) -> Duration {
        self.kept / 2
    }

    /// How often the claims are read.
    fn read_every(&self) -> Duration {
        (self.kept / 30).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }

    /// How often old claims are removed from the table.
    pub fn expire_every(&self) -> Duration {
        (self.kept / 6).min(Duration::from_secs(60))
    }
}

/// An instance's window of a PostgreSQL database (see the module's description).
pub struct SharedWindow {
    local: Arc<Mutex<LocalWindow>>,
    /// When the last successful read of the claims was asked for.
    read_at: Arc<Mutex<Instant>>,
    timing: SharedTiming,
    /// Held while the window's directory is this instance's.
    _directory_lock: File,
}

impl SharedWindow {
    /// Opens this instance's window (a directory no other running instance holds), records
    /// what its runs lack from the database, and starts following the claims.
    pub async fn open(
        db: &DatabaseConnection,
        journal: &Journal,
        window: Duration,
        timing: SharedTiming,
    ) -> Result<Self, DbErr> {
        let (dir, identity, lock) = free_directory(db).await?;
        // A directory without runs (a new instance) starts from the runs another instance
        // published, not from the whole window's events.
        let copied = match published::copy_into(db, &dir, &identity, window).await {
            Ok(copied) => copied,
            Err(e) => {
                tracing::warn!(error = %e, "could not copy the messageId window's published runs; the window is read from the stored events");
                None
            }
        };
        if let Some(copied) = &copied {
            tracing::info!(
                runs = copied.len(),
                "copied the messageId window's published runs"
            );
        }
        let mut local = super::open_in(dir.clone(), identity, window, copied).await?;
        let publisher = published::publisher_name(&dir)
            .map_err(|e| DbErr::Custom(format!("could not open the messageId window: {e}")))?;
        // Runs hold what was read from the claims some seconds after the messages came.
        local.replay_earlier(chrono_duration(timing.kept + timing.grace()));
        // Claims committed while the replay below reads are read from the table: their
        // transactions began at most a grace before now. If the replay outlasts the table's
        // span, the first read finds itself behind and replays the difference.
        let from = server_time(db, timing).await?.0;
        local.load(db, journal, dedup::shared_message_key).await?;
        let local = Arc::new(Mutex::new(local));
        let read_at = Arc::new(Mutex::new(Instant::now()));
        tokio::spawn(follow(
            db.clone(),
            journal.clone(),
            Arc::downgrade(&local),
            read_at.clone(),
            timing,
            from,
        ));
        tokio::spawn(expire(
            db.clone(),
            Arc::downgrade(&local),
            timing.kept.min(window),
            timing.expire_every(),
        ));
        tokio::spawn(published::publish(
            db.clone(),
            Arc::downgrade(&local),
            publisher,
        ));
        Ok(Self {
            local,
            read_at,
            timing,
            _directory_lock: lock,
        })
    }

    /// Whether the window holds every claim the table may have forgotten: otherwise batches
    /// are refused until it does.
    pub fn is_current(&self) -> bool {
        lock(&self.read_at).elapsed() <= self.timing.trusted_for()
    }

    /// Answers, for each claim key, whether the window knows it (first claimed within the
    /// window).
    pub fn known(&self, keys: &[dedup::ClaimKey], now: DateTime<Utc>) -> Vec<bool> {
        let local = lock(&self.local);
        keys.iter()
            .map(|k| local.contains(&dedup::window_key(k), now))
            .collect()
    }

    /// Between writes: see [`LocalWindow::sweep`]. Answers the window's memory.
    pub fn sweep(&self, now: DateTime<Utc>) -> usize {
        let mut local = lock(&self.local);
        local.sweep(now);
        local.memory_bytes()
    }

    /// Messages held, runs on disk and memory: for the start-up log.
    pub fn describe(&self) -> (usize, usize, usize) {
        let local = lock(&self.local);
        (local.len(), local.run_count(), local.memory_bytes())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::days(1))
}

/// Where instances keep their windows (`CUSTINTEL_WINDOW_DIR`, else the system's temporary
/// directory).
fn base_directory() -> PathBuf {
    match std::env::var("CUSTINTEL_WINDOW_DIR") {
        Ok(dir) if !dir.trim().is_empty() => PathBuf::from(dir),
        _ => std::env::temp_dir().join("custintel-window"),
    }
}

/// The name each window directory of the database `identity` starts with.
fn directory_name(identity: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(identity.as_bytes()))
}

/// The first directory of this database under `base` that no running process holds, and the
/// lock that holds it. A restarted instance takes back the one it left, with its runs.
fn claim_directory(base: &std::path::Path, identity: &str) -> std::io::Result<(PathBuf, File)> {
    std::fs::create_dir_all(base)?;
    let name = directory_name(identity);
    for slot in 0.. {
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(base.join(format!("{name}-{slot}.lock")))?;
        match lock.try_lock() {
            Ok(()) => return Ok((base.join(format!("{name}-{slot}")), lock)),
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
    unreachable!("an unbounded range ends")
}

/// The window directory an instance of `db` starting now would take, the database's identity
/// the window is made for, and the lock that holds the directory until dropped. (Benchmarks
/// fill a window there before they start an instance that takes it back.)
pub async fn free_directory(db: &DatabaseConnection) -> Result<(PathBuf, String, File), DbErr> {
    let identity = database_identity(db).await?;
    let base = base_directory();
    let (dir, lock) = claim_directory(&base, &identity).map_err(|e| {
        DbErr::Custom(format!(
            "could not open the messageId window in {} (CUSTINTEL_WINDOW_DIR): {e}",
            base.display()
        ))
    })?;
    Ok((dir, identity, lock))
}

/// Removes the windows this database's stopped instances left for a restart to take back (a
/// window held by a running instance stays): for a database about to be dropped, whose windows
/// no instance will take back. Answers how many were removed.
pub async fn remove_stopped_windows(db: &DatabaseConnection) -> Result<usize, DbErr> {
    let identity = database_identity(db).await?;
    Ok(remove_unheld(&base_directory(), &identity))
}

fn remove_unheld(base: &std::path::Path, identity: &str) -> usize {
    let prefix = format!("{}-", directory_name(identity));
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(slot) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.strip_suffix(".lock"))
        else {
            continue;
        };
        let lock_path = entry.path();
        let Ok(lock) = File::options().write(true).open(&lock_path) else {
            continue;
        };
        if lock.try_lock().is_ok() {
            let _ = std::fs::remove_dir_all(base.join(format!("{prefix}{slot}")));
            let _ = std::fs::remove_file(&lock_path);
            removed += 1;
        }
    }
    removed
}

/// What tells this database apart from another: its name, the schema, and when its schema
/// was first created (a database dropped and made again under the same name differs).
pub async fn database_identity(db: &DatabaseConnection) -> Result<String, DbErr> {
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT current_database() || ':' || current_schema() || ':' || \
             coalesce((SELECT CAST(applied_at AS text) FROM seaql_migrations \
             ORDER BY version LIMIT 1), '')",
        ))
        .await?;
    Ok(row
        .map(|r| r.try_get_by_index::<String>(0))
        .transpose()?
        .unwrap_or_default())
}

/// The server's time less the grace (how far claims may be read), and less `kept` (before
/// which the table may have forgotten them).
async fn server_time(
    db: &DatabaseConnection,
    timing: SharedTiming,
) -> Result<(DateTime<Utc>, DateTime<Utc>), DbErr> {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT clock_timestamp() - make_interval(secs => $1), \
             clock_timestamp() - make_interval(secs => $2)",
            [
                timing.grace().as_secs_f64().into(),
                timing.kept.as_secs_f64().into(),
            ],
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("the server did not tell its time".into()))?;
    Ok((row.try_get_by_index(0)?, row.try_get_by_index(1)?))
}

/// Reads the claims into the window about once a second, until the window is dropped.
async fn follow(
    db: DatabaseConnection,
    journal: Journal,
    local: Weak<Mutex<LocalWindow>>,
    read_at: Arc<Mutex<Instant>>,
    timing: SharedTiming,
    mut from: DateTime<Utc>,
) {
    let mut failing_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(timing.read_every()).await;
        let Some(window) = local.upgrade() else {
            return;
        };
        let asked = Instant::now();
        match read_claims(&db, &journal, &window, timing, &mut from).await {
            Ok(()) => {
                *lock(&read_at) = asked;
                if failing_since.take().is_some() {
                    tracing::info!("reading the messageId claims again");
                }
            }
            Err(e) => {
                // Logged once per failure spell: during an outage it fails every second.
                if failing_since.is_none() {
                    tracing::warn!(error = %e, "could not read the messageId claims; batches are refused once the window is behind");
                    failing_since = Some(asked);
                }
            }
        }
    }
}

/// Removes the claims every instance has read, in a task of its own (it never delays a
/// write or an apply), until the window is dropped. Every instance does it; when two do it at
/// once, the second finds little left.
async fn expire(
    db: DatabaseConnection,
    local: Weak<Mutex<LocalWindow>>,
    kept: Duration,
    every: Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        if local.strong_count() == 0 {
            return;
        }
        if let Err(e) = dedup::expire_shared(&db, kept).await {
            tracing::warn!(error = %e, "could not remove old messageId claims");
        }
    }
}

/// One read: the claims made since `from` that are old enough to have committed, and, if
/// the table may have forgotten some since `from`, the stored messages first.
async fn read_claims(
    db: &DatabaseConnection,
    journal: &Journal,
    window: &Mutex<LocalWindow>,
    timing: SharedTiming,
    from: &mut DateTime<Utc>,
) -> Result<(), DbErr> {
    let (upto, forgotten_before) = server_time(db, timing).await?;
    let margin = chrono_duration(timing.kept / 6);
    if *from < forgotten_before + margin {
        let since = *from - margin;
        tracing::warn!(%since, "the messageId window fell behind the shared claims; recording the stored messages since then");
        // Replayed into a window of its own, then merged: the writer keeps checking meanwhile
        // (and refuses batches, the window being behind).
        let mut replayed = {
            let local = lock(window);
            LocalWindow::in_memory(local.window_length())
        };
        replayed
            .replay(db, journal, since, dedup::shared_message_key)
            .await?;
        let mut local = lock(window);
        replayed.drain_into(&mut local);
    }
    // The keys come as one value (16 bytes each, back to back): a row per claim cost a
    // decoded row per claim on every instance, about once a second at the full rate. Each is
    // recorded as first seen at `upto`, at most the read's interval after its claim: its
    // repeats are dropped that much longer, never shorter, than the window.
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT string_agg(key, ''::bytea) FROM ingest_message_keys \
             WHERE first_seen_at > $1 AND first_seen_at <= $2",
            [(*from).into(), upto.into()],
        ))
        .await?;
    let keys: Option<Vec<u8>> = row.map(|r| r.try_get_by_index(0)).transpose()?.flatten();
    {
        let mut local = lock(window);
        let keys = keys.unwrap_or_default();
        local.record(keys.chunks_exact(16).filter_map(dedup::key_of_claim), upto);
        local.sweep(Utc::now());
    }
    *from = upto.max(*from);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_keeps_its_order() {
        let t = SharedTiming { kept: DEFAULT_KEPT };
        // A claim commits (longest write) before it is read (grace), and is read again and
        // again (trusted) before the table forgets it (kept).
        assert!(t.longest_write() < t.grace());
        assert!(t.grace() + t.trusted_for() < t.kept);
        assert_eq!(t.read_every(), Duration::from_secs(1));
        let short = SharedTiming {
            kept: Duration::from_secs(3),
        };
        assert_eq!(short.read_every(), Duration::from_millis(100));
    }

    #[test]
    fn a_directory_is_held_by_one_window_at_a_time() {
        let base = tempfile::tempdir().unwrap();
        let (first, first_lock) = claim_directory(base.path(), "db:schema:1").unwrap();
        let (second, _second_lock) = claim_directory(base.path(), "db:schema:1").unwrap();
        assert_ne!(first, second);
        let (other, other_lock) = claim_directory(base.path(), "db:schema:2").unwrap();
        assert_ne!(other, first);
        drop(first_lock);
        let (again, again_lock) = claim_directory(base.path(), "db:schema:1").unwrap();
        assert_eq!(
            again, first,
            "a restarted instance takes back its directory"
        );
        drop(again_lock);
        for dir in [&first, &second, &other] {
            std::fs::create_dir_all(dir).unwrap();
        }
        // Another database's window, its instance stopped: not this database's to remove.
        drop(other_lock);
        assert_eq!(remove_unheld(base.path(), "db:schema:1"), 1);
        assert!(!first.exists(), "a stopped instance's window is removed");
        assert!(second.exists(), "a running instance's window stays");
        assert!(other.exists(), "another database's window stays");
        assert_eq!(remove_unheld(base.path(), "db:schema:2"), 1);
        assert!(!other.exists());
    }
}
