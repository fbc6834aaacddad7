//! PostgreSQL: the `messageId` window's runs kept in the database, so an instance started
//! without its own runs (a new container, a lost volume) copies them instead of reading the
//! whole window back from the stored events.
//!
//! One instance at a time publishes (`ingest_window_publisher`, a lease renewed on the server's
//! clock); its runs are stored in parts of at most a few MiB (`ingest_window_runs`), since a
//! merged run of a long window can outgrow what one value may hold. The parts are written once
//! and read whole: kept out of line and uncompressed (their keys are hashes, which do not
//! compress).

use sea_orm_migration::prelude::*;

crate::postgres_only_migration! {
    up: [
        "CREATE TABLE ingest_window_runs (
            publisher text NOT NULL,
            first_seal bigint NOT NULL,
            last_seal bigint NOT NULL,
            part integer NOT NULL,
            newest_second bigint NOT NULL,
            sealed_at_second bigint NOT NULL,
            content bytea NOT NULL,
            PRIMARY KEY (publisher, first_seal, last_seal, part)
        )",
        "ALTER TABLE ingest_window_runs ALTER COLUMN content SET STORAGE EXTERNAL",
        "CREATE TABLE ingest_window_publisher (
            id smallint PRIMARY KEY CHECK (id = 1),
            publisher text NOT NULL,
            renewed_at timestamptz NOT NULL
        )",
    ],
    down: [
        "DROP TABLE ingest_window_publisher",
        "DROP TABLE ingest_window_runs",
    ],
}
