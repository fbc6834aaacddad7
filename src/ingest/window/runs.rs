//! The window's exact keys on disk: sorted runs, each a file of (key, first-seen second)
//! records in key order, written once and never changed.
//!
//! A run is written from the keys the window sealed (or by merging runs), through a temporary
//! file that is synced and then renamed, and carries a checksum: a run that is there at start
//! is whole. A lookup reads one block of [`INDEX_EVERY`] records, found through an in-memory
//! index of every block's first key (1/8 byte a key); a shard's keys are one contiguous range.
//!
//! Layout: a 48-byte header (magic, first and last seal number, record count, oldest and
//! newest first-seen second, sealing second), the records (16-byte key, 4-byte second, little
//! endian), and an 8-byte checksum of the records and then the header.

use std::{
    cmp::Reverse,
    collections::BinaryHeap,
    fs::File,
    io::{self, BufReader, BufWriter, Read, Write},
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use xxhash_rust::xxh3::Xxh3;

use super::fingerprints::shard_bounds;
use crate::ingest::dedup::MessageKey;

const MAGIC: &[u8; 8] = b"CIWRUN01";
const HEADER: u64 = 48;
const RECORD: u64 = 20;
const FOOTER: u64 = 8;
/// Records per block of the in-memory index.
pub const INDEX_EVERY: u64 = 128;
/// Records read and checked at a time when a run is read whole.
const READ_BLOCK_RECORDS: u64 = 1 << 16;

/// A run's description, as its header holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunHeader {
    /// The seal numbers the run covers (a merged run covers its inputs').
    pub first_seal: u64,
    pub last_seal: u64,
    pub count: u64,
    /// Oldest and newest first-seen second of its records.
    pub oldest: u32,
    pub newest: u32,
    /// When the newest seal it covers was taken: every key recorded before then is in this
    /// run or an earlier one.
    pub sealed_at: u32,
}

impl RunHeader {
    fn encode(&self) -> [u8; HEADER as usize] {
        let mut b = [0u8; HEADER as usize];
        b[0..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&self.first_seal.to_le_bytes());
        b[16..24].copy_from_slice(&self.last_seal.to_le_bytes());
        b[24..32].copy_from_slice(&self.count.to_le_bytes());
        b[32..36].copy_from_slice(&self.oldest.to_le_bytes());
        b[36..40].copy_from_slice(&self.newest.to_le_bytes());
        b[40..44].copy_from_slice(&self.sealed_at.to_le_bytes());
        b
    }

    fn decode(b: &[u8; HEADER as usize]) -> io::Result<Self> {
        if &b[0..8] != MAGIC {
            return Err(invalid("not a window run"));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
        Ok(Self {
            first_seal: u64_at(8),
            last_seal: u64_at(16),
            count: u64_at(24),
            oldest: u32_at(32),
            newest: u32_at(36),
            sealed_at: u32_at(40),
        })
    }
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_string())
}

fn encode_record(key: &MessageKey, second: u32) -> [u8; RECORD as usize] {
    let mut r = [0u8; RECORD as usize];
    r[0..8].copy_from_slice(&key.0.to_le_bytes());
    r[8..16].copy_from_slice(&key.1.to_le_bytes());
    r[16..20].copy_from_slice(&second.to_le_bytes());
    r
}

fn decode_record(r: &[u8]) -> (MessageKey, u32) {
    let u64_at = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().unwrap_or_default());
    let second = u32::from_le_bytes(r[16..20].try_into().unwrap_or_default());
    ((u64_at(0), u64_at(8)), second)
}

/// The file name of a run covering seals `first..=last`.
pub fn file_name(first: u64, last: u64) -> String {
    format!("{first:020}-{last:020}.run")
}

/// The records a run's file of `bytes` holds (0 for a file too short to be one).
pub fn records_in(bytes: u64) -> u64 {
    bytes.saturating_sub(HEADER + FOOTER) / RECORD
}

