//! A small read-only Stripe API client (customers and subscriptions) and the rules that turn
//! Stripe's billing into a customer's billing status and MRR.

use std::time::Duration;

use entity::customer::BillingStatus;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{IntegrationError, IntegrationResult};

/// Page size asked of Stripe (its maximum).
const PAGE_LIMIT: &str = "100";
/// Upper bound on pages per list, so a misbehaving API cannot keep a sync running forever.
const MAX_PAGES: usize = 10_000;

#[derive(Debug, Clone, Deserialize)]
pub struct StripeCustomer {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub email: Option<String>,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    #[serde(default)]
    pub deleted: bool,
}

impl StripeCustomer {
    /// `metadata.customerId`: the account id the organization uses (the Ingest API's `customerId`).
    pub fn external_id(&self) -> Option<String> {
        self.metadata
            .get("customerId")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    }

    /// Domain of the customer's email, lower case.
    pub fn email_domain(&self) -> Option<String> {
        let email = self.email.as_deref()?.trim();
        let (_, domain) = email.rsplit_once('@')?;
        let domain = domain.trim().to_ascii_lowercase();
        (!domain.is_empty()).then_some(domain)
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Recurring {
    pub interval: String,
    #[serde(default = "one")]
    pub interval_count: i64,
}

fn one() -> i64 {
    1
}

#[derive(Debug, Clone, Deserialize)]
pub struct Price {
    #[serde(default)]
    pub unit_amount: Option<i64>,
    #[serde(default)]
    pub recurring: Option<Recurring>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SubscriptionItem {
    pub price: Price,
    #[serde(default)]
    pub quantity: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ItemList {
    #[serde(default)]
    pub data: Vec<SubscriptionItem>,
}

/// `customer` is an id, or the expanded customer object.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum CustomerRef {
    Id(String),
    Object { id: String },
}

impl CustomerRef {
    pub fn id(&self) -> &str {
        match self {
            CustomerRef::Id(id) | CustomerRef::Object { id } => id,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Subscription {
    pub id: String,
    pub customer: CustomerRef,
    pub status: String,
    pub items: ItemList,
}

#[derive(Debug, Deserialize)]
struct Page<T> {
    data: Vec<T>,
    #[serde(default)]
    has_more: bool,
}

/// Monthly recurring revenue of one subscription item, in cents.
pub fn item_mrr_cents(item: &SubscriptionItem) -> i64 {
    let Some(recurring) = &item.price.recurring else {
        return 0;
    };
    let amount = item.price.unit_amount.unwrap_or(0) * item.quantity.unwrap_or(1);
    let count = recurring.interval_count.max(1);
    // Per-month value of one billing period; rounded to whole cents.
    let (num, den) = match recurring.interval.as_str() {
        "month" => (1, 1),
        "year" => (1, 12),
        "week" => (52, 12),
        "day" => (365, 12),
        _ => (0, 1),
    };
    let den = den * count;
    (amount * num + den / 2) / den
}

/// A customer's billing from its subscriptions (DESIGN.md): MRR over `active` and `past_due`
/// subscriptions; status `PAYING`, else `TRIALING`, else `CHURNED`, else `NONE`.
pub fn billing_of(subscriptions: &[&Subscription]) -> (BillingStatus, i64) {
    let paying = |s: &&&Subscription| s.status == "active" || s.status == "past_due";
    let mrr: i64 = subscriptions
        .iter()
        .filter(paying)
        .flat_map(|s| s.items.data.iter())
        .map(item_mrr_cents)
        .sum();
    let status = if subscriptions.iter().any(|s| paying(&s)) {
        BillingStatus::Paying
    } else if subscriptions.iter().any(|s| s.status == "trialing") {
        BillingStatus::Trialing
    } else if subscriptions.iter().any(|s| s.status == "canceled") {
        BillingStatus::Churned
    } else {
        BillingStatus::None
    };
    (status, mrr)
}

/// Read-only Stripe API client for one account.
pub struct StripeClient {
    http: reqwest::Client,
    base: String,
    api_key: String,
}

impl StripeClient {
    pub fn new(base: &str, api_key: &str) -> IntegrationResult<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| IntegrationError::Internal(e.to_string()))?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_string(),
            api_key: api_key.to_string(),
        })
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> IntegrationResult<T> {
        let url = format!("{}/v1/{path}", self.base);
        let resp = self
            .http
            .get(&url)
            .bearer_auth(&self.api_key)
            .query(query)
            .send()
            .await
            .map_err(|e| IntegrationError::Upstream(format!("Stripe could not be reached: {e}")))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| IntegrationError::Upstream(format!("Stripe answer unreadable: {e}")))?;
        if !status.is_success() {
            // Stripe errors carry `error.message`; show it, not the whole body.
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| {
                    v.pointer("/error/message")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .unwrap_or_else(|| format!("HTTP {status}"));
            return Err(IntegrationError::Upstream(format!(
                "Stripe answered {}: {message}",
                status.as_u16()
            )));
        }
        serde_json::from_str(&text).map_err(|e| {
            IntegrationError::Upstream(format!("unexpected answer from Stripe for {path}: {e}"))
        })
    }

    /// Every page of a list, following `starting_after` while `has_more`.
    async fn list_all<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
        id_of: impl Fn(&T) -> String,
    ) -> IntegrationResult<Vec<T>> {
        let mut out: Vec<T> = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut q: Vec<(&str, &str)> = query.to_vec();
            q.push(("limit", PAGE_LIMIT));
            if let Some(a) = after.as_deref() {
                q.push(("starting_after", a));
            }
            let page: Page<T> = self.get(path, &q).await?;
            let last = page.data.last().map(&id_of);
            out.extend(page.data);
            match (page.has_more, last) {
                (true, Some(last)) => after = Some(last),
                _ => return Ok(out),
            }
        }
        Err(IntegrationError::Upstream(format!(
            "Stripe kept paginating {path} beyond {MAX_PAGES} pages"
        )))
    }

    pub async fn customers(&self) -> IntegrationResult<Vec<StripeCustomer>> {
        self.list_all("customers", &[], |c: &StripeCustomer| c.id.clone())
            .await
    }

    pub async fn customer(&self, id: &str) -> IntegrationResult<StripeCustomer> {
        self.get(&format!("customers/{id}"), &[]).await
    }

    /// Every subscription, canceled ones included (they decide `CHURNED`).
    pub async fn subscriptions(
        &self,
        customer: Option<&str>,
    ) -> IntegrationResult<Vec<Subscription>> {
        let mut query = vec![("status", "all")];
        if let Some(c) = customer {
            query.push(("customer", c));
        }
        self.list_all("subscriptions", &query, |s: &Subscription| s.id.clone())
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(status: &str, amount: i64, qty: i64, interval: &str) -> Subscription {
        serde_json::from_value(serde_json::json!({
            "id": "sub_1", "customer": "cus_1", "status": status,
            "items": {"data": [{"price": {"unit_amount": amount,
                "recurring": {"interval": interval, "interval_count": 1}}, "quantity": qty}]}
        }))
        .unwrap()
    }

    #[test]
    fn mrr_normalizes_intervals_and_status_priority() {
        let monthly = sub("active", 1000, 3, "month");
        let yearly = sub("past_due", 120_000, 1, "year");
        let weekly = sub("active", 1200, 1, "week");
        let trial = sub("trialing", 5000, 1, "month");
        let gone = sub("canceled", 5000, 1, "month");
        assert_eq!(
            billing_of(&[&monthly, &yearly, &weekly, &trial]),
            (BillingStatus::Paying, 3000 + 10_000 + 5200)
        );
        assert_eq!(billing_of(&[&trial, &gone]), (BillingStatus::Trialing, 0));
        assert_eq!(billing_of(&[&gone]), (BillingStatus::Churned, 0));
        assert_eq!(billing_of(&[]), (BillingStatus::None, 0));
    }
}
