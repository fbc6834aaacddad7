//! The automation engine (DESIGN.md "Automation engine"): signals evaluated on ingested events,
//! automation runs (one per subject per dedupe bucket), the processor that builds each run's
//! message and delivers it, schedules, and the run history the routes show.

pub mod config;
pub mod matching;
