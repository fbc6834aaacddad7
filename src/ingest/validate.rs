//! Turns a request body into an accepted batch: request-level checks first (any failure
//! refuses the whole batch), then each event on its own (a failure drops only that event).

use std::{borrow::Cow, collections::BTreeMap, fmt};

use chrono::{DateTime, TimeZone, Utc};
use serde::de::{self, value::MapDeserializer, DeserializeOwned, DeserializeSeed, Deserializer};
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
    /// The event's id from acceptance on (time-ordered: see `crate::ids::time_ordered_id`).
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

/// An object's members as the request wrote them: names decoded, values left as their JSON
/// text (borrowed from the body). Sorted by name; a repeated name keeps its last value, as a
/// decoded object would. Events are read this way so that each value is decoded once, by the
/// event type's checks, and `data` is written from the members' own text (building every event
/// as a `Value` and writing it out again made validation a third slower).
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Members<'a> {
    fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.0
            .binary_search_by(|(key, _)| key.as_ref().cmp(name))
            .ok()
            .map(|at| self.0[at].1)
    }

    /// The members but `skip`, decoded as the object they make.
    fn to_object(&self, skip: &str) -> Result<Value, Refusal> {
        let mut object = Map::new();
        for (key, value) in self.0.iter().filter(|(key, _)| key != skip) {
            let value = serde_json::from_str(value.get()).map_err(|_| Refusal::Malformed)?;
            object.insert(key.to_string(), value);
        }
        Ok(Value::Object(object))
    }

    /// Reads an object's members, leaving each value as its text.
    fn collect<A: de::MapAccess<'a>>(mut map: A) -> Result<Self, A::Error> {
        let mut members: Vec<(Cow<'a, str>, &'a RawValue)> =
            Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some(key) = map.next_key_seed(MemberName)? {
            members.push((key, map.next_value()?));
        }
        // Stable, so of a repeated name the last comes last.
        members.sort_by(|a, b| a.0.cmp(&b.0));
        let mut unique: Vec<(Cow<'a, str>, &'a RawValue)> = Vec::with_capacity(members.len());
        for member in members {
            match unique.last_mut() {
                Some(last) if last.0 == member.0 => *last = member,
                _ => unique.push(member),
            }
        }
        Ok(Members(unique))
    }

    /// Every value decodes (is not, say, a number out of range).
    fn decode(&self) -> bool {
        self.0
            .iter()
            .all(|(_, value)| serde_json::from_str::<Value>(value.get()).is_ok())
    }
}

/// A request body read in one pass: the batch's own fields decoded (`events` among them as an
/// empty array when it is one, so the batch's checks do not read the events), and the events
/// kept for reading one by one.
struct BodyText<'a> {
    fields: Map<String, Value>,
    events: Vec<EventText<'a>>,
}

/// One element of `events`: an object's members as their text, or whatever else it was.
enum EventText<'a> {
    Object(Members<'a>),
    Other,
}

/// `events` as read: a list, or some other value (kept for the batch's error message).
enum EventsText<'a> {
    List(Vec<EventText<'a>>),
    Other(Value),
}

/// The visits of a JSON scalar, each giving `$other` made of the value.
macro_rules! visit_scalars {
    ($other:expr) => {
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok($other(Value::Bool(v)))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok($other(Value::from(v)))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok($other(Value::from(v)))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok($other(Value::from(v)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok($other(Value::String(v.to_string())))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($other(Value::Null))
        }
    };
}

impl<'de> de::Deserialize<'de> for BodyText<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BodyVisitor;
        impl<'de> de::Visitor<'de> for BodyVisitor {
            type Value = BodyText<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object with `events`")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = Map::new();
                let mut events = Vec::new();
                while let Some(key) = map.next_key_seed(MemberName)? {
                    if key == "events" {
                        // A repeated member keeps its last value, as when decoded whole.
                        let placeholder = match map.next_value_seed(EventsSeed)? {
                            EventsText::List(list) => {
                                events = list;
                                Value::Array(Vec::new())
                            }
                            EventsText::Other(value) => {
                                events = Vec::new();
                                value
                            }
                        };
                        fields.insert(key.into_owned(), placeholder);
                    } else {
                        fields.insert(key.into_owned(), map.next_value()?);
                    }
                }
                Ok(BodyText { fields, events })
            }
        }
        deserializer.deserialize_map(BodyVisitor)
    }
}

struct EventsSeed;

