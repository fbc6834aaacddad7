//! What accepted batches do to the customer model, written in the same transaction as their
//! events: visitors, users and customers resolved or created, journey stages, engagement
//! sessions, billing status and history, and last activity (which only moves forward).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Duration, Utc};
use entity::{
    billing_change,
    customer::{self, BillingStatus},
    engagement_session, user, visitor,
};
use sea_orm::{
    sea_query::{CaseStatement, Expr, OnConflict, SimpleExpr},
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter, Set,
};
use serde_json::{Map, Value};

use crate::engine::{self, evaluate::AppliedEvent};

use super::{
    model::{BillingEventStatus, StageName},
    store::{self, EventRow},
    validate::{Batch, CustomerRef, Effect, UserRef},
};

/// An engagement session ends after this long without events.
pub const SESSION_IDLE: Duration = Duration::minutes(30);

/// Journey stages in the order identity inference may raise them.
const DISCOVERED: &str = "discovered";
const SIGNED_UP: &str = "signed_up";

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
}

/// Stores batches' events and applies their effects in the caller's transaction (the
/// applier's, which also removes them from the journal). Their `messageId` repeats were
/// dropped when they were acknowledged.
///
/// Then the automation engine evaluates the events against the organizations' signals (after
/// the effects, so each event's user and customer are resolved); returns how many automation
/// runs that created.
pub async fn write_batches<C: ConnectionTrait>(
    conn: &C,
    batches: &[&Batch],
) -> Result<usize, DbErr> {
    let mut group = Group::default();
    // Every visitor and session the group names is loaded here, so a key missing from
    // `group.visitors` / `group.sessions` afterwards is one the database does not have.
    preload_visitors(conn, &mut group, batches).await?;
    preload_sessions(conn, &mut group, batches).await?;
    for batch in batches {
        apply_batch(conn, &mut group, batch).await?;
    }
    let mut orgs: Vec<&str> = batches.iter().map(|b| b.organization_id.as_str()).collect();
    orgs.sort_unstable();
    orgs.dedup();
    let rules = engine::evaluate::Rules::load(conn, &orgs).await?;
    // Only events some signal names are copied for evaluation.
    let candidates: Vec<AppliedEvent> = if rules.is_empty() {
        Vec::new()
    } else {
        group
            .rows
            .iter()
            .filter(|r| rules.wants(&r.organization_id, &r.event_type, r.event_name.as_deref()))
            .cloned()
            .collect()
    };
    let rows = std::mem::take(&mut group.rows);
    store::insert_events(conn, rows).await?;
    flush(conn, group).await?;
    engine::evaluate::evaluate(conn, &rules, &candidates).await
}

/// Keys per `IN (...)` lookup: well under every backend's bound-parameter limit.
const LOOKUP_CHUNK: usize = 500;

/// The distinct keys `add` collects from each organization's batches.
fn keys_by_org<'a>(
    batches: &[&'a Batch],
    mut add: impl FnMut(&'a Batch, &mut HashSet<&'a str>),
) -> HashMap<&'a str, Vec<&'a str>> {
    let mut by_org: HashMap<&str, HashSet<&str>> = HashMap::new();
    for batch in batches {
        add(
            batch,
            by_org.entry(batch.organization_id.as_str()).or_default(),
        );
    }
    by_org
        .into_iter()
        .map(|(org, ids)| (org, ids.into_iter().collect()))
        .collect()
}

/// Loads every visitor the group's batches name (their `visitorId`s and attributed
/// fingerprints) with one query per organization and chunk, instead of one per batch.
async fn preload_visitors<C: ConnectionTrait>(
    conn: &C,
    group: &mut Group,
    batches: &[&Batch],
) -> Result<(), DbErr> {
    let by_org = keys_by_org(batches, |batch, ids| {
        if let Some(v) = &batch.visitor_id {
            ids.insert(v.as_str());
        }
        for event in &batch.events {
            if let Effect::Attribute {
                fingerprint: Some(fp),
                ..
            } = &event.effect
            {
                ids.insert(fp.as_str());
            }
        }
    });
    for (org, ids) in by_org {
        for chunk in ids.chunks(LOOKUP_CHUNK) {
            let rows = visitor::Entity::find()
                .filter(visitor::Column::OrganizationId.eq(org))
                .filter(visitor::Column::VisitorId.is_in(chunk.iter().copied()))
                .all(conn)
                .await?;
            for row in rows {
                let key = (row.organization_id.clone(), row.visitor_id.clone());
                group
                    .visitors
                    .insert(key, VisitorState { row, dirty: false });
            }
        }
    }
    Ok(())
}

