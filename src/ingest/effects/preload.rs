//! The group's look-ups before it applies anything: every visitor, session, account and user
//! its batches name, one query per organization and chunk.

use std::collections::{HashMap, HashSet};

use entity::{engagement_session, visitor};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};

use super::{Group, SessionState, VisitorState};
use crate::ingest::validate::{Batch, Effect};

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

/// The rows of entity `E` in organization `org` whose `key` column is one of `keys`, one
/// query per chunk of keys.
pub(super) async fn find_in_chunks<E: EntityTrait, C: ConnectionTrait>(
    conn: &C,
    org_column: E::Column,
    org: &str,
    key_column: E::Column,
    keys: &[&str],
) -> Result<Vec<E::Model>, DbErr> {
    let mut rows = Vec::new();
    for chunk in keys.chunks(LOOKUP_CHUNK) {
        rows.extend(
            E::find()
                .filter(org_column.eq(org))
                .filter(key_column.is_in(chunk.iter().copied()))
                .all(conn)
                .await?,
        );
    }
    Ok(rows)
}

/// Loads every visitor the group's batches name (their `visitorId`s and attributed
/// fingerprints) with one query per organization and chunk, instead of one per batch.
pub(super) async fn preload_visitors<C: ConnectionTrait>(
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
        use visitor::Column as V;
        for row in
            find_in_chunks::<visitor::Entity, _>(conn, V::OrganizationId, org, V::VisitorId, &ids)
                .await?
        {
            let key = (row.organization_id.clone(), row.visitor_id.clone());
            group
                .visitors
                .insert(key, VisitorState { row, dirty: false });
        }
    }
    Ok(())
}

/// Loads the latest stored row of every engagement session the group's events name.
pub(super) async fn preload_sessions<C: ConnectionTrait>(
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
        use engagement_session::Column as S;
        for row in find_in_chunks::<engagement_session::Entity, _>(
            conn,
            S::OrganizationId,
            org,
            S::SessionId,
            &ids,
        )
        .await?
        {
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
    Ok(())
}

/// Loads every account (by `externalId`) and user (by `userId`) the group's batches and their
/// identity, attribution and billing events name, one query per organization and chunk;
/// a key without a stored row is remembered as `None`. Where two rows share a key, the first
/// the index yields is kept, as the single-row look-up it replaces would have found.
pub(super) async fn preload_identities<C: ConnectionTrait>(
    conn: &C,
    group: &mut Group,
    batches: &[&Batch],
) -> Result<(), DbErr> {
    let customers = keys_by_org(batches, |batch, ids| {
        if let Some(c) = &batch.customer_identity {
            ids.insert(c.external_id.as_str());
        }
        for event in &batch.events {
            match &event.effect {
                Effect::Identify { customer_id, .. } | Effect::Attribute { customer_id, .. } => {
                    ids.extend(customer_id.as_deref())
                }
                Effect::Billing {
                    customer_id,
                    stripe_customer_id,
                    ..
                } => ids.extend(
                    customer_id
                        .as_deref()
                        .into_iter()
                        .chain(stripe_customer_id.as_deref()),
                ),
                _ => {}
            }
        }
    });
    for (org, ids) in customers {
        group.customers.load(conn, org, &ids).await?;
    }
    let users = keys_by_org(batches, |batch, ids| {
        if let Some(u) = batch
            .user_identity
            .as_ref()
            .and_then(|u| u.user_id.as_deref())
        {
            ids.insert(u);
        }
        for event in &batch.events {
            if let Effect::Identify { user_id, .. } | Effect::Attribute { user_id, .. } =
                &event.effect
            {
                ids.extend(user_id.as_deref());
            }
        }
    });
    for (org, ids) in users {
        group.users.load(conn, org, &ids).await?;
    }
    Ok(())
}
