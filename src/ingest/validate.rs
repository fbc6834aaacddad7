//! Turns a request body into an accepted batch: request-level checks first (any failure
//! refuses the whole batch), then each event on its own (a failure drops only that event).

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};
use serde::de::DeserializeOwned;
use serde_json::{value::RawValue, Map, Value};

use super::{
    model::{
        BillingEvent, BillingEventStatus, CalendarEvent, CustomEvent, CustomerIdentity,
        EngagementEvent, EventSource, FormEvent, IdentifyEvent, PageviewEvent, RawBatch,
        StageEvent, StageName, UserIdentity,
    },
    sensitive,
};
use crate::validation::{parse_from, PathSegment, ValidationIssue};

/// Most events one request may carry.
pub const MAX_EVENTS_PER_REQUEST: usize = 100;
/// Longest `messageId`, `eventName` and identifier accepted.
const MAX_ID_CHARS: usize = 200;

/// What an event does to the customer model beyond being stored.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Effect {
    None,
    /// A custom event's own attribution fields.
    Attribute {
        email: Option<String>,
        user_id: Option<String>,
        fingerprint: Option<String>,
        customer_id: Option<String>,
    },
    Identify {
        email: Option<String>,
        user_id: Option<String>,
        traits: Map<String, Value>,
        customer_id: Option<String>,
        customer_traits: Map<String, Value>,
    },
    Engagement {
        session_id: String,
        active_time_ms: i64,
        total_time_ms: i64,
    },
    Stage(StageName),
    Billing {
        status: BillingEventStatus,
        customer_id: Option<String>,
        stripe_customer_id: Option<String>,
    },
}

/// An event that passed validation, ready to store. Serialized (JSON) into the ingest journal
/// between the acknowledgement and its effects; the `events` view reads pending ones from there
/// by these field names.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AcceptedEvent {
    /// The event's id from acceptance on (time-ordered: see `store::time_ordered_id`).
    pub id: String,
    /// Position in the request's `events`.
    pub index: usize,
    pub event_type: String,
    pub event_name: Option<String>,
    pub message_id: Option<String>,
    pub url: String,
    pub path: String,
    pub occurred_at: DateTime<Utc>,
    /// The type-specific fields, sensitive form fields removed, as the JSON text they are
    /// stored as: the applier moves this text into the event's row instead of rebuilding a
    /// value from the journal and writing it out again.
    pub data: Box<RawValue>,
    pub effect: Effect,
}

/// A user named by the batch or an event.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct UserRef {
    pub email: Option<String>,
    pub user_id: Option<String>,
    pub traits: Map<String, Value>,
}

/// An account named by the batch or an event.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct CustomerRef {
    pub external_id: String,
    pub traits: Map<String, Value>,
}

/// A validated batch of one organization.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Batch {
    pub organization_id: String,
    pub source: EventSource,
    pub visitor_id: Option<String>,
    pub user_identity: Option<UserRef>,
    pub customer_identity: Option<CustomerRef>,
    pub received_at: DateTime<Utc>,
    pub events: Vec<AcceptedEvent>,
}

/// An event that was refused, by position.
#[derive(Debug, Clone, PartialEq)]
pub struct EventError {
    pub index: usize,
    pub message: String,
}

fn describe(issue: &ValidationIssue) -> String {
    let path: Vec<String> = issue
        .path
        .iter()
        .map(|s| match s {
            PathSegment::Key(k) => k.clone(),
            PathSegment::Index(i) => i.to_string(),
        })
        .collect();
    if path.is_empty()
        || issue.message.starts_with('`')
        || issue.message.starts_with("unknown property")
    {
        issue.message.clone()
    } else {
        format!("`{}`: {}", path.join("."), issue.message)
    }
}

/// A typed view of a value. Most values fit: they are read without the path tracking, which
/// only the error message needs (read again with it when the fast read fails).
fn parse<T: DeserializeOwned>(value: &Value) -> Result<T, String> {
    T::deserialize(value)
        .or_else(|_| parse_from::<T, _>(value).map_err(|issues| first_issue(&issues)))
}

fn first_issue(issues: &[ValidationIssue]) -> String {
    issues
        .first()
        .map(describe)
        .unwrap_or_else(|| "invalid".to_string())
}

