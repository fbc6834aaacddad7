//! The Ingest API's batch and tracking events as the parser reads them (serde). The endpoint
//! reads the body itself (text/plain beacons, gzip, a size bound) and parses each event on its
//! own, so one bad event fails alone.
//!
//! The published description of these types (field docs, the `type` tags) is the HTTP side's
//! (`api::ingest_batch`); a test there holds the two to the same fields.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a batch comes from (default `client`); decides which identity fields are required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventSource {
    Client,
    Server,
    Integration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Utm {
    pub source: Option<String>,
    pub medium: Option<String>,
    pub campaign: Option<String>,
    pub term: Option<String>,
    pub content: Option<String>,
}

/// A logged-in user every event of the batch is attributed to.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserIdentity {
    pub email: Option<String>,
    pub user_id: Option<String>,
    pub traits: Option<BTreeMap<String, Value>>,
}

/// The account (customer) every event of the batch belongs to.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomerIdentity {
    pub customer_id: String,
    pub customer_traits: Option<BTreeMap<String, Value>>,
}

/// Declares one event type with the fields every event shares (its `type` is read before it).
macro_rules! tracking_event {
    ($name:ident { $($field:ident : $ty:ty,)* }) => {
        #[derive(Debug, Clone, Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        pub struct $name {
            /// Unix milliseconds; the receive time when absent.
            pub timestamp: Option<f64>,
            pub url: String,
            pub path: String,
            pub referrer: Option<String>,
            pub utm: Option<Utm>,
            pub message_id: Option<String>,
            $(pub $field: $ty,)*
        }
    };
}

tracking_event!(PageviewEvent {
    title: Option<String>,
});

tracking_event!(CustomEvent {
    event_name: String,
    properties: Option<BTreeMap<String, Value>>,
    email: Option<String>,
    user_id: Option<String>,
    fingerprint: Option<String>,
    customer_id: Option<String>,
});

tracking_event!(FormEvent {
    form_id: Option<String>,
    form_fields: Option<BTreeMap<String, Value>>,
});

tracking_event!(IdentifyEvent {
    email: Option<String>,
    user_id: Option<String>,
    traits: Option<BTreeMap<String, Value>>,
    customer_id: Option<String>,
    customer_traits: Option<BTreeMap<String, Value>>,
});

tracking_event!(EngagementEvent {
    active_time_ms: f64,
    total_time_ms: f64,
    session_id: String,
});

/// The scheduling tool that booked a meeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum CalendarProvider {
    #[serde(rename = "cal.com")]
    CalCom,
    #[serde(rename = "calendly")]
    Calendly,
    #[serde(rename = "unknown")]
    Unknown,
}

tracking_event!(CalendarEvent {
    provider: CalendarProvider,
    event_type: Option<String>,
    start_time: Option<String>,
    end_time: Option<String>,
    duration: Option<f64>,
    is_recurring: Option<bool>,
    invitee_email: Option<String>,
    invitee_name: Option<String>,
});

/// A journey stage set by an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StageName {
    Activated,
    Engaged,
    Inactive,
}

tracking_event!(StageEvent {
    stage: StageName,
    properties: Option<BTreeMap<String, Value>>,
});

/// A billing status reported for an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BillingEventStatus {
    Trialing,
    Paid,
    Churned,
}

tracking_event!(BillingEvent {
    status: BillingEventStatus,
    customer_id: Option<String>,
    stripe_customer_id: Option<String>,
    properties: Option<BTreeMap<String, Value>>,
});

/// The batch's own fields as parsed; events are parsed one by one.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawBatch {
    pub visitor_id: Option<String>,
    pub source: Option<EventSource>,
    pub events: Vec<Value>,
    pub user_identity: Option<UserIdentity>,
    pub customer_identity: Option<CustomerIdentity>,
    pub sent_at: Option<f64>,
}
