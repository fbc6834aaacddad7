//! Inbound Stripe webhooks: the `Stripe-Signature` check, then the customer changes the event
//! implies. Nothing changes before the signature is verified.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sea_orm::{DatabaseConnection, EntityTrait};
use serde_json::Value;
use sha2::Sha256;

use super::{
    providers::STRIPE,
    setup::WEBHOOK_SECRET_SETTING,
    stripe::StripeCustomer,
    sync::{self, client_for},
    IntegrationError, IntegrationResult, IntegrationsConfig,
};
use crate::crypto::SecretBox;
use entity::integration_connection as conn;

/// Largest accepted age (or clock skew) of a signed delivery, in seconds.
pub const TOLERANCE_SECS: i64 = 300;

/// Why a signature was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SignatureError {
    #[error("the Stripe-Signature header has no timestamp (t=...)")]
    NoTimestamp,
    #[error("the Stripe-Signature header has no v1 signature")]
    NoSignature,
    #[error("the Stripe-Signature timestamp is outside the 5 minute tolerance")]
    Stale,
    #[error("no v1 signature matches the payload for this endpoint's signing secret")]
    Mismatch,
}

/// `t=<unix>,v1=<hex>` as Stripe signs it: HMAC-SHA256 over `"{t}.{payload}"` with the secret.
pub fn sign(secret: &str, timestamp: i64, payload: &[u8]) -> String {
    hex::encode(mac_for(secret, timestamp, payload).finalize().into_bytes())
}

// HMAC accepts keys of any length, so constructing one cannot fail; this keeps the
// signature of `sign` free of a Result without an unwrap.
fn unreachable_mac() -> Hmac<Sha256> {
    <Hmac<Sha256> as hmac::digest::KeyInit>::new(&Default::default())
}

fn mac_for(secret: &str, timestamp: i64, payload: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable_mac());
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    mac
}

/// Verifies a `Stripe-Signature` header over the raw payload at time `now`.
pub fn verify(
    secret: &str,
    header: &str,
    payload: &[u8],
    now: DateTime<Utc>,
) -> Result<(), SignatureError> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        let Some((key, value)) = part.trim().split_once('=') else {
            continue;
        };
        match key {
            "t" => timestamp = value.parse::<i64>().ok(),
            "v1" => signatures.push(value.to_string()),
            _ => {}
        }
    }
    let t = timestamp.ok_or(SignatureError::NoTimestamp)?;
    if signatures.is_empty() {
        return Err(SignatureError::NoSignature);
    }
    if (now.timestamp() - t).abs() > TOLERANCE_SECS {
        return Err(SignatureError::Stale);
    }
    for candidate in signatures {
        let Ok(bytes) = hex::decode(&candidate) else {
            continue;
        };
        // verify_slice compares in constant time.
        if mac_for(secret, t, payload).verify_slice(&bytes).is_ok() {
            return Ok(());
        }
    }
    Err(SignatureError::Mismatch)
}

/// What a delivery did.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub event_type: String,
    /// False for event types this service does not act on.
    pub handled: bool,
    /// The customer the event changed or confirmed.
    pub customer_id: Option<String>,
}

/// Handles one delivery to `/api/webhooks/stripe/{connectionId}`.
pub async fn receive(
    db: &DatabaseConnection,
    secrets: &SecretBox,
    config: &IntegrationsConfig,
    connection_id: &str,
    signature: &str,
    payload: &[u8],
    now: DateTime<Utc>,
) -> IntegrationResult<Delivery> {
    let row = conn::Entity::find_by_id(connection_id.to_string())
        .one(db)
        .await?
        .filter(|r| r.provider == STRIPE)
        .ok_or_else(|| {
            IntegrationError::NotFound(format!("no Stripe connection `{connection_id}`"))
        })?;
    let sealed = row
        .settings
        .get(WEBHOOK_SECRET_SETTING)
        .and_then(Value::as_str)
        .ok_or_else(|| {
            IntegrationError::NotSetUp(
                "this connection has no webhook signing secret yet: run the `webhooks` setup \
                 step with {\"webhookSecret\": \"whsec_...\"}"
                    .to_string(),
            )
        })?;
    let secret = secrets
        .decrypt(sealed)
        .map_err(|e| IntegrationError::Internal(e.to_string()))?;
    verify(&secret, signature, payload, now)
        .map_err(|e| IntegrationError::invalid_field("Stripe-Signature", e.to_string()))?;

    let event: Value = serde_json::from_slice(payload)
        .map_err(|e| IntegrationError::bad_request(format!("the event is not JSON: {e}")))?;
    let event_type = event
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| IntegrationError::invalid_field("type", "the event has no `type`"))?
        .to_string();
    let object = event
        .pointer("/data/object")
        .cloned()
        .unwrap_or(Value::Null);
    let org = row.organization_id.clone();
    let customer = match event_type.as_str() {
        "customer.created" | "customer.updated" => {
            let stripe: StripeCustomer = serde_json::from_value(object).map_err(|e| {
                IntegrationError::invalid_field("data", format!("not a Stripe customer: {e}"))
            })?;
            Some(sync::upsert_customer(db, &org, &stripe).await?)
        }
        "customer.subscription.created"
        | "customer.subscription.updated"
        | "customer.subscription.deleted" => {
            let stripe_customer = object
                .get("customer")
                .and_then(|c| c.as_str().or_else(|| c.get("id").and_then(Value::as_str)))
                .ok_or_else(|| {
                    IntegrationError::invalid_field("data", "the subscription names no customer")
                })?
                .to_string();
            // The event shows one subscription; MRR needs all of the customer's, so ask Stripe.
            let client = client_for(secrets, config, &row)?;
            Some(sync::refresh_customer(db, &client, &org, &stripe_customer).await?)
        }
        _ => None,
    };
    if customer.is_some() {
        sync::mark_data_received(db, &row.id).await?;
    }
    Ok(Delivery {
        handled: customer.is_some(),
        customer_id: customer.map(|c| c.id),
        event_type,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_round_trip_tolerance_and_tamper() {
        let now = Utc::now();
        let t = now.timestamp();
        let body = br#"{"type":"customer.created"}"#;
        let header = format!("t={t},v1={}", sign("whsec_abc", t, body));
        assert_eq!(verify("whsec_abc", &header, body, now), Ok(()));
        assert_eq!(
            verify("whsec_other", &header, body, now),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify("whsec_abc", &header, b"{}", now),
            Err(SignatureError::Mismatch)
        );
        let later = now + chrono::Duration::seconds(TOLERANCE_SECS + 1);
        assert_eq!(
            verify("whsec_abc", &header, body, later),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify("whsec_abc", "v1=00", body, now),
            Err(SignatureError::NoTimestamp)
        );
    }
}
