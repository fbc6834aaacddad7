//! What accepted batches do to the customer model, written in the same transaction as their
//! events: visitors, users and customers resolved or created, journey stages, engagement
//! sessions, billing status and history, and last activity (which only moves forward).
//!
//! `apply_batch` is the sequence; each seam is a file: who a batch and its events are
//! (`identity`), engagement sessions (`engagement`), billing status (`billing`), the group's
//! look-ups before (`preload`) and its writes after (`write`).

mod billing;
mod engagement;
mod identity;
mod known;
pub mod pending;
mod preload;
mod write;

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use entity::{customer, engagement_session, user, visitor};
use sea_orm::{ConnectionTrait, DbErr};

use crate::db::customer_event_hours::AddedEvents;

use super::{
    after_apply::AfterApply,
    apply_txn::ApplyTxn,
    store::EventRow,
    validate::{AcceptedEvent, Batch, Effect},
};
use identity::{Attribution, BatchIdentity};
use known::KnownRows;
use preload::{preload_identities, preload_sessions, preload_visitors};
use write::flush;

pub use engagement::SESSION_IDLE;

/// A user the batch is attributed to.
#[derive(Debug, Clone)]
struct UserLink {
    id: String,
    customer_id: Option<String>,
}

/// A visitor row as the group sees it; written once at the end.
#[derive(Debug, Clone)]
struct VisitorState {
    row: visitor::Model,
    dirty: bool,
}

/// An engagement session as the group sees it; written once at the end.
#[derive(Debug, Clone)]
struct SessionState {
    row: engagement_session::Model,
    dirty: bool,
}

/// Everything one group transaction accumulates before writing it.
#[derive(Default)]
struct Group {
    rows: Vec<EventRow>,
    visitors: HashMap<(String, String), VisitorState>,
    /// Current session per (organization, sessionId), plus closed ones still to write.
    sessions: HashMap<(String, String), SessionState>,
    closed_sessions: Vec<SessionState>,
    user_activity: HashMap<String, DateTime<Utc>>,
    customer_activity: HashMap<String, DateTime<Utc>>,
    /// The tracked events each account gets, for its counter and kept hours.
    added_events: AddedEvents,
    /// Accounts and users the group's identity effects name, as stored (`known`). A write that
    /// bypasses them (a stage event's update) drops the row it changed.
    customers: KnownRows<customer::Entity>,
    users: KnownRows<user::Entity>,
    /// Time spent resolving who batches and `identify` events are (for the debug log).
    identity_time: std::time::Duration,
}

/// Stores batches' events and applies their effects in the caller's transaction (the
/// applier's, which also removes them from the journal). Their `messageId` repeats were
/// dropped when they were acknowledged.
///
/// Then `after` works on the events (the automation engine evaluates them against the
/// organizations' signals, after the effects, so each event's user and customer are resolved);
/// returns how many automation runs that created.
///
/// Each event's text fields are moved into its row, not copied: the batches are left without
/// them.
pub async fn write_batches(
    conn: &ApplyTxn,
    batches: &mut [&mut Batch],
    after: &mut dyn AfterApply,
) -> Result<usize, DbErr> {
    // Where an apply's time goes, for `RUST_LOG=custintel::ingest=debug`.
    let started = std::time::Instant::now();
    let mut group = Group::default();
    {
        let shared: Vec<&Batch> = batches.iter().map(|b| &**b).collect();
        // Every visitor and session the group names is loaded here, so a key missing from
        // `group.visitors` / `group.sessions` afterwards is one the database does not have.
        preload_visitors(conn, &mut group, &shared).await?;
        preload_sessions(conn, &mut group, &shared).await?;
        preload_identities(conn, &mut group, &shared).await?;
    }
    let preloaded = started.elapsed();
    for batch in batches.iter_mut() {
        let first_row = group.rows.len();
        apply_batch(conn, &mut group, batch).await?;
        // `record_event` added one row per event, in order; the event's own text fields move
        // into it now that its effects are done (nothing reads the batch's events after).
        for (row, event) in group.rows[first_row..]
            .iter_mut()
            .zip(batch.events.iter_mut())
        {
            row.id = std::mem::take(&mut event.id);
            row.message_id = event.message_id.take();
            row.event_name = event.event_name.take();
            row.url = std::mem::take(&mut event.url);
            row.path = std::mem::take(&mut event.path);
            // Swapped: the row's placeholder is left in the event, no second one is made.
            std::mem::swap(&mut row.data, &mut event.data);
        }
    }
    let effects_done = started.elapsed();
    let candidates = after.select(conn, &group.rows).await?;
    let identity_time = group.identity_time;
    let rows = std::mem::take(&mut group.rows);
    let events = rows.len();
    conn.insert_events(rows).await?;
    let inserted = started.elapsed();
    flush(conn, group).await?;
    let flushed = started.elapsed();
    let runs = after.apply(conn, &candidates).await?;
    tracing::debug!(
        events,
        candidates = candidates.len(),
        runs,
        preload_ms = preloaded.as_secs_f64() * 1e3,
        effects_ms = (effects_done - preloaded).as_secs_f64() * 1e3,
        identity_ms = identity_time.as_secs_f64() * 1e3,
        insert_ms = (inserted - effects_done).as_secs_f64() * 1e3,
        flush_ms = (flushed - inserted).as_secs_f64() * 1e3,
        evaluate_ms = (started.elapsed() - flushed).as_secs_f64() * 1e3,
        "group written"
    );
    Ok(runs)
}

