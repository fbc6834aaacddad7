//! `/api/automations/{id}/runs` and `/test`: automation.run.list, automation.run.get and
//! automation.test (extensions): what the automation engine did, and what it would do.

use poem_openapi::{
    param::{Path, Query},
    Enum, Object, OpenApi,
};
use serde::Deserialize;
use serde_json::Value;

use super::{automations::RunStatus, caller, reply, ApiTags, AppState};
use crate::{
    command_data,
    engine::history::{self, RunView, TestInput},
    http::api::ApiKeyAuth,
    http::envelope::{ActionResponse, ResourceRef},
    http::request::JsonBody,
    http::types::{ts_opt, Nullable, Timestamp},
};
use entity::notification_delivery::DeliveryStatus;

/// What a run is about: a user (or an anonymous visitor) or a customer.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct RunSubject {
    /// `user` or `customer`.
    pub grain: String,
    /// The user's or customer's id (`visitor:{visitorId}` for an anonymous visitor).
    pub id: String,
    /// The value of the signal's `subjectResolver` (email, userId, customerId or visitorId).
    pub key: String,
    pub name: Nullable<String>,
    /// The subject's customer, when known.
    pub customer_id: Nullable<String>,
}

/// A signal that occurred for the run.
#[derive(Debug, Object)]
pub struct RunSignal {
    pub id: String,
    pub key: String,
    pub name: String,
}

/// One attempt to deliver.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct DeliveryAttempt {
    pub at: Timestamp,
    /// The destination's HTTP status; null when none was received (time-out, no connection).
    pub http_status: Nullable<i32>,
    /// Null when delivered.
    pub error: Nullable<String>,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum RunDeliveryStatus {
    Delivered,
    /// Failed so far; the notifier retries in the background for up to 24 hours.
    Retrying,
    Failed,
}

impl From<DeliveryStatus> for RunDeliveryStatus {
    fn from(stored: DeliveryStatus) -> Self {
        match stored {
            DeliveryStatus::Delivered => RunDeliveryStatus::Delivered,
            DeliveryStatus::Retrying => RunDeliveryStatus::Retrying,
            DeliveryStatus::Failed => RunDeliveryStatus::Failed,
        }
    }
}

/// A run's delivery to one destination, with every attempt.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct RunDelivery {
    pub destination_id: String,
    pub status: RunDeliveryStatus,
    pub attempts: Vec<DeliveryAttempt>,
}

/// One run of an automation. Its `status` walks `PENDING` -> `RUNNING_PROCESSOR` ->
/// `READY_FOR_DELIVERY` -> `DELIVERED`, `PARTIAL_FAILURE` or `FAILED` (`PENDING_DELIVERY` while
/// deliveries are retried in the background); `SKIPPED` with `skipReason`.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct AutomationRun {
    pub id: String,
    pub automation_id: String,
    pub status: RunStatus,
    pub triggered_at: Timestamp,
    pub started_at: Nullable<Timestamp>,
    pub finished_at: Nullable<Timestamp>,
    /// The automation's `configHash` when the run was made.
    pub config_hash: Nullable<String>,
    /// Null for a schedule's digest run.
    pub subject: Nullable<RunSubject>,
    /// Why the run was skipped; null unless `SKIPPED`.
    pub skip_reason: Nullable<String>,
    pub title: Nullable<String>,
    /// What destinations receive (the agent's final message, or the template); null until built.
    pub message: Nullable<String>,
    /// Things to know that did not stop the run (e.g. no language model for the agent).
    pub warnings: Vec<String>,
    pub signals: Vec<RunSignal>,
    /// The matching events, as the `events` view shows them.
    pub events: Vec<Value>,
    pub deliveries: Vec<RunDelivery>,
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn attempts_of(log: Option<&Value>) -> Vec<DeliveryAttempt> {
    log.and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|a| DeliveryAttempt {
                    at: text(a, "at")
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
                        .map(|t| t.with_timezone(&chrono::Utc))
                        .unwrap_or_default()
                        .into(),
                    http_status: a
                        .get("httpStatus")
                        .and_then(Value::as_i64)
                        .map(|c| c as i32)
                        .into(),
                    error: text(a, "error").into(),
                })
                .collect()
        })
        .unwrap_or_default()
}