/// Loads the latest stored row of every engagement session the group's events name.
async fn preload_sessions<C: ConnectionTrait>(
    conn: &C,
    group: &mut Group,
    batches: &[&Batch],
) -> Result<(), DbErr> {
    let by_org = keys_by_org(batches, |batch, ids| {
        for event in &batch.events {
            if let Effect::Engagement { session_id, .. } = &event.effect {
                ids.insert(session_id.as_str());
            }
        }
    });
    for (org, ids) in by_org {
        for chunk in ids.chunks(LOOKUP_CHUNK) {
            let rows = engagement_session::Entity::find()
                .filter(engagement_session::Column::OrganizationId.eq(org))
                .filter(engagement_session::Column::SessionId.is_in(chunk.iter().copied()))
                .all(conn)
                .await?;
            for row in rows {
                let key = (row.organization_id.clone(), row.session_id.clone());
                let newer = group
                    .sessions
                    .get(&key)
                    .is_none_or(|s| row.last_seen_at > s.row.last_seen_at);
                if newer {
                    group
                        .sessions
                        .insert(key, SessionState { row, dirty: false });
                }
            }
        }
    }
    Ok(())
}

async fn apply_batch<C: ConnectionTrait>(
    conn: &C,
    group: &mut Group,
    batch: &Batch,
) -> Result<(), DbErr> {
    let Some(last_event_at) = batch.events.iter().map(|e| e.occurred_at).max() else {
        return Ok(());
    };
    let org = batch.organization_id.as_str();
    let now = batch.received_at;

    // Who the batch is: its explicit identities, else what its visitor is linked to.
    let visitor_key = batch
        .visitor_id
        .as_ref()
        .map(|v| (org.to_string(), v.clone()));
    if let Some(key) = &visitor_key {
        touch_visitor(group, key, last_event_at);
    }
    let mut batch_customer = match &batch.customer_identity {
        Some(c) => Some(resolve_customer(conn, org, c, now).await?),
        None => None,
    };
    let mut user = match &batch.user_identity {
        Some(u) => {
            let stage = u.user_id.as_ref().map(|_| SIGNED_UP);
            Some(resolve_user(conn, org, u, stage, batch_customer.as_deref(), now).await?)
        }
        None => visitor_key
            .as_ref()
            .and_then(|k| group.visitors.get(k))
            .and_then(|v| v.row.user_id.clone())
            .map(|id| UserLink {
                id,
                customer_id: None,
            }),
    };
    if batch_customer.is_none() {
        batch_customer = user
            .as_ref()
            .and_then(|u| u.customer_id.clone())
            .or_else(|| {
                visitor_key
                    .as_ref()
                    .and_then(|k| group.visitors.get(k))
                    .and_then(|v| v.row.customer_id.clone())
            });
    }
    if let Some(key) = &visitor_key {
        link_visitor(
            group,
            key,
            user.as_ref().map(|u| u.id.as_str()),
            batch_customer.as_deref(),
        );
    }

    for event in &batch.events {
        let mut event_user = user.as_ref().map(|u| u.id.clone());
        let mut event_customer = batch_customer.clone();
        let mut event_visitor = batch.visitor_id.clone();
        match &event.effect {
            Effect::None => {}
            Effect::Identify {
                email,
                user_id,
                traits,
                customer_id,
                customer_traits,
            } => {
                let customer = match customer_id {
                    Some(external_id) => Some(
                        resolve_customer(
                            conn,
                            org,
                            &CustomerRef {
                                external_id: external_id.clone(),
                                traits: customer_traits.clone(),
                            },
                            now,
                        )
                        .await?,
                    ),
                    None => None,
                };
                let stage = if user_id.is_some() {
                    SIGNED_UP
                } else {
                    DISCOVERED
                };
                let identified = resolve_user(
                    conn,
                    org,
                    &UserRef {
                        email: email.clone(),
                        user_id: user_id.clone(),
                        traits: traits.clone(),
                    },
                    Some(stage),
                    customer.as_deref().or(batch_customer.as_deref()),
                    now,
                )
                .await?;
                event_user = Some(identified.id.clone());
                event_customer = customer.clone().or(identified.customer_id.clone());
                if let Some(key) = &visitor_key {
                    link_visitor(group, key, Some(&identified.id), event_customer.as_deref());
                }
                // Later events of this batch are the identified user's, unless the batch
                // names its user explicitly.
                if batch.user_identity.is_none() {
                    if batch.customer_identity.is_none() {
                        batch_customer = event_customer.clone();
                    }
                    user = Some(identified);
                }
            }
            Effect::Attribute {
                email,
                user_id,
                fingerprint,
                customer_id,
            } => {
                if let Some(external_id) = customer_id {
                    event_customer = Some(
                        resolve_customer(
                            conn,
                            org,
                            &CustomerRef {
                                external_id: external_id.clone(),
                                traits: Map::new(),
                            },
                            now,
                        )
                        .await?,
                    );
                }
                if email.is_some() || user_id.is_some() {
                    let found = resolve_user(
                        conn,
                        org,
                        &UserRef {
                            email: email.clone(),
                            user_id: user_id.clone(),
                            traits: Map::new(),
                        },
                        None,
                        event_customer.as_deref(),
                        now,
                    )
                    .await?;
                    if customer_id.is_none() {
                        event_customer = found.customer_id.clone().or(event_customer);
                    }
                    event_user = Some(found.id);
                } else if let Some(fp) = fingerprint {
                    let key = (org.to_string(), fp.clone());
                    touch_visitor(group, &key, event.occurred_at);
                    if let Some(v) = group.visitors.get(&key) {
                        event_user = v.row.user_id.clone().or(event_user);
                        event_customer = v.row.customer_id.clone().or(event_customer);
                    }
                    event_visitor = Some(fp.clone());
                }
            }
            Effect::Engagement {
                session_id,
                active_time_ms,
                total_time_ms,
            } => {
                add_engagement(
                    group,
                    org,
                    session_id,
                    batch.visitor_id.as_deref(),
                    *active_time_ms,
                    *total_time_ms,
                    event.occurred_at,
                );
            }
            Effect::Stage(stage) => {
                if let Some(u) = &event_user {
                    set_stage(conn, u, *stage, now).await?;
                }
            }
            Effect::Billing {
                status,
                customer_id,
                stripe_customer_id,
            } => {
                let id = set_billing(
                    conn,
                    org,
                    customer_id.as_deref(),
                    stripe_customer_id.as_deref(),
                    *status,
                    event.occurred_at,
                    now,
                )
                .await?;
                event_customer = Some(id);
            }
        }
        if let Some(u) = &event_user {
            bump(&mut group.user_activity, u, event.occurred_at);
        }
        if let Some(c) = &event_customer {
            bump(&mut group.customer_activity, c, event.occurred_at);
        }
        group.rows.push(EventRow {
            id: event.id.clone(),
            organization_id: org.to_string(),
            message_id: event.message_id.clone(),
            event_type: event.event_type.to_string(),
            event_name: event.event_name.clone(),
            visitor_id: event_visitor,
            user_id: event_user,
            customer_id: event_customer,
            url: event.url.clone(),
            path: event.path.clone(),
            occurred_at: event.occurred_at,
            received_at: batch.received_at,
            data: event.data.clone(),
        });
    }
    Ok(())
}

