//! The `messageId` window of a SQLite database (one serving process per file), in memory that
//! does not grow with the window: exact keys of the latest messages in memory, older ones in
//! sorted runs on disk beside the database (`<file>.window/`), and a fingerprint of every key
//! in memory to tell most new messages apart without reading the disk.
//!
//! A message is checked against the fingerprints first: no fingerprint, and it is new (the
//! common case, no disk read). A fingerprint sends the check to the exact keys: the recent ones
//! in memory, then each run (one block read each). So repeats are dropped exactly: a
//! fingerprint only says "maybe".
//!
//! The recent keys are sealed into a run every [`SEAL_KEYS`] keys, written by a thread of the
//! window's own; runs of one sixteenth of the window are merged into one, so a check reads at
//! most about twenty runs; a run whose newest key has left the window is deleted. Memory:
//! about 2 bytes a key of fingerprints, 1/8 byte a key of run index, and the recent keys (at
//! most two seals of them).
//!
//! At start the runs are read back (each checked whole) and the fingerprints rebuilt from them;
//! what was recorded after the newest run was sealed is replayed from the events and the
//! journal, as the whole window was before there were runs. A batch is acknowledged within
//! [`MAX_QUEUE_WAIT`] of its arrival (the writer refuses it otherwise), so the replay starts
//! that long before the newest seal and finds every key the runs lack.

pub mod fingerprints;
pub mod published;
pub mod runs;
pub mod shared;

use std::{
    cmp::Reverse,
    collections::{hash_map::Entry, HashMap},
    fs::File,
    hash::{BuildHasherDefault, Hasher},
    io,
    path::{Path, PathBuf},
    sync::{mpsc, Arc},
    time::Duration,
};

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, Statement, Value as DbValue};

use self::{
    fingerprints::{shard_of, Fingerprints, SHARDS},
    runs::KeyRun,
};
use super::dedup::MessageKey;

/// Recent keys sealed into a run at a time.
pub const SEAL_KEYS: usize = 400_000;
/// The longest a batch may wait for the writer before it is refused (not acknowledged, so the
/// client retries): the bound that makes a restart's replay complete.
pub const MAX_QUEUE_WAIT: Duration = Duration::from_secs(10);
/// How much larger than its keys a shard's fingerprints are rebuilt when they are full.
const ROOM_TO_GROW: f64 = 1.0 / 6.0;
/// Seals waiting to be written before the writer waits for one.
const MAX_SEALING: usize = 2;
/// How long before the newest seal the replay at start begins.
const REPLAY_BEFORE_SEAL: i64 = MAX_QUEUE_WAIT.as_secs() as i64 + 5;
/// A run is merged with the others of its part of the window; the window has this many parts.
const MERGE_PARTS: i64 = 16;
/// Runs of the current part merged once there are this many.
const MERGE_RUNS: usize = 4;
/// How long one pass over the recent keys' tables takes, dropping those that left the window.
const SWEEP_PASS: chrono::Duration = chrono::Duration::minutes(1);

/// The keys are already uniformly distributed hashes: use their bits as the table hash.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

type KeyMap = HashMap<MessageKey, u32, BuildHasherDefault<KeyHasher>>;

/// Seconds since the Unix epoch, as the window stores them (until 2106).
fn second(at: DateTime<Utc>) -> u32 {
    u32::try_from(at.timestamp().max(0)).unwrap_or(u32::MAX)
}

/// The second before which a key has left a window of `window`, now.
fn expired_second(window: Duration) -> u32 {
    let window = chrono::Duration::from_std(window).unwrap_or(chrono::Duration::days(1));
    second(Utc::now() - window)
}

/// Recent keys handed to the window's thread to be written as a run.
struct Seal {
    number: u64,
    sealed_at: u32,
    keys: Arc<Vec<KeyMap>>,
    /// Writing it failed: tried again at the next sweep after this.
    retry_after: Option<DateTime<Utc>>,
}

impl Seal {
    fn write_task(&self) -> Task {
        Task::Write {
            number: self.number,
            sealed_at: self.sealed_at,
            keys: self.keys.clone(),
        }
    }
}

enum Task {
    Write {
        number: u64,
        sealed_at: u32,
        keys: Arc<Vec<KeyMap>>,
    },
    Merge {
        inputs: Vec<Arc<KeyRun>>,
        expired: u32,
    },
}

enum Done {
    Written(u64, io::Result<KeyRun>),
    Merged(Vec<Arc<KeyRun>>, io::Result<KeyRun>),
}

/// The runs' directory and the window's two threads: one writes seals (at the normal
/// priority: until a seal is written its keys stay in memory), one merges runs (in the
/// background: a merge can wait).
struct Store {
    dir: PathBuf,
    seals: mpsc::Sender<Task>,
    merges: mpsc::Sender<Task>,
    done: mpsc::Receiver<Done>,
}

