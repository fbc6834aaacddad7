//! Indexes that let the tools answer at a million customers: each serves a filter together with
//! the order its list is read in, or makes a capped count read index entries only.
//! - customers by billing status and revenue: counting `billingStatus` + `minMrrCents` matches
//!   is one range of this index instead of a revenue range checked row by row, and grouping by
//!   status with revenue sums reads the index alone;
//! - a customer's users most recently active first (it replaces the `(organization_id,
//!   customer_id)` index, a prefix of it): a page instead of sorting every user of a large
//!   customer;
//! - facts and sources of given types newest first (the facts one replaces `(organization_id,
//!   source_type, status)`, a prefix of it): a page instead of sorting every match;
//! - a customer's timeline of tracked events with their type (it replaces the same index
//!   without the type): the timeline leaves billing events out, and counting a window of a
//!   customer with 100,000 events then reads index entries only instead of every event's row.
//!   Still the one index of the events table besides the `messageId` one, as ingest wants.
//!
//! The per-customer time indexes (sources, facts, billing history) now end with `id`, the
//! lists' tie-break: they then give the whole order, as the organization-wide time indexes do,
//! and a planner whose statistics are approximate (SQLite's `PRAGMA optimize` samples) no longer
//! prefers walking the organization's index in order over searching the customer's and
//! sorting; PostgreSQL without it sorts every match of a page.
//!
//! PostgreSQL reads an index backwards only in the reverse of its own order, nulls included:
//! `last_activity_at DESC NULLS LAST` (most recently active first, never active last) needs an
//! index in that order. So on PostgreSQL the activity indexes are remade in the lists' order;
//! SQLite (nulls first ascending, so last descending) keeps their order and adds `mrr_cents`
//! to the customers' ones: SQLite checks a condition on an index's columns before it reads the
//! row (a deferred seek), so a revenue filter walking customers in activity order reads only
//! the rows that pass it.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// An index as each database gets it: name, table, SQLite columns, PostgreSQL columns (`None`:
/// the index is not made there).
type Spec = (
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
);

const CREATED: [Spec; 5] = [
    (
        "ix_customers_org_status_mrr",
        "customers",
        Some("organization_id, billing_status, mrr_cents"),
        Some("organization_id, billing_status, mrr_cents"),
    ),
    (
        "ix_users_org_customer_activity_id",
        "users",
        Some("organization_id, customer_id, last_activity_at, id"),
        Some("organization_id, customer_id, last_activity_at DESC NULLS LAST, id DESC"),
    ),
    (
        "ix_facts_org_type_status_occurred_id",
        "facts",
        Some("organization_id, source_type, status, source_occurred_at, id"),
        Some("organization_id, source_type, status, source_occurred_at, id"),
    ),
    (
        "ix_sources_org_type_occurred_id",
        "sources",
        Some("organization_id, source_type, occurred_at, id"),
        Some("organization_id, source_type, occurred_at, id"),
    ),
    (
        "ix_events_org_customer_occurred_type",
        "events",
        Some("organization_id, customer_id, occurred_at, event_type"),
        Some("organization_id, customer_id, occurred_at, id, event_type"),
    ),
];

