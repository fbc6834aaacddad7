//! The window's fingerprints in memory: a cuckoo filter of 12-bit fingerprints of every message
//! key the window holds, split into [`SHARDS`] tables by the key's top bits.
//!
//! It answers "not in the window" exactly for most new messages (one or two cache lines read)
//! and "maybe" otherwise (about one new message in 400, and every repeat), which the caller
//! settles with the exact keys. It never forgets a key it was given, so it never makes a repeat
//! look new. A table that cannot take another fingerprint is rebuilt, larger, from the exact
//! keys of its shard (which the caller keeps: recent ones in memory, older ones on disk);
//! rebuilding also drops the fingerprints of keys that have left the window.
//!
//! Five fingerprints share a 64-bit bucket: 12.8 bits a slot, about 2 bytes per key at the
//! tables' usual fill. (An exact table of 128-bit keys took 28-56 bytes per key.)

use crate::ingest::dedup::MessageKey;

/// Bits of the key that choose its table.
pub const SHARD_BITS: u32 = 10;
pub const SHARDS: usize = 1 << SHARD_BITS;
const SLOTS: usize = 5;
const FP_BITS: u32 = 12;
const FP_MASK: u64 = (1 << FP_BITS) - 1;
/// How full a table is made when it is built for a number of keys.
const BUILD_FILL: f64 = 0.85;
/// Fingerprints displaced in a chain before an insert gives up and the table is rebuilt.
const MAX_KICKS: usize = 500;

/// The table a key's fingerprint lives in.
pub fn shard_of(key: &MessageKey) -> usize {
    (key.0 >> (64 - SHARD_BITS)) as usize
}

/// The first and last possible keys of a shard, for range reads of sorted keys.
pub fn shard_bounds(shard: usize) -> (MessageKey, MessageKey) {
    let low = (shard as u64) << (64 - SHARD_BITS);
    let high = low | (u64::MAX >> SHARD_BITS);
    ((low, 0), (high, u64::MAX))
}

fn fingerprint(key: &MessageKey) -> u64 {
    // 0 marks an empty slot.
    (key.1 & FP_MASK).max(1)
}

/// One shard's table: buckets of five 12-bit slots.
struct Table {
    buckets: Vec<u64>,
    len: usize,
    rng: u64,
}

impl Table {
    fn for_keys(keys: usize) -> Self {
        let buckets = ((keys as f64 / (SLOTS as f64 * BUILD_FILL)).ceil() as usize).max(2);
        Self {
            buckets: vec![0; buckets],
            len: 0,
            rng: 0x9E37_79B9_7F4A_7C15 ^ buckets as u64,
        }
    }

    fn home(&self, key: &MessageKey) -> usize {
        // Bits below the shard's, mapped onto the table's size without a division.
        (((key.0 & 0xFFFF_FFFF) * self.buckets.len() as u64) >> 32) as usize
    }