/// The seals a run's file name says it covers.
pub fn parse_file_name(name: &str) -> Option<(u64, u64)> {
    let (first, last) = name.strip_suffix(".run")?.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// A run on disk, open for lookups.
pub struct KeyRun {
    pub header: RunHeader,
    path: PathBuf,
    file: File,
    /// The first key of every block of [`INDEX_EVERY`] records.
    index: Vec<MessageKey>,
}

impl std::fmt::Debug for KeyRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRun")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}

impl KeyRun {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes its in-memory index takes.
    pub fn memory_bytes(&self) -> usize {
        self.index.capacity() * std::mem::size_of::<MessageKey>() + std::mem::size_of::<Self>()
    }

    /// Opens a run, reading it whole to check its checksum and build its index.
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::open_reading(path, |_, _| {})
    }

    /// Opens a run as [`open`](Self::open) does, handing each record to `each` as it is read
    /// (before the checksum is known to match).
    pub fn open_reading(path: &Path, mut each: impl FnMut(&MessageKey, u32)) -> io::Result<Self> {
        let file = File::open(path)?;
        let mut head = [0u8; HEADER as usize];
        file.read_exact_at(&mut head, 0)?;
        let header = RunHeader::decode(&head)?;
        let expected = HEADER + header.count * RECORD + FOOTER;
        if file.metadata()?.len() != expected {
            return Err(invalid("a window run of the wrong length"));
        }
        // Whole blocks of records are read and hashed at a time (hashing record by record
        // took a tenth of a start's reading).
        let mut reader = File::open(path)?;
        std::io::copy(&mut (&mut reader).take(HEADER), &mut io::sink())?;
        let mut hasher = Xxh3::new();
        let mut index = Vec::with_capacity((header.count / INDEX_EVERY + 1) as usize);
        let mut block = vec![0u8; (READ_BLOCK_RECORDS * RECORD) as usize];
        let mut i = 0u64;
        while i < header.count {
            let records = READ_BLOCK_RECORDS.min(header.count - i);
            let bytes = &mut block[..(records * RECORD) as usize];
            reader.read_exact(bytes)?;
            hasher.update(bytes);
            for record in bytes.chunks_exact(RECORD as usize) {
                let (key, first_seen) = decode_record(record);
                if i.is_multiple_of(INDEX_EVERY) {
                    index.push(key);
                }
                each(&key, first_seen);
                i += 1;
            }
        }
        hasher.update(&head);
        let mut footer = [0u8; FOOTER as usize];
        reader.read_exact(&mut footer)?;
        if u64::from_le_bytes(footer) != hasher.digest() {
            return Err(invalid("a window run whose checksum does not match"));
        }
        Ok(Self {
            header,
            path: path.to_path_buf(),
            file,
            index,
        })
    }

    /// Bytes of the run's file: header, records and checksum.
    pub fn file_len(&self) -> u64 {
        HEADER + self.header.count * RECORD + FOOTER
    }

    /// `len` bytes of the run's file from `offset`, read through the run's own handle: a run a
    /// merge removed meanwhile is still read whole.
    pub fn read_file_bytes(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    fn read_records(&self, from: u64, to: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; ((to - from) * RECORD) as usize];
        self.file.read_exact_at(&mut buf, HEADER + from * RECORD)?;
        Ok(buf)
    }

    /// The first-seen second of `key`, if the run holds it: one block read.
    pub fn find(&self, key: &MessageKey) -> io::Result<Option<u32>> {
        let blocks_at_or_below = self.index.partition_point(|k| k <= key);
        let Some(block) = blocks_at_or_below.checked_sub(1) else {
            return Ok(None);
        };
        let from = block as u64 * INDEX_EVERY;
        let to = (from + INDEX_EVERY).min(self.header.count);
        let buf = self.read_records(from, to)?;
        let records: Vec<(MessageKey, u32)> = buf
            .chunks_exact(RECORD as usize)
            .map(decode_record)
            .collect();
        Ok(records
            .binary_search_by(|(k, _)| k.cmp(key))
            .ok()
            .map(|i| records[i].1))
    }

    /// Appends the keys of `shard` first seen after `after` to `out`.
    pub fn shard_keys(
        &self,
        shard: usize,
        after: u32,
        out: &mut Vec<MessageKey>,
    ) -> io::Result<()> {
        if self.header.newest <= after || self.header.count == 0 {
            return Ok(());
        }
        let (low, high) = shard_bounds(shard);
        let below_low = self.index.partition_point(|k| *k < low);
        let from = below_low.saturating_sub(1) as u64 * INDEX_EVERY;
        let to = (self.index.partition_point(|k| *k <= high) as u64 * INDEX_EVERY)
            .min(self.header.count);
        if from >= to {
            return Ok(());
        }
        let buf = self.read_records(from, to)?;
        out.extend(
            buf.chunks_exact(RECORD as usize)
                .map(decode_record)
                .filter(|(k, second)| *k >= low && *k <= high && *second > after)
                .map(|(k, _)| k),
        );
        Ok(())
    }

    /// Every record, in key order, read sequentially.
    fn records(&self) -> io::Result<RecordReader> {
        let mut reader = BufReader::with_capacity(1 << 18, File::open(&self.path)?);
        std::io::copy(&mut (&mut reader).take(HEADER), &mut io::sink())?;
        Ok(RecordReader {
            reader,
            left: self.header.count,
        })
    }
}

struct RecordReader {
    reader: BufReader<File>,
    left: u64,
}