/// Trims an identifier; an empty one is absent.
fn clean(value: Option<String>) -> Option<String> {
    value
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn check_len(field: &str, value: &Option<String>) -> Result<(), String> {
    match value {
        Some(v) if v.chars().count() > MAX_ID_CHARS => Err(format!(
            "`{field}` must be at most {MAX_ID_CHARS} characters long"
        )),
        _ => Ok(()),
    }
}

/// Lower-cases an email and checks it has the form `local@domain`.
fn clean_email(field: &str, value: Option<String>) -> Result<Option<String>, String> {
    let Some(email) = clean(value) else {
        return Ok(None);
    };
    let valid = email
        .split_once('@')
        .is_some_and(|(local, domain)| !local.is_empty() && domain.contains('.'))
        && !email.contains(char::is_whitespace)
        && email.len() <= 320;
    if valid {
        Ok(Some(email.to_lowercase()))
    } else {
        Err(format!("`{field}` is not an email address"))
    }
}

fn to_map(value: Option<BTreeMap<String, Value>>) -> Map<String, Value> {
    value.unwrap_or_default().into_iter().collect()
}

fn user_ref(identity: UserIdentity) -> Result<UserRef, String> {
    let email = clean_email("userIdentity.email", identity.email)?;
    let user_id = clean(identity.user_id);
    check_len("userIdentity.userId", &user_id)?;
    if email.is_none() && user_id.is_none() {
        return Err("`userIdentity` needs `email` or `userId`".into());
    }
    Ok(UserRef {
        email,
        user_id,
        traits: to_map(identity.traits),
    })
}

fn customer_ref(identity: CustomerIdentity) -> Result<CustomerRef, String> {
    let Some(external_id) = clean(Some(identity.customer_id)) else {
        return Err("`customerIdentity.customerId` must not be empty".into());
    };
    check_len("customerIdentity.customerId", &Some(external_id.clone()))?;
    Ok(CustomerRef {
        external_id,
        traits: to_map(identity.customer_traits),
    })
}

/// A request the endpoint refuses as a whole (400).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRejected(pub String);

/// Parses and validates a body. Returns the accepted batch and the refused events, or the
/// reason the whole request is refused.
pub fn validate_batch(
    organization_id: &str,
    body: &[u8],
    received_at: DateTime<Utc>,
) -> Result<(Batch, Vec<EventError>), RequestRejected> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(RequestRejected("a JSON request body is required".into()));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| RequestRejected(format!("malformed JSON: {e}")))?;
    if !value.is_object() {
        return Err(RequestRejected(
            "the body must be a JSON object with `events`".into(),
        ));
    }
    // Count before parsing the events one by one, so an oversized batch costs little.
    if let Some(events) = value.get("events").and_then(Value::as_array) {
        if events.len() > MAX_EVENTS_PER_REQUEST {
            return Err(RequestRejected(format!(
                "too many events: {} sent, at most {MAX_EVENTS_PER_REQUEST} per request",
                events.len()
            )));
        }
    }
    // The events array is taken out before the batch's own fields are parsed, with an empty
    // one standing in: read through the path tracking, every value in it would be rebuilt (a
    // third of the validation's time). An `events` that is not an array stays, for the error.
    let mut value = value;
    let events = match value.get_mut("events") {
        Some(Value::Array(events)) => std::mem::take(events),
        _ => Vec::new(),
    };
    let mut raw: RawBatch =
        parse_from::<RawBatch, _>(value).map_err(|issues| RequestRejected(first_issue(&issues)))?;
    raw.events = events;
    let source = raw.source.unwrap_or(EventSource::Client);
    let visitor_id = match clean(raw.visitor_id) {
        Some(v) => match uuid::Uuid::parse_str(&v) {
            Ok(id) => Some(id.hyphenated().to_string()),
            Err(_) => {
                return Err(RequestRejected(format!(
                    "`visitorId` must be a UUID, got `{v}`"
                )))
            }
        },
        None if source == EventSource::Client => {
            return Err(RequestRejected(
                "`visitorId` (a UUID) is required for `client` batches".into(),
            ))
        }
        None => None,
    };
    let user_identity = raw
        .user_identity
        .map(user_ref)
        .transpose()
        .map_err(RequestRejected)?;
    let customer_identity = raw
        .customer_identity
        .map(customer_ref)
        .transpose()
        .map_err(RequestRejected)?;
    // Clock-skew correction: how far the client's clock is behind the server's.
    let skew_ms = match raw.sent_at {
        Some(sent) if sent.is_finite() && sent >= 0.0 => {
            received_at.timestamp_millis() - sent as i64
        }
        Some(_) => {
            return Err(RequestRejected(
                "`sentAt` must be Unix time in milliseconds".into(),
            ))
        }
        None => 0,
    };
    let ctx = EventContext {
        source,
        batch_attributed: visitor_id.is_some()
            || user_identity.is_some()
            || customer_identity.is_some(),
        received_at,
        skew_ms,
    };
    let mut accepted = Vec::new();
    let mut errors = Vec::new();
    let mut urls = ValidUrls::default();
    for (index, event) in raw.events.into_iter().enumerate() {
        match validate_event(&ctx, &mut urls, index, event) {
            Ok(event) => accepted.push(event),
            Err(message) => errors.push(EventError { index, message }),
        }
    }
    Ok((
        Batch {
            organization_id: organization_id.to_string(),
            source,
            visitor_id,
            user_identity,
            customer_identity,
            received_at,
            events: accepted,
        },
        errors,
    ))
}

