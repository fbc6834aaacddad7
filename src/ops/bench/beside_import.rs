//! `bench tools --during-import`: the tool calls while `custintel import` fills the same
//! database.
//!
//! A second book of the benchmark's scale goes into an organization of its own through a
//! `custintel import` process (this executable), as a user would run it beside a serving
//! instance, while the callers call the cases, each call a case drawn at random.
//! An import's last minute is where it writes its last chunks and then refreshes the planner's
//! statistics (`VACUUM (ANALYZE)` of the tables it filled on PostgreSQL, `ANALYZE` on SQLite):
//! the figures are those of the calls made in that minute, so they do not depend on how long
//! the import took. The same callers run for a minute before the import starts, and their
//! figures then are printed first: what the import changed is the difference.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration as StdDuration, Instant},
};

use anyhow::{bail, Context, Result};
use rand::{rngs::StdRng, Rng, SeedableRng};
use sea_orm::DatabaseConnection;

use super::{bench_ingest, truncate, write_book, Case, Client, Location, Measured, Sample, Scale};

/// The part of the import the figures are taken from: its end; and how long the callers run
/// before it starts.
const LAST: StdDuration = StdDuration::from_secs(60);
/// The start of the callers' minute before the import that is not counted (warm-up).
const WARM_UP: StdDuration = StdDuration::from_secs(5);

/// One call made while the import ran.
struct Timed {
    case: usize,
    started: Instant,
    took: StdDuration,
    error: Option<String>,
}

/// Imports a second book beside `concurrency` callers of `cases`; answers each case's
/// figures over the calls that began in the import's last minute, in the order of `cases`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn measure(
    conn: &DatabaseConnection,
    location: &Location,
    dir: &std::path::Path,
    scale: Scale,
    cases: &[Arc<Case>],
    sample: Arc<Sample>,
    client: &Client,
    concurrency: usize,
) -> Result<Vec<Measured>> {
    if cases.is_empty() {
        bail!("--during-import: no case to call");
    }
    let name = format!("Bench import {}", chrono::Utc::now().format("%Y%m%d%H%M%S"));
    let org = bench_ingest::create_org(conn, &name, 1_000_000).await?;
    let book = dir.join("beside-import.jsonl");
    let lines = write_book(&book, scale, 4_242)?;

    let done = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..concurrency)
        .map(|k| {
            let (cases, sample, client, done) =
                (cases.to_vec(), sample.clone(), client.clone(), done.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(2_000 + k as u64);
                let mut calls = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    let case = rng.gen_range(0..cases.len());
                    let call = (cases[case].make)(&sample, &mut rng);
                    let started = Instant::now();
                    let error = client.call(&call).await.err().map(|e| e.to_string());
                    calls.push(Timed {
                        case,
                        started,
                        took: started.elapsed(),
                        error,
                    });
                }
                calls
            })
        })
        .collect();

    let callers_started = Instant::now();
    tokio::time::sleep(LAST).await;
    println!("import beside {concurrency} callers: {lines} lines into the organization {name}");
    let started = Instant::now();
    let import = {
        let (url, org, book) = (location.url(), org.organization_id.clone(), book.clone());
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(std::env::current_exe()?)
                .args(["import", "--org", &org])
                .arg(&book)
                .env("DATABASE_URL", url)
                .env("RUST_LOG", "warn")
                .stdin(std::process::Stdio::null())
                .output()
        })
        .await
    };
    let ended = Instant::now();
    done.store(true, Ordering::Relaxed);
    let mut calls = Vec::new();
    for caller in callers {
        calls.extend(caller.await.context("a caller failed")?);
    }
    std::fs::remove_file(&book)?;
    let output = import
        .context("the import's task failed")?
        .context("custintel import did not start")?;
    if !output.status.success() {
        bail!(
            "custintel import failed ({}): {} {}",
            output.status,
            truncate(&String::from_utf8_lossy(&output.stdout), 500),
            truncate(&String::from_utf8_lossy(&output.stderr), 500)
        );
    }
    let before_from = callers_started + WARM_UP;
    let before: Vec<&Timed> = calls
        .iter()
        .filter(|c| c.started >= before_from && c.started + c.took <= started)
        .collect();
    println!(
        "without the import (the same callers in the {:.0} s before it started): {} calls",
        (started - before_from).as_secs_f64(),
        before.len()
    );
    println!(
        "{:<48} {:>7} {:>9} {:>9}",
        "case", "calls", "p50 ms", "p99 ms"
    );
    for (case, m) in cases.iter().zip(figures(cases.len(), &before)) {
        println!(
            "{:<48} {:>7} {:>9.2} {:>9.2}",
            case.label,
            m.calls,
            m.p50.as_secs_f64() * 1e3,
            m.p99.as_secs_f64() * 1e3
        );
    }
    let took = (ended - started).as_secs_f64();
    let from = ended.checked_sub(LAST).unwrap_or(started).max(started);
    let in_last: Vec<&Timed> = calls.iter().filter(|c| c.started >= from).collect();
    println!(
        "import: {lines} lines in {took:.1} s ({:.0} lines/s) beside {} tool calls; \
         figures of the {} calls of its last {:.0} s",
        lines as f64 / took,
        calls.len(),
        in_last.len(),
        (ended - from).as_secs_f64()
    );
    Ok(figures(cases.len(), &in_last))
}

/// Each case's figures over `calls`, in the order of the cases.
fn figures(cases: usize, calls: &[&Timed]) -> Vec<Measured> {
    (0..cases)
        .map(|case| {
            let of_case = calls.iter().filter(|c| c.case == case);
            let times = of_case
                .clone()
                .filter(|c| c.error.is_none())
                .map(|c| c.took)
                .collect();
            let errors: Vec<&String> = of_case.filter_map(|c| c.error.as_ref()).collect();
            Measured::of(times, errors.len(), errors.first().map(|e| e.to_string()))
        })
        .collect()
}
