//! Deliveries to destinations ([`Outbox`]): a recorded delivery per destination, up to four
//! attempts now (0.5 s, 1 s, 2 s apart) on 5xx, 429, time-outs and connection failures; what
//! still fails is left `retrying` for the background worker.

use std::{sync::OnceLock, time::Duration};

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, EntityTrait, Set};
use serde::Serialize;
use serde_json::{json, Value};

use super::signing;
use crate::{crypto::SecretBox, timestamp};
pub use entity::notification_delivery::DeliveryStatus;
use entity::{
    destination::{self, DestinationKind},
    notification_delivery,
};

/// Pauses between the attempts made during the call.
pub const INLINE_BACKOFF: [Duration; 3] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
];

/// What is sent.
#[derive(Debug, Clone)]
pub struct Notification {
    pub title: String,
    pub message: String,
    pub severity: String,
    pub source: Option<String>,
    pub subject: Option<String>,
    pub payload: Value,
    pub markdown: Option<String>,
    pub sent_at: DateTime<Utc>,
}

impl Notification {
    /// The webhook body (also what is stored for later retries).
    pub fn webhook_body(&self) -> Value {
        json!({
            "type": "notification",
            "title": self.title,
            "message": self.message,
            "severity": self.severity,
            "source": self.source,
            "subject": self.subject,
            "payload": self.payload,
            "markdown": self.markdown,
            "sentAt": timestamp::format(&self.sent_at),
        })
    }
}

/// A Slack incoming-webhook message built from a stored webhook body: the markdown when given,
/// else the title and message.
pub fn slack_body(body: &Value) -> Value {
    let text_of = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("");
    let marker = match text_of("severity") {
        "critical" => ":rotating_light: ",
        "warning" => ":warning: ",
        _ => "",
    };
    let text = match body.get("markdown").and_then(Value::as_str) {
        Some(md) if !md.trim().is_empty() => format!("{marker}*{}*\n{md}", text_of("title")),
        _ => format!("{marker}*{}*\n{}", text_of("title"), text_of("message")),
    };
    json!({ "text": text, "mrkdwn": true })
}

/// The outcome for one destination, as the tool reports it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    pub destination_id: String,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub http_status: Option<u16>,
    pub error: Option<String>,
}

/// Result of one HTTP attempt.
#[derive(Debug)]
pub enum Attempt {
    Delivered(u16),
    /// Worth trying again: 5xx, 429, time-out, connection failure.
    Retryable {
        http: Option<u16>,
        error: String,
    },
    /// Will not succeed by retrying: other 4xx, or a destination that cannot be sent to.
    Permanent {
        http: Option<u16>,
        error: String,
    },
}

impl Attempt {
    /// The delivery's status, HTTP status and error after this attempt.
    pub fn outcome(self) -> (DeliveryStatus, Option<u16>, Option<String>) {
        match self {
            Attempt::Delivered(code) => (DeliveryStatus::Delivered, Some(code), None),
            Attempt::Retryable { http, error } => (DeliveryStatus::Retrying, http, Some(error)),
            Attempt::Permanent { http, error } => (DeliveryStatus::Failed, http, Some(error)),
        }
    }
}

fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        let secs = std::env::var("CUSTINTEL_DELIVERY_TIMEOUT_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10);
        reqwest::Client::builder()
            .timeout(Duration::from_secs(secs))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent("custintel-webhooks/1")
            .build()
            .unwrap_or_default()
    })
}

/// Sends `body` (a stored webhook body) to `dest` once.
pub async fn attempt_once(
    secrets: &SecretBox,
    dest: &destination::Model,
    message_id: &str,
    body: &Value,
) -> Attempt {
    let sealed = match &dest.secret_ciphertext {
        Some(s) => s,
        None => {
            return Attempt::Permanent {
                http: None,
                error: "the destination has no stored secret".into(),
            }
        }
    };
    let secret = match secrets.decrypt(sealed) {
        Ok(s) => s,
        Err(e) => {
            return Attempt::Permanent {
                http: None,
                error: e.to_string(),
            }
        }
    };
    let request = match dest.kind {
        DestinationKind::SlackChannel => client().post(&secret).json(&slack_body(body)),
        DestinationKind::WebhookEndpoint => {
            let url = dest.config.get("url").and_then(Value::as_str).unwrap_or("");
            let bytes = serde_json::to_vec(body).unwrap_or_default();
            let signed = match signing::sign(&secret, message_id, Utc::now().timestamp(), &bytes) {
                Ok(s) => s,
                Err(error) => return Attempt::Permanent { http: None, error },
            };
            client()
                .post(url)
                .header("content-type", "application/json")
                .header("webhook-id", signed.id)
                .header("webhook-timestamp", signed.timestamp.to_string())
                .header("webhook-signature", signed.signature)
                .body(bytes)
        }
    };
    match request.send().await {
        Ok(resp) => {
            let code = resp.status().as_u16();
            if resp.status().is_success() {
                Attempt::Delivered(code)
            } else if code == 429 || resp.status().is_server_error() {
                Attempt::Retryable {
                    http: Some(code),
                    error: format!("destination answered {code}"),
                }
            } else {
                Attempt::Permanent {
                    http: Some(code),
                    error: format!("destination answered {code}"),
                }
            }
        }
        Err(e) if e.is_builder() => Attempt::Permanent {
            http: None,
            error: format!("invalid destination URL: {e}"),
        },
        Err(e) => Attempt::Retryable {
            http: None,
            error: if e.is_timeout() {
                "timed out".to_string()
            } else {
                format!("could not connect: {e}")
            },
        },
    }
}

