//! custintel: customer intelligence behind one typed HTTP API.
//!
//! Three layers, imports one way: the HTTP side ([`http`]) and the operations ([`ops`]: the
//! command line, seeding, import, benchmarks) call the domain (every other module), which knows
//! neither; storage is the `entity` and `migration` crates. [`http::server::app`] builds the
//! poem application, so tests can mount it in-process or serve it on a real socket.

pub mod http;
pub mod ops;

// The domain.
pub mod agents;
pub mod auth;
pub mod background;
pub mod correlation;
pub mod cron;
pub mod crypto;
pub mod db;
pub mod engine;
pub mod ids;
pub mod import;
pub mod ingest;
pub mod integrations;
pub mod llm;
pub mod memory;
pub mod notify;
pub mod platform;
pub mod search;
pub mod timestamp;
pub mod tools;
pub mod validation;

// Shared by the layers: start-up configuration and the application state.
pub mod config;
pub mod state;

// What a serving instance runs beside its requests.
pub mod workers;