impl RecordReader {
    fn next(&mut self) -> io::Result<Option<(MessageKey, u32)>> {
        if self.left == 0 {
            return Ok(None);
        }
        let mut record = [0u8; RECORD as usize];
        self.reader.read_exact(&mut record)?;
        self.left -= 1;
        Ok(Some(decode_record(&record)))
    }
}

/// Writes a run from records given in strictly rising key order.
/// A run's file being written: under a temporary name in the runs' directory until it is
/// whole and synced, then under its run's name. Dropped before that, it leaves nothing.
pub struct PendingRun {
    dir: PathBuf,
    temporary: PathBuf,
    out: BufWriter<File>,
}

impl PendingRun {
    pub fn create(dir: &Path) -> io::Result<Self> {
        let temporary = dir.join(format!("{}.part", uuid::Uuid::new_v4().simple()));
        Ok(Self {
            dir: dir.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, File::create(&temporary)?),
            temporary,
        })
    }

    /// Appends bytes of the file: a run copied from elsewhere comes whole, header and
    /// checksum included (checked when the window opens it, as every run's is).
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)
    }

    /// Flushes and syncs the file and gives it the name of the run covering seals
    /// `first..=last`; answers that path. The directory is synced by the caller.
    pub fn finish(mut self, first_seal: u64, last_seal: u64) -> io::Result<PathBuf> {
        self.out.flush()?;
        self.out.get_ref().sync_all()?;
        let path = self.dir.join(file_name(first_seal, last_seal));
        std::fs::rename(&self.temporary, &path)?;
        Ok(path)
    }
}

impl Drop for PendingRun {
    fn drop(&mut self) {
        // After `finish` the temporary name is gone and this does nothing.
        let _ = std::fs::remove_file(&self.temporary);
    }
}

/// Writes a run record by record: its header is written last, once its count and seconds are
/// known.
struct RunWriter {
    file: PendingRun,
    hasher: Xxh3,
    index: Vec<MessageKey>,
    count: u64,
    oldest: u32,
    newest: u32,
}

impl RunWriter {
    fn create(dir: &Path) -> io::Result<Self> {
        let mut file = PendingRun::create(dir)?;
        file.append(&[0u8; HEADER as usize])?;
        Ok(Self {
            file,
            hasher: Xxh3::new(),
            index: Vec::new(),
            count: 0,
            oldest: u32::MAX,
            newest: 0,
        })
    }

    fn push(&mut self, key: &MessageKey, second: u32) -> io::Result<()> {
        let record = encode_record(key, second);
        self.file.append(&record)?;
        self.hasher.update(&record);
        if self.count.is_multiple_of(INDEX_EVERY) {
            self.index.push(*key);
        }
        self.count += 1;
        self.oldest = self.oldest.min(second);
        self.newest = self.newest.max(second);
        Ok(())
    }

    /// Finishes the file, syncs it and gives it its name.
    fn finish(mut self, first_seal: u64, last_seal: u64, sealed_at: u32) -> io::Result<KeyRun> {
        let header = RunHeader {
            first_seal,
            last_seal,
            count: self.count,
            oldest: if self.count == 0 {
                sealed_at
            } else {
                self.oldest
            },
            newest: if self.count == 0 {
                sealed_at
            } else {
                self.newest
            },
            sealed_at,
        };
        let head = header.encode();
        self.hasher.update(&head);
        self.file.append(&self.hasher.digest().to_le_bytes())?;
        self.file.out.flush()?;
        self.file.out.get_ref().write_all_at(&head, 0)?;
        let dir = self.file.dir.clone();
        let path = self.file.finish(first_seal, last_seal)?;
        File::open(&dir)?.sync_all()?;
        Ok(KeyRun {
            header,
            file: File::open(&path)?,
            path,
            index: self.index,
        })
    }
}

/// Writes the keys of one seal as a run.
pub fn write_seal(
    dir: &Path,
    seal: u64,
    sealed_at: u32,
    mut records: Vec<(MessageKey, u32)>,
) -> io::Result<KeyRun> {
    records.sort_unstable_by_key(|(k, _)| *k);
    let mut writer = RunWriter::create(dir)?;
    for (key, second) in &records {
        writer.push(key, *second)?;
    }
    writer.finish(seal, seal, sealed_at)
}

