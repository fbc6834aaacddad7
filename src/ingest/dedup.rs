//! The `messageId` de-duplication window: a repeat whose first copy arrived within the window
//! (`CUSTINTEL_DEDUP_WINDOW`, default 24 h) is dropped and counted as processed.
//!
//! SQLite (one serving process per file): an exact in-memory set of 128-bit hashes of
//! (organization, messageId), rebuilt at start from the last window's events and journal, so
//! it survives restarts without a random-key index on the acknowledging path. PostgreSQL
//! (several instances): the `ingest_message_ids` table, claimed with `ON CONFLICT` in the
//! acknowledging transaction, so a repeat is dropped whichever instance it reaches.

use std::{
    collections::{hash_map::Entry, HashMap, HashSet},
    hash::{BuildHasherDefault, Hasher},
    time::Duration,
};

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, Value as DbValue};
use serde_json::Value;

/// Default window.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Reads `CUSTINTEL_DEDUP_WINDOW`: `<n>s`, `<n>m`, `<n>h`, `<n>d` or `<n>w`, at least one
/// second.
pub fn parse_window(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    let err = || format!("`{raw}` is not a window: use <n>s, <n>m, <n>h, <n>d or <n>w (e.g. 24h)");
    let split = raw.len().checked_sub(1).ok_or_else(err)?;
    let (n, unit) = raw.split_at(split);
    let n: u64 = n.parse().map_err(|_| err())?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(err()),
    };
    let total = n.checked_mul(secs).filter(|t| *t > 0).ok_or_else(err)?;
    Ok(Duration::from_secs(total))
}

/// A message's identity in the window.
pub type MessageKey = (u64, u64);

/// The hash of (organization, messageId). 128 bits: a false repeat needs a collision among
/// the window's messages, which at 2^-128 per pair does not happen.
pub fn message_key(organization_id: &str, message_id: &str) -> MessageKey {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(organization_id.as_bytes());
    // A separator no id contains, so ("ab","c") and ("a","bc") differ.
    h.update(&[0xff]);
    h.update(message_id.as_bytes());
    let v = h.digest128();
    ((v >> 64) as u64, v as u64)
}

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

/// Tables the window is split into, by the key's top bits. A hash table grows by moving every
/// entry into one twice its size: a single table of 10 million messages stalled the
/// acknowledging writer (and every request waiting on it) for up to 1.9 s at each doubling and
/// at each sweep; a table of 1/1024 of them moves in a millisecond or two.
const SHARD_BITS: u32 = 10;
const SHARDS: usize = 1 << SHARD_BITS;

/// How long one sweep pass over every table takes (a few tables per group commit).
const SWEEP_PASS: chrono::Duration = chrono::Duration::minutes(1);

/// The in-memory window (SQLite). 24 bytes of key and first-seen second per message, in hash
/// tables kept at most 7/8 full: 28 to 56 bytes per message in the window.
pub struct MemoryWindow {
    window: chrono::Duration,
    /// First-seen time, as seconds since `epoch`, in [`SHARDS`] tables.
    seen: Vec<KeyMap>,
    epoch: i64,
    /// When the current sweep pass began, and the next table it sweeps.
    pass_started: DateTime<Utc>,
    next_to_sweep: usize,
}

impl MemoryWindow {
    pub fn new(window: Duration) -> Self {
        let now = Utc::now();
        let window = chrono::Duration::from_std(window).unwrap_or(chrono::Duration::days(1));
        Self {
            window,
            seen: (0..SHARDS).map(|_| KeyMap::default()).collect(),
            // Offsets from a day before the oldest time the window can hold at start (what
            // `load` reads back) fit a u32 for a century.
            epoch: now.timestamp() - window.num_seconds() - 86_400,
            pass_started: now,
            next_to_sweep: 0,
        }
    }

    fn offset(&self, at: DateTime<Utc>) -> u32 {
        u32::try_from((at.timestamp() - self.epoch).max(0)).unwrap_or(u32::MAX)
    }

    fn shard(key: &MessageKey) -> usize {
        (key.0 >> (64 - SHARD_BITS)) as usize
    }

    /// Messages in the window.
    pub fn len(&self) -> usize {
        self.seen.iter().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.iter().all(HashMap::is_empty)
    }

    /// Bytes the tables hold (their buckets and control bytes).
    pub fn memory_bytes(&self) -> usize {
        let slots: usize = self.seen.iter().map(HashMap::capacity).sum();
        slots * (std::mem::size_of::<(MessageKey, u32)>() + 1)
    }