impl<'de> DeserializeSeed<'de> for EventsSeed {
    type Value = EventsText<'de>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct EventsVisitor;
        impl<'de> de::Visitor<'de> for EventsVisitor {
            type Value = EventsText<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of events")
            }
            visit_scalars!(EventsText::Other);
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(128));
                while let Some(event) = seq.next_element_seed(EventSeed)? {
                    list.push(event);
                }
                Ok(EventsText::List(list))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let value = <Value as de::Deserialize>::deserialize(
                    de::value::MapAccessDeserializer::new(map),
                )?;
                Ok(EventsText::Other(value))
            }
        }
        deserializer.deserialize_any(EventsVisitor)
    }
}

struct EventSeed;

impl<'de> DeserializeSeed<'de> for EventSeed {
    type Value = EventText<'de>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct EventVisitor;
        impl<'de> de::Visitor<'de> for EventVisitor {
            type Value = EventText<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an event")
            }
            visit_scalars!(|_: Value| EventText::Other);
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                // Decoded (and dropped) so that JSON that does not decode is found.
                <Value as de::Deserialize>::deserialize(de::value::SeqAccessDeserializer::new(
                    seq,
                ))?;
                Ok(EventText::Other)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                Ok(EventText::Object(Members::collect(map)?))
            }
        }
        deserializer.deserialize_any(EventVisitor)
    }
}

/// A member's name, borrowed from the body unless it had escapes.
struct MemberName;

impl<'de> DeserializeSeed<'de> for MemberName {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct NameVisitor;
        impl<'de> de::Visitor<'de> for NameVisitor {
            type Value = Cow<'de, str>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Cow::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

/// Why an event was not accepted.
enum Refusal {
    Event(String),
    /// Part of the body is not JSON that decodes (a lone surrogate escape, a number out of
    /// range): the whole request is refused, with the parser's message for the whole body.
    Malformed,
}

impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Refusal::Event(message)
    }
}

impl From<&str> for Refusal {
    fn from(message: &str) -> Self {
        Refusal::Event(message.to_string())
    }
}

/// A typed view of an event's members but `type`. Most events fit: they are read straight from
/// the members' text, without the path tracking, which only the error message needs (read
/// again with it, from decoded values, when the fast read fails).
fn parse<T: DeserializeOwned>(members: &Members) -> Result<T, Refusal> {
    let fields = members
        .0
        .iter()
        .filter(|(key, _)| key != "type")
        .map(|(key, value)| (key.as_ref(), *value));
    let fast: Result<T, serde_json::Error> = T::deserialize(MapDeserializer::new(fields));
    match fast {
        Ok(value) => Ok(value),
        Err(_) => {
            let object = members.to_object("type")?;
            parse_from::<T, _>(&object).map_err(|issues| Refusal::Event(first_issue(&issues)))
        }
    }
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

/// How JSON text writes U+0000 (a raw NUL byte is not JSON). PostgreSQL's text and `jsonb`
/// cannot hold the character, so an event carrying one would fail to store there (the request
/// answered 500, which clients retry for ever); it is refused as the client's mistake, on both
/// databases alike.
const NUL_ESCAPE: &[u8] = b"\\u0000";

fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(members) => members
            .iter()
            .any(|(name, value)| name.contains('\0') || holds_nul(value)),
        _ => false,
    }
}

/// The refusal of a member (of the batch or of an event) that holds U+0000, if it does.
fn nul_refusal(name: &str, value: &Value) -> Option<String> {
    if name.contains('\0') {
        Some("a member name must not contain the NUL character (U+0000)".into())
    } else if holds_nul(value) {
        Some(format!(
            "`{name}` must not contain the NUL character (U+0000)"
        ))
    } else {
        None
    }
}

/// A request the endpoint refuses as a whole (400).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRejected(pub String);

