//! The published description of the Ingest API's request: the batch and every tracking event
//! type. The endpoint never parses into these types; [`crate::ingest::model`] is the parser. A
//! test below holds each described object and enum to the fields and values the parser reads.

use std::collections::BTreeMap;

use poem_openapi::{Enum, Object, Union};
use serde_json::Value;

/// Where a batch comes from (default `client`); decides which identity fields are required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum EventSource {
    /// A browser or app: `visitorId` is required.
    Client,
    /// Your backend: identity comes from the events' `email`, `userId`, `fingerprint`,
    /// `customerId`, billing identifiers, or the batch's `userIdentity`/`customerIdentity`.
    Server,
    /// An integration forwarding events; attributed like `server`.
    Integration,
}

/// UTM campaign parameters of the page.
#[derive(Debug, Clone, Object)]
pub struct Utm {
    pub source: Option<String>,
    pub medium: Option<String>,
    pub campaign: Option<String>,
    pub term: Option<String>,
    pub content: Option<String>,
}

/// A logged-in user: attributes every event of the batch to this user.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct UserIdentity {
    /// The user's email address (one of `email` and `userId` is required).
    pub email: Option<String>,
    /// Your id for the user (one of `email` and `userId` is required).
    pub user_id: Option<String>,
    /// Attributes of the user, merged into what is known (`name` sets the user's name).
    pub traits: Option<BTreeMap<String, Value>>,
}

/// The account (customer) every event of the batch belongs to.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct CustomerIdentity {
    /// Your id for the account; the customer with this `externalId` is found or created.
    pub customer_id: String,
    /// Attributes of the account: `name` and `domain` fill the customer's name and domain,
    /// the rest is merged into its traits.
    pub customer_traits: Option<BTreeMap<String, Value>>,
}