struct EventContext {
    source: EventSource,
    /// The batch names a visitor, user or account every event can be attributed to.
    batch_attributed: bool,
    received_at: DateTime<Utc>,
    skew_ms: i64,
}

/// The fields every event type shares, read from whichever type's object was parsed.
struct Common {
    timestamp: Option<f64>,
    url: String,
    path: String,
    message_id: Option<String>,
}

macro_rules! common {
    ($e:expr) => {
        Common {
            timestamp: $e.timestamp,
            url: $e.url.clone(),
            path: $e.path.clone(),
            message_id: $e.message_id.clone(),
        }
    };
}

/// Fields that are columns of the stored event rather than part of its `data`.
const COLUMN_FIELDS: [&str; 5] = ["type", "timestamp", "url", "path", "messageId"];

/// The URLs a batch's events named that parsed: a batch's events mostly share a few pages, and
/// parsing a URL cost as much as the rest of an event's checks.
#[derive(Default)]
struct ValidUrls(std::collections::HashSet<String>);

impl ValidUrls {
    fn check(&mut self, url: &str) -> bool {
        let url = url.trim();
        if self.0.contains(url) {
            return true;
        }
        let valid = !url.is_empty() && url::Url::parse(url).is_ok();
        if valid {
            self.0.insert(url.to_string());
        }
        valid
    }
}

