//! The Stripe sync: customers and subscriptions into customers' billing status and MRR, each
//! model's run recorded in `sync_runs`, each change of status or MRR in `billing_history`.

use std::collections::HashMap;

use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, Set,
};
use serde_json::{json, Value};

use super::{
    credentials,
    stripe::{billing_of, StripeClient, StripeCustomer, Subscription},
    IntegrationError, IntegrationResult, IntegrationsConfig,
};
use crate::crypto::SecretBox;
use crate::db::name_search::{index_names, NamesOf};
use entity::{
    billing_change,
    customer::{self, BillingStatus},
    integration_connection as conn,
    sync_run::{self, SyncRunStatus},
};

/// `origin` of billing history rows written by the Stripe sync and webhook.
pub const ORIGIN_STRIPE: &str = "stripe";

/// The client for a connection's account.
pub fn client_for(
    secrets: &SecretBox,
    config: &IntegrationsConfig,
    row: &conn::Model,
) -> IntegrationResult<StripeClient> {
    let creds = credentials::credentials(secrets, row)?;
    let key = creds.get("apiKey").and_then(Value::as_str).ok_or_else(|| {
        IntegrationError::Internal("stored Stripe credentials lack apiKey".into())
    })?;
    StripeClient::new(&config.stripe_api_base, key)
}