impl Store {
    fn start(dir: PathBuf) -> io::Result<Self> {
        let (done_tx, done) = mpsc::channel();
        let seals = Self::worker(&dir, "custintel-window-seal", false, done_tx.clone())?;
        let merges = Self::worker(&dir, "custintel-window-merge", true, done_tx)?;
        Ok(Self {
            dir,
            seals,
            merges,
            done,
        })
    }

    fn worker(
        dir: &Path,
        name: &str,
        background: bool,
        done_tx: mpsc::Sender<Done>,
    ) -> io::Result<mpsc::Sender<Task>> {
        let (tasks, task_rx) = mpsc::channel::<Task>();
        let dir = dir.to_path_buf();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if background {
                    crate::background::lower_this_threads_priority();
                }
                for task in task_rx {
                    let done = match task {
                        Task::Write {
                            number,
                            sealed_at,
                            keys,
                        } => {
                            let records = keys
                                .iter()
                                .flat_map(|m| m.iter().map(|(k, s)| (*k, *s)))
                                .collect();
                            Done::Written(
                                number,
                                runs::write_seal(&dir, number, sealed_at, records),
                            )
                        }
                        Task::Merge { inputs, expired } => {
                            let run = runs::merge(&dir, &inputs, expired);
                            Done::Merged(inputs, run)
                        }
                    };
                    if done_tx.send(done).is_err() {
                        break;
                    }
                }
            })?;
        Ok(tasks)
    }
}

/// A window kept by one process: a SQLite database's, or one PostgreSQL instance's
/// ([`shared`]).
pub struct LocalWindow {
    window: chrono::Duration,
    /// `None` for an in-memory database: every key stays in `recent`.
    store: Option<Store>,
    /// Keys recorded since the last seal, by shard, with their first-seen second.
    recent: Vec<KeyMap>,
    seal_keys: usize,
    /// Seals not yet written as runs, oldest first.
    sealing: Vec<Seal>,
    /// Runs on disk, oldest first.
    runs: Vec<Arc<KeyRun>>,
    merging: bool,
    fingerprints: Fingerprints,
    next_seal: u64,
    /// Where the replay of stored events begins (see [`LocalWindow::load`]).
    replay_from: DateTime<Utc>,
    pass_started: DateTime<Utc>,
    next_to_sweep: usize,
}

impl LocalWindow {
    /// A window kept in memory only (an in-memory database).
    pub fn in_memory(window: Duration) -> Self {
        let window = chrono::Duration::from_std(window).unwrap_or(chrono::Duration::days(1));
        let now = Utc::now();
        Self {
            window,
            store: None,
            recent: (0..SHARDS).map(|_| KeyMap::default()).collect(),
            seal_keys: SEAL_KEYS,
            sealing: Vec::new(),
            runs: Vec::new(),
            merging: false,
            fingerprints: Fingerprints::new(),
            next_seal: 1,
            replay_from: now - window,
            pass_started: now,
            next_to_sweep: 0,
        }
    }

    /// The window whose runs are in `dir`, made for the database `identity` names: runs
    /// left by another database (a file replaced at the same path) are removed. Reads every
    /// run back and rebuilds the fingerprints; blocking.
    pub fn open(dir: &Path, identity: &str, window: Duration) -> io::Result<Self> {
        Self::open_with(dir, identity, window, SEAL_KEYS, None)
    }