fn validate_event(
    ctx: &EventContext,
    urls: &mut ValidUrls,
    index: usize,
    value: Value,
) -> Result<AcceptedEvent, String> {
    let Value::Object(mut map) = value else {
        return Err("an event must be a JSON object".into());
    };
    let event_type = match map.remove("type") {
        Some(Value::String(t)) => t,
        Some(_) => return Err("`type` must be a string".into()),
        None => return Err("`type` is required".into()),
    };
    // The typed view borrows the event; what is left of the map becomes its `data`.
    let object = Value::Object(map);
    let is_server = ctx.source != EventSource::Client;
    let (kind, common, event_name, effect): (&'static str, Common, Option<String>, Effect) =
        match event_type.as_str() {
            "pageview" => {
                let e: PageviewEvent = parse(&object)?;
                ("pageview", common!(e), None, Effect::None)
            }
            "custom" => {
                let e: CustomEvent = parse(&object)?;
                let name = e.event_name.trim().to_string();
                if name.is_empty() {
                    return Err("`eventName` must not be empty".into());
                }
                check_len("eventName", &Some(name.clone()))?;
                for (key, v) in e.properties.iter().flatten() {
                    if v.is_array() || v.is_object() {
                        return Err(format!(
                            "`properties.{key}` must be a string, number, boolean or null"
                        ));
                    }
                }
                let email = clean_email("email", e.email.clone())?;
                let user_id = clean(e.user_id.clone());
                let fingerprint = clean(e.fingerprint.clone());
                let customer_id = clean(e.customer_id.clone());
                for (field, v) in [
                    ("userId", &user_id),
                    ("fingerprint", &fingerprint),
                    ("customerId", &customer_id),
                ] {
                    check_len(field, v)?;
                }
                let own = email.is_some()
                    || user_id.is_some()
                    || fingerprint.is_some()
                    || customer_id.is_some();
                if is_server && !own && !ctx.batch_attributed {
                    return Err("a server `custom` event needs one of `email`, `userId`, \
                                `fingerprint`, `customerId`"
                        .into());
                }
                let effect = if own {
                    Effect::Attribute {
                        email,
                        user_id,
                        fingerprint,
                        customer_id,
                    }
                } else {
                    Effect::None
                };
                ("custom", common!(e), Some(name), effect)
            }
            "form" => {
                let e: FormEvent = parse(&object)?;
                ("form", common!(e), None, Effect::None)
            }
            "identify" => {
                let e: IdentifyEvent = parse(&object)?;
                let email = clean_email("email", e.email.clone())?;
                let user_id = clean(e.user_id.clone());
                let customer_id = clean(e.customer_id.clone());
                check_len("userId", &user_id)?;
                check_len("customerId", &customer_id)?;
                if email.is_none() && user_id.is_none() {
                    return Err("an `identify` event needs `email` or `userId`".into());
                }
                let effect = Effect::Identify {
                    email,
                    user_id,
                    traits: to_map(e.traits.clone()),
                    customer_id,
                    customer_traits: to_map(e.customer_traits.clone()),
                };
                ("identify", common!(e), None, effect)
            }
            "engagement" => {
                let e: EngagementEvent = parse(&object)?;
                for (field, v) in [
                    ("activeTimeMs", e.active_time_ms),
                    ("totalTimeMs", e.total_time_ms),
                ] {
                    if !v.is_finite() || v < 0.0 || v > 1.0e12 {
                        return Err(format!(
                            "`{field}` must be a number of milliseconds, 0 or more"
                        ));
                    }
                }
                let session_id = uuid::Uuid::parse_str(e.session_id.trim())
                    .map_err(|_| "`sessionId` must be a UUID".to_string())?
                    .hyphenated()
                    .to_string();
                let effect = Effect::Engagement {
                    session_id,
                    active_time_ms: e.active_time_ms.round() as i64,
                    total_time_ms: e.total_time_ms.round() as i64,
                };
                ("engagement", common!(e), None, effect)
            }
            "calendar" => {
                let e: CalendarEvent = parse(&object)?;
                for (field, v) in [("startTime", &e.start_time), ("endTime", &e.end_time)] {
                    if let Some(t) = v {
                        DateTime::parse_from_rfc3339(t).map_err(|_| {
                            format!("`{field}` must be an ISO 8601 date-time, got `{t}`")
                        })?;
                    }
                }
                if e.duration.is_some_and(|d| !d.is_finite() || d < 0.0) {
                    return Err("`duration` must be a number of minutes, 0 or more".into());
                }
                if !is_server && (e.invitee_email.is_some() || e.invitee_name.is_some()) {
                    return Err("`inviteeEmail` and `inviteeName` are accepted only from \
                                `server` and `integration` batches"
                        .into());
                }
                ("calendar", common!(e), None, Effect::None)
            }
            "stage" => {
                let e: StageEvent = parse(&object)?;
                ("stage", common!(e), None, Effect::Stage(e.stage))
            }
            "billing" => {
                let e: BillingEvent = parse(&object)?;
                let customer_id = clean(e.customer_id.clone());
                let stripe_customer_id = clean(e.stripe_customer_id.clone());
                check_len("customerId", &customer_id)?;
                check_len("stripeCustomerId", &stripe_customer_id)?;
                if customer_id.is_none() && stripe_customer_id.is_none() {
                    return Err("a `billing` event needs `customerId` or `stripeCustomerId`".into());
                }
                let effect = Effect::Billing {
                    status: e.status,
                    customer_id,
                    stripe_customer_id,
                };
                ("billing", common!(e), None, effect)
            }
            other => {
                return Err(format!(
                    "unknown event type `{other}`: expected one of pageview, custom, form, \
                     identify, engagement, calendar, stage, billing"
                ))
            }
        };
    if !urls.check(&common.url) {
        return Err(format!("`url` must be a full URL, got `{}`", common.url));
    }
    if common.path.trim().is_empty() {
        return Err("`path` must not be empty".into());
    }
    let message_id = match common.message_id {
        Some(id) if id.is_empty() || id.chars().count() > MAX_ID_CHARS => {
            return Err(format!(
                "`messageId` must be 1 to {MAX_ID_CHARS} characters long"
            ))
        }
        other => other,
    };
    let occurred_at = match common.timestamp {
        None => ctx.received_at,
        Some(ms) => {
            if !ms.is_finite() || ms < 0.0 {
                return Err("`timestamp` must be Unix time in milliseconds".into());
            }
            let corrected = (ms as i64).saturating_add(ctx.skew_ms);
            Utc.timestamp_millis_opt(corrected)
                .single()
                .ok_or_else(|| "`timestamp` is out of range".to_string())?
        }
    };
    let Value::Object(mut data) = object else {
        return Err("an event must be a JSON object".into());
    };
    for field in COLUMN_FIELDS {
        data.remove(field);
    }
    if kind == "form" {
        if let Some(fields) = data.get_mut("formFields") {
            sensitive::strip(fields);
        }
    }
    Ok(AcceptedEvent {
        id: super::store::time_ordered_id(),
        index,
        event_type: kind.to_string(),
        event_name,
        message_id,
        url: common.url,
        path: common.path,
        occurred_at,
        data: serde_json::value::to_raw_value(&data)
            .map_err(|e| format!("the event's fields cannot be stored: {e}"))?,
        effect,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const VISITOR: &str = "00000000-0000-4000-8000-000000000001";

    fn validate(body: Value) -> Result<(Batch, Vec<EventError>), RequestRejected> {
        validate_batch("org", body.to_string().as_bytes(), Utc::now())
    }

    fn refused(body: Value) -> String {
        match validate(body) {
            Err(RequestRejected(message)) => message,
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn the_batch_fields_are_checked_with_the_events_set_aside() {
        assert_eq!(
            refused(json!({"visitorId": VISITOR})),
            "`events` is required"
        );
        assert!(
            refused(json!({"visitorId": VISITOR, "events": {"type": "pageview"}}))
                .starts_with("`events`: "),
            "{}",
            refused(json!({"visitorId": VISITOR, "events": 3}))
        );
        assert_eq!(
            refused(json!({"visitorId": VISITOR, "events": [], "colour": "red"})),
            "unknown property `colour`"
        );
        assert_eq!(
            refused(json!({"visitorId": 7, "events": []})),
            "`visitorId`: invalid type: integer `7`, expected a string"
        );
        // The events themselves are still all there, in order.
        let page = |path: &str| json!({"type": "pageview", "url": "https://app.example.com", "path": path});
        let (batch, errors) =
            validate(json!({"visitorId": VISITOR, "events": [page("/a"), page("/b")]}))
                .expect("valid");
        assert!(errors.is_empty());
        let paths: Vec<&str> = batch.events.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["/a", "/b"]);
    }

    #[test]
    fn each_event_url_is_checked_whether_or_not_an_earlier_event_named_it() {
        let at = |url: &str| json!({"type": "pageview", "url": url, "path": "/"});
        let (batch, errors) = validate(json!({"visitorId": VISITOR, "events": [
            at("https://app.example.com/x"),
            at("not a url"),
            at(" https://app.example.com/x "),
            at("not a url"),
            at(""),
        ]}))
        .expect("valid batch");
        assert_eq!(batch.events.len(), 2);
        let failed: Vec<(usize, &str)> = errors
            .iter()
            .map(|e| (e.index, e.message.as_str()))
            .collect();
        assert_eq!(
            failed,
            [
                (1, "`url` must be a full URL, got `not a url`"),
                (3, "`url` must be a full URL, got `not a url`"),
                (4, "`url` must be a full URL, got ``"),
            ]
        );
    }

    #[test]
    fn an_event_that_does_not_fit_its_type_names_the_field() {
        let (_, errors) = validate(json!({"visitorId": VISITOR, "events": [
            {"type": "engagement", "url": "https://a.example.com", "path": "/",
             "totalTimeMs": 2, "sessionId": VISITOR},
            {"type": "pageview", "url": "https://a.example.com", "path": "/", "timestamp": "x"},
        ]}))
        .expect("valid batch");
        let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "`activeTimeMs` is required",
                "`timestamp`: invalid type: string \"x\", expected f64"
            ]
        );
    }
}
