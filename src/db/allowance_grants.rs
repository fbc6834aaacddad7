//! Blocks of the tool-call allowance held by this instance.
//!
//! Counting every call with its own write made the organization's usage row the one place all
//! its calls met: on PostgreSQL each call updated it and held its lock to the commit, on SQLite
//! each call took the usage file's write lock. So an instance counts calls in blocks: one
//! conditional statement adds a block of calls to the cycle's count (never past the limit),
//! and the instance's calls use the block in memory. The count in the database is then the
//! calls made plus the blocks' unused parts, and a block's unused part is given back when its
//! organization's calls pause.
//!
//! How large a block is: one call at first, doubling while blocks are used up within
//! [`FAST_USE`] (up to [`MAX_BLOCK`]), halving when one lasts longer than [`SLOW_USE`]; and at
//! most a sixteenth of what the limit leaves, so close to the limit every call is counted on its
//! own and the instances' unused parts cannot refuse another instance's calls while calls are
//! left.
//!
//! What a stop costs: a graceful stop gives the unused parts back. After a crash of the
//! instance (SIGKILL) they stay counted: at most about two blocks per organization (the rest
//! of one and the next, counted ahead), and a block is at most 256 calls and a sixteenth of
//! what the limit left.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, Weak,
    },
    time::{Duration, Instant},
};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, Statement};

/// Blocks no larger than this.
const MAX_BLOCK: u64 = 256;
/// A block used up within this grows the next.
const FAST_USE: Duration = Duration::from_millis(100);
/// A block that lasted longer than this shrinks the next.
const SLOW_USE: Duration = Duration::from_secs(1);
/// An unused part not touched for this long is given back.
const GIVE_BACK_AFTER: Duration = Duration::from_millis(500);
/// How often held blocks are looked at.
const SWEEP_EVERY: Duration = Duration::from_millis(250);
/// An entry without an unused part is forgotten after this long idle.
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// One organization's block in one cycle.
#[derive(Debug)]
pub struct Block {
    /// Calls counted in the database that this instance has not used yet.
    unused: u64,
    /// Size of the last block counted (0: none yet, or since a refusal or a give-back).
    size: u64,
    /// What the limit left after the last block was counted (`None` before the first).
    headroom: Option<u64>,
    granted_at: Instant,
    last_used: Instant,
    /// Whether a call is counting the next block while this one is used.
    refilling: bool,
}

impl Block {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            unused: 0,
            size: 0,
            headroom: None,
            granted_at: now,
            last_used: now,
            refilling: false,
        }
    }

    /// Uses one call of the block, if it has one left.
    pub fn take_one(&mut self) -> bool {
        if self.unused == 0 {
            return false;
        }
        self.unused -= 1;
        self.last_used = Instant::now();
        true
    }

    /// How many calls to ask the database for, now that the block is used up.
    pub fn wanted(&self) -> u64 {
        let lasted = self.granted_at.elapsed();
        let size = if self.size == 0 {
            1
        } else if lasted <= FAST_USE {
            self.size * 2
        } else if lasted > SLOW_USE {
            self.size / 2
        } else {
            self.size
        };
        let cap = self.headroom.map_or(1, |left| (left / 16).max(1));
        size.clamp(1, MAX_BLOCK).min(cap)
    }

    /// Records a block of `size` calls counted, one of which is the caller's, leaving
    /// `headroom` under the limit.
    pub fn granted(&mut self, size: u64, headroom: u64) {
        let now = Instant::now();
        self.unused = size.saturating_sub(1);
        self.size = size;
        self.headroom = Some(headroom);
        self.granted_at = now;
        self.last_used = now;
    }

    /// The size of the next block, when the call that just took one should count it now: a
    /// quarter of a block of more than one call is left, no other call is counting one, and
    /// the limit is not near (where calls are counted one at a time, when the block is used
    /// up). The caller then reports with [`Block::end_refill`].
    pub fn begin_refill(&mut self) -> Option<u64> {
        if self.refilling || self.size <= 1 || self.unused > self.size / 4 {
            return None;
        }
        let size = self.wanted();
        if size <= 1 {
            return None;
        }
        self.refilling = true;
        Some(size)
    }

    /// Records a refill's outcome: `Some(headroom)` when its `size` calls were counted; `None`
    /// when the limit did not leave them (or the database did not answer), after which the
    /// block's next calls are counted one at a time.
    pub fn end_refill(&mut self, size: u64, counted: Option<u64>) {
        self.refilling = false;
        match counted {
            Some(headroom) => {
                self.unused += size;
                self.size = size;
                self.headroom = Some(headroom);
                self.granted_at = Instant::now();
            }
            None => self.headroom = Some(0),
        }
    }

    /// The limit is reached: calls are counted one at a time again.
    pub fn refused(&mut self) {
        self.size = 0;
        self.headroom = Some(0);
    }
}

type Key = (String, String);
type Blocks = Mutex<HashMap<Key, Arc<tokio::sync::Mutex<Block>>>>;

/// This instance's blocks, by organization and cycle. Cloned handles share them.
#[derive(Clone, Debug, Default)]
pub struct AllowanceGrants {
    blocks: Arc<Blocks>,
    /// Whether the task that gives unused parts back has been started.
    sweeping: Arc<AtomicBool>,
}