    /// As [`open`](Self::open); runs `read` already holds (a copy read them as they arrived)
    /// are not read again.
    fn open_with(
        dir: &Path,
        identity: &str,
        window: Duration,
        seal_keys: usize,
        read: Option<RunsRead>,
    ) -> io::Result<Self> {
        let mut w = Self::in_memory(window);
        w.seal_keys = seal_keys;
        std::fs::create_dir_all(dir)?;
        let identity_file = dir.join("database");
        let same_database =
            std::fs::read_to_string(&identity_file).is_ok_and(|stored| stored == identity);
        // Runs by the seals they cover; files that are not this database's runs go.
        let mut named: Vec<(u64, u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            match runs::parse_file_name(name) {
                Some((first, last)) if same_database => named.push((first, last, path)),
                None if name == "database" || name == published::PUBLISHER_FILE => {}
                _ => std::fs::remove_file(&path)?,
            }
        }
        if !same_database {
            std::fs::write(&identity_file, identity)?;
            File::open(dir)?.sync_all()?;
        }
        // A merge that stopped before removing its inputs leaves runs that another covers.
        named.sort_by_key(|(first, last, _)| (*first, Reverse(*last)));
        let mut covering: Vec<(u64, u64, PathBuf)> = Vec::new();
        for run in named {
            match covering.last() {
                Some((_, until, _)) if run.1 <= *until => std::fs::remove_file(&run.2)?,
                _ => covering.push(run),
            }
        }
        let mut read = match read {
            Some(read) if same_database => read,
            // Sized for every record up front; a shard that still overflows is rebuilt after.
            _ => RunsRead::for_records(
                covering
                    .iter()
                    .map(|(_, _, path)| {
                        std::fs::metadata(path).map_or(0, |m| runs::records_in(m.len()))
                    })
                    .sum(),
                window,
            ),
        };
        let mut kept: Vec<KeyRun> = Vec::new();
        for (_, _, path) in &covering {
            if let Some(run) = read.take(path) {
                kept.push(run);
            } else if let Some(run) = read.read(path)? {
                kept.push(run);
            }
        }
        let RunsRead {
            fingerprints,
            overflowed,
            ..
        } = read;
        w.fingerprints = fingerprints;
        // Keys recorded after the newest run of an unbroken chain are replayed; a missing run
        // (its write failed) breaks the chain where it is.
        let mut complete_until: Option<u32> = None;
        let mut previous: Option<&KeyRun> = None;
        for run in &kept {
            if previous.is_some_and(|p| p.header.last_seal + 1 != run.header.first_seal) {
                break;
            }
            complete_until = Some(run.header.sealed_at);
            previous = Some(run);
        }
        if let Some(sealed_at) = complete_until {
            let from = DateTime::from_timestamp(i64::from(sealed_at) - REPLAY_BEFORE_SEAL, 0);
            w.replay_from = from.unwrap_or(w.replay_from).max(w.replay_from);
        }
        w.next_seal = kept
            .iter()
            .map(|r| r.header.last_seal + 1)
            .max()
            .unwrap_or(1);
        w.runs = kept.into_iter().map(Arc::new).collect();
        for (shard, _) in overflowed.iter().enumerate().filter(|(_, o)| **o) {
            w.rebuild_shard(shard, 0.0);
        }
        w.store = Some(Store::start(dir.to_path_buf())?);
        Ok(w)
    }

    /// The runs on disk, oldest first.
    pub fn runs(&self) -> Vec<Arc<KeyRun>> {
        self.runs.clone()
    }

    /// Fingerprints held: about the messages in the window.
    pub fn len(&self) -> usize {
        self.fingerprints.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fingerprints.is_empty()
    }

    /// Runs on disk.
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// Bytes the window holds in memory: fingerprints, recent keys, the runs' indexes.
    pub fn memory_bytes(&self) -> usize {
        let map_bytes = |maps: &[KeyMap]| -> usize {
            maps.iter()
                .map(|m| m.capacity() * (std::mem::size_of::<(MessageKey, u32)>() + 1))
                .sum()
        };
        self.fingerprints.memory_bytes()
            + map_bytes(&self.recent)
            + self
                .sealing
                .iter()
                .map(|s| map_bytes(&s.keys))
                .sum::<usize>()
            + self.runs.iter().map(|r| r.memory_bytes()).sum::<usize>()
    }

    /// Whether a message first seen within the window is known (without recording it).
    pub fn contains(&self, key: &MessageKey, now: DateTime<Utc>) -> bool {
        let expired = second(now - self.window);
        self.fingerprints.may_contain(key)
            && (self.recent[shard_of(key)]
                .get(key)
                .is_some_and(|s| *s > expired)
                || self.older_copy_within(key, expired))
    }

    /// Whether a message arriving at `at` is new (not seen within the window); a new one is
    /// recorded at once. The caller [`forget`](Self::forget)s what it recorded if its commit
    /// fails (before the next [`sweep`](Self::sweep)).
    pub fn check_and_record(&mut self, key: MessageKey, at: DateTime<Utc>) -> bool {
        let expired = second(at - self.window);
        let now = second(at);
        let shard = shard_of(&key);
        if self.fingerprints.may_contain(&key) {
            if let Some(first) = self.recent[shard].get_mut(&key) {
                if *first > expired {
                    return false;
                }
                // Seen before the window: it starts a new one (its fingerprint is there).
                *first = now;
                return true;
            }
            if self.older_copy_within(&key, expired) {
                return false;
            }
        }
        self.add_recent(key, now);
        true
    }

    /// Whether a sealed copy of `key` (sealing, or in a run) was first seen after `expired`.
    fn older_copy_within(&self, key: &MessageKey, expired: u32) -> bool {
        let shard = shard_of(key);
        if self
            .sealing
            .iter()
            .any(|s| s.keys[shard].get(key).is_some_and(|first| *first > expired))
        {
            return true;
        }
        self.runs
            .iter()
            .rev()
            .filter(|run| run.header.newest > expired)
            .any(|run| match run.find(key) {
                Ok(first) => first.is_some_and(|first| first > expired),
                Err(e) => {
                    // Counted as new: a copy stored twice rather than an event lost.
                    tracing::error!(path = %run.path().display(), error = %e, "could not read a messageId window run");
                    false
                }
            })
    }