/// Merges runs into one covering their seals, keeping each key once (its latest first-seen
/// second) and leaving out keys first seen at or before `expired`. Reads and writes
/// sequentially, holding a buffer per input.
pub fn merge(dir: &Path, inputs: &[Arc<KeyRun>], expired: u32) -> io::Result<KeyRun> {
    let mut readers = inputs
        .iter()
        .map(|run| run.records())
        .collect::<io::Result<Vec<_>>>()?;
    let mut heap = BinaryHeap::new();
    for (i, reader) in readers.iter_mut().enumerate() {
        if let Some((key, second)) = reader.next()? {
            heap.push(Reverse((key, i, second)));
        }
    }
    let mut writer = RunWriter::create(dir)?;
    let mut pending: Option<(MessageKey, u32)> = None;
    while let Some(Reverse((key, i, second))) = heap.pop() {
        if let Some((key, second)) = readers[i].next()? {
            heap.push(Reverse((key, i, second)));
        }
        match &mut pending {
            Some((k, s)) if *k == key => *s = (*s).max(second),
            _ => {
                if let Some((k, s)) = pending.take() {
                    if s > expired {
                        writer.push(&k, s)?;
                    }
                }
                pending = Some((key, second));
            }
        }
    }
    if let Some((k, s)) = pending {
        if s > expired {
            writer.push(&k, s)?;
        }
    }
    let first = inputs
        .iter()
        .map(|r| r.header.first_seal)
        .min()
        .unwrap_or(0);
    let last = inputs.iter().map(|r| r.header.last_seal).max().unwrap_or(0);
    let sealed_at = inputs.iter().map(|r| r.header.sealed_at).max().unwrap_or(0);
    writer.finish(first, last, sealed_at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::dedup::message_key;
    use crate::ingest::window::fingerprints::shard_of;

    fn records(n: usize, prefix: &str, second: u32) -> Vec<(MessageKey, u32)> {
        (0..n)
            .map(|i| (message_key("org", &format!("{prefix}{i}")), second))
            .collect()
    }

    #[test]
    fn a_run_finds_its_keys_and_reopens_whole() {
        let dir = tempfile::tempdir().unwrap();
        // More records than one block of a whole read.
        let written = records(70_000, "a", 100);
        let run = write_seal(dir.path(), 7, 120, written.clone()).unwrap();
        assert_eq!(run.header.count, 70_000);
        for (k, s) in written.iter().step_by(97) {
            assert_eq!(run.find(k).unwrap(), Some(*s));
        }
        assert_eq!(run.find(&message_key("org", "absent")).unwrap(), None);
        assert_eq!(run.find(&(0, 0)).unwrap(), None);
        assert_eq!(run.find(&(u64::MAX, u64::MAX)).unwrap(), None);
        let mut seen = 0;
        let again = KeyRun::open_reading(run.path(), |_, _| seen += 1).unwrap();
        assert_eq!(again.header, run.header);
        assert_eq!(again.index, run.index);
        assert_eq!(seen, 70_000);
        assert_eq!(
            parse_file_name(run.path().file_name().unwrap().to_str().unwrap()),
            Some((7, 7))
        );
        // Each shard's range holds exactly that shard's keys.
        let mut total = 0;
        for shard in [0, 1, 511, 1023] {
            let mut out = Vec::new();
            run.shard_keys(shard, 0, &mut out).unwrap();
            let expected = written.iter().filter(|(k, _)| shard_of(k) == shard).count();
            assert_eq!(out.len(), expected);
            total += out.len();
        }
        assert!(total > 0);
        // Keys first seen at or before `after` are left out.
        let mut out = Vec::new();
        run.shard_keys(0, 100, &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn a_damaged_run_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let run = write_seal(dir.path(), 1, 5, records(500, "a", 3)).unwrap();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(run.path())
            .unwrap();
        file.write_all_at(&[0xAB], HEADER + 7).unwrap();
        assert!(KeyRun::open(run.path()).is_err());
    }

    #[test]
    fn merging_keeps_each_key_once_and_drops_the_expired() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_seal(dir.path(), 1, 10, records(3_000, "a", 5)).unwrap();
        let mut b_records = records(2_000, "b", 20);
        // A key of `a` seen again later: the merge keeps the later second.
        b_records.push((message_key("org", "a1"), 21));
        let b = write_seal(dir.path(), 2, 30, b_records).unwrap();
        let merged = merge(dir.path(), &[Arc::new(a), Arc::new(b)], 0).unwrap();
        assert_eq!(merged.header.count, 5_000);
        assert_eq!((merged.header.first_seal, merged.header.last_seal), (1, 2));
        assert_eq!(merged.header.sealed_at, 30);
        assert_eq!(merged.find(&message_key("org", "a1")).unwrap(), Some(21));
        assert_eq!(merged.find(&message_key("org", "a2")).unwrap(), Some(5));
        let dropped = merge(dir.path(), &[Arc::new(merged)], 5).unwrap();
        assert_eq!(dropped.header.count, 2_001);
        assert_eq!(dropped.find(&message_key("org", "a2")).unwrap(), None);
    }
}