/// Applies one batch to the group: who the batch is, then each event's effect, then the event's
/// row with the user, account and visitor it is attributed to.
async fn apply_batch<C: ConnectionTrait>(
    conn: &C,
    group: &mut Group,
    batch: &Batch,
) -> Result<(), DbErr> {
    let Some(last_event_at) = batch.events.iter().map(|e| e.occurred_at).max() else {
        return Ok(());
    };
    let resolving = std::time::Instant::now();
    let mut who = BatchIdentity::resolve(conn, group, batch, last_event_at).await?;
    group.identity_time += resolving.elapsed();
    for event in &batch.events {
        let mut to = who.attribution(batch);
        match &event.effect {
            Effect::None => {}
            Effect::Identify { .. } => {
                let resolving = std::time::Instant::now();
                identity::identify(conn, group, batch, event, &mut who, &mut to).await?;
                group.identity_time += resolving.elapsed();
            }
            Effect::Attribute { .. } => {
                identity::attribute(conn, group, batch, event, &mut to).await?
            }
            Effect::Engagement {
                session_id,
                active_time_ms,
                total_time_ms,
            } => engagement::add_engagement(
                group,
                &batch.organization_id,
                session_id,
                batch.visitor_id.as_deref(),
                *active_time_ms,
                *total_time_ms,
                event.occurred_at,
            ),
            Effect::Stage(stage) => {
                if let Some(u) = &to.user {
                    identity::set_stage(conn, group, u, *stage, batch.received_at).await?;
                }
            }
            Effect::Billing {
                status,
                customer_id,
                stripe_customer_id,
            } => {
                let id = billing::set_billing(
                    conn,
                    group,
                    &batch.organization_id,
                    customer_id.as_deref(),
                    stripe_customer_id.as_deref(),
                    *status,
                    event.occurred_at,
                    batch.received_at,
                )
                .await?;
                to.customer = Some(id);
            }
        }
        record_event(group, batch, event, to);
    }
    Ok(())
}

/// Moves the attributed user's and account's last activity and adds the event's row.
fn record_event(group: &mut Group, batch: &Batch, event: &AcceptedEvent, to: Attribution) {
    if let Some(u) = &to.user {
        bump(&mut group.user_activity, u, event.occurred_at);
    }
    if let Some(c) = &to.customer {
        bump(&mut group.customer_activity, c, event.occurred_at);
        // Billing events reach the timeline as billing changes, not as events.
        if event.event_type != "billing" {
            group
                .added_events
                .add(&batch.organization_id, c, event.occurred_at);
        }
    }
    group.rows.push(EventRow {
        // The event's text fields are moved in by `write_batches` once the batch is applied.
        id: String::new(),
        organization_id: batch.organization_id.clone(),
        message_id: None,
        event_type: event.event_type.to_string(),
        event_name: None,
        visitor_id: to.visitor,
        user_id: to.user,
        customer_id: to.customer,
        url: String::new(),
        path: String::new(),
        occurred_at: event.occurred_at,
        received_at: batch.received_at,
        data: Default::default(),
    });
}

fn bump(map: &mut HashMap<String, DateTime<Utc>>, id: &str, at: DateTime<Utc>) {
    let entry = map.entry(id.to_string()).or_insert(at);
    if at > *entry {
        *entry = at;
    }
}
