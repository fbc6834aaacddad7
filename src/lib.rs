//! custintel: customer intelligence behind one typed HTTP API.
//!
//! [`server::app`] builds the poem application from the parts below, so tests can mount it
//! in-process or serve it on a real socket.

pub mod admin;
pub mod agents;
pub mod api;
pub mod apply;
pub mod auth;
pub mod bench;
pub mod bench_automations;
pub mod bench_import;
pub mod bench_ingest;
pub mod bench_sqlite_floor;
pub mod cli;
pub mod config;
pub mod correlation;
pub mod correlation_header;
pub mod crypto;
pub mod db;
pub mod demo;
pub mod engine;
pub mod envelope;
pub mod import;
pub mod ingest;
pub mod integrations;
pub mod mcp;
pub mod metrics;
pub mod notify;
pub mod platform;
pub mod request;
pub mod search;
pub mod server;
pub mod state;
pub mod timestamp;
pub mod tools;
pub mod types;
pub mod validation;