fn bump(map: &mut HashMap<String, DateTime<Utc>>, id: &str, at: DateTime<Utc>) {
    let entry = map.entry(id.to_string()).or_insert(at);
    if at > *entry {
        *entry = at;
    }
}

/// Starts the visitor in the group when it is not stored (the group holds every stored
/// visitor it names) and moves its seen times.
fn touch_visitor(group: &mut Group, key: &(String, String), seen_at: DateTime<Utc>) {
    group
        .visitors
        .entry(key.clone())
        .or_insert_with(|| VisitorState {
            row: visitor::Model {
                id: uuid::Uuid::new_v4().to_string(),
                organization_id: key.0.clone(),
                visitor_id: key.1.clone(),
                user_id: None,
                customer_id: None,
                first_seen_at: seen_at,
                last_seen_at: seen_at,
            },
            dirty: true,
        });
    if let Some(state) = group.visitors.get_mut(key) {
        if seen_at > state.row.last_seen_at {
            state.row.last_seen_at = seen_at;
            state.dirty = true;
        }
        if seen_at < state.row.first_seen_at {
            state.row.first_seen_at = seen_at;
            state.dirty = true;
        }
    }
}

/// Links a visitor to its user and account (a later link replaces an earlier one).
fn link_visitor(
    group: &mut Group,
    key: &(String, String),
    user_id: Option<&str>,
    customer_id: Option<&str>,
) {
    if let Some(state) = group.visitors.get_mut(key) {
        if let Some(u) = user_id {
            if state.row.user_id.as_deref() != Some(u) {
                state.row.user_id = Some(u.to_string());
                state.dirty = true;
            }
        }
        if let Some(c) = customer_id {
            if state.row.customer_id.as_deref() != Some(c) {
                state.row.customer_id = Some(c.to_string());
                state.dirty = true;
            }
        }
    }
}

