//! `custintel bench window`: the SQLite `messageId` window alone, as the acknowledging writer
//! uses it (groups of messages checked and recorded, then a sweep), up to a given number of
//! messages held in a 24 h window: checks per second, the window's memory and the process's own
//! resident memory as it fills, then how fast repeats and new messages are told apart when it
//! is full, and how long reopening it takes (what `serve` does at start before replaying the
//! events received after the newest run).

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use chrono::Utc;

use crate::ingest::{
    dedup::{message_key, MessageKey},
    window::LocalWindow,
};

/// Options of a run.
#[derive(Debug, Clone, clap::Args)]
pub struct WindowBenchArgs {
    /// Messages sent into the window (all within it).
    #[arg(long, default_value_t = 100_000_000)]
    pub messages: u64,
    /// Messages checked per group (between sweeps), as the writer's groups.
    #[arg(long, default_value_t = 2_000)]
    pub group: u64,
    /// Where the window's runs are written (a temporary directory by default; a given one is
    /// kept).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Only open the window whose runs an earlier run left in `--dir`, as `serve` does at
    /// start, and report the time and memory it took in this fresh process.
    #[arg(long, requires = "dir")]
    pub reopen: bool,
}

const WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The process's own resident memory (anonymous pages), in bytes.
fn rss_anon() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

fn key(i: u64) -> MessageKey {
    message_key("bench-organization", &format!("{i:016x}-message"))
}

/// Runs the benchmark and prints its figures.
pub fn run(args: WindowBenchArgs) -> anyhow::Result<()> {
    let temporary = tempfile::tempdir()?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| temporary.path().join("window"));
    if args.reopen {
        return open_and_report(&dir, "opened");
    }
    let n = args.messages.max(1);
    let group = args.group.max(1);
    println!(
        "custintel bench window: {n} messages into a 24 h window, groups of {group}, runs in {}",
        dir.display()
    );
    let mut window = LocalWindow::open(&dir, "bench", WINDOW)?;
    fill(&mut window, n, group, key)?;

    // Repeats of messages spread over the whole window, and messages never sent.
    let probes = 200_000u64.min(n);
    let step = (n / probes).max(1);
    let now = Utc::now();
    let t = Instant::now();
    for p in 0..probes {
        if window.check_and_record(key(p * step), now) {
            anyhow::bail!("message {} was sent but taken for new", p * step);
        }
    }
    let repeat_us = t.elapsed().as_secs_f64() * 1e6 / probes as f64;
    let t = Instant::now();
    for p in 0..probes {
        window.check_and_record(key(n + 1 + p), now);
    }
    let new_us = t.elapsed().as_secs_f64() * 1e6 / probes as f64;
    println!(
        "full window: a repeat found in {repeat_us:.1} us (exact keys read from memory or disk), a new message in {new_us:.2} us"
    );
    println!(
        "window before closing: {:.1} MiB",
        mib(window.memory_bytes() as u64)
    );
    drop(window);
    open_and_report(&dir, "reopened")?;
    let on_disk: u64 = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!("runs on disk: {:.1} MiB", mib(on_disk));
    Ok(())
}

/// Sends messages `0..n` (`key` makes each one's key) into `window` in groups of `group`, each
/// group checked and recorded at one time and followed by a sweep, as the acknowledging writer
/// does; prints the rate and the memory held ten times along the way. Fails if a message is
/// taken for a repeat.
pub(crate) fn fill(
    window: &mut LocalWindow,
    n: u64,
    group: u64,
    key: impl Fn(u64) -> MessageKey,
) -> anyhow::Result<()> {
    let group = group.max(1);
    let rss_start = rss_anon();
    let started = Instant::now();
    let mut last = (Instant::now(), 0u64);
    let report_every = (n / 10).max(1);
    let mut sent = 0u64;
    while sent < n {
        let now = Utc::now();
        let end = (sent + group).min(n);
        for i in sent..end {
            if !window.check_and_record(key(i), now) {
                anyhow::bail!("message {i} was taken for a repeat: the window is not exact");
            }
        }
        window.sweep(now);
        let before = sent;
        sent = end;
        if sent / report_every != before / report_every || sent == n {
            let rate = (sent - last.1) as f64 / last.0.elapsed().as_secs_f64();
            last = (Instant::now(), sent);
            println!(
                "{sent:>12} messages  {rate:>10.0} checks/s  window {:>7.1} MiB ({:.2} B a message)  process own {:>7.1} MiB  runs {}",
                mib(window.memory_bytes() as u64),
                window.memory_bytes() as f64 / sent as f64,
                mib(rss_anon().saturating_sub(rss_start)),
                window.run_count()
            );
        }
    }
    let fill_secs = started.elapsed().as_secs_f64();
    println!(
        "filled: {n} messages in {fill_secs:.1} s, {:.0} checks/s",
        n as f64 / fill_secs
    );
    Ok(())
}

/// Opens the window in `dir` and prints how long that took and what it holds.
fn open_and_report(dir: &std::path::Path, what: &str) -> anyhow::Result<()> {
    let rss_start = rss_anon();
    let t = Instant::now();
    let window = LocalWindow::open(dir, "bench", WINDOW)?;
    println!(
        "{what} in {:.1} s: {} messages, {} runs; window {:.1} MiB; the process's own memory grew {:.1} MiB",
        t.elapsed().as_secs_f64(),
        window.len(),
        window.run_count(),
        mib(window.memory_bytes() as u64),
        mib(rss_anon().saturating_sub(rss_start))
    );
    Ok(())
}
