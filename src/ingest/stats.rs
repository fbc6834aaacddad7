//! Process-wide ingest counters: what the writer acknowledged and dropped, what the applier
//! applied, and how long effects lagged behind their acknowledgement (a fixed-bucket
//! histogram, so memory stays constant). Read by the metrics endpoint and the benchmark.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (seconds) of the effects-lag buckets; a last bucket takes the rest.
pub const LAG_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];

pub struct IngestStats {
    /// Events journaled (acknowledged and not repeats).
    pub journaled: AtomicU64,
    /// Events dropped as repeats of a `messageId` within the window.
    pub repeats: AtomicU64,
    /// Events refused by validation.
    pub refused: AtomicU64,
    /// Events whose effects were applied.
    pub applied: AtomicU64,
    /// Batches refused with 503 because the instance held as many unanswered batches as it may
    /// (`backlog`): the offered load is above what the database commits.
    pub saturated_batches: AtomicU64,
    /// Applied events per lag bucket (the last is the overflow bucket).
    lag: [AtomicU64; LAG_BUCKETS.len() + 1],
    /// Sum of lags in milliseconds, weighted by events.
    lag_sum_ms: AtomicU64,
    /// Microseconds the acknowledging writer spent on groups (waiting for the write lock,
    /// writing, committing): how busy ingest is, for work that should give way to it.
    pub writer_busy_us: AtomicU64,
    /// Bytes the in-memory `messageId` window holds (SQLite), as of the latest group: it grows
    /// with the messages of the window's length and is sized apart from the rest (benchmarks).
    pub window_bytes: AtomicU64,
}

static STATS: IngestStats = IngestStats {
    journaled: AtomicU64::new(0),
    repeats: AtomicU64::new(0),
    refused: AtomicU64::new(0),
    applied: AtomicU64::new(0),
    saturated_batches: AtomicU64::new(0),
    lag: [const { AtomicU64::new(0) }; LAG_BUCKETS.len() + 1],
    lag_sum_ms: AtomicU64::new(0),
    writer_busy_us: AtomicU64::new(0),
    window_bytes: AtomicU64::new(0),
};

/// The counters of this process.
pub fn stats() -> &'static IngestStats {
    &STATS
}

/// A copy of the lag histogram: events per bucket (cumulative counts are the caller's).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LagHistogram {
    pub buckets: Vec<u64>,
    pub sum_secs: f64,
}

impl LagHistogram {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The bucket bound under which the `p` quantile lies (infinity when in the last bucket).
    pub fn quantile_bound(&self, p: f64) -> f64 {
        let total = self.count();
        if total == 0 {
            return 0.0;
        }
        let rank = (total as f64 * p).ceil() as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return LAG_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY);
            }
        }
        f64::INFINITY
    }

    /// `<=bound:count` for each non-empty bucket.
    pub fn describe(&self) -> String {
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| match LAG_BUCKETS.get(i) {
                Some(bound) => format!("<={bound}s:{n}"),
                None => format!(">{}s:{n}", LAG_BUCKETS[LAG_BUCKETS.len() - 1]),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// What was recorded since `earlier`.
    pub fn since(&self, earlier: &LagHistogram) -> LagHistogram {
        LagHistogram {
            buckets: self
                .buckets
                .iter()
                .zip(earlier.buckets.iter().chain(std::iter::repeat(&0)))
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            sum_secs: self.sum_secs - earlier.sum_secs,
        }
    }
}

impl IngestStats {
    /// Records `events` applied `lag_secs` after their acknowledgement.
    pub fn record_applied(&self, events: u64, lag_secs: f64) {
        self.applied.fetch_add(events, Ordering::Relaxed);
        let i = LAG_BUCKETS
            .iter()
            .position(|b| lag_secs <= *b)
            .unwrap_or(LAG_BUCKETS.len());
        self.lag[i].fetch_add(events, Ordering::Relaxed);
        let ms = (lag_secs.max(0.0) * 1000.0) as u64;
        self.lag_sum_ms
            .fetch_add(ms.saturating_mul(events), Ordering::Relaxed);
    }

    pub fn lag(&self) -> LagHistogram {
        LagHistogram {
            buckets: self.lag.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            sum_secs: self.lag_sum_ms.load(Ordering::Relaxed) as f64 / 1000.0,
        }
    }
}

/// Whether ingest is saturated: the acknowledging writer was busy for nearly all of a second
/// (requests wait for it), and saturation holds until two seconds pass without such a quarter
/// second and what it waits for is something background work
/// takes from it. Background work (the automation processor) slows down while it says so.
/// - On SQLite every write transaction holds the one write lock, so a busy writer is waiting on
///   the other writers: the writer alone decides.
/// - On PostgreSQL transactions commit side by side; the group-commit writer is busy
///   back-to-back whenever commits are slow, at loads the machine carries with room to spare
///   (holding runs back there only delays them), so the machine's CPUs must be busy too.
pub struct WriterLoad {
    sampled_at: std::time::Instant,
    busy_us: u64,
    cpu: Option<CpuTimes>,
    read_cpu: fn() -> Option<CpuTimes>,
    /// Saturated until then: the answer holds for [`WriterLoad::HOLD`] after the latest
    /// saturated interval.
    saturated_until: Option<std::time::Instant>,
    /// Saturated intervals in a row, up to the latest.
    streak: u32,
}

impl WriterLoad {
    /// `one_write_lock`: the database serializes every write transaction (SQLite).
    pub fn new(one_write_lock: bool) -> Self {
        let read_cpu: fn() -> Option<CpuTimes> = if one_write_lock {
            || None
        } else {
            CpuTimes::read
        };
        Self {
            sampled_at: std::time::Instant::now(),
            busy_us: STATS.writer_busy_us.load(Ordering::Relaxed),
            cpu: read_cpu(),
            read_cpu,
            saturated_until: None,
            streak: 0,
        }
    }
}

impl WriterLoad {
    /// Shortest interval a busy fraction is computed over.
    const INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);
    /// Busy fraction (of the writer, and of the CPUs) at and above which ingest counts as
    /// saturated.
    const SATURATED: f64 = 0.9;
    /// Consecutive saturated intervals (one second) that make ingest saturated: single
    /// intervals come and go at loads the machine carries (a checkpoint, a long apply).
    const ENTER: u32 = 4;
    /// How long saturation holds after its latest saturated interval. Whatever gives way while
    /// ingest is saturated takes the cores back as soon as an interval falls below the bar,
    /// which its own work then causes: without this hold, the automation processor flapped
    /// back to whole batches within a peak (docs/performance.md).
    const HOLD: std::time::Duration = std::time::Duration::from_secs(2);

    /// Saturated once [`Self::ENTER`] intervals in a row were, and until [`Self::HOLD`] has
    /// passed without a saturated interval.
    pub fn saturated(&mut self) -> bool {
        let elapsed = self.sampled_at.elapsed();
        if elapsed >= Self::INTERVAL {
            let busy = STATS.writer_busy_us.load(Ordering::Relaxed);
            let writer =
                busy.saturating_sub(self.busy_us) as f64 / elapsed.as_micros().max(1) as f64;
            let cpu_now = (self.read_cpu)();
            // Where the CPUs are not read (SQLite) or cannot be (not Linux), the writer alone
            // decides.
            let cpu = match (&self.cpu, &cpu_now) {
                (Some(before), Some(now)) => now.busy_since(before),
                _ => 1.0,
            };
            let now = std::time::Instant::now();
            let holding = self.saturated_until.is_some_and(|until| now < until);
            if writer >= Self::SATURATED && cpu >= Self::SATURATED {
                self.streak += 1;
                if holding || self.streak >= Self::ENTER {
                    self.saturated_until = Some(now + Self::HOLD);
                }
            } else {
                self.streak = 0;
            }
            self.busy_us = busy;
            self.cpu = cpu_now;
            self.sampled_at = std::time::Instant::now();
        }
        self.saturated_until
            .is_some_and(|until| std::time::Instant::now() < until)
    }
}