/// Merges `incoming` into `traits`; answers whether anything changed.
fn merge_traits(traits: &mut Value, incoming: &Map<String, Value>) -> bool {
    if incoming.is_empty() {
        return false;
    }
    if !traits.is_object() {
        *traits = Value::Object(Map::new());
    }
    let mut changed = false;
    if let Value::Object(map) = traits {
        for (k, v) in incoming {
            if map.get(k) != Some(v) {
                map.insert(k.clone(), v.clone());
                changed = true;
            }
        }
    }
    changed
}

fn trait_str(traits: &Map<String, Value>, key: &str) -> Option<String> {
    traits
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Finds the user by `userId` (its `externalId`), then by email; creates it when unseen.
/// `stage` is the stage identity implies (`discovered`, `signed_up`): it raises a user no
/// further than that and never lowers one. A user without an account joins `customer_id`.
async fn resolve_user<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    who: &UserRef,
    stage: Option<&str>,
    customer_id: Option<&str>,
    now: DateTime<Utc>,
) -> Result<UserLink, DbErr> {
    let mut found = None;
    if let Some(external_id) = &who.user_id {
        found = user::Entity::find()
            .filter(user::Column::OrganizationId.eq(org))
            .filter(user::Column::ExternalId.eq(external_id.as_str()))
            .one(conn)
            .await?;
    }
    if found.is_none() {
        if let Some(email) = &who.email {
            let mut query = user::Entity::find()
                .filter(user::Column::OrganizationId.eq(org))
                .filter(user::Column::Email.eq(email.as_str()));
            // A user already known under another `userId` is a different person.
            if who.user_id.is_some() {
                query = query.filter(user::Column::ExternalId.is_null());
            }
            found = query.one(conn).await?;
        }
    }
    let name = trait_str(&who.traits, "name");
    match found {
        Some(existing) => {
            let mut row = existing.clone();
            if row.email.is_none() {
                row.email = who.email.clone();
            }
            if row.external_id.is_none() {
                row.external_id = who.user_id.clone();
            }
            if name.is_some() {
                row.name = name;
            }
            merge_traits(&mut row.traits, &who.traits);
            if stage == Some(SIGNED_UP) && row.stage == DISCOVERED {
                row.stage = SIGNED_UP.to_string();
            }
            if row.customer_id.is_none() {
                row.customer_id = customer_id.map(str::to_string);
            }
            if row != existing {
                row.updated_at = now;
                let active = row.clone().into_active_model().reset_all();
                active.update(conn).await?;
            }
            Ok(UserLink {
                id: row.id,
                customer_id: row.customer_id,
            })
        }
        None => {
            let id = uuid::Uuid::new_v4().to_string();
            user::ActiveModel {
                id: Set(id.clone()),
                organization_id: Set(org.to_string()),
                customer_id: Set(customer_id.map(str::to_string)),
                email: Set(who.email.clone()),
                external_id: Set(who.user_id.clone()),
                name: Set(name),
                stage: Set(stage.unwrap_or(DISCOVERED).to_string()),
                traits: Set(Value::Object(who.traits.clone())),
                last_activity_at: Set(None),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(conn)
            .await?;
            Ok(UserLink {
                id,
                customer_id: customer_id.map(str::to_string),
            })
        }
    }
}

/// Finds the account by `externalId`, creating it when unseen; `name` and `domain` traits
/// fill its name and domain, the other traits merge into its traits.
async fn resolve_customer<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    who: &CustomerRef,
    now: DateTime<Utc>,
) -> Result<String, DbErr> {
    let found = customer::Entity::find()
        .filter(customer::Column::OrganizationId.eq(org))
        .filter(customer::Column::ExternalId.eq(who.external_id.as_str()))
        .one(conn)
        .await?;
    let name = trait_str(&who.traits, "name");
    let domain = trait_str(&who.traits, "domain").map(|d| d.to_lowercase());
    let mut other = who.traits.clone();
    other.remove("name");
    other.remove("domain");
    match found {
        Some(existing) => {
            let mut row = existing.clone();
            if let Some(n) = name {
                row.name = n;
            }
            if domain.is_some() {
                row.domain = domain;
            }
            merge_traits(&mut row.traits, &other);
            if row != existing {
                row.updated_at = now;
                let active = row.clone().into_active_model().reset_all();
                active.update(conn).await?;
            }
            Ok(row.id)
        }
        None => {
            let id = uuid::Uuid::new_v4().to_string();
            customer::ActiveModel {
                id: Set(id.clone()),
                organization_id: Set(org.to_string()),
                name: Set(name.unwrap_or_else(|| who.external_id.clone())),
                domain: Set(domain),
                external_id: Set(Some(who.external_id.clone())),
                billing_status: Set("NONE".to_string()),
                mrr_cents: Set(0),
                traits: Set(Value::Object(other)),
                last_activity_at: Set(None),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(conn)
            .await?;
            Ok(id)
        }
    }
}

async fn set_stage<C: ConnectionTrait>(
    conn: &C,
    user_id: &str,
    stage: StageName,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let stage = match stage {
        StageName::Activated => "activated",
        StageName::Engaged => "engaged",
        StageName::Inactive => "inactive",
    };
    user::Entity::update_many()
        .col_expr(user::Column::Stage, Expr::value(stage))
        .col_expr(user::Column::UpdatedAt, Expr::value(now))
        .filter(user::Column::Id.eq(user_id))
        .filter(user::Column::Stage.ne(stage))
        .exec(conn)
        .await?;
    Ok(())
}

/// Sets an account's billing status (creating the account when unseen) and records the
/// change in its billing history; answers the account's id.
async fn set_billing<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    customer_id: Option<&str>,
    stripe_customer_id: Option<&str>,
    status: BillingEventStatus,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<String, DbErr> {
    let billing_status = match status {
        BillingEventStatus::Trialing => BillingStatus::Trialing,
        BillingEventStatus::Paid => BillingStatus::Paying,
        BillingEventStatus::Churned => BillingStatus::Churned,
    }
    .as_str();
    let mut found = None;
    for external_id in [customer_id, stripe_customer_id].into_iter().flatten() {
        found = customer::Entity::find()
            .filter(customer::Column::OrganizationId.eq(org))
            .filter(customer::Column::ExternalId.eq(external_id))
            .one(conn)
            .await?;
        if found.is_some() {
            break;
        }
    }
    let mut stripe_trait = Map::new();
    if let Some(s) = stripe_customer_id {
        stripe_trait.insert("stripeCustomerId".into(), Value::String(s.to_string()));
    }
    let row = match found {
        Some(row) => row,
        None => {
            let external_id = customer_id.or(stripe_customer_id).unwrap_or_default();
            let id = resolve_customer(
                conn,
                org,
                &CustomerRef {
                    external_id: external_id.to_string(),
                    traits: Map::new(),
                },
                now,
            )
            .await?;
            customer::Entity::find_by_id(id.clone())
                .one(conn)
                .await?
                .ok_or_else(|| DbErr::RecordNotFound(format!("customer {id}")))?
        }
    };
    let mut updated = row.clone();
    updated.billing_status = billing_status.to_string();
    merge_traits(&mut updated.traits, &stripe_trait);
    if updated != row {
        updated.updated_at = now;
        let active = updated.clone().into_active_model().reset_all();
        active.update(conn).await?;
    }
    if row.billing_status != billing_status {
        billing_change::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org.to_string()),
            customer_id: Set(row.id.clone()),
            at: Set(at),
            billing_status: Set(billing_status.to_string()),
            mrr_cents: Set(row.mrr_cents),
            origin: Set("ingest".to_string()),
        }
        .insert(conn)
        .await?;
    }
    Ok(row.id)
}