    fn add_recent(&mut self, key: MessageKey, second: u32) {
        let shard = shard_of(&key);
        match self.recent[shard].entry(key) {
            Entry::Occupied(mut first) => {
                first.insert(second);
                return;
            }
            Entry::Vacant(slot) => {
                slot.insert(second);
            }
        }
        if !self.fingerprints.insert(&key) {
            self.rebuild_shard(shard, ROOM_TO_GROW);
        }
    }

    /// Recent keys, not yet sealed.
    fn recent_len(&self) -> usize {
        self.recent.iter().map(HashMap::len).sum()
    }

    /// Builds a shard's fingerprints again from its keys: every recent one (the sweep removes
    /// their fingerprints one by one as they leave), and the sealed ones still in the window;
    /// sized for that many and `grow` times more.
    fn rebuild_shard(&mut self, shard: usize, grow: f64) {
        let expired = second(Utc::now() - self.window);
        let mut keys: Vec<MessageKey> = self.recent[shard].keys().copied().collect();
        for seal in &self.sealing {
            keys.extend(
                seal.keys[shard]
                    .iter()
                    .filter(|(_, first)| **first > expired)
                    .map(|(k, _)| *k),
            );
        }
        for run in &self.runs {
            if let Err(e) = run.shard_keys(shard, expired, &mut keys) {
                // The run's keys in this shard lose their fingerprints: their repeats would
                // be stored again.
                tracing::error!(path = %run.path().display(), error = %e, "could not read a messageId window run to rebuild its fingerprints");
            }
        }
        let room = keys.len() + (keys.len() as f64 * grow) as usize;
        self.fingerprints.rebuild(shard, &keys, room);
    }

    /// Removes messages [`check_and_record`](Self::check_and_record) recorded for a write that
    /// failed, so their copies sent again are stored.
    pub fn forget(&mut self, keys: &[MessageKey]) {
        for key in keys {
            if self.recent[shard_of(key)].remove(key).is_some() {
                self.fingerprints.remove(key);
            }
        }
    }

    /// How long the window is.
    pub fn window_length(&self) -> Duration {
        self.window.to_std().unwrap_or(Duration::from_secs(86_400))
    }

    /// Moves every key of this window (an in-memory one, filled on the side) into `other`.
    pub fn drain_into(self, other: &mut LocalWindow) {
        for shard in self.recent {
            for (key, second) in shard {
                other.add_recent(key, second);
            }
        }
    }

    /// Records messages stored at `at` (the replay at start).
    pub fn record(&mut self, keys: impl IntoIterator<Item = MessageKey>, at: DateTime<Utc>) {
        let second = second(at);
        for key in keys {
            self.add_recent(key, second);
        }
    }

