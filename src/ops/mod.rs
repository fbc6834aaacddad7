//! Operations: the command line, organization and key administration, the demo seed,
//! `apply` of configuration files, and the benchmarks. They call the domain (and start the HTTP
//! server); the domain never imports them.

pub mod admin;
pub mod apply;
pub mod bench;
pub mod bench_automations;
pub mod bench_import;
pub mod bench_ingest;
pub mod bench_search;
pub mod bench_sqlite_floor;
pub mod bench_window;
pub mod cli;
pub mod demo;
/// `custintel import` reads the domain's import (kept at this path for the operations' callers).
pub use crate::import;