/// Adds active and total time to the session, starting a new one after 30 idle minutes (the
/// group holds the latest stored row of every session it names).
fn add_engagement(
    group: &mut Group,
    org: &str,
    session_id: &str,
    visitor_id: Option<&str>,
    active_ms: i64,
    total_ms: i64,
    at: DateTime<Utc>,
) {
    let key = (org.to_string(), session_id.to_string());
    let continues = group.sessions.get(&key).is_some_and(|s| {
        at <= s.row.last_seen_at + SESSION_IDLE && at >= s.row.started_at - SESSION_IDLE
    });
    if continues {
        if let Some(s) = group.sessions.get_mut(&key) {
            s.row.active_time_ms = s.row.active_time_ms.saturating_add(active_ms);
            s.row.total_time_ms = s.row.total_time_ms.saturating_add(total_ms);
            s.row.last_seen_at = s.row.last_seen_at.max(at);
            s.row.started_at = s.row.started_at.min(at);
            if s.row.visitor_id.is_none() {
                s.row.visitor_id = visitor_id.map(str::to_string);
            }
            s.dirty = true;
        }
        return;
    }
    let fresh = SessionState {
        row: engagement_session::Model {
            id: uuid::Uuid::new_v4().to_string(),
            organization_id: org.to_string(),
            session_id: session_id.to_string(),
            visitor_id: visitor_id.map(str::to_string),
            active_time_ms: active_ms,
            total_time_ms: total_ms,
            started_at: at,
            last_seen_at: at,
        },
        dirty: true,
    };
    if let Some(previous) = group.sessions.insert(key, fresh) {
        if previous.dirty {
            group.closed_sessions.push(previous);
        }
    }
}