/// How long the background worker waits before attempt `attempts + 1`.
pub fn background_backoff(attempts: i32) -> chrono::Duration {
    let step = (attempts - INLINE_BACKOFF.len() as i32 - 1).clamp(0, 7) as u32;
    chrono::Duration::seconds((30i64 * 2i64.pow(step)).min(3600))
}

/// How long a delivery is retried before it is given up.
pub fn retry_window() -> chrono::Duration {
    chrono::Duration::hours(24)
}

/// Deliveries to make: each is recorded before it is attempted (in the caller's transaction
/// when it has one, so a delivery exists exactly when what asked for it does), attempted now
/// (up to four times, [`INLINE_BACKOFF`] apart), and what came of it recorded
/// ([`record_attempts_of`]); what still fails is left `retrying` for the worker
/// ([`super::worker`]). Automation runs, the notification tool and agents'
/// `notify_destination` all send through one.
#[derive(Default)]
pub struct Outbox {
    rows: Vec<notification_delivery::ActiveModel>,
    sends: Vec<(String, destination::Model, Value)>,
}

impl Outbox {
    /// Adds a delivery of `body` (a webhook body, also what retries send) to `destination`.
    pub fn add(
        &mut self,
        organization_id: &str,
        destination: &destination::Model,
        body: &Value,
        automation_run_id: Option<&str>,
    ) {
        let row = pending_row(organization_id, &destination.id, body, automation_run_id);
        let id = row.id.clone().unwrap();
        self.rows.push(row);
        self.sends.push((id, destination.clone(), body.clone()));
    }

    /// Records the deliveries added since the last call, before any attempt (multi-row
    /// statements of 1,000 rows: 15 columns stay under every backend's parameter limit).
    pub async fn record<C: ConnectionTrait>(&mut self, conn: &C) -> Result<(), sea_orm::DbErr> {
        let mut rows = std::mem::take(&mut self.rows).into_iter().peekable();
        while rows.peek().is_some() {
            let chunk: Vec<_> = rows.by_ref().take(1_000).collect();
            notification_delivery::Entity::insert_many(chunk)
                .exec_without_returning(conn)
                .await?;
        }
        Ok(())
    }

    /// Attempts every delivery now, concurrently; the results in the order they were added.
    pub async fn send(self, secrets: &SecretBox) -> Vec<Attempted> {
        let attempts = self
            .sends
            .iter()
            .map(|(id, dest, body)| attempt_with_retries(secrets, id, dest, body));
        futures::future::join_all(attempts).await
    }

    /// Records, sends and records the results, for a caller without a transaction of its own.
    pub async fn deliver(
        mut self,
        db: &DatabaseConnection,
        secrets: &SecretBox,
    ) -> Result<Vec<Attempted>, sea_orm::DbErr> {
        self.record(db).await?;
        let done = self.send(secrets).await;
        record_attempts_of(db, &done).await?;
        Ok(done)
    }
}

/// One notification to each destination, through an [`Outbox`].
pub async fn deliver_notification(
    db: &DatabaseConnection,
    secrets: &SecretBox,
    organization_id: &str,
    destinations: Vec<destination::Model>,
    notification: &Notification,
) -> Result<Vec<Delivery>, sea_orm::DbErr> {
    let body = notification.webhook_body();
    let mut outbox = Outbox::default();
    for dest in &destinations {
        outbox.add(organization_id, dest, &body, None);
    }
    let done = outbox.deliver(db, secrets).await?;
    Ok(done.iter().map(Attempted::delivery).collect())
}

