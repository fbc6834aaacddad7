//! Who a batch and its events are: visitors, users and accounts resolved or created, and the
//! journey stages identity implies or stage events set.

use chrono::{DateTime, Utc};
use entity::{
    customer::{self, BillingStatus},
    user, visitor,
};
use sea_orm::{
    sea_query::Expr, ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait,
    IntoActiveModel, QueryFilter, Set,
};
use serde_json::{Map, Value};

use super::{Group, UserLink, VisitorState};
use crate::db::name_search::{index_names, NamesOf};
use crate::ingest::{
    model::StageName,
    validate::{AcceptedEvent, Batch, CustomerRef, Effect, UserRef},
};

/// Journey stages in the order identity inference may raise them.
const DISCOVERED: &str = "discovered";
const SIGNED_UP: &str = "signed_up";

/// Who a batch is: its visitor, and the user and account its events are attributed to unless
/// an event says otherwise.
pub(super) struct BatchIdentity {
    visitor_key: Option<(String, String)>,
    user: Option<UserLink>,
    customer: Option<String>,
}

/// The user, account and visitor one event is attributed to.
pub(super) struct Attribution {
    pub user: Option<String>,
    pub customer: Option<String>,
    pub visitor: Option<String>,
}

impl BatchIdentity {
    /// The batch's explicit identities, else what its visitor is linked to; the visitor is
    /// started or moved and linked to them.
    pub(super) async fn resolve<C: ConnectionTrait>(
        conn: &C,
        group: &mut Group,
        batch: &Batch,
        last_event_at: DateTime<Utc>,
    ) -> Result<Self, DbErr> {
        let org = batch.organization_id.as_str();
        let now = batch.received_at;
        let visitor_key = batch
            .visitor_id
            .as_ref()
            .map(|v| (org.to_string(), v.clone()));
        if let Some(key) = &visitor_key {
            touch_visitor(group, key, last_event_at);
        }
        let mut batch_customer = match &batch.customer_identity {
            Some(c) => Some(resolve_customer(conn, group, org, c, now).await?),
            None => None,
        };
        let user = match &batch.user_identity {
            Some(u) => {
                let stage = u.user_id.as_ref().map(|_| SIGNED_UP);
                Some(
                    resolve_user(conn, group, org, u, stage, batch_customer.as_deref(), now)
                        .await?,
                )
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
        Ok(Self {
            visitor_key,
            user,
            customer: batch_customer,
        })
    }

    /// What an event of the batch is attributed to before its own effect.
    pub(super) fn attribution(&self, batch: &Batch) -> Attribution {
        Attribution {
            user: self.user.as_ref().map(|u| u.id.clone()),
            customer: self.customer.clone(),
            visitor: batch.visitor_id.clone(),
        }
    }
}

/// An `identify` event: resolves (or creates) its account and user, links the visitor to
/// them, and makes them the batch's for later events unless the batch names its own.
pub(super) async fn identify<C: ConnectionTrait>(
    conn: &C,
    group: &mut Group,
    batch: &Batch,
    event: &AcceptedEvent,
    who: &mut BatchIdentity,
    to: &mut Attribution,
) -> Result<(), DbErr> {
    let Effect::Identify {
        email,
        user_id,
        traits,
        customer_id,
        customer_traits,
    } = &event.effect
    else {
        return Ok(());
    };
    let org = batch.organization_id.as_str();
    let now = batch.received_at;
    let customer = match customer_id {
        Some(external_id) => Some(
            customer_by_external_id(conn, group, org, external_id, customer_traits.clone(), now)
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
        group,
        org,
        &UserRef {
            email: email.clone(),
            user_id: user_id.clone(),
            traits: traits.clone(),
        },
        Some(stage),
        customer.as_deref().or(who.customer.as_deref()),
        now,
    )
    .await?;
    to.user = Some(identified.id.clone());
    to.customer = customer.clone().or(identified.customer_id.clone());
    if let Some(key) = &who.visitor_key {
        link_visitor(group, key, Some(&identified.id), to.customer.as_deref());
    }
    // Later events of this batch are the identified user's, unless the batch
    // names its user explicitly.
    if batch.user_identity.is_none() {
        if batch.customer_identity.is_none() {
            who.customer = to.customer.clone();
        }
        who.user = Some(identified);
    }
    Ok(())
}

/// A server event naming its user (email, `userId`), device (fingerprint) or account: the event
/// is attributed to them.
pub(super) async fn attribute<C: ConnectionTrait>(
    conn: &C,
    group: &mut Group,
    batch: &Batch,
    event: &AcceptedEvent,
    to: &mut Attribution,
) -> Result<(), DbErr> {
    let Effect::Attribute {
        email,
        user_id,
        fingerprint,
        customer_id,
    } = &event.effect
    else {
        return Ok(());
    };
    let org = batch.organization_id.as_str();
    let now = batch.received_at;
    if let Some(external_id) = customer_id {
        to.customer =
            Some(customer_by_external_id(conn, group, org, external_id, Map::new(), now).await?);
    }
    if email.is_some() || user_id.is_some() {
        let found = resolve_user(
            conn,
            group,
            org,
            &UserRef {
                email: email.clone(),
                user_id: user_id.clone(),
                traits: Map::new(),
            },
            None,
            to.customer.as_deref(),
            now,
        )
        .await?;
        if customer_id.is_none() {
            to.customer = found.customer_id.clone().or(to.customer.take());
        }
        to.user = Some(found.id);
    } else if let Some(fp) = fingerprint {
        let key = (org.to_string(), fp.clone());
        touch_visitor(group, &key, event.occurred_at);
        if let Some(v) = group.visitors.get(&key) {
            to.user = v.row.user_id.clone().or(to.user.take());
            to.customer = v.row.customer_id.clone().or(to.customer.take());
        }
        to.visitor = Some(fp.clone());
    }
    Ok(())
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
pub(super) fn merge_traits(traits: &mut Value, incoming: &Map<String, Value>) -> bool {
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
    group: &mut Group,
    org: &str,
    who: &UserRef,
    stage: Option<&str>,
    customer_id: Option<&str>,
    now: DateTime<Utc>,
) -> Result<UserLink, DbErr> {
    let mut found = None;
    if let Some(external_id) = &who.user_id {
        found = group.users.find(conn, org, external_id).await?;
    }
    if found.is_none() {
        if let Some(email) = &who.email {
            found = user_by_email(conn, org, email, who.user_id.is_some()).await?;
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
            let renamed = name.is_some() && name != row.name;
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
                if renamed {
                    let named = row.name.iter().map(|n| (row.id.as_str(), n.as_str()));
                    index_names(conn, NamesOf::Users, named).await?;
                }
            }
            let link = UserLink {
                id: row.id.clone(),
                customer_id: row.customer_id.clone(),
            };
            group.users.remember(row);
            Ok(link)
        }
        None => {
            let id = uuid::Uuid::new_v4().to_string();
            let created = user::ActiveModel {
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
            let named = created.name.iter().map(|n| (id.as_str(), n.as_str()));
            index_names(conn, NamesOf::Users, named).await?;
            group.users.remember(created);
            Ok(UserLink {
                id,
                customer_id: customer_id.map(str::to_string),
            })
        }
    }
}

/// The stored user with this email; with `has_user_id`, only one known under no `userId` (a
/// user already known under another `userId` is a different person).
pub(super) async fn user_by_email<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    email: &str,
    has_user_id: bool,
) -> Result<Option<user::Model>, DbErr> {
    let mut query = user::Entity::find()
        .filter(user::Column::OrganizationId.eq(org))
        .filter(user::Column::Email.eq(email));
    if has_user_id {
        query = query.filter(user::Column::ExternalId.is_null());
    }
    query.one(conn).await
}

/// [`resolve_customer`] for an account named by its `externalId` alone.
pub(super) async fn customer_by_external_id<C: ConnectionTrait>(
    conn: &C,
    group: &mut Group,
    org: &str,
    external_id: &str,
    traits: Map<String, Value>,
    now: DateTime<Utc>,
) -> Result<String, DbErr> {
    let who = CustomerRef {
        external_id: external_id.to_string(),
        traits,
    };
    resolve_customer(conn, group, org, &who, now).await
}

/// Finds the account by `externalId`, creating it when unseen; `name` and `domain` traits
/// fill its name and domain, the other traits merge into its traits.
pub(super) async fn resolve_customer<C: ConnectionTrait>(
    conn: &C,
    group: &mut Group,
    org: &str,
    who: &CustomerRef,
    now: DateTime<Utc>,
) -> Result<String, DbErr> {
    let found = group.customers.find(conn, org, &who.external_id).await?;
    let name = trait_str(&who.traits, "name");
    let domain = trait_str(&who.traits, "domain").map(|d| d.to_lowercase());
    let mut other = who.traits.clone();
    other.remove("name");
    other.remove("domain");
    match found {
        Some(existing) => {
            let mut row = existing.clone();
            let renamed = name.as_ref().is_some_and(|n| *n != row.name);
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
                if renamed {
                    let named = [(row.id.as_str(), row.name.as_str())];
                    index_names(conn, NamesOf::Customers, named).await?;
                }
            }
            let id = row.id.clone();
            group.customers.remember(row);
            Ok(id)
        }
        None => {
            let id = uuid::Uuid::new_v4().to_string();
            let created = customer::ActiveModel {
                id: Set(id.clone()),
                organization_id: Set(org.to_string()),
                name: Set(name.unwrap_or_else(|| who.external_id.clone())),
                domain: Set(domain),
                external_id: Set(Some(who.external_id.clone())),
                billing_status: Set(BillingStatus::None),
                mrr_cents: Set(0),
                traits: Set(Value::Object(other)),
                last_activity_at: Set(None),
                events_counted: sea_orm::ActiveValue::Set(0),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(conn)
            .await?;
            let named = [(id.as_str(), created.name.as_str())];
            index_names(conn, NamesOf::Customers, named).await?;
            group.customers.remember(created);
            Ok(id)
        }
    }
}

pub(super) async fn set_stage<C: ConnectionTrait>(
    conn: &C,
    group: &mut Group,
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
    // The group's copy of that user (if any) no longer matches what is stored.
    group.users.forget(|u| u.id == user_id);
    Ok(())
}