/// Writes what the group accumulated: visitors and sessions with one multi-row upsert per
/// table, last activity with one conditional UPDATE per table (per chunk).
async fn flush<C: ConnectionTrait>(conn: &C, group: Group) -> Result<(), DbErr> {
    let visitors: Vec<visitor::ActiveModel> = group
        .visitors
        .into_values()
        .filter(|s| s.dirty)
        .map(|s| s.row.into_active_model().reset_all())
        .collect();
    for chunk in visitors.chunks(UPSERT_CHUNK) {
        use visitor::Column as V;
        visitor::Entity::insert_many(chunk.to_vec())
            .on_conflict(
                OnConflict::column(V::Id)
                    .update_columns([V::UserId, V::CustomerId, V::FirstSeenAt, V::LastSeenAt])
                    .to_owned(),
            )
            .exec_without_returning(conn)
            .await?;
    }
    let sessions: Vec<engagement_session::ActiveModel> = group
        .sessions
        .into_values()
        .chain(group.closed_sessions)
        .filter(|s| s.dirty)
        .map(|s| s.row.into_active_model().reset_all())
        .collect();
    for chunk in sessions.chunks(UPSERT_CHUNK) {
        use engagement_session::Column as S;
        engagement_session::Entity::insert_many(chunk.to_vec())
            .on_conflict(
                OnConflict::column(S::Id)
                    .update_columns([
                        S::VisitorId,
                        S::ActiveTimeMs,
                        S::TotalTimeMs,
                        S::StartedAt,
                        S::LastSeenAt,
                    ])
                    .to_owned(),
            )
            .exec_without_returning(conn)
            .await?;
    }
    advance_activity::<user::Entity, _>(
        conn,
        user::Column::Id,
        user::Column::LastActivityAt,
        group.user_activity,
    )
    .await?;
    advance_activity::<customer::Entity, _>(
        conn,
        customer::Column::Id,
        customer::Column::LastActivityAt,
        group.customer_activity,
    )
    .await
}

/// Moves each row's last activity forward to its new time (never back), one CASE UPDATE per
/// chunk of rows.
async fn advance_activity<E: EntityTrait, C: ConnectionTrait>(
    conn: &C,
    id: E::Column,
    last: E::Column,
    times: HashMap<String, DateTime<Utc>>,
) -> Result<(), DbErr> {
    let times: Vec<(String, DateTime<Utc>)> = times.into_iter().collect();
    for chunk in times.chunks(UPSERT_CHUNK) {
        E::update_many()
            .col_expr(last, latest_activity(id, last, chunk))
            .filter(id.is_in(chunk.iter().map(|(row_id, _)| row_id.clone())))
            .exec(conn)
            .await?;
    }
    Ok(())
}

/// Rows per multi-row upsert or CASE update: 8 columns x 200 rows stays far below the
/// backends' bound-parameter limits.
const UPSERT_CHUNK: usize = 200;

/// `CASE WHEN id = ? AND (last IS NULL OR last < ?) THEN ? ... ELSE last END`: each row's last
/// activity moves forward to its new time, never back.
fn latest_activity<I: ColumnTrait, L: ColumnTrait>(
    id: I,
    last: L,
    times: &[(String, DateTime<Utc>)],
) -> SimpleExpr {
    let mut case = CaseStatement::new();
    for (row_id, at) in times {
        case = case.case(
            Condition::all()
                .add(id.eq(row_id.as_str()))
                .add(Condition::any().add(last.is_null()).add(last.lt(*at))),
            Expr::value(*at),
        );
    }
    case.finally(Expr::col(last)).into()
}