/// One entry of a delivery's `attempt_log`.
pub fn attempt_entry(at: DateTime<Utc>, attempt: &Attempt) -> Value {
    let (http, error) = match attempt {
        Attempt::Delivered(code) => (Some(*code), None),
        Attempt::Retryable { http, error } | Attempt::Permanent { http, error } => {
            (*http, Some(error.clone()))
        }
    };
    json!({ "at": timestamp::format(&at), "httpStatus": http, "error": error })
}

/// A delivery row recorded before its first attempt, so a crash mid-call leaves a record the
/// worker retries; leased by the caller while it makes its attempts.
fn pending_row(
    organization_id: &str,
    destination_id: &str,
    body: &Value,
    automation_run_id: Option<&str>,
) -> notification_delivery::ActiveModel {
    let now = Utc::now();
    notification_delivery::ActiveModel {
        // Time-ordered: automation runs write these at ingest's pace (see engine::runs).
        id: Set(crate::ids::time_ordered_id()),
        organization_id: Set(organization_id.to_string()),
        destination_id: Set(destination_id.to_string()),
        payload: Set(body.clone()),
        status: Set(DeliveryStatus::Retrying),
        attempts: Set(0),
        http_status: Set(None),
        error: Set(None),
        next_attempt_at: Set(Some(
            now + background_backoff(INLINE_BACKOFF.len() as i32 + 1),
        )),
        lease_until: Set(Some(now + chrono::Duration::seconds(120))),
        created_at: Set(now),
        updated_at: Set(now),
        automation_run_id: Set(automation_run_id.map(str::to_string)),
        attempt_log: Set(Some(json!([]))),
    }
}

/// What the attempts made during a call came to.
#[derive(Debug, Clone)]
pub struct Attempted {
    pub delivery_id: String,
    pub destination_id: String,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub log: Vec<Value>,
}

impl Attempted {
    pub fn delivery(&self) -> Delivery {
        Delivery {
            destination_id: self.destination_id.clone(),
            status: self.status,
            attempts: self.attempts,
            http_status: self.http_status,
            error: self.error.clone(),
        }
    }
}

/// Up to four attempts now (0.5 s, 1 s, 2 s apart) while the answer is worth retrying.
async fn attempt_with_retries(
    secrets: &SecretBox,
    delivery_id: &str,
    dest: &destination::Model,
    body: &Value,
) -> Attempted {
    let message_id = format!("msg_{}", delivery_id.replace('-', ""));
    let mut attempts = 0;
    let mut log = Vec::new();
    let mut last = Attempt::Retryable {
        http: None,
        error: "not attempted".into(),
    };
    for pause in std::iter::once(None).chain(INLINE_BACKOFF.iter().map(Some)) {
        if let Some(p) = pause {
            tokio::time::sleep(*p).await;
        }
        attempts += 1;
        let at = Utc::now();
        last = attempt_once(secrets, dest, &message_id, body).await;
        log.push(attempt_entry(at, &last));
        if !matches!(last, Attempt::Retryable { .. }) {
            break;
        }
    }
    let (status, http_status, error) = last.outcome();
    Attempted {
        delivery_id: delivery_id.to_string(),
        destination_id: dest.id.clone(),
        status,
        attempts,
        http_status,
        error,
        log,
    }
}

/// Stores what deliveries' attempts came to, in one statement per few thousand (an automation
/// processor's batch records them while it holds the write lock); a delivery still failing is
/// left to the worker.
pub async fn record_attempts_of<C: ConnectionTrait>(
    conn: &C,
    done: &[Attempted],
) -> Result<(), sea_orm::DbErr> {
    const RECORD: crate::db::RowsUpdate = crate::db::RowsUpdate {
        table: "notification_deliveries",
        types: &[
            "text",
            "text",
            "integer",
            "integer",
            "text",
            "timestamptz",
            "jsonb",
            "timestamptz",
        ],
        set: "status = v.column2, attempts = v.column3, http_status = v.column4, \
              error = v.column5, next_attempt_at = v.column6, lease_until = NULL, \
              attempt_log = v.column7, updated_at = v.column8",
        and_where: "",
    };
    let now = Utc::now();
    let rows = done
        .iter()
        .map(|d| {
            let next = match d.status {
                DeliveryStatus::Retrying => Some(now + background_backoff(d.attempts)),
                _ => None,
            };
            vec![
                d.delivery_id.clone().into(),
                d.status.as_str().into(),
                d.attempts.into(),
                d.http_status.map(i32::from).into(),
                d.error.clone().into(),
                next.into(),
                sea_orm::Value::Json(Some(Box::new(Value::Array(d.log.clone())))),
                now.into(),
            ]
        })
        .collect();
    RECORD.exec(conn, rows).await?;
    Ok(())
}