impl AllowanceGrants {
    /// The block of `organization_id` in `cycle`.
    pub fn of(&self, organization_id: &str, cycle: &str) -> Arc<tokio::sync::Mutex<Block>> {
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        blocks
            .entry((organization_id.to_string(), cycle.to_string()))
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Block::new())))
            .clone()
    }

    /// Starts (once) the task that gives unused parts back to `counts`, where the counts are
    /// kept; called before the first block is counted.
    pub fn start_sweeping(&self, counts: &DatabaseConnection) {
        if self.sweeping.swap(true, Ordering::Relaxed) {
            return;
        }
        let blocks = Arc::downgrade(&self.blocks);
        let counts = counts.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if !sweep(&blocks, &counts, GIVE_BACK_AFTER).await {
                    return;
                }
            }
        });
    }

    /// Gives back every unused part now (a graceful stop).
    pub async fn give_back_all(&self, counts: &DatabaseConnection) {
        sweep(&Arc::downgrade(&self.blocks), counts, Duration::ZERO).await;
    }
}

/// Gives back the unused parts idle for `idle` or longer and forgets idle entries; `false`
/// once the blocks are gone (their service stopped).
async fn sweep(blocks: &Weak<Blocks>, counts: &DatabaseConnection, idle: Duration) -> bool {
    let Some(blocks) = blocks.upgrade() else {
        return false;
    };
    let held: Vec<(Key, Arc<tokio::sync::Mutex<Block>>)> = blocks
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(k, b)| (k.clone(), b.clone()))
        .collect();
    let mut forget = Vec::new();
    for (key, block) in held {
        // A block in use is not idle.
        let Ok(mut block) = block.try_lock() else {
            continue;
        };
        if block.last_used.elapsed() < idle {
            continue;
        }
        if block.unused > 0 {
            match give_back(counts, &key.0, &key.1, block.unused).await {
                Ok(()) => {
                    block.unused = 0;
                    block.size = 0;
                }
                Err(e) => {
                    // Kept, and used or given back later: the database is not answering.
                    tracing::debug!(error = %e, "could not give back unused tool calls");
                    continue;
                }
            }
        }
        if block.last_used.elapsed() >= FORGET_AFTER {
            forget.push(key);
        }
    }
    if !forget.is_empty() {
        let mut blocks = blocks.lock().unwrap_or_else(|e| e.into_inner());
        for key in forget {
            // Forgotten only while no call holds it (a call that has it may be about to be
            // granted a block) and it holds no unused part.
            let idle = blocks.get(&key).is_some_and(|b| {
                Arc::strong_count(b) == 1 && b.try_lock().is_ok_and(|b| b.unused == 0)
            });
            if idle {
                blocks.remove(&key);
            }
        }
    }
    true
}

/// Takes `calls` off the cycle's count.
async fn give_back(
    counts: &DatabaseConnection,
    organization_id: &str,
    cycle: &str,
    calls: u64,
) -> Result<(), DbErr> {
    counts
        .execute_raw(Statement::from_sql_and_values(
            counts.get_database_backend(),
            "UPDATE api_usage SET calls = CASE WHEN calls > $3 THEN calls - $3 ELSE 0 END \
             WHERE organization_id = $1 AND cycle = $2",
            [
                organization_id.into(),
                cycle.into(),
                i64::try_from(calls).unwrap_or(i64::MAX).into(),
            ],
        ))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uses up a block at once and asks for the next, as busy callers do.
    fn next_of(block: &mut Block, headroom: u64) -> u64 {
        let size = block.wanted();
        block.granted(size, headroom);
        while block.take_one() {}
        size
    }

    #[test]
    fn blocks_start_at_one_call_and_double_while_used_fast() {
        let mut block = Block::new();
        let sizes: Vec<u64> = (0..12).map(|_| next_of(&mut block, 1_000_000)).collect();
        assert_eq!(sizes[0], 1, "the first call is counted alone");
        assert_eq!(&sizes[1..4], &[2, 4, 8]);
        assert_eq!(*sizes.last().unwrap(), MAX_BLOCK);
    }

    #[test]
    fn blocks_take_at_most_a_sixteenth_of_what_the_limit_leaves() {
        let mut block = Block::new();
        for _ in 0..10 {
            next_of(&mut block, 1_000_000);
        }
        assert_eq!(next_of(&mut block, 160), MAX_BLOCK.min(1_000_000 / 16));
        assert_eq!(next_of(&mut block, 40), 10, "160 left: a tenth block");
        assert_eq!(next_of(&mut block, 15), 2);
        assert_eq!(
            next_of(&mut block, 0),
            1,
            "under 16 left: one call at a time"
        );
    }

    #[test]
    fn the_next_block_is_counted_while_a_quarter_is_left() {
        let mut block = Block::new();
        for _ in 0..4 {
            next_of(&mut block, 1_000_000);
        }
        // A block of 16: the call that leaves 4 counts the next one, and only that call.
        block.granted(16, 1_000_000);
        let mut refills = Vec::new();
        for _ in 0..15 {
            assert!(block.take_one());
            refills.push(block.begin_refill());
        }
        let started: Vec<usize> = (0..15).filter(|&i| refills[i].is_some()).collect();
        assert_eq!(started, vec![10], "{refills:?}");
        block.end_refill(32, Some(1_000_000));
        assert_eq!(block.unused, 32);
        // A refill the limit refused leaves the rest, then one call at a time.
        block.granted(16, 1_000_000);
        while block.begin_refill().is_none() {
            assert!(block.take_one());
        }
        block.end_refill(32, None);
        while block.take_one() {}
        assert_eq!(block.wanted(), 1);
        assert_eq!(block.begin_refill(), None);
    }

    #[test]
    fn blocks_shrink_when_used_slowly_and_restart_after_a_refusal() {
        let mut block = Block::new();
        for _ in 0..6 {
            next_of(&mut block, 1_000_000);
        }
        block.granted_at -= SLOW_USE * 2;
        assert_eq!(block.size, 32);
        assert_eq!(block.wanted(), 16);
        block.refused();
        assert_eq!(block.wanted(), 1);
    }
}