    /// Between writes: takes in what the window's thread finished, seals the recent keys when
    /// there are enough, deletes runs that left the window, starts a merge when one is due, and
    /// drops recent keys that left the window (a share of the tables at a time). Cheap to call
    /// often.
    pub fn sweep(&mut self, now: DateTime<Utc>) {
        let expired = second(now - self.window);
        self.take_finished(now);
        if let Some(store) = &self.store {
            for seal in &mut self.sealing {
                if seal.retry_after.is_some_and(|t| t <= now) {
                    seal.retry_after = None;
                    let _ = store.seals.send(seal.write_task());
                }
            }
            if self.recent_len() >= self.seal_keys {
                let keys = std::mem::replace(
                    &mut self.recent,
                    (0..SHARDS).map(|_| KeyMap::default()).collect(),
                );
                let seal = Seal {
                    number: self.next_seal,
                    sealed_at: second(now),
                    keys: Arc::new(keys),
                    retry_after: None,
                };
                self.next_seal += 1;
                let _ = store.seals.send(seal.write_task());
                self.sealing.push(seal);
            }
            let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.runs)
                .into_iter()
                .partition(|run| run.header.newest <= expired);
            self.runs = kept;
            for run in gone {
                remove_run(&run);
            }
            if !self.merging {
                if let Some(inputs) = self.due_merge(now) {
                    self.merging = true;
                    let _ = store.merges.send(Task::Merge { inputs, expired });
                }
            }
        }
        self.sweep_recent(now, expired);
    }

    fn take_finished(&mut self, now: DateTime<Utc>) {
        let Some(store) = &self.store else { return };
        // Seals wait in memory until written: past MAX_SEALING of them (a disk slower than the
        // messages come), the writer waits for one, which bounds the memory they hold.
        let mut wait = self
            .sealing
            .iter()
            .filter(|s| s.retry_after.is_none())
            .count()
            > MAX_SEALING;
        loop {
            let done = if wait {
                wait = false;
                match store.done.recv_timeout(Duration::from_secs(1)) {
                    Ok(done) => done,
                    Err(_) => break,
                }
            } else {
                match store.done.try_recv() {
                    Ok(done) => done,
                    Err(_) => break,
                }
            };
            match done {
                Done::Written(number, Ok(run)) => {
                    self.sealing.retain(|s| s.number != number);
                    insert_run(&mut self.runs, run);
                }
                Done::Written(number, Err(e)) => {
                    tracing::error!(error = %e, dir = %store.dir.display(), "could not write a messageId window run; its keys stay in memory and it is tried again");
                    if let Some(seal) = self.sealing.iter_mut().find(|s| s.number == number) {
                        seal.retry_after = Some(now + chrono::Duration::seconds(10));
                    }
                }
                Done::Merged(inputs, Ok(run)) => {
                    self.merging = false;
                    self.runs
                        .retain(|r| !inputs.iter().any(|input| Arc::ptr_eq(r, input)));
                    for input in &inputs {
                        remove_run(input);
                    }
                    insert_run(&mut self.runs, run);
                }
                Done::Merged(_, Err(e)) => {
                    self.merging = false;
                    tracing::error!(error = %e, "could not merge messageId window runs; they stay as they are");
                }
            }
        }
    }

    /// Runs to merge: those of one part of the window (a sixteenth of it, by their newest
    /// key), once there are [`MERGE_RUNS`] of them, or two in a part that is over.
    fn due_merge(&self, now: DateTime<Utc>) -> Option<Vec<Arc<KeyRun>>> {
        let current = self.part_of(second(now));
        let mut groups: Vec<(i64, Vec<Arc<KeyRun>>)> = Vec::new();
        for run in &self.runs {
            let p = self.part_of(run.header.newest);
            match groups.last_mut() {
                Some((q, group)) if *q == p => group.push(run.clone()),
                _ => groups.push((p, vec![run.clone()])),
            }
        }
        groups
            .into_iter()
            .find(|(p, group)| group.len() >= MERGE_RUNS || (*p < current && group.len() >= 2))
            .map(|(_, group)| group)
    }

    /// The part of the window (a [`MERGE_PARTS`]th of its length, counted from the epoch)
    /// second `s` falls in.
    fn part_of(&self, s: u32) -> i64 {
        let part_secs = (self.window.num_seconds() / MERGE_PARTS).max(1);
        i64::from(s) / part_secs
    }

    /// Whether the part of the window `run`'s newest key falls in is over: no later seal
    /// joins the merge of that part.
    pub fn part_is_over(&self, run: &KeyRun, now: DateTime<Utc>) -> bool {
        self.part_of(run.header.newest) < self.part_of(second(now))
    }

    fn sweep_recent(&mut self, now: DateTime<Utc>, expired: u32) {
        let elapsed = (now - self.pass_started).num_milliseconds().max(0) as u128;
        let pass = SWEEP_PASS.num_milliseconds() as u128;
        let due = ((elapsed * SHARDS as u128) / pass).min(SHARDS as u128) as usize;
        if due <= self.next_to_sweep {
            return;
        }
        for shard in self.next_to_sweep..due {
            let table = &mut self.recent[shard];
            let fingerprints = &mut self.fingerprints;
            table.retain(|key, first| {
                let keep = *first > expired;
                if !keep {
                    fingerprints.remove(key);
                }
                keep
            });
            if table.len() < table.capacity() / 4 {
                table.shrink_to_fit();
            }
        }
        self.next_to_sweep = due;
        if due == SHARDS {
            self.pass_started = now;
            self.next_to_sweep = 0;
        }
    }

    /// Replays what the runs lack from what the database holds: the journal's batches not yet
    /// applied, then the events received since the replay's start (their ids are time-ordered,
    /// so this reads one primary-key range). Without runs, that is the whole window. `key_of`
    /// is how this window keys a message.
    pub async fn load<C: ConnectionTrait>(
        &mut self,
        conn: &C,
        journal: &super::journal::Journal,
        key_of: fn(&str, &str) -> MessageKey,
    ) -> Result<(), DbErr> {
        let since = self.replay_from.max(Utc::now() - self.window);
        self.replay(conn, journal, since, key_of).await
    }

    /// Moves the start of [`load`](Self::load)'s replay `earlier`: where what the runs hold was
    /// recorded some time after it was stored (PostgreSQL's instances, whose windows follow
    /// the shared claims).
    pub fn replay_earlier(&mut self, earlier: chrono::Duration) {
        self.replay_from -= earlier;
    }

    /// Records every message stored since `since`: the journal's batches first, then the
    /// events, so a batch the applier moves from one to the other meanwhile is read in one of
    /// them. The events are found by id, which rises with every one this service stores (ids
    /// made from now on sort after every stored one: [`crate::ids::never_below`]), so a clock
    /// that stepped back between a message's arrival and this replay cannot hide it: what is
    /// recorded is every event whose id is after the id of `since`, whatever its `receivedAt`.
    pub async fn replay<C: ConnectionTrait>(
        &mut self,
        conn: &C,
        journal: &super::journal::Journal,
        since: DateTime<Utc>,
        key_of: fn(&str, &str) -> MessageKey,
    ) -> Result<(), DbErr> {
        let mut after_seq = 0i64;
        loop {
            let batches = journal.read_after(after_seq, 200).await?;
            let Some(last) = batches.last() else { break };
            after_seq = last.seq;
            for entry in &batches {
                if let Some(newest) = entry.batch.events.iter().map(|e| &e.id).max() {
                    crate::ids::never_below(newest);
                }
                let keys = entry.batch.events.iter().filter_map(|e| {
                    e.message_id
                        .as_deref()
                        .map(|m| key_of(&entry.batch.organization_id, m))
                });
                let keys: Vec<MessageKey> = keys.collect();
                self.record(keys, entry.batch.received_at);
            }
        }
        let backend = conn.get_database_backend();
        let newest = conn
            .query_one_raw(Statement::from_string(
                backend,
                "SELECT max(id) FROM events",
            ))
            .await?;
        if let Some(newest) =
            newest.and_then(|row| row.try_get_by_index::<Option<String>>(0).ok().flatten())
        {
            crate::ids::never_below(&newest);
        }
        let mut after = crate::ids::time_ordered_floor(since);
        loop {
            let rows = conn
                .query_all_raw(Statement::from_sql_and_values(
                    backend,
                    crate::db::placeholders(
                        backend,
                        "SELECT id, organization_id, message_id, received_at FROM events \
                         WHERE id > ? ORDER BY id LIMIT 20000",
                    ),
                    [DbValue::from(after.clone())],
                ))
                .await?;
            let Some(last) = rows.last() else { break };
            after = last.try_get_by_index::<String>(0)?;
            for row in &rows {
                let message_id: Option<String> = row.try_get_by_index(2)?;
                let received_at: DateTime<Utc> = row.try_get_by_index(3)?;
                if let Some(m) = message_id {
                    let org: String = row.try_get_by_index(1)?;
                    self.record([key_of(&org, &m)], received_at);
                }
            }
            self.sweep(Utc::now());
        }
        Ok(())
    }
}

