//! One test binary (one link step) for the whole API: contract, platform actions, keys, CLI.

mod fake_llm;
mod fake_stripe;
mod helpers;
mod receiver;

mod agents_run;
mod apply;
mod browser;
mod cli;
mod cli_client;
mod contract;
mod customer_sections;
mod engine;
mod event_hours;
mod import;
mod ingest;
mod ingest_backlog;
mod ingest_durability;
mod ingest_journal;
mod integrations;
mod keys;
mod layers;
mod mcp;
mod migrations;
mod notify;
mod ops;
mod outage;
mod platform;
mod query_plans;
mod reads;
mod search_query;
mod tools;
mod tracker;
mod typed_bodies;
mod window_published;
mod write_load;
