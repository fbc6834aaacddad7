//! Billing events: an account's billing status and its history.

use chrono::{DateTime, Utc};
use entity::{billing_change, customer::BillingStatus};
use sea_orm::{ActiveModelTrait, ConnectionTrait, DbErr, IntoActiveModel, Set};

use serde_json::{Map, Value};

use super::{
    identity::{customer_by_external_id, merge_traits},
    Group,
};
use crate::ingest::model::BillingEventStatus;

/// Sets an account's billing status (creating the account when unseen) and records the
/// change in its billing history; answers the account's id.
pub(super) async fn set_billing<C: ConnectionTrait>(
    conn: &C,
    group: &mut Group,
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
    };
    let mut found = None;
    for external_id in [customer_id, stripe_customer_id].into_iter().flatten() {
        found = group.customers.find(conn, org, external_id).await?;
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
            // Created (and remembered by the group) under `external_id`: no second read.
            let id =
                customer_by_external_id(conn, group, org, external_id, Map::new(), now).await?;
            group
                .customers
                .find(conn, org, external_id)
                .await?
                .ok_or_else(|| DbErr::RecordNotFound(format!("customer {id}")))?
        }
    };
    let mut updated = row.clone();
    updated.billing_status = billing_status;
    merge_traits(&mut updated.traits, &stripe_trait);
    if updated != row {
        updated.updated_at = now;
        let active = updated.clone().into_active_model().reset_all();
        active.update(conn).await?;
    }
    group.customers.remember(updated);
    if row.billing_status != billing_status {
        billing_change::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org.to_string()),
            customer_id: Set(row.id.clone()),
            at: Set(at),
            billing_status: Set(billing_status),
            mrr_cents: Set(row.mrr_cents),
            origin: Set("ingest".to_string()),
        }
        .insert(conn)
        .await?;
    }
    Ok(row.id)
}
