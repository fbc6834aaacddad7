//! An acknowledged event whose effects are not applied yet, as the applier would store it: for
//! reads that should not wait for the applier (an automation's dry run by `eventId`). The
//! event is attributed the way [`super::identity`] attributes it, to the users, accounts and
//! visitors already stored, and nothing is written: a user or account the batch would create
//! is not there yet, so the event names none.

use entity::{customer, user, visitor};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};

use super::identity::{user_by_email, Attribution};
use crate::ingest::{
    store::EventRow,
    validate::{Batch, Effect},
};

/// The event at `at` of `batch`, with the user and account it would be attributed to now.
pub async fn as_stored<C: ConnectionTrait>(
    conn: &C,
    batch: &Batch,
    at: usize,
) -> Result<Option<EventRow>, DbErr> {
    let Some(event) = batch.events.get(at) else {
        return Ok(None);
    };
    let org = batch.organization_id.as_str();
    let mut to = batch_attribution(conn, batch).await?;
    // An earlier `identify` of the batch makes later events its user's, unless the batch
    // names its own user.
    if batch.user_identity.is_none() {
        for earlier in &batch.events[..at] {
            if let Effect::Identify {
                email,
                user_id,
                customer_id,
                ..
            } = &earlier.effect
            {
                let identified = identify(conn, org, email, user_id, customer_id, &to).await?;
                to.user = identified.user;
                if batch.customer_identity.is_none() {
                    to.customer = identified.customer;
                }
            }
        }
    }
    match &event.effect {
        Effect::Identify {
            email,
            user_id,
            customer_id,
            ..
        } => {
            let identified = identify(conn, org, email, user_id, customer_id, &to).await?;
            to.user = identified.user;
            to.customer = identified.customer;
        }
        Effect::Attribute {
            email,
            user_id,
            fingerprint,
            customer_id,
        } => {
            if let Some(external_id) = customer_id {
                to.customer = customer_by_external_id(conn, org, external_id).await?;
            }
            if email.is_some() || user_id.is_some() {
                let found = user_by(conn, org, email.as_deref(), user_id.as_deref()).await?;
                if customer_id.is_none() {
                    to.customer = found
                        .as_ref()
                        .and_then(|u| u.customer_id.clone())
                        .or(to.customer.take());
                }
                to.user = found.map(|u| u.id);
            } else if let Some(fingerprint) = fingerprint {
                if let Some(v) = visitor_of(conn, org, fingerprint).await? {
                    to.user = v.user_id.or(to.user.take());
                    to.customer = v.customer_id.or(to.customer.take());
                }
                to.visitor = Some(fingerprint.clone());
            }
        }
        Effect::Billing {
            customer_id,
            stripe_customer_id,
            ..
        } => {
            let mut found = None;
            for external_id in [customer_id, stripe_customer_id].into_iter().flatten() {
                found = customer_by_external_id(conn, org, external_id).await?;
                if found.is_some() {
                    break;
                }
            }
            to.customer = found;
        }
        Effect::None | Effect::Engagement { .. } | Effect::Stage(_) => {}
    }
    Ok(Some(EventRow {
        id: event.id.clone(),
        organization_id: batch.organization_id.clone(),
        message_id: event.message_id.clone(),
        event_type: event.event_type.clone(),
        event_name: event.event_name.clone(),
        visitor_id: to.visitor,
        user_id: to.user,
        customer_id: to.customer,
        url: event.url.clone(),
        path: event.path.clone(),
        occurred_at: event.occurred_at,
        received_at: batch.received_at,
        data: event.data.clone(),
    }))
}

/// The batch's own user and account, else what its visitor is linked to.
async fn batch_attribution<C: ConnectionTrait>(
    conn: &C,
    batch: &Batch,
) -> Result<Attribution, DbErr> {
    let org = batch.organization_id.as_str();
    let visitor = match &batch.visitor_id {
        Some(v) => visitor_of(conn, org, v).await?,
        None => None,
    };
    let mut customer_id = match &batch.customer_identity {
        Some(c) => customer_by_external_id(conn, org, &c.external_id).await?,
        None => None,
    };
    let (user_id, user_customer) = match &batch.user_identity {
        Some(u) => match user_by(conn, org, u.email.as_deref(), u.user_id.as_deref()).await? {
            Some(found) => (Some(found.id), found.customer_id),
            None => (None, None),
        },
        None => (visitor.as_ref().and_then(|v| v.user_id.clone()), None),
    };
    if customer_id.is_none() {
        customer_id = user_customer.or_else(|| visitor.and_then(|v| v.customer_id));
    }
    Ok(Attribution {
        user: user_id,
        customer: customer_id,
        visitor: batch.visitor_id.clone(),
    })
}

/// An `identify`'s user and account: its account, else the user's, else the batch's.
async fn identify<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    email: &Option<String>,
    user_id: &Option<String>,
    customer_id: &Option<String>,
    before: &Attribution,
) -> Result<Attribution, DbErr> {
    let customer = match customer_id {
        Some(external_id) => customer_by_external_id(conn, org, external_id).await?,
        None => None,
    };
    let user = user_by(conn, org, email.as_deref(), user_id.as_deref()).await?;
    let user_customer = user
        .as_ref()
        .and_then(|u| u.customer_id.clone())
        .or_else(|| before.customer.clone());
    Ok(Attribution {
        user: user.map(|u| u.id),
        customer: customer.or(user_customer),
        visitor: before.visitor.clone(),
    })
}

/// The stored user by `userId` (its `externalId`), then by email.
async fn user_by<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    email: Option<&str>,
    external_id: Option<&str>,
) -> Result<Option<user::Model>, DbErr> {
    if let Some(external_id) = external_id {
        let found = user::Entity::find()
            .filter(user::Column::OrganizationId.eq(org))
            .filter(user::Column::ExternalId.eq(external_id))
            .one(conn)
            .await?;
        if found.is_some() {
            return Ok(found);
        }
    }
    match email {
        Some(email) => user_by_email(conn, org, email, external_id.is_some()).await,
        None => Ok(None),
    }
}

async fn customer_by_external_id<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    external_id: &str,
) -> Result<Option<String>, DbErr> {
    Ok(customer::Entity::find()
        .filter(customer::Column::OrganizationId.eq(org))
        .filter(customer::Column::ExternalId.eq(external_id))
        .one(conn)
        .await?
        .map(|c| c.id))
}

async fn visitor_of<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    visitor_id: &str,
) -> Result<Option<visitor::Model>, DbErr> {
    visitor::Entity::find()
        .filter(visitor::Column::OrganizationId.eq(org))
        .filter(visitor::Column::VisitorId.eq(visitor_id))
        .one(conn)
        .await
}