    /// Whether a message first seen within the window is known (the writer asks
    /// [`check_and_record`](Self::check_and_record) instead).
    #[cfg(test)]
    pub fn contains(&self, key: &MessageKey, now: DateTime<Utc>) -> bool {
        let cutoff = self.offset(now - self.window);
        self.seen[Self::shard(key)]
            .get(key)
            .is_some_and(|first| *first > cutoff)
    }

    /// Whether a message arriving at `at` is new (not seen within the window); a new one is
    /// recorded at once, in the same probe of its table (a random memory access each: checking
    /// and recording after the commit took two). The caller [`forget`](Self::forget)s what it
    /// recorded if its commit fails.
    pub fn check_and_record(&mut self, key: MessageKey, at: DateTime<Utc>) -> bool {
        let cutoff = self.offset(at - self.window);
        let t = self.offset(at);
        match self.seen[Self::shard(&key)].entry(key) {
            Entry::Occupied(mut first) if *first.get() <= cutoff => {
                // Seen before the window: it starts a new one.
                first.insert(t);
                true
            }
            Entry::Occupied(_) => false,
            Entry::Vacant(slot) => {
                slot.insert(t);
                true
            }
        }
    }

    /// Removes messages [`check_and_record`](Self::check_and_record) recorded for a write that
    /// failed, so their copies sent again are stored. (One that had been seen before the
    /// window is removed too: the same as expired.)
    pub fn forget(&mut self, keys: &[MessageKey]) {
        for key in keys {
            self.seen[Self::shard(key)].remove(key);
        }
    }

    /// Records messages stored at `at` (rebuilding the window from what is stored).
    pub fn record(&mut self, keys: impl IntoIterator<Item = MessageKey>, at: DateTime<Utc>) {
        let t = self.offset(at);
        for k in keys {
            // A message stored again after its window starts a new one.
            self.seen[Self::shard(&k)].insert(k, t);
        }
    }

    /// Drops what has left the window, a share of the tables at a time: each table is swept
    /// once per [`SWEEP_PASS`], the tables due by `now` on this call. Cheap to call often.
    pub fn sweep(&mut self, now: DateTime<Utc>) {
        let elapsed = (now - self.pass_started).num_milliseconds().max(0) as u128;
        let pass = SWEEP_PASS.num_milliseconds() as u128;
        let due = ((elapsed * SHARDS as u128) / pass).min(SHARDS as u128) as usize;
        if due <= self.next_to_sweep {
            return;
        }
        let cutoff = self.offset(now - self.window);
        for table in &mut self.seen[self.next_to_sweep..due] {
            table.retain(|_, first| *first > cutoff);
            // Give memory back after a burst, not after every sweep (a rehash costs a copy).
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

    /// Rebuilds the window from what the database holds: the events received within the
    /// window (their ids are time-ordered, so this reads one primary-key range) and the
    /// journal's batches not yet applied.
    pub async fn load<C: ConnectionTrait>(
        &mut self,
        conn: &C,
        journal: &super::journal::Journal,
    ) -> Result<(), DbErr> {
        let now = Utc::now();
        let since = now - self.window;
        let backend = conn.get_database_backend();
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
                if let (Some(m), true) = (message_id, received_at > since) {
                    let org: String = row.try_get_by_index(1)?;
                    self.record([message_key(&org, &m)], received_at);
                }
            }
        }
        let mut after_seq = 0i64;
        loop {
            let batches = journal.read_after(after_seq, 200).await?;
            let Some(last) = batches.last() else { break };
            after_seq = last.seq;
            for entry in &batches {
                let keys = entry.batch.events.iter().filter_map(|e| {
                    e.message_id
                        .as_deref()
                        .map(|m| message_key(&entry.batch.organization_id, m))
                });
                let keys: Vec<MessageKey> = keys.collect();
                self.record(keys, entry.batch.received_at);
            }
        }
        Ok(())
    }
}

