//! The automation engine (DESIGN.md "Automation engine"): signals evaluated on ingested events,
//! automation runs (one per subject per dedupe bucket), the processor that builds each run's
//! message and delivers it, schedules, and the run history the routes show.
//!
//! [`contract`] types the JSON that configures signals and automations (its schema is both the
//! description's and the check); [`config`] reads stored triggers, audiences and signal
//! definitions; [`matching`] matches one
//! event; [`evaluate`] runs in the ingest applier's transaction and creates runs; [`runs`] keeps
//! run rows and statuses; [`processor`] works runs to delivery; [`digest`] lists a schedule
//! run's subjects; [`schedules`] starts schedule runs; [`history`] lists runs and makes dry runs;
//! [`retention`] removes signal hits no window reads any more.

pub mod automations;
pub mod config;
pub mod contract;
pub mod digest;
pub mod evaluate;
pub mod history;
pub mod matching;
pub mod processor;
pub mod retention;
pub mod runs;
pub mod schedules;
pub mod signals;

/// Starts the engine's background work on this instance: the processor and the schedule ticks.
pub fn spawn(state: crate::state::AppState) -> Vec<tokio::task::JoinHandle<()>> {
    vec![
        schedules::spawn(state.db.clone(), schedules::TICK),
        processor::spawn(state),
    ]
}