/// Declares one event type's object with the fields every event shares.
macro_rules! tracking_event {
    ($(#[$meta:meta])* $name:ident, $kind:ident = $tag:literal { $($(#[$fmeta:meta])* $field:ident : $ty:ty,)* }) => {
        #[doc = concat!("The `type` of a ", $tag, " event.")]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Enum)]
        pub enum $kind {
            #[default]
            #[oai(rename = $tag)]
            Only,
        }

        $(#[$meta])*
        #[derive(Debug, Clone, Object)]
        #[oai(rename_all = "camelCase")]
        pub struct $name {
            #[oai(rename = "type")]
            pub kind: $kind,
            /// Unix time in milliseconds when the event happened; defaults to the time the
            /// server received it. Corrected for the client's clock when the batch has `sentAt`.
            pub timestamp: Option<f64>,
            /// Full page URL; server events use a `server://...` form.
            pub url: String,
            /// URL path.
            pub path: String,
            pub referrer: Option<String>,
            pub utm: Option<Utm>,
            /// Extension: your unique id for this event (1 to 200 characters). An event whose
            /// `messageId` the organization has already stored is acknowledged but not stored
            /// again, so a client may safely retry a batch after a timeout.
            pub message_id: Option<String>,
            $($(#[$fmeta])* pub $field: $ty,)*
        }
    };
}

tracking_event!(
    /// A page view.
    PageviewEvent, PageviewType = "pageview" {
        /// The page title.
        title: Option<String>,
    }
);

tracking_event!(
    /// A named event of your product. From a `server` batch it needs one of `email`, `userId`,
    /// `fingerprint`, `customerId` (or the batch's `userIdentity`/`customerIdentity`/`visitorId`).
    CustomEvent, CustomType = "custom" {
        /// The event's name (1 to 200 characters); signals match on it.
        event_name: String,
        /// Event properties; each value is a string, a number, a boolean or null.
        properties: Option<BTreeMap<String, Value>>,
        /// Attributes the event to the user with this email.
        email: Option<String>,
        /// Attributes the event to the user with this id.
        user_id: Option<String>,
        /// Attributes the event to the visitor (device) with this id.
        fingerprint: Option<String>,
        /// Attributes the event to the account with this `externalId`.
        customer_id: Option<String>,
    }
);

tracking_event!(
    /// A form submission. Fields that look sensitive (passwords, card numbers, CVC, SSN,
    /// secrets, tokens, PINs, IBANs and similar, by name or by value) are removed before
    /// anything is stored; do not send them.
    FormEvent, FormType = "form" {
        form_id: Option<String>,
        /// The submitted field values by field name.
        form_fields: Option<BTreeMap<String, Value>>,
    }
);

tracking_event!(
    /// Who the visitor is. Finds or creates the user (by `userId`, then `email`), links the
    /// visitor to it, and with `customerId` links the user to that account. A user first seen
    /// with only an email is `discovered`; one with a `userId` has `signed_up`.
    IdentifyEvent, IdentifyType = "identify" {
        /// The user's email (one of `email` and `userId` is required).
        email: Option<String>,
        /// Your id for the user (one of `email` and `userId` is required).
        user_id: Option<String>,
        /// Attributes of the user, merged into what is known (`name` sets the user's name).
        traits: Option<BTreeMap<String, Value>>,
        /// The user's account: the customer with this `externalId` is found or created.
        customer_id: Option<String>,
        /// Attributes of the account: `name` and `domain` fill the customer's name and domain.
        customer_traits: Option<BTreeMap<String, Value>>,
    }
);

tracking_event!(
    /// Active time on a page, added to the session's totals.
    EngagementEvent, EngagementType = "engagement" {
        /// Milliseconds the visitor was active since the previous engagement event (0 or more).
        active_time_ms: f64,
        /// Milliseconds elapsed since the previous engagement event (0 or more).
        total_time_ms: f64,
        /// UUID of the session. After 30 minutes without events the same id starts a new
        /// session.
        session_id: String,
    }
);

/// The scheduling tool that booked a meeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
pub enum CalendarProvider {
    #[oai(rename = "cal.com")]
    CalCom,
    #[oai(rename = "calendly")]
    Calendly,
    #[oai(rename = "unknown")]
    Unknown,
}

tracking_event!(
    /// A meeting booked through a scheduling tool.
    CalendarEvent, CalendarType = "calendar" {
        provider: CalendarProvider,
        /// The kind of meeting booked.
        event_type: Option<String>,
        /// ISO 8601 start time.
        start_time: Option<String>,
        /// ISO 8601 end time.
        end_time: Option<String>,
        /// Length in minutes.
        duration: Option<f64>,
        is_recurring: Option<bool>,
        /// Only from `server` and `integration` batches (webhooks).
        invitee_email: Option<String>,
        /// Only from `server` and `integration` batches (webhooks).
        invitee_name: Option<String>,
    }
);

/// A journey stage set by an event. `discovered` and `signed_up` are inferred from identify
/// events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum StageName {
    /// The user reached the product's activation point.
    Activated,
    /// Accepted for compatibility; normally derived from tracked activity.
    Engaged,
    /// Accepted for compatibility; normally derived from tracked activity.
    Inactive,
}

tracking_event!(
    /// Moves the batch's user to a journey stage.
    StageEvent, StageType = "stage" {
        stage: StageName,
        properties: Option<BTreeMap<String, Value>>,
    }
);

/// A billing status reported for an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum BillingEventStatus {
    /// Sets the account's billing status to `TRIALING`.
    Trialing,
    /// Sets the account's billing status to `PAYING`.
    Paid,
    /// Sets the account's billing status to `CHURNED`.
    Churned,
}

tracking_event!(
    /// A billing status change of an account (not a contact). An account not seen before is
    /// created. One of `customerId` and `stripeCustomerId` is required.
    BillingEvent, BillingType = "billing" {
        status: BillingEventStatus,
        /// Your id for the account (its `externalId`).
        customer_id: Option<String>,
        /// The account's Stripe customer id; used as its `externalId` when that is all there is.
        stripe_customer_id: Option<String>,
        properties: Option<BTreeMap<String, Value>>,
    }
);

/// One tracking event; `type` says which.
#[derive(Debug, Clone, Union)]
pub enum TrackingEvent {
    Pageview(PageviewEvent),
    Custom(CustomEvent),
    Form(FormEvent),
    Identify(IdentifyEvent),
    Engagement(EngagementEvent),
    Calendar(CalendarEvent),
    Stage(StageEvent),
    Billing(BillingEvent),
}

/// A batch of tracking events. Send it as `application/json`, or as `text/plain` (what
/// `navigator.sendBeacon` sends), optionally with `Content-Encoding: gzip`; at most
/// 1,048,576 bytes after decompression.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct IngestRequest {
    /// UUID of the browser or device; required for `client` batches. Events of a visitor that
    /// has been identified are attributed to its user and account.
    pub visitor_id: Option<uuid::Uuid>,
    pub source: Option<EventSource>,
    /// The events, at most 100.
    #[oai(validator(max_items = 100))]
    pub events: Vec<TrackingEvent>,
    pub user_identity: Option<UserIdentity>,
    pub customer_identity: Option<CustomerIdentity>,
    /// Extension: Unix time in milliseconds when the client sent the batch. Event timestamps
    /// are shifted by the difference between the server's receive time and `sentAt`, which
    /// corrects a client clock that is off.
    pub sent_at: Option<f64>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use poem_openapi::{registry::Registry, types::Type};
    use serde::de::{self, Deserialize, Deserializer, Visitor};

    use super::IngestRequest;
    use crate::ingest::model;

    /// The names serde reads for a struct (its fields) or an enum (its variants), taken from
    /// the `deserialize_struct`/`deserialize_enum` call its derived `Deserialize` makes.
    fn serde_names<T: for<'de> Deserialize<'de>>() -> BTreeSet<String> {
        match T::deserialize(NameProbe) {
            Err(Names(names)) => names.iter().map(|n| n.to_string()).collect(),
            Ok(_) => unreachable!("the probe never yields a value"),
        }
    }

    struct NameProbe;

    #[derive(Debug)]
    struct Names(&'static [&'static str]);

    impl std::fmt::Display for Names {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{:?}", self.0)
        }
    }

    impl std::error::Error for Names {}

    impl de::Error for Names {
        fn custom<M: std::fmt::Display>(_msg: M) -> Self {
            Names(&[])
        }
    }

    impl<'de> Deserializer<'de> for NameProbe {
        type Error = Names;

        fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Names> {
            Err(Names(&[]))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Names> {
            Err(Names(fields))
        }

        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _name: &'static str,
            variants: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Names> {
            Err(Names(variants))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map identifier
            ignored_any
        }
    }

    /// The property names (objects) or values (enums) the description gives `name`.
    fn described(registry: &Registry, name: &str) -> BTreeSet<String> {
        let schema = &registry.schemas[name];
        let properties = schema.properties.iter().map(|(p, _)| p.to_string());
        let values = schema
            .enum_items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string));
        // An event's `type` is its tag, read before the event itself.
        properties.chain(values).filter(|p| p != "type").collect()
    }

    #[test]
    fn the_description_names_what_the_parser_reads() {
        let mut registry = Registry::new();
        IngestRequest::register(&mut registry);
        let pairs = [
            ("IngestRequest", serde_names::<model::RawBatch>()),
            ("EventSource", serde_names::<model::EventSource>()),
            ("Utm", serde_names::<model::Utm>()),
            ("UserIdentity", serde_names::<model::UserIdentity>()),
            ("CustomerIdentity", serde_names::<model::CustomerIdentity>()),
            ("PageviewEvent", serde_names::<model::PageviewEvent>()),
            ("CustomEvent", serde_names::<model::CustomEvent>()),
            ("FormEvent", serde_names::<model::FormEvent>()),
            ("IdentifyEvent", serde_names::<model::IdentifyEvent>()),
            ("EngagementEvent", serde_names::<model::EngagementEvent>()),
            ("CalendarProvider", serde_names::<model::CalendarProvider>()),
            ("CalendarEvent", serde_names::<model::CalendarEvent>()),
            ("StageName", serde_names::<model::StageName>()),
            ("StageEvent", serde_names::<model::StageEvent>()),
            (
                "BillingEventStatus",
                serde_names::<model::BillingEventStatus>(),
            ),
            ("BillingEvent", serde_names::<model::BillingEvent>()),
        ];
        for (name, parsed) in pairs {
            assert_eq!(described(&registry, name), parsed, "{name}");
        }
    }
}
