//! PostgreSQL: the name trigram indexes keep a short pending list (64 kB, the least
//! PostgreSQL takes, instead of the server's 4 MB default).
//!
//! A GIN index puts new entries in a pending list that it merges into the index in bulk once
//! the list passes its limit, and every lookup reads the whole list. A row's new version goes
//! there whenever it is written other than in place, which every activity update of a customer
//! or user is (the activity time is in other indexes). An import or steady ingest therefore
//! keeps the list near its limit: a name lookup at 100,000 customers read 430 pages (31 ms)
//! instead of 16 (0.7 ms), and with 8 callers a list by name took 290 ms at p50. With 64 kB the
//! list holds a few pages, so a lookup reads about as much as on a merged index, and writers
//! merge more often: about 60 µs a written name against 13 µs (300,000 random names inserted
//! at once; an 850,000-line import showed no difference beyond its noise).

use sea_orm_migration::prelude::*;

crate::postgres_only_migration! {
    // `IF EXISTS`: the indexes are left out where `pg_trgm` could not be created.
    up: [
        "ALTER INDEX IF EXISTS ix_customers_name_trigrams \
         SET (gin_pending_list_limit = 64)",
        "ALTER INDEX IF EXISTS ix_users_name_trigrams SET (gin_pending_list_limit = 64)",
    ],
    down: [
        "ALTER INDEX IF EXISTS ix_customers_name_trigrams RESET (gin_pending_list_limit)",
        "ALTER INDEX IF EXISTS ix_users_name_trigrams RESET (gin_pending_list_limit)",
    ],
}