/// The refusal of a body that could not be read (`error`, from reading part of it): said as
/// reading the whole body as one JSON value says it, so the message places the fault in the
/// body the client sent.
fn refuse_body(body: &[u8], error: &dyn fmt::Display) -> RequestRejected {
    match serde_json::from_slice::<Value>(body) {
        Err(e) => RequestRejected(format!("malformed JSON: {e}")),
        Ok(value) if !value.is_object() => {
            RequestRejected("the body must be a JSON object with `events`".into())
        }
        Ok(_) => RequestRejected(format!("malformed JSON: {error}")),
    }
}

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
    // UTF-8 checked once for the whole body, not string by string.
    let text = std::str::from_utf8(body).map_err(|e| refuse_body(body, &e))?;
    let BodyText { fields, events } =
        serde_json::from_str(text).map_err(|e| refuse_body(body, &e))?;
    if events.len() > MAX_EVENTS_PER_REQUEST {
        return Err(RequestRejected(format!(
            "too many events: {} sent, at most {MAX_EVENTS_PER_REQUEST} per request",
            events.len()
        )));
    }
    // Looked for only where the escape is: it is rare, and the scan for it is cheap.
    let may_hold_nul = memchr::memmem::find(body, NUL_ESCAPE).is_some();
    if may_hold_nul {
        if let Some(message) = fields
            .iter()
            .find_map(|(name, value)| nul_refusal(name, value))
        {
            return Err(RequestRejected(message));
        }
    }
    let raw: RawBatch = parse_from::<RawBatch, _>(Value::Object(fields))
        .map_err(|issues| RequestRejected(first_issue(&issues)))?;
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
        may_hold_nul,
        batch_attributed: visitor_id.is_some()
            || user_identity.is_some()
            || customer_identity.is_some(),
        received_at,
        skew_ms,
    };
    let mut accepted = Vec::new();
    let mut errors = Vec::new();
    let mut urls = ValidUrls::default();
    for (index, event) in events.iter().enumerate() {
        match validate_event(&ctx, &mut urls, index, event) {
            Ok(event) => accepted.push(event),
            // A refused event's own message stands only if its values decode (an accepted
            // one's were decoded on the way); otherwise the body is refused, as it would be
            // were it decoded whole.
            Err(Refusal::Event(message))
                if matches!(event, EventText::Object(members) if members.decode())
                    || matches!(event, EventText::Other) =>
            {
                errors.push(EventError { index, message })
            }
            Err(_) => return Err(refuse_body(body, &"a value in `events` does not decode")),
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
    /// The body has the escape of U+0000 somewhere (see [`NUL_ESCAPE`]).
    may_hold_nul: bool,
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
    event: &EventText,
) -> Result<AcceptedEvent, Refusal> {
    let EventText::Object(members) = event else {
        return Err("an event must be a JSON object".into());
    };
    if ctx.may_hold_nul {
        for (name, value) in &members.0 {
            if name.contains('\0') || value.get().contains("\\u0000") {
                let decoded: Value =
                    serde_json::from_str(value.get()).map_err(|_| Refusal::Malformed)?;
                if let Some(message) = nul_refusal(name, &decoded) {
                    return Err(message.into());
                }
            }
        }
    }
    let event_type: String = match members.get("type") {
        Some(t) => {
            serde_json::from_str(t.get()).map_err(|_| Refusal::from("`type` must be a string"))?
        }
        None => return Err("`type` is required".into()),
    };
    let is_server = ctx.source != EventSource::Client;
    let (kind, common, event_name, effect): (&'static str, Common, Option<String>, Effect) =
        match event_type.as_str() {
            "pageview" => {
                let e: PageviewEvent = parse(members)?;
                ("pageview", common!(e), None, Effect::None)
            }
            "custom" => {
                let e: CustomEvent = parse(members)?;
                let name = e.event_name.trim().to_string();
                if name.is_empty() {
                    return Err("`eventName` must not be empty".into());
                }
                check_len("eventName", &Some(name.clone()))?;
                for (key, v) in e.properties.iter().flatten() {
                    if v.is_array() || v.is_object() {
                        return Err(format!(
                            "`properties.{key}` must be a string, number, boolean or null"
                        )
                        .into());
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
                let e: FormEvent = parse(members)?;
                ("form", common!(e), None, Effect::None)
            }
            "identify" => {
                let e: IdentifyEvent = parse(members)?;
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
                let e: EngagementEvent = parse(members)?;
                for (field, v) in [
                    ("activeTimeMs", e.active_time_ms),
                    ("totalTimeMs", e.total_time_ms),
                ] {
                    if !v.is_finite() || !(0.0..=1.0e12).contains(&v) {
                        return Err(format!(
                            "`{field}` must be a number of milliseconds, 0 or more"
                        )
                        .into());
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
                let e: CalendarEvent = parse(members)?;
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
                let e: StageEvent = parse(members)?;
                ("stage", common!(e), None, Effect::Stage(e.stage))
            }
            "billing" => {
                let e: BillingEvent = parse(members)?;
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
                )
                .into())
            }
        };
    if !urls.check(&common.url) {
        return Err(format!("`url` must be a full URL, got `{}`", common.url).into());
    }
    if common.path.trim().is_empty() {
        return Err("`path` must not be empty".into());
    }
    let message_id = match common.message_id {
        Some(id) if id.is_empty() || id.chars().count() > MAX_ID_CHARS => {
            return Err(format!("`messageId` must be 1 to {MAX_ID_CHARS} characters long").into())
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
    let data = event_data(members, kind == "form")?;
    Ok(AcceptedEvent {
        id: crate::ids::time_ordered_id(),
        index,
        event_type: kind.to_string(),
        event_name,
        message_id,
        url: common.url,
        path: common.path,
        occurred_at,
        data,
        effect,
    })
}

/// An event's `data`: its members but the columns' ([`COLUMN_FIELDS`]), in name order, each
/// value as the request wrote it (it was decoded once on the way, so it is known to be valid);
/// a form's sensitive fields removed.
fn event_data(members: &Members, form: bool) -> Result<Box<RawValue>, Refusal> {
    let form_fields = match members.get("formFields") {
        Some(fields) if form => {
            let mut fields: Value =
                serde_json::from_str(fields.get()).map_err(|_| Refusal::Malformed)?;
            sensitive::strip(&mut fields);
            Some(fields)
        }
        _ => None,
    };
    serde_json::value::to_raw_value(&EventData {
        members,
        form_fields,
    })
    .map_err(|e| Refusal::Event(format!("the event's fields cannot be stored: {e}")))
}

/// Writes an event's `data` (see [`event_data`]): the members' own text goes out as it came.
struct EventData<'m, 'a> {
    members: &'m Members<'a>,
    /// A form's fields with the sensitive ones removed, written in place of the member.
    form_fields: Option<Value>,
}

impl serde::Serialize for EventData<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in &self.members.0 {
            match (key.as_ref(), &self.form_fields) {
                (key, _) if COLUMN_FIELDS.contains(&key) => {}
                ("formFields", Some(fields)) => map.serialize_entry(key, fields)?,
                (key, _) => map.serialize_entry(key, value)?,
            }
        }
        map.end()
    }
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

    fn data_of(event: &str) -> Result<String, String> {
        let body = format!(r#"{{"visitorId":"{VISITOR}","source":"server","events":[{event}]}}"#);
        match validate_batch("org", body.as_bytes(), Utc::now()) {
            Ok((batch, errors)) => match (batch.events.first(), errors.first()) {
                (Some(e), _) => Ok(e.data.get().to_string()),
                (None, Some(e)) => Err(e.message.clone()),
                (None, None) => Err("nothing".into()),
            },
            Err(RequestRejected(message)) => Err(format!("request: {message}")),
        }
    }

    #[test]
    fn data_is_the_members_but_the_columns_in_name_order_as_written() {
        let data = data_of(
            r#"{"url":"https://a.example.com","type":"custom","path":"/","timestamp":5,
                "messageId":"m1","properties":{ "z": 1e3, "a": "\u00e9" },"eventName":"x",
                "eventName":"used","customerId":"acct_1"}"#,
        )
        .expect("accepted");
        // A repeated name keeps its last value; nested values keep the client's own text.
        assert_eq!(
            data,
            r#"{"customerId":"acct_1","eventName":"used","properties":{ "z": 1e3, "a": "\u00e9" }}"#
        );
        let value: Value = serde_json::from_str(&data).expect("valid JSON");
        assert_eq!(value["properties"]["a"], "é");
        // An escaped name is written escaped again.
        let data = data_of(
            r#"{"type":"pageview","url":"https://a.example.com","path":"/","titl\u0065":"T"}"#,
        )
        .expect("accepted");
        assert_eq!(data, r#"{"title":"T"}"#);
    }

    #[test]
    fn a_forms_sensitive_fields_are_not_kept() {
        let data = data_of(
            r#"{"type":"form","url":"https://a.example.com","path":"/","formId":"f",
                "formFields":{"company":"Acme","password":"hunter2"}}"#,
        )
        .expect("accepted");
        assert!(data.contains("Acme") && !data.contains("hunter2"), "{data}");
    }

    #[test]
    fn json_that_does_not_decode_refuses_the_body_wherever_it_is() {
        // A lone surrogate escape and a number out of range parse as JSON text but do not
        // decode: as before events were read from their text, the whole body is refused.
        for bad in [r#""\ud800""#, "1e400"] {
            for event in [
                format!(
                    r#"{{"type":"custom","eventName":"x","url":"https://a.example.com","path":"/","properties":{{"p":{bad}}}}}"#
                ),
                format!(r#"{{"type":"nonsense","x":{bad}}}"#),
                format!(r#"{{"type":"pageview","colour":{bad}}}"#),
            ] {
                let refused = data_of(&event).expect_err("refused");
                assert!(
                    refused.starts_with("request: malformed JSON: "),
                    "{refused}"
                );
            }
        }
        // Where it decodes, an event's own fault stays its own.
        assert_eq!(
            data_of(r#"{"type":"pageview","url":"https://a.example.com","path":"/","colour":1}"#),
            Err("unknown property `colour`".to_string())
        );
        assert_eq!(
            data_of(r#"[1]"#),
            Err("an event must be a JSON object".to_string())
        );
        assert_eq!(
            data_of(r#"{"type":3}"#),
            Err("`type` must be a string".to_string())
        );
    }
}
