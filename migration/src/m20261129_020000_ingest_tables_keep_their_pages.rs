//! PostgreSQL: a vacuum of the claims table or the journal leaves their empty trailing pages in
//! place (`vacuum_truncate = false`) instead of cutting them off the file.
//!
//! Cutting pages off takes the table's exclusive lock, which every acknowledging writer waits
//! for: both tables take an insert with every acknowledged batch, and both empty from their
//! oldest rows (claims expire after seconds, applied batches leave the journal), so a vacuum
//! often finds empty pages at the end. Measured in `bench ingest` at 10,000 events/s: claim
//! inserts waited 60-70 ms behind the claims' vacuum, and those seconds' requests were the slow
//! ones. The pages are used again by the next inserts; a journal swollen by a backlog keeps its
//! size on disk until a manual `VACUUM (TRUNCATE)`.

use sea_orm_migration::prelude::*;

crate::postgres_only_migration! {
    up: [
        "ALTER TABLE ingest_message_keys SET (vacuum_truncate = false)",
        "ALTER TABLE ingest_journal SET \
         (vacuum_truncate = false, toast.vacuum_truncate = false)",
    ],
    down: [
        "ALTER TABLE ingest_message_keys RESET (vacuum_truncate)",
        "ALTER TABLE ingest_journal RESET (vacuum_truncate, toast.vacuum_truncate)",
    ],
}