/// Runs read for a window being opened: each run is checked whole and its keys' fingerprints
/// added as it is read, so a copy can have each run read as it arrives, while the next is
/// fetched.
pub struct RunsRead {
    expired: u32,
    fingerprints: Fingerprints,
    /// Shards whose table filled up: rebuilt from their keys once every run is read.
    overflowed: Vec<bool>,
    read: HashMap<PathBuf, KeyRun>,
}

impl RunsRead {
    /// Fingerprints sized for about `records` keys, for a window of `window`.
    pub fn for_records(records: u64, window: Duration) -> Self {
        Self {
            expired: expired_second(window),
            fingerprints: Fingerprints::for_keys(usize::try_from(records).unwrap_or(0)),
            overflowed: vec![false; SHARDS],
            read: HashMap::new(),
        }
    }

    /// Reads the run at `path` and keeps it for [`LocalWindow::open`]'s use.
    pub fn add(&mut self, path: &Path) -> io::Result<()> {
        if let Some(run) = self.read(path)? {
            self.read.insert(path.to_path_buf(), run);
        }
        Ok(())
    }

    /// Runs read and kept.
    pub fn len(&self) -> usize {
        self.read.len()
    }

    pub fn is_empty(&self) -> bool {
        self.read.is_empty()
    }

    fn take(&mut self, path: &Path) -> Option<KeyRun> {
        self.read.remove(path)
    }

    /// Reads the run at `path`, adding the fingerprints of its keys still in the window. A run
    /// the window has left, or one that cannot be read, is removed (`None`): the keys of the
    /// latter are read from the stored events instead.
    fn read(&mut self, path: &Path) -> io::Result<Option<KeyRun>> {
        let (expired, fingerprints, overflowed) =
            (self.expired, &mut self.fingerprints, &mut self.overflowed);
        let opened = KeyRun::open_reading(path, |key, first_seen| {
            let shard = shard_of(key);
            if first_seen > expired && !overflowed[shard] && !fingerprints.insert(key) {
                overflowed[shard] = true;
            }
        });
        match opened {
            Ok(run) if run.header.newest > expired => Ok(Some(run)),
            Ok(_) => std::fs::remove_file(path).map(|()| None),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "a messageId window run could not be read; its keys are read from the stored events instead");
                std::fs::remove_file(path).map(|()| None)
            }
        }
    }
}

/// Whether `dir` holds runs of the database `identity` names, seen without opening them (an
/// opening reads every run whole).
pub fn holds_runs(dir: &Path, identity: &str) -> bool {
    let same = std::fs::read_to_string(dir.join("database")).is_ok_and(|s| s == identity);
    same && std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| runs::parse_file_name(n).is_some())
        })
    })
}