/// Finds the customer a Stripe customer maps to, or creates it (DESIGN.md): `externalId` equal to
/// `metadata.customerId`, else `domain` equal to the email's domain, else a new customer. A
/// matched customer keeps its name.
pub async fn upsert_customer(
    db: &DatabaseConnection,
    org: &str,
    stripe: &StripeCustomer,
) -> IntegrationResult<customer::Model> {
    let external_id = stripe.external_id();
    let domain = stripe.email_domain();
    if let Some(found) = find_mapped(db, org, &external_id, &domain).await? {
        return Ok(found);
    }
    // Not there: looked up again and created in one transaction that holds the organization's
    // identities, so concurrent deliveries of one Stripe customer, or ingest naming the same
    // `externalId`, do not each create one. The common case, a customer already there, takes
    // no write lock.
    let txn = crate::db::begin_write(db).await?;
    crate::db::hold_identities(&txn, org).await?;
    if let Some(found) = find_mapped(&txn, org, &external_id, &domain).await? {
        txn.commit().await?;
        return Ok(found);
    }
    let name = stripe
        .name
        .clone()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .or_else(|| external_id.clone())
        .unwrap_or_else(|| stripe.id.clone());
    let now = Utc::now();
    // The customer and its name in the name index, together.
    let created = customer::ActiveModel {
        id: Set(uuid::Uuid::new_v4().to_string()),
        organization_id: Set(org.to_string()),
        name: Set(name),
        domain: Set(domain),
        external_id: Set(external_id),
        billing_status: Set(BillingStatus::None),
        mrr_cents: Set(0),
        traits: Set(json!({})),
        last_activity_at: Set(None),
        events_counted: sea_orm::ActiveValue::Set(0),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    let named = [(created.id.as_str(), created.name.as_str())];
    index_names(&txn, NamesOf::Customers, named).await?;
    txn.commit().await?;
    Ok(created)
}

/// The customer a Stripe customer maps to: by `externalId`, else by domain (the oldest match).
async fn find_mapped<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    external_id: &Option<String>,
    domain: &Option<String>,
) -> IntegrationResult<Option<customer::Model>> {
    let keys = [
        external_id
            .as_ref()
            .map(|v| (customer::Column::ExternalId, v)),
        domain.as_ref().map(|v| (customer::Column::Domain, v)),
    ];
    for (column, value) in keys.into_iter().flatten() {
        let found = customer::Entity::find()
            .filter(customer::Column::OrganizationId.eq(org))
            .filter(column.eq(value.clone()))
            .order_by_asc(customer::Column::CreatedAt)
            .one(conn)
            .await?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// Sets a customer's billing status and MRR; a change is recorded in `billing_history`.
pub async fn apply_billing<C: ConnectionTrait>(
    db: &C,
    row: customer::Model,
    status: BillingStatus,
    mrr_cents: i64,
) -> IntegrationResult<bool> {
    if row.billing_status == status && row.mrr_cents == mrr_cents {
        return Ok(false);
    }
    let now = Utc::now();
    let (org, id) = (row.organization_id.clone(), row.id.clone());
    let mut active = row.into_active_model();
    active.billing_status = Set(status);
    active.mrr_cents = Set(mrr_cents);
    active.updated_at = Set(now);
    active.update(db).await?;
    billing_change::ActiveModel {
        id: Set(uuid::Uuid::new_v4().to_string()),
        organization_id: Set(org),
        customer_id: Set(id),
        at: Set(now),
        billing_status: Set(status),
        mrr_cents: Set(mrr_cents),
        origin: Set(ORIGIN_STRIPE.to_string()),
    }
    .insert(db)
    .await?;
    Ok(true)
}

async fn start_run<C: ConnectionTrait>(
    db: &C,
    row: &conn::Model,
    model: &str,
) -> IntegrationResult<sync_run::Model> {
    Ok(sync_run::ActiveModel {
        id: Set(uuid::Uuid::new_v4().to_string()),
        organization_id: Set(row.organization_id.clone()),
        connection_id: Set(row.id.clone()),
        model: Set(model.to_string()),
        status: Set(SyncRunStatus::Running),
        error_message: Set(None),
        started_at: Set(Utc::now()),
        finished_at: Set(None),
    }
    .insert(db)
    .await?)
}

async fn finish_run<C: ConnectionTrait>(
    db: &C,
    run: sync_run::Model,
    outcome: &Result<(), String>,
) -> IntegrationResult<()> {
    let mut active = run.into_active_model();
    match outcome {
        Ok(()) => active.status = Set(SyncRunStatus::Success),
        Err(message) => {
            active.status = Set(SyncRunStatus::Failed);
            active.error_message = Set(Some(message.clone()));
        }
    }
    active.finished_at = Set(Some(Utc::now()));
    active.update(db).await?;
    Ok(())
}

/// Maps every Stripe customer; returns Stripe id -> local customer.
async fn sync_customers(
    db: &DatabaseConnection,
    client: &StripeClient,
    org: &str,
) -> IntegrationResult<HashMap<String, customer::Model>> {
    let mut mapped = HashMap::new();
    for stripe in client.customers().await? {
        if stripe.deleted {
            continue;
        }
        let local = upsert_customer(db, org, &stripe).await?;
        mapped.insert(stripe.id.clone(), local);
    }
    Ok(mapped)
}

/// Recomputes every mapped customer's billing from all subscriptions.
async fn sync_subscriptions(
    db: &DatabaseConnection,
    client: &StripeClient,
    org: &str,
    mut mapped: HashMap<String, customer::Model>,
) -> IntegrationResult<()> {
    let subscriptions = client.subscriptions(None).await?;
    let mut by_customer: HashMap<String, Vec<&Subscription>> = HashMap::new();
    for s in &subscriptions {
        by_customer
            .entry(s.customer.id().to_string())
            .or_default()
            .push(s);
    }
    // A customer created between the two lists is fetched on its own.
    for stripe_id in by_customer.keys() {
        if !mapped.contains_key(stripe_id) {
            let stripe = client.customer(stripe_id).await?;
            if !stripe.deleted {
                mapped.insert(stripe_id.clone(), upsert_customer(db, org, &stripe).await?);
            }
        }
    }
    for (stripe_id, local) in mapped {
        // Reread: several Stripe customers may map to one customer (same email domain).
        let Some(current) = customer::Entity::find_by_id(local.id).one(db).await? else {
            continue;
        };
        let subs = by_customer.get(&stripe_id).cloned().unwrap_or_default();
        let (status, mrr) = billing_of(&subs);
        apply_billing(db, current, status, mrr).await?;
    }
    Ok(())
}

/// One full sync of a Stripe connection. Each model's run is recorded whatever the outcome;
/// the error is returned too so the scheduler can log it.
pub async fn run_stripe_sync(
    db: &DatabaseConnection,
    secrets: &SecretBox,
    config: &IntegrationsConfig,
    connection_id: &str,
) -> IntegrationResult<()> {
    let Some(row) = conn::Entity::find_by_id(connection_id.to_string())
        .one(db)
        .await?
    else {
        // Disconnected since the job was scheduled.
        return Ok(());
    };
    let org = row.organization_id.clone();
    let customers_run = start_run(db, &row, "customers").await?;
    let customers: IntegrationResult<HashMap<String, customer::Model>> = async {
        let client = client_for(secrets, config, &row)?;
        sync_customers(db, &client, &org).await
    }
    .await;
    let outcome = customers.as_ref().map(|_| ()).map_err(|e| e.to_string());
    finish_run(db, customers_run, &outcome).await?;

    let subscriptions_run = start_run(db, &row, "subscriptions").await?;
    let subscriptions: IntegrationResult<()> = match customers {
        Ok(mapped) => {
            async {
                let client = client_for(secrets, config, &row)?;
                sync_subscriptions(db, &client, &org, mapped).await
            }
            .await
        }
        Err(e) => Err(IntegrationError::Upstream(format!(
            "skipped: the customers sync failed: {e}"
        ))),
    };
    let outcome = subscriptions
        .as_ref()
        .map(|_| ())
        .map_err(|e| e.to_string());
    finish_run(db, subscriptions_run, &outcome).await?;
    if subscriptions.is_ok() {
        mark_data_received(db, &row.id).await?;
    }
    subscriptions
}

/// Records that data arrived from the provider (the list's `lastDataReceivedAt`).
pub async fn mark_data_received<C: ConnectionTrait>(
    db: &C,
    connection_id: &str,
) -> IntegrationResult<()> {
    conn::Entity::update_many()
        .col_expr(
            conn::Column::LastDataReceivedAt,
            sea_orm::sea_query::Expr::value(Some(Utc::now())),
        )
        .filter(conn::Column::Id.eq(connection_id))
        .exec(db)
        .await?;
    Ok(())
}

/// Recomputes one Stripe customer's billing from Stripe (the webhook's subscription events).
pub async fn refresh_customer(
    db: &DatabaseConnection,
    client: &StripeClient,
    org: &str,
    stripe_customer_id: &str,
) -> IntegrationResult<customer::Model> {
    let stripe = client.customer(stripe_customer_id).await?;
    let local = upsert_customer(db, org, &stripe).await?;
    let subscriptions = client.subscriptions(Some(stripe_customer_id)).await?;
    let refs: Vec<&Subscription> = subscriptions.iter().collect();
    let (status, mrr) = billing_of(&refs);
    let id = local.id.clone();
    apply_billing(db, local, status, mrr).await?;
    customer::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| IntegrationError::Internal("customer vanished during refresh".into()))
}
