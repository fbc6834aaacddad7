//! The records tools answer with (DESIGN.md "Records"): every listed field always present,
//! nullable ones as `null`, times as RFC 3339 `Z` with milliseconds.

use entity::{billing_change, customer, event, fact, source, user, workspace_user};
use serde_json::{json, Value};

use super::common::{ts, ts_opt};

pub const CUSTOMER_FIELDS: &[&str] = &[
    "id",
    "name",
    "domain",
    "externalId",
    "billingStatus",
    "mrrCents",
    "lastActivityAt",
    "traits",
    "createdAt",
];
pub const CUSTOMER_IDS: &[&str] = &["id"];

pub fn customer(c: &customer::Model) -> Value {
    with_traits(
        &c.traits,
        json!({
            "id": c.id,
            "name": c.name,
            "domain": c.domain,
            "externalId": c.external_id,
            "billingStatus": c.billing_status.as_str(),
            "mrrCents": c.mrr_cents,
            "lastActivityAt": ts_opt(&c.last_activity_at),
            "createdAt": ts(&c.created_at),
        }),
    )
}

pub const USER_FIELDS: &[&str] = &[
    "id",
    "customerId",
    "email",
    "externalId",
    "name",
    "stage",
    "traits",
    "lastActivityAt",
    "createdAt",
];
pub const USER_IDS: &[&str] = &["id"];

pub fn user(u: &user::Model) -> Value {
    with_traits(
        &u.traits,
        json!({
            "id": u.id,
            "customerId": u.customer_id,
            "email": u.email,
            "externalId": u.external_id,
            "name": u.name,
            "stage": u.stage,
            "lastActivityAt": ts_opt(&u.last_activity_at),
            "createdAt": ts(&u.created_at),
        }),
    )
}

/// `record` with its `traits`, copied as a tree (`json!` would write them out and read them
/// back, key by key).
fn with_traits(traits: &Value, mut record: Value) -> Value {
    if let Value::Object(fields) = &mut record {
        fields.insert("traits".into(), traits.clone());
    }
    record
}

pub const WORKSPACE_USER_FIELDS: &[&str] = &["id", "name", "email", "role"];
pub const WORKSPACE_USER_IDS: &[&str] = &["id"];

pub fn workspace_user(w: &workspace_user::Model) -> Value {
    json!({ "id": w.id, "name": w.name, "email": w.email, "role": w.role })
}

pub const FACT_FIELDS: &[&str] = &[
    "id",
    "customerId",
    "text",
    "status",
    "sourceType",
    "sourceId",
    "sourceOccurredAt",
    "sourceQuote",
    "permalink",
    "createdAt",
];
pub const FACT_IDS: &[&str] = &["id"];

pub fn fact(f: &fact::Model) -> Value {
    json!({
        "id": f.id,
        "customerId": f.customer_id,
        "text": f.text,
        "status": f.status.as_str(),
        "sourceType": f.source_type,
        "sourceId": f.source_id,
        "sourceOccurredAt": ts(&f.source_occurred_at),
        "sourceQuote": f.source_quote,
        "permalink": f.permalink,
        "createdAt": ts(&f.created_at),
    })
}

/// Characters of a source list item's `snippet`.
pub const SNIPPET_CHARS: usize = 280;

pub const SOURCE_ITEM_FIELDS: &[&str] = &[
    "sourceType",
    "sourceId",
    "customerId",
    "title",
    "snippet",
    "occurredAt",
    "permalink",
    "participants",
];
pub const SOURCE_IDS: &[&str] = &["sourceType", "sourceId"];

fn participants(s: &source::Model) -> Value {
    match &s.participants {
        Value::Array(items) => Value::Array(items.clone()),
        _ => json!([]),
    }
}

/// A whole source, with its `body`.
pub fn source(s: &source::Model) -> Value {
    json!({
        "sourceType": s.source_type,
        "sourceId": s.source_id,
        "customerId": s.customer_id,
        "title": s.title,
        "body": s.body,
        "occurredAt": ts(&s.occurred_at),
        "permalink": s.permalink,
        "participants": participants(s),
    })
}

/// A source in a list: `snippet` (at most 280 characters) in place of `body`.
pub fn source_item(s: &source::Model) -> Value {
    json!({
        "sourceType": s.source_type,
        "sourceId": s.source_id,
        "customerId": s.customer_id,
        "title": s.title,
        "snippet": snippet(&s.body),
        "occurredAt": ts(&s.occurred_at),
        "permalink": s.permalink,
        "participants": participants(s),
    })
}

/// The start of a body, cut at a word boundary when one is near, with `…` when cut.
pub fn snippet(body: &str) -> String {
    let flat: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= SNIPPET_CHARS {
        return flat;
    }
    let cut: String = flat.chars().take(SNIPPET_CHARS - 1).collect();
    let cut = match cut.rfind(' ') {
        Some(i) if i > SNIPPET_CHARS / 2 => cut[..i].to_string(),
        _ => cut,
    };
    format!("{cut}…")
}

/// Timeline channels.
pub const CHANNELS: [&str; 4] = ["product", "billing", "support", "conversation"];

/// The channel a source type belongs to.
pub fn source_channel(source_type: &str) -> &'static str {
    match source_type {
        "SUPPORT_TICKET" => "support",
        "OPPORTUNITY" => "billing",
        _ => "conversation",
    }
}

pub fn timeline_event(e: &event::Model) -> Value {
    let title = match e.event_type.as_str() {
        "pageview" => e
            .data
            .get("title")
            .and_then(Value::as_str)
            .map(|t| format!("Viewed {t}"))
            .unwrap_or_else(|| format!("Viewed {}", e.path)),
        "custom" => e
            .event_name
            .clone()
            .unwrap_or_else(|| "custom event".into()),
        "identify" => "Identified".to_string(),
        "form" => format!("Submitted a form on {}", e.path),
        "stage" => match e.data.get("stage").and_then(Value::as_str) {
            Some(stage) => format!("Stage {stage}"),
            None => "Stage change".to_string(),
        },
        other => e.event_name.clone().unwrap_or_else(|| other.to_string()),
    };
    json!({
        "at": ts(&e.occurred_at),
        "channel": "product",
        "kind": e.event_type,
        "title": title,
        "ref": { "type": "event", "id": e.id },
    })
}

pub fn timeline_billing(b: &billing_change::Model) -> Value {
    json!({
        "at": ts(&b.at),
        "channel": "billing",
        "kind": "billing_change",
        "title": format!("Billing status {}, MRR {}", b.billing_status, dollars(b.mrr_cents)),
        "ref": { "type": "billing_change", "id": b.id },
    })
}

pub fn timeline_source(s: &source::Model) -> Value {
    json!({
        "at": ts(&s.occurred_at),
        "channel": source_channel(&s.source_type),
        "kind": s.source_type.to_lowercase(),
        "title": s.title,
        "ref": { "type": s.source_type, "id": s.source_id },
    })
}

/// `$1,234.50` from cents.
pub fn dollars(cents: i64) -> String {
    let whole = (cents / 100).abs();
    let digits = whole.to_string();
    let mut grouped = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}${grouped}.{:02}", (cents % 100).abs())
}