/// PostgreSQL: claims messages in the caller's transaction and answers those that are new
/// (never seen, or first seen before the window). A concurrent instance's claim of the same
/// message waits for that transaction and then counts as a repeat.
pub async fn claim_shared<C: ConnectionTrait>(
    conn: &C,
    messages: &[(String, String)],
    now: DateTime<Utc>,
    window: Duration,
) -> Result<HashSet<(String, String)>, DbErr> {
    let cutoff = now - chrono::Duration::from_std(window).unwrap_or(chrono::Duration::days(1));
    let mut fresh = HashSet::new();
    if messages.is_empty() {
        return Ok(fresh);
    }
    // The whole group's claims travel as one JSON parameter that the server unpacks: one short
    // statement whatever the count. (A multi-row VALUES list with three parameters a row cost
    // 35-60 ms per thousand rows here, mostly planning; this is what made PostgreSQL's
    // acknowledgements slow.) A statement may not touch one row twice: the caller passes
    // distinct messages.
    let claims: Vec<Value> = messages
        .iter()
        .map(|(org, msg)| serde_json::json!({"o": org, "m": msg}))
        .collect();
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO ingest_message_ids (organization_id, message_id, first_seen_at) \
             SELECT c.o, c.m, $2 FROM json_to_recordset($1::json) AS c(o text, m text) \
             ON CONFLICT (organization_id, message_id) DO UPDATE SET first_seen_at = \
             EXCLUDED.first_seen_at WHERE ingest_message_ids.first_seen_at <= $3 \
             RETURNING organization_id, message_id",
            [
                Value::Array(claims).to_string().into(),
                now.into(),
                cutoff.into(),
            ],
        ))
        .await?;
    for row in rows {
        fresh.insert((row.try_get_by_index(0)?, row.try_get_by_index(1)?));
    }
    Ok(fresh)
}

/// PostgreSQL: forgets messages first seen before the window (any instance may run it).
pub async fn expire_shared<C: ConnectionTrait>(
    conn: &C,
    now: DateTime<Utc>,
    window: Duration,
) -> Result<u64, DbErr> {
    let cutoff = now - chrono::Duration::from_std(window).unwrap_or(chrono::Duration::days(1));
    let done = conn
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "DELETE FROM ingest_message_ids WHERE first_seen_at <= $1",
            [cutoff.into()],
        ))
        .await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse() {
        assert_eq!(parse_window("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_window("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_window("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_window("0h").is_err());
        assert!(parse_window("h").is_err());
        assert!(parse_window("").is_err());
        assert!(parse_window("3y").is_err());
    }

    #[test]
    fn long_windows_remember_what_arrived_before_start() {
        let mut w = MemoryWindow::new(Duration::from_secs(7 * 86_400));
        let now = Utc::now();
        let k = message_key("org", "m1");
        w.record([k], now - chrono::Duration::days(5));
        assert!(w.contains(&k, now));
        assert!(!w.contains(&k, now + chrono::Duration::days(3)));
    }

    #[test]
    fn repeats_expire_with_the_window() {
        let mut w = MemoryWindow::new(Duration::from_secs(3_600));
        let t0 = Utc::now();
        let k = message_key("org", "m1");
        assert!(!w.contains(&k, t0));
        w.record([k], t0);
        assert!(w.contains(&k, t0 + chrono::Duration::minutes(59)));
        assert!(!w.contains(&k, t0 + chrono::Duration::minutes(61)));
        assert!(!w.contains(&message_key("other", "m1"), t0));
        w.sweep(t0 + chrono::Duration::minutes(61));
        assert!(w.is_empty());
    }

    #[test]
    fn checking_records_a_new_message_and_a_failed_write_forgets_it() {
        let mut w = MemoryWindow::new(Duration::from_secs(3_600));
        let t0 = Utc::now();
        let minutes = chrono::Duration::minutes;
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

    /// A sweep pass spreads over a minute: each call sweeps the tables due by then, and
    /// together they sweep every table once.
    #[test]
    fn sweeps_spread_over_a_pass() {
        let mut w = MemoryWindow::new(Duration::from_secs(60));
        let t0 = w.pass_started;
        let keys: Vec<MessageKey> = (0..20_000)
            .map(|i| message_key("org", &format!("m{i}")))
            .collect();
        w.record(keys.iter().copied(), t0 - chrono::Duration::minutes(5));
        assert_eq!(w.len(), 20_000);
        // A quarter of the pass: about a quarter of the tables swept, the expired entries in
        // them dropped, the others kept.
        w.sweep(t0 + chrono::Duration::seconds(15));
        let left = w.len();
        assert!(
            (13_000..17_000).contains(&left),
            "{left} left after a quarter"
        );
        // Calling again at the same moment sweeps nothing more.
        w.sweep(t0 + chrono::Duration::seconds(15));
        assert_eq!(w.len(), left);
        w.sweep(t0 + chrono::Duration::seconds(60));
        assert!(w.is_empty());
        // The next pass starts over: new expired entries go within its minute.
        w.record(keys.iter().copied(), t0 - chrono::Duration::minutes(5));
        w.sweep(t0 + chrono::Duration::seconds(121));
        assert!(w.is_empty());
    }
}