    /// The other bucket a fingerprint may live in: (h(fp) - i) mod n, which maps each of the
    /// two buckets to the other for any table size.
    fn alternate(&self, bucket: usize, fp: u64) -> usize {
        let n = self.buckets.len() as u64;
        let h = (fp.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % n;
        ((h + n - bucket as u64) % n) as usize
    }

    fn slot(bucket: u64, j: usize) -> u64 {
        (bucket >> (FP_BITS as usize * j)) & FP_MASK
    }

    fn with_slot(bucket: u64, j: usize, fp: u64) -> u64 {
        let shift = FP_BITS as usize * j;
        (bucket & !(FP_MASK << shift)) | (fp << shift)
    }

    fn holds(bucket: u64, fp: u64) -> bool {
        (0..SLOTS).any(|j| Self::slot(bucket, j) == fp)
    }

    fn put(&mut self, i: usize, fp: u64) -> bool {
        let bucket = self.buckets[i];
        match (0..SLOTS).find(|&j| Self::slot(bucket, j) == 0) {
            Some(j) => {
                self.buckets[i] = Self::with_slot(bucket, j, fp);
                true
            }
            None => false,
        }
    }

    fn contains(&self, key: &MessageKey) -> bool {
        let fp = fingerprint(key);
        let i = self.home(key);
        Self::holds(self.buckets[i], fp) || Self::holds(self.buckets[self.alternate(i, fp)], fp)
    }

    /// Adds a key's fingerprint; `false` when the table is too full, after which it has lost
    /// a fingerprint and must be rebuilt.
    fn insert(&mut self, key: &MessageKey) -> bool {
        let mut fp = fingerprint(key);
        let home = self.home(key);
        let alternate = self.alternate(home, fp);
        if self.put(home, fp) || self.put(alternate, fp) {
            self.len += 1;
            return true;
        }
        let mut i = if self.next_random() & 1 == 0 {
            home
        } else {
            alternate
        };
        for _ in 0..MAX_KICKS {
            let j = (self.next_random() % SLOTS as u64) as usize;
            let victim = Self::slot(self.buckets[i], j);
            self.buckets[i] = Self::with_slot(self.buckets[i], j, fp);
            fp = victim;
            i = self.alternate(i, fp);
            if self.put(i, fp) {
                self.len += 1;
                return true;
            }
        }
        false
    }

    fn remove(&mut self, key: &MessageKey) -> bool {
        let fp = fingerprint(key);
        let home = self.home(key);
        for i in [home, self.alternate(home, fp)] {
            let bucket = self.buckets[i];
            if let Some(j) = (0..SLOTS).find(|&j| Self::slot(bucket, j) == fp) {
                self.buckets[i] = Self::with_slot(bucket, j, 0);
                self.len -= 1;
                return true;
            }
        }
        false
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64: the choice of which fingerprint to displace only needs to vary.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
}

/// Fingerprints of the window's keys.
pub struct Fingerprints {
    tables: Vec<Table>,
}

impl Default for Fingerprints {
    fn default() -> Self {
        Self::new()
    }
}

impl Fingerprints {
    pub fn new() -> Self {
        Self::for_keys(0)
    }

    /// Tables sized for about `keys` keys in all, spread evenly by the keys' hashes (a table
    /// built for n keys is 85% full with them and takes a few percent more).
    pub fn for_keys(keys: usize) -> Self {
        let size = (keys / SHARDS).max(64);
        Self {
            tables: (0..SHARDS).map(|_| Table::for_keys(size)).collect(),
        }
    }

    /// `false`: the key was never added (exact). `true`: it may have been.
    pub fn may_contain(&self, key: &MessageKey) -> bool {
        self.tables[shard_of(key)].contains(key)
    }

    /// Adds a key; `false` when its shard is full and must be [`rebuild`](Self::rebuild)t
    /// from its keys before the filter is asked again.
    #[must_use]
    pub fn insert(&mut self, key: &MessageKey) -> bool {
        self.tables[shard_of(key)].insert(key)
    }

    /// Removes one fingerprint a key added (a key added twice keeps one).
    pub fn remove(&mut self, key: &MessageKey) {
        self.tables[shard_of(key)].remove(key);
    }

    /// Replaces a shard's table with one built from `keys` (all of the shard's keys), sized
    /// for `room` keys or more.
    pub fn rebuild(&mut self, shard: usize, keys: &[MessageKey], room: usize) {
        let mut size = room.max(keys.len()).max(64);
        loop {
            let mut table = Table::for_keys(size);
            if keys.iter().all(|k| table.insert(k)) {
                self.tables[shard] = table;
                return;
            }
            size += size / 8 + 1;
        }
    }

    /// Fingerprints held.
    pub fn len(&self) -> usize {
        self.tables.iter().map(|t| t.len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the tables.
    pub fn memory_bytes(&self) -> usize {
        self.tables
            .iter()
            .map(|t| t.buckets.len() * 8)
            .sum::<usize>()
            + self.tables.len() * std::mem::size_of::<Table>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::dedup::message_key;

    fn keys(n: usize, prefix: &str) -> Vec<MessageKey> {
        (0..n)
            .map(|i| message_key("org", &format!("{prefix}{i}")))
            .collect()
    }

    /// Every key added is found; keys never added are mostly not; a full shard is rebuilt
    /// from its keys and still finds every one.
    #[test]
    fn no_key_added_is_ever_missed() {
        let mut f = Fingerprints::new();
        let added = keys(200_000, "a");
        for k in &added {
            if !f.insert(k) {
                let shard = shard_of(k);
                let of_shard: Vec<MessageKey> = added
                    .iter()
                    .take_while(|x| *x != k)
                    .chain([k])
                    .filter(|x| shard_of(x) == shard)
                    .copied()
                    .collect();
                f.rebuild(shard, &of_shard, of_shard.len() * 5 / 4);
            }
        }
        assert!(added.iter().all(|k| f.may_contain(k)));
        assert_eq!(f.len(), added.len());
        let others = keys(100_000, "b");
        let false_maybes = others.iter().filter(|k| f.may_contain(k)).count();
        assert!(
            false_maybes < 1_000,
            "{false_maybes} false maybes in 100,000"
        );
        // About 2 bytes a key.
        let per_key = f.memory_bytes() as f64 / added.len() as f64;
        assert!(per_key < 3.0, "{per_key} bytes a key");
    }

    #[test]
    fn removing_drops_one_copy() {
        let mut f = Fingerprints::new();
        let k = message_key("org", "m");
        assert!(!f.may_contain(&k));
        assert!(f.insert(&k) && f.insert(&k));
        f.remove(&k);
        assert!(f.may_contain(&k));
        f.remove(&k);
        assert!(!f.may_contain(&k));
        assert!(f.is_empty());
    }

    #[test]
    fn shard_bounds_hold_their_keys() {
        for k in keys(1_000, "c") {
            let (low, high) = shard_bounds(shard_of(&k));
            assert!(low <= k && k <= high);
        }
    }
}