/// The machine's CPU time counters (`/proc/stat`, all CPUs), in clock ticks.
#[derive(Debug, Clone, PartialEq)]
struct CpuTimes {
    busy: u64,
    total: u64,
}

impl CpuTimes {
    fn read() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The `cpu` line: user nice system idle iowait irq softirq steal ...; idle and iowait are
    /// the idle time.
    fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|t| t.parse().ok())
            .collect();
        let total: u64 = ticks.iter().take(8).sum();
        let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
        Some(Self {
            busy: total.saturating_sub(idle),
            total,
        })
    }

    /// The busy share of the CPU time since `before` (1 when no tick passed, which a caller
    /// reads as "no evidence of room").
    fn busy_since(&self, before: &Self) -> f64 {
        let total = self.total.saturating_sub(before.total);
        if total == 0 {
            return 1.0;
        }
        self.busy.saturating_sub(before.busy) as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_times_read_the_cpu_line_of_proc_stat() {
        let before = CpuTimes::parse("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(
            before,
            CpuTimes {
                busy: 150,
                total: 1000
            }
        );
        let after = CpuTimes::parse("cpu  190 0 50 800 60 0 0 0 0 0\n").unwrap();
        assert!((after.busy_since(&before) - 0.9).abs() < 1e-9);
        assert_eq!(CpuTimes::parse("intr 1 2 3"), None);
    }

    #[test]
    fn writer_load_says_saturated_only_when_the_writer_was_busy_nearly_all_the_interval() {
        // One write lock: the writer alone decides (the machine running the test may have idle
        // CPUs).
        let mut load = WriterLoad::new(true);
        assert!(!load.saturated(), "no interval has passed yet");
        std::thread::sleep(WriterLoad::INTERVAL);
        // Half the interval busy: not saturated.
        let half = WriterLoad::INTERVAL.as_micros() as u64 / 2;
        STATS.writer_busy_us.fetch_add(half, Ordering::Relaxed);
        assert!(!load.saturated());
        // Whole intervals busy (groups that waited for the write lock throughout): saturated
        // after ENTER of them in a row, and the answer holds for HOLD after the latest, idle
        // intervals or not.
        let whole = WriterLoad::INTERVAL.as_micros() as u64 * 2;
        for i in 1..=WriterLoad::ENTER {
            std::thread::sleep(WriterLoad::INTERVAL);
            STATS.writer_busy_us.fetch_add(whole, Ordering::Relaxed);
            assert_eq!(load.saturated(), i == WriterLoad::ENTER, "interval {i}");
        }
        assert!(load.saturated());
        std::thread::sleep(WriterLoad::INTERVAL);
        assert!(load.saturated(), "one idle interval does not end it");
        std::thread::sleep(WriterLoad::HOLD);
        assert!(!load.saturated(), "idle intervals for HOLD end it");
    }
}