impl From<RunView> for AutomationRun {
    fn from(v: RunView) -> Self {
        let m = v.run;
        let list = |value: &Value| value.as_array().cloned().unwrap_or_default();
        Self {
            id: m.id,
            automation_id: m.automation_id,
            status: m.status.into(),
            triggered_at: m.triggered_at.into(),
            started_at: ts_opt(m.started_at),
            finished_at: ts_opt(m.finished_at),
            config_hash: m.config_hash.into(),
            subject: m
                .subject
                .as_ref()
                .map(|s| RunSubject {
                    grain: text(s, "grain").unwrap_or_default(),
                    id: text(s, "id").unwrap_or_default(),
                    key: text(s, "key").unwrap_or_default(),
                    name: text(s, "name").into(),
                    customer_id: text(s, "customerId").into(),
                })
                .into(),
            skip_reason: m.skip_reason.into(),
            title: m.title.into(),
            message: m.message.into(),
            warnings: list(&m.warnings)
                .iter()
                .filter_map(|w| w.as_str().map(str::to_string))
                .collect(),
            signals: list(&m.signals)
                .iter()
                .map(|s| RunSignal {
                    id: text(s, "id").unwrap_or_default(),
                    key: text(s, "key").unwrap_or_default(),
                    name: text(s, "name").unwrap_or_default(),
                })
                .collect(),
            events: list(&m.events),
            deliveries: v
                .deliveries
                .into_iter()
                .map(|d| RunDelivery {
                    destination_id: d.destination_id,
                    status: d.status.into(),
                    attempts: attempts_of(d.attempt_log.as_ref()),
                })
                .collect(),
        }
    }
}

/// `data` of automation.run.list.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct AutomationRunListData {
    /// Newest first.
    pub runs: Vec<AutomationRun>,
    /// Pass as `cursor` for the next page; `""` on the last page.
    pub next_cursor: String,
}
command_data!(AutomationRunListData, "automation.run.list");

/// `data` of automation.run.get.
#[derive(Debug, Object)]
pub struct AutomationRunGetData {
    pub run: AutomationRun,
}
command_data!(AutomationRunGetData, "automation.run.get");

/// `data` of automation.test.
#[derive(Debug, Object)]
pub struct AutomationTestData {
    /// The run the event or subject would make (stored nowhere).
    pub run: AutomationRun,
    /// The body each webhook destination would receive (`type: "automation.run"`).
    pub payload: Value,
}
command_data!(AutomationTestData, "automation.test");

/// What a tested subject is: `user` (found by email, externalId or id) or `customer` (by id,
/// domain or externalId).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Enum)]
#[oai(rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum TestSubjectGrain {
    User,
    Customer,
}

/// A subject named by its grain and key.
#[derive(Debug, Deserialize, Object)]
#[serde(deny_unknown_fields)]
pub struct TestSubject {
    pub grain: TestSubjectGrain,
    #[oai(validator(min_length = 1))]
    pub key: String,
}

/// A dry run for an event.
#[derive(Debug, Deserialize, Object)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[oai(rename_all = "camelCase")]
pub struct AutomationTestByEvent {
    /// The id of an event of the `events` view, applied or not.
    #[oai(validator(min_length = 1))]
    pub event_id: String,
}

/// A dry run for a subject, as of now.
#[derive(Debug, Deserialize, Object)]
#[serde(deny_unknown_fields)]
pub struct AutomationTestBySubject {
    pub subject: TestSubject,
}

/// What to test with: an event's id, or a subject (not both).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum AutomationTestRequest {
    ByEvent(AutomationTestByEvent),
    BySubject(AutomationTestBySubject),
}

crate::alternative_body!(
    AutomationTestRequest,
    "What to test with: an event's id, or a subject (not both).",
    [AutomationTestByEvent, AutomationTestBySubject]
);

fn resources(run: &AutomationRun) -> Vec<ResourceRef> {
    vec![ResourceRef::new("automation_run", run.id.clone())]
}