/// Adds a run where seal order puts it.
fn insert_run(runs: &mut Vec<Arc<KeyRun>>, run: KeyRun) {
    let at = runs.partition_point(|r| r.header.first_seal < run.header.first_seal);
    runs.insert(at, Arc::new(run));
}

fn remove_run(run: &KeyRun) {
    if let Err(e) = std::fs::remove_file(run.path()) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %run.path().display(), error = %e, "could not remove a messageId window run");
        }
    }
}

/// The window of `db`: on a file, its runs beside it (`<file>.window/`); in memory otherwise.
/// Not yet [`load`](LocalWindow::load)ed.
pub async fn for_database(db: &DatabaseConnection, window: Duration) -> Result<LocalWindow, DbErr> {
    let Some(file) = crate::db::sqlite_file(db).await? else {
        return Ok(LocalWindow::in_memory(window));
    };
    let identity = database_identity(db, &file).await?;
    open_in(crate::db::beside(&file, "window"), identity, window, None).await
}

/// The window whose runs are in `dir`, made for the database `identity` names (see
/// [`LocalWindow::open`]), opened off the runtime's threads; the runs `read` holds are not
/// read again. Not yet loaded.
pub async fn open_in(
    dir: PathBuf,
    identity: String,
    window: Duration,
    read: Option<RunsRead>,
) -> Result<LocalWindow, DbErr> {
    // Fewer keys a seal make the runs' path run in small tests.
    let seal_keys = std::env::var("CUSTINTEL_DEDUP_SEAL_KEYS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(SEAL_KEYS);
    let shown = dir.display().to_string();
    tokio::task::spawn_blocking(move || {
        LocalWindow::open_with(&dir, &identity, window, seal_keys, read)
    })
    .await
    .map_err(|e| DbErr::Custom(format!("opening the messageId window stopped: {e}")))?
    .map_err(|e| {
        DbErr::Custom(format!(
            "could not open the messageId window in {shown}: {e}"
        ))
    })
}

/// What tells this database apart from another later made at the same path: when its schema
/// was first created, and its file's inode.
pub async fn database_identity(db: &DatabaseConnection, file: &Path) -> Result<String, DbErr> {
    let created = db
        .query_one_raw(Statement::from_string(
            sea_orm::DbBackend::Sqlite,
            "SELECT CAST(applied_at AS TEXT) FROM seaql_migrations ORDER BY version LIMIT 1",
        ))
        .await?
        .map(|row| row.try_get_by_index::<String>(0))
        .transpose()?
        .unwrap_or_default();
    let inode = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(file).map(|m| m.ino()).unwrap_or_default()
    };
    Ok(format!("{created}:{inode}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::dedup::message_key;

    fn minutes(n: i64) -> chrono::Duration {
        chrono::Duration::minutes(n)
    }

    fn keys(n: usize, prefix: &str) -> Vec<MessageKey> {
        (0..n)
            .map(|i| message_key("org", &format!("{prefix}{i}")))
            .collect()
    }

    /// Sweeps until the window's thread has written every seal and finished its merge.
    fn settle(w: &mut LocalWindow, now: DateTime<Utc>) {
        for _ in 0..500 {
            w.sweep(now);
            if w.sealing.is_empty() && !w.merging {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the window's thread did not finish");
    }

    #[test]
    fn repeats_expire_with_the_window() {
        let mut w = LocalWindow::in_memory(Duration::from_secs(3_600));
        let t0 = Utc::now();
        let k = message_key("org", "m1");
        assert!(!w.contains(&k, t0));
        w.record([k], t0);
        assert!(w.contains(&k, t0 + minutes(59)));
        assert!(!w.contains(&k, t0 + minutes(61)));
        assert!(!w.contains(&message_key("other", "m1"), t0));
        w.sweep(t0 + minutes(61));
        w.sweep(t0 + minutes(62));
        assert!(w.is_empty());
    }

    #[test]
    fn checking_records_a_new_message_and_a_failed_write_forgets_it() {
        let mut w = LocalWindow::in_memory(Duration::from_secs(3_600));
        let t0 = Utc::now();
        let k = message_key("org", "m1");
        assert!(w.check_and_record(k, t0), "first copy");
        assert!(
            !w.check_and_record(k, t0 + minutes(1)),
            "repeat in the window"
        );
        assert!(w.check_and_record(message_key("other", "m1"), t0));
        w.forget(&[k]);
        assert!(!w.contains(&k, t0), "forgotten after a failed write");
        assert!(w.check_and_record(k, t0 + minutes(2)), "sent again: new");
        // A copy after the window starts a new one, and repeats of it are dropped again.
        assert!(w.check_and_record(k, t0 + minutes(63)));
        assert!(!w.check_and_record(k, t0 + minutes(64)));
        assert!(w.contains(&k, t0 + minutes(120)));
    }

    /// Keys sealed into runs are still repeats, in this process and after a restart that
    /// replays nothing; runs are merged as they accumulate; new keys stay new.
    #[test]
    fn sealed_keys_are_repeats_on_disk_and_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let window = Duration::from_secs(3_600);
        let mut w = LocalWindow::open_with(dir.path(), "db", window, 500, None).unwrap();
        let now = Utc::now();
        let sent = keys(20_000, "a");
        for chunk in sent.chunks(250) {
            for k in chunk {
                assert!(w.check_and_record(*k, now));
            }
            w.sweep(now);
        }
        settle(&mut w, now);
        assert!(w.run_count() >= 1);
        assert!(
            w.run_count() < 20,
            "{} runs: merges keep them few",
            w.run_count()
        );
        for k in &sent {
            assert!(!w.check_and_record(*k, now), "a sealed key is a repeat");
        }
        let memory_before = w.memory_bytes();
        drop(w);

        let mut w = LocalWindow::open_with(dir.path(), "db", window, 500, None).unwrap();
        assert!(w.memory_bytes() <= memory_before);
        // Only the keys after the newest seal would need the replay.
        let replayed_from = w.replay_from;
        assert!(replayed_from > now - chrono::Duration::seconds(REPLAY_BEFORE_SEAL + 5));
        let sealed = sent
            .iter()
            .filter(|k| !w.check_and_record(**k, now))
            .count();
        assert!(sealed >= 19_000, "{sealed} of 20,000 found after reopening");
        for k in keys(1_000, "b") {
            assert!(w.check_and_record(k, now), "a key never sent is new");
        }
    }

    /// Runs read before the window opens (as a copy reads each as it arrives) are not read
    /// again; one that a later run covers is dropped; every key is found.
    #[test]
    fn runs_read_before_opening_are_kept_once() {
        let dir = tempfile::tempdir().unwrap();
        let window = Duration::from_secs(3_600);
        std::fs::write(dir.path().join("database"), "db").unwrap();
        let at = second(Utc::now());
        let seal = |n: u64, prefix: &str| {
            let records = keys(3_000, prefix).into_iter().map(|k| (k, at)).collect();
            Arc::new(runs::write_seal(dir.path(), n, at, records).unwrap())
        };
        let (a, b) = (seal(1, "a"), seal(2, "b"));
        let mut read = RunsRead::for_records(6_000, window);
        read.add(a.path()).unwrap();
        read.add(b.path()).unwrap();
        // A merged run copied after the seals it covers (the copy looked again after a merge
        // replaced them).
        let merged = runs::merge(dir.path(), &[a.clone(), b.clone()], 0).unwrap();
        read.add(merged.path()).unwrap();
        // Its checksum broken after it was read: a second read would refuse and remove it.
        let mut bytes = std::fs::read(merged.path()).unwrap();
        *bytes.last_mut().unwrap() ^= 0xFF;
        std::fs::write(merged.path(), bytes).unwrap();
        // A run not read before is read at the opening.
        let c = seal(3, "c");
        let w = LocalWindow::open_with(dir.path(), "db", window, 500, Some(read)).unwrap();
        assert_eq!(w.run_count(), 2, "the merged run and the third seal");
        assert!(!a.path().exists() && !b.path().exists() && c.path().exists());
        assert_eq!(w.next_seal, 4);
        let now = Utc::now();
        for k in keys(3_000, "a")
            .iter()
            .chain(&keys(3_000, "b"))
            .chain(&keys(3_000, "c"))
        {
            assert!(w.contains(k, now));
        }
        assert!(!w.contains(&message_key("org", "d1"), now));
    }

    #[test]
    fn runs_leave_with_the_window_and_with_another_database() {
        let dir = tempfile::tempdir().unwrap();
        let window = Duration::from_secs(600);
        let mut w = LocalWindow::open_with(dir.path(), "db", window, 100, None).unwrap();
        let now = Utc::now();
        for k in keys(1_000, "a") {
            assert!(w.check_and_record(k, now));
            w.sweep(now);
        }
        settle(&mut w, now);
        assert!(w.run_count() > 0);
        drop(w);
        // Another database at the same path: its runs are not this one's.
        let mut w = LocalWindow::open_with(dir.path(), "other", window, 100, None).unwrap();
        assert_eq!(w.run_count(), 0);
        for k in keys(1_000, "a") {
            assert!(w.check_and_record(k, now));
            w.sweep(now);
        }
        settle(&mut w, now);
        assert!(w.run_count() > 0);
        // After the window, the runs go, files and all.
        let later = now + minutes(11);
        settle(&mut w, later);
        w.sweep(later);
        assert_eq!(w.run_count(), 0);
        let files = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                let e = e.as_ref().unwrap();
                e.file_name().to_str().unwrap().ends_with(".run")
            })
            .count();
        assert_eq!(files, 0);
        for k in keys(100, "a") {
            assert!(w.check_and_record(k, later), "expired: new again");
        }
    }
}