/// Indexes dropped: made redundant by one above, or (PostgreSQL) remade below in the order the
/// lists read them. With the columns they had, for `down`.
const DROPPED: [Spec; 10] = [
    (
        "ix_users_organization_id_customer_id",
        "users",
        Some("organization_id, customer_id"),
        Some("organization_id, customer_id"),
    ),
    (
        "ix_facts_org_source_type_status",
        "facts",
        Some("organization_id, source_type, status"),
        Some("organization_id, source_type, status"),
    ),
    (
        "ix_events_organization_id_customer_id_occurred_at",
        "events",
        Some("organization_id, customer_id, occurred_at"),
        Some("organization_id, customer_id, occurred_at"),
    ),
    (
        "ix_customers_org_activity_id",
        "customers",
        Some("organization_id, last_activity_at, id"),
        Some("organization_id, last_activity_at, id"),
    ),
    (
        "ix_customers_org_status_activity_id",
        "customers",
        Some("organization_id, billing_status, last_activity_at, id"),
        Some("organization_id, billing_status, last_activity_at, id"),
    ),
    (
        "ix_users_org_activity_id",
        "users",
        None,
        Some("organization_id, last_activity_at, id"),
    ),
    (
        "ix_users_org_stage_activity_id",
        "users",
        None,
        Some("organization_id, stage, last_activity_at, id"),
    ),
    (
        "ix_sources_organization_id_customer_id_occurred_at",
        "sources",
        Some("organization_id, customer_id, occurred_at"),
        Some("organization_id, customer_id, occurred_at"),
    ),
    (
        "ix_facts_organization_id_customer_id_source_occurred_at",
        "facts",
        Some("organization_id, customer_id, source_occurred_at"),
        Some("organization_id, customer_id, source_occurred_at"),
    ),
    (
        "ix_billing_history_organization_id_customer_id_at",
        "billing_history",
        Some("organization_id, customer_id, at"),
        Some("organization_id, customer_id, at"),
    ),
];

/// The remade indexes, under their old names (the activity ones on PostgreSQL only).
const REMADE: [Spec; 7] = [
    (
        "ix_customers_org_activity_id",
        "customers",
        Some("organization_id, last_activity_at, id, mrr_cents"),
        Some("organization_id, last_activity_at DESC NULLS LAST, id DESC"),
    ),
    (
        "ix_customers_org_status_activity_id",
        "customers",
        Some("organization_id, billing_status, last_activity_at, id, mrr_cents"),
        Some("organization_id, billing_status, last_activity_at DESC NULLS LAST, id DESC"),
    ),
    (
        "ix_users_org_activity_id",
        "users",
        None,
        Some("organization_id, last_activity_at DESC NULLS LAST, id DESC"),
    ),
    (
        "ix_users_org_stage_activity_id",
        "users",
        None,
        Some("organization_id, stage, last_activity_at DESC NULLS LAST, id DESC"),
    ),
    (
        "ix_sources_organization_id_customer_id_occurred_at",
        "sources",
        Some("organization_id, customer_id, occurred_at, id"),
        Some("organization_id, customer_id, occurred_at, id"),
    ),
    (
        "ix_facts_organization_id_customer_id_source_occurred_at",
        "facts",
        Some("organization_id, customer_id, source_occurred_at, id"),
        Some("organization_id, customer_id, source_occurred_at, id"),
    ),
    (
        "ix_billing_history_organization_id_customer_id_at",
        "billing_history",
        Some("organization_id, customer_id, at, id"),
        Some("organization_id, customer_id, at, id"),
    ),
];

fn columns(spec: &Spec, backend: DbBackend) -> Option<&'static str> {
    match backend {
        DbBackend::Postgres => spec.3,
        _ => spec.2,
    }
}

async fn create(manager: &SchemaManager<'_>, specs: &[Spec]) -> Result<(), DbErr> {
    let backend = manager.get_database_backend();
    for spec in specs {
        if let Some(columns) = columns(spec, backend) {
            manager
                .get_connection()
                .execute_unprepared(&format!(
                    "CREATE INDEX IF NOT EXISTS {} ON {} ({columns})",
                    spec.0, spec.1
                ))
                .await?;
        }
    }
    Ok(())
}

async fn drop(manager: &SchemaManager<'_>, specs: &[Spec]) -> Result<(), DbErr> {
    let backend = manager.get_database_backend();
    for spec in specs {
        if columns(spec, backend).is_some() {
            manager
                .get_connection()
                .execute_unprepared(&format!("DROP INDEX IF EXISTS {}", spec.0))
                .await?;
        }
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        create(manager, &CREATED).await?;
        drop(manager, &DROPPED).await?;
        create(manager, &REMADE).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop(manager, &REMADE).await?;
        create(manager, &DROPPED).await?;
        drop(manager, &CREATED).await
    }
}