pub struct AutomationRunsApi {
    pub state: AppState,
}

#[OpenApi(tag = "ApiTags::Automations")]
impl AutomationRunsApi {
    /// List an automation's runs (extension)
    ///
    /// Newest first, each with its subject, matching events, message and deliveries (every
    /// attempt). `status` filters by run status; `limit` 1 to 100 (default 20); `cursor` is the
    /// previous page's `nextCursor`.
    #[oai(
        path = "/api/automations/:id/runs",
        method = "get",
        operation_id = "listAutomationRuns"
    )]
    async fn runs(
        &self,
        key: ApiKeyAuth,
        id: Path<String>,
        /// Only runs with this status.
        status: Query<Option<String>>,
        /// Runs per page, 1 to 100 (default 20).
        limit: Query<Option<u32>>,
        /// The previous page's `nextCursor`.
        cursor: Query<Option<String>>,
    ) -> ActionResponse<AutomationRunListData> {
        let auth = caller!(self.state, key, AutomationRunListData);
        reply(
            history::list(
                &self.state.db,
                &auth.organization_id,
                &id,
                status.0.as_deref(),
                limit.0,
                cursor.0.as_deref(),
            )
            .await
            .map(|page| {
                let runs: Vec<AutomationRun> =
                    page.runs.into_iter().map(AutomationRun::from).collect();
                let touched = runs.iter().flat_map(resources).collect();
                let data = AutomationRunListData {
                    runs,
                    next_cursor: page.next_cursor,
                };
                (data, touched, None)
            }),
        )
    }

    /// Get an automation run (extension)
    #[oai(
        path = "/api/automations/:id/runs/:run_id",
        method = "get",
        operation_id = "getAutomationRun"
    )]
    async fn run(
        &self,
        key: ApiKeyAuth,
        id: Path<String>,
        run_id: Path<String>,
    ) -> ActionResponse<AutomationRunGetData> {
        let auth = caller!(self.state, key, AutomationRunGetData);
        reply(
            history::get(&self.state.db, &auth.organization_id, &id, &run_id)
                .await
                .map(|v| {
                    let run = AutomationRun::from(v);
                    let touched = resources(&run);
                    (AutomationRunGetData { run }, touched, None)
                }),
        )
    }

    /// Test an automation (extension)
    ///
    /// A dry run, also for a disabled automation: with `{"eventId": "..."}` (an event of the
    /// `events` view) or `{"subject": {"grain": "user" | "customer", "key": "..."}}`, answers
    /// the run the automation would make (`SKIPPED` with the reason when the event matches none
    /// of its signals, the subject is outside the audience, or no destination is enabled) and
    /// the body its webhook destinations would receive. Nothing is stored or sent, and the
    /// agent is not called (the payload carries the template message). An event acknowledged
    /// a moment ago, whose effects are not applied yet, is tested as received: attributed to
    /// the users and accounts already stored (one its batch creates is not there yet).
    #[oai(
        path = "/api/automations/:id/test",
        method = "post",
        operation_id = "testAutomation"
    )]
    async fn test(
        &self,
        key: ApiKeyAuth,
        id: Path<String>,
        body: JsonBody<AutomationTestRequest>,
    ) -> ActionResponse<AutomationTestData> {
        let auth = caller!(self.state, key, AutomationTestData);
        let input = match body.0 {
            AutomationTestRequest::ByEvent(b) => TestInput::Event(b.event_id),
            AutomationTestRequest::BySubject(b) => TestInput::Subject {
                grain: match b.subject.grain {
                    TestSubjectGrain::User => "user".into(),
                    TestSubjectGrain::Customer => "customer".into(),
                },
                key: b.subject.key,
            },
        };
        let outcome = history::test(&self.state, &auth.organization_id, &id, input).await;
        reply(outcome.map(|o| {
            let run = AutomationRun::from(o.run);
            let touched = resources(&run);
            (
                AutomationTestData {
                    run,
                    payload: o.payload,
                },
                touched,
                None,
            )
        }))
    }
}
