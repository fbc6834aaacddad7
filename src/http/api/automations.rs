//! `/api/automations`: automation.list, .get, .create (extensions), .enable, .disable.

use std::collections::BTreeMap;

use poem_openapi::{
    param::{Path, Query},
    Enum, Object, OpenApi,
};
use serde::Deserialize;
use serde_json::Value;

use super::{
    action_ctx, caller,
    destinations::Destination,
    reply, reply_change,
    signals::{ManagedBy, Signal},
    ApiTags, AppState,
};
use crate::{
    command_data,
    engine::automations::{self, AutomationView},
    http::api::ApiKeyAuth,
    http::envelope::ActionResponse,
    http::request::JsonBody,
    http::typed_json::{
        AtLeastSignalOccurrenceTriggerJson, AudienceFilterJson, ContractJson, ScheduleTriggerJson,
        SignalOccurrenceTriggerJson,
    },
    http::types::{parse_enum, ts_opt, Clearable, Nullable, Timestamp},
};
use entity::automation_run::AutomationRunStatus;

/// What starts an automation run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum, Deserialize)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TriggerType {
    SignalOccurrence,
    Schedule,
}

/// How the automation's signals combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum, Deserialize)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MatchMode {
    Any,
    All,
    AtLeast,
}

/// `matchMode` of a `SIGNAL_OCCURRENCE` automation that counts its linked signals without a
/// bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum, Deserialize)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AnyOrAllMatchMode {
    Any,
    All,
}

/// `matchMode` of a `SIGNAL_OCCURRENCE` automation that needs `atLeast` of its linked signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum, Deserialize)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AtLeastMatchMode {
    AtLeast,
}

/// Declares one member of [`AutomationCreate`]: the fields every new automation has, with the
/// `triggerJson` of its trigger type.
macro_rules! automation_create_member {
    ($name:ident, $doc:literal, $match_mode:ty, $trigger:ty) => {
        #[doc = $doc]
        #[derive(Debug, Deserialize, Object)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        #[oai(rename_all = "camelCase")]
        pub struct $name {
            /// 1 to 120 characters.
            #[oai(validator(min_length = 1, max_length = 120))]
            pub name: String,
            /// Up to 1000 characters, or null.
            #[oai(validator(max_length = 1000))]
            #[serde(default)]
            pub description: Clearable<String>,
            /// Unique in the organization; defaults to a slug of the name.
            #[oai(validator(min_length = 1, max_length = 120))]
            pub key: Option<String>,
            pub trigger_json: ContractJson<$trigger>,
            pub audience_filter_json: Option<ContractJson<AudienceFilterJson>>,
            /// The agent that processes runs (an id of the organization's agents), or null for
            /// the message template.
            #[serde(default)]
            pub agent_id: Clearable<String>,
            pub match_mode: $match_mode,
            /// Ids of the organization's signals (none when left out).
            pub signal_ids: Option<Vec<String>>,
            /// Ids of the organization's destinations (none when left out).
            pub destination_ids: Option<Vec<String>>,
        }

        impl $name {
            fn into_new(self, trigger_type: TriggerType) -> automations::NewAutomation {
                automations::NewAutomation {
                    name: self.name,
                    description: self.description.into(),
                    key: self.key,
                    trigger_type: trigger_type.into(),
                    trigger_json: object_entries(self.trigger_json.into()),
                    audience_filter_json: self
                        .audience_filter_json
                        .map(|a| object_entries(a.into())),
                    agent_id: self.agent_id.into(),
                    match_mode: self.match_mode.into(),
                    signal_ids: self.signal_ids.unwrap_or_default(),
                    destination_ids: self.destination_ids.unwrap_or_default(),
                }
            }
        }
    };
}

automation_create_member!(
    AnyOrAllSignalOccurrenceAutomationCreate,
    "A new automation that runs when any (`ANY`) or every (`ALL`, within `window`) linked \
     signal has occurred for a subject.",
    AnyOrAllMatchMode,
    SignalOccurrenceTriggerJson
);
automation_create_member!(
    AtLeastSignalOccurrenceAutomationCreate,
    "A new automation that runs when `atLeast` distinct linked signals have occurred for a \
     subject within `window`.",
    AtLeastMatchMode,
    AtLeastSignalOccurrenceTriggerJson
);

/// A new automation that runs when its linked signals occur, by `matchMode`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum SignalOccurrenceAutomationCreate {
    AnyOrAll(AnyOrAllSignalOccurrenceAutomationCreate),
    AtLeast(AtLeastSignalOccurrenceAutomationCreate),
}

crate::body_of_members!(
    SignalOccurrenceAutomationCreate,
    [
        AnyOrAllSignalOccurrenceAutomationCreate,
        AtLeastSignalOccurrenceAutomationCreate
    ],
    |registry| {
        crate::http::typed_json::register_one_of(
            registry,
            "SignalOccurrenceAutomationCreate",
            "A new automation that runs when its linked signals occur: `ANY` or `ALL` of them, \
             or `AT_LEAST` a number of them (`atLeast` in `triggerJson`).",
            &[
                AnyOrAllSignalOccurrenceAutomationCreate::name().into_owned(),
                AtLeastSignalOccurrenceAutomationCreate::name().into_owned(),
            ],
        );
    }
);

automation_create_member!(
    ScheduleAutomationCreate,
    "A new automation that runs on a schedule: each run is one digest of the subjects in the \
     audience whose linked signals occurred since the previous run (the whole audience when no \
     signal is linked).",
    MatchMode,
    ScheduleTriggerJson
);

/// A new automation, by `triggerType`. It is created disabled; enable it once its
/// requirements are met.
#[derive(Debug, Deserialize)]
#[serde(tag = "triggerType")]
pub enum AutomationCreate {
    #[serde(rename = "SIGNAL_OCCURRENCE")]
    SignalOccurrence(SignalOccurrenceAutomationCreate),
    #[serde(rename = "SCHEDULE")]
    Schedule(ScheduleAutomationCreate),
}

crate::tagged_body!(
    AutomationCreate,
    "A new automation, by `triggerType`. It is created disabled; enable it once its requirements are met.",
    "triggerType",
    {
        "SIGNAL_OCCURRENCE" => SignalOccurrence(SignalOccurrenceAutomationCreate),
        "SCHEDULE" => Schedule(ScheduleAutomationCreate),
    }
);

/// The entries of a JSON object the body's description admitted as one.
fn object_entries(json: Value) -> BTreeMap<String, Value> {
    match json {
        Value::Object(map) => map.into_iter().collect(),
        _ => BTreeMap::new(),
    }
}

impl From<TriggerType> for automations::TriggerType {
    fn from(value: TriggerType) -> Self {
        match value {
            TriggerType::SignalOccurrence => Self::SignalOccurrence,
            TriggerType::Schedule => Self::Schedule,
        }
    }
}

impl From<MatchMode> for automations::MatchMode {
    fn from(value: MatchMode) -> Self {
        match value {
            MatchMode::Any => Self::Any,
            MatchMode::All => Self::All,
            MatchMode::AtLeast => Self::AtLeast,
        }
    }
}

impl From<AnyOrAllMatchMode> for automations::MatchMode {
    fn from(value: AnyOrAllMatchMode) -> Self {
        match value {
            AnyOrAllMatchMode::Any => Self::Any,
            AnyOrAllMatchMode::All => Self::All,
        }
    }
}

impl From<AtLeastMatchMode> for automations::MatchMode {
    fn from(value: AtLeastMatchMode) -> Self {
        match value {
            AtLeastMatchMode::AtLeast => Self::AtLeast,
        }
    }
}

impl From<AutomationCreate> for automations::NewAutomation {
    fn from(body: AutomationCreate) -> Self {
        match body {
            AutomationCreate::SignalOccurrence(SignalOccurrenceAutomationCreate::AnyOrAll(b)) => {
                b.into_new(TriggerType::SignalOccurrence)
            }
            AutomationCreate::SignalOccurrence(SignalOccurrenceAutomationCreate::AtLeast(b)) => {
                b.into_new(TriggerType::SignalOccurrence)
            }
            AutomationCreate::Schedule(b) => b.into_new(TriggerType::Schedule),
        }
    }
}

/// Status of an automation's latest run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunStatus {
    Pending,
    Skipped,
    RunningProcessor,
    ReadyForDelivery,
    PendingDelivery,
    Delivered,
    PartialFailure,
    Failed,
}

impl From<AutomationRunStatus> for RunStatus {
    fn from(stored: AutomationRunStatus) -> Self {
        match stored {
            AutomationRunStatus::Pending => RunStatus::Pending,
            AutomationRunStatus::Skipped => RunStatus::Skipped,
            AutomationRunStatus::RunningProcessor => RunStatus::RunningProcessor,
            AutomationRunStatus::ReadyForDelivery => RunStatus::ReadyForDelivery,
            AutomationRunStatus::PendingDelivery => RunStatus::PendingDelivery,
            AutomationRunStatus::Delivered => RunStatus::Delivered,
            AutomationRunStatus::PartialFailure => RunStatus::PartialFailure,
            AutomationRunStatus::Failed => RunStatus::Failed,
        }
    }
}

/// An automation with its signals and destinations.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct Automation {
    pub id: uuid::Uuid,
    pub key: String,
    pub managed_by: ManagedBy,
    pub name: String,
    pub description: Nullable<String>,
    pub enabled: bool,
    pub trigger_type: TriggerType,
    pub trigger_json: Value,
    pub audience_filter_json: Value,
    pub agent_id: Nullable<uuid::Uuid>,
    pub match_mode: MatchMode,
    pub schema_version: String,
    pub config_hash: Nullable<String>,
    pub archived_at: Nullable<Timestamp>,
    pub last_run_at: Nullable<Timestamp>,
    pub last_run_status: Nullable<RunStatus>,
    pub next_run_at: Nullable<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub signals: Vec<Signal>,
    pub destinations: Vec<Destination>,
    /// Linked signals that are not archived.
    #[oai(validator(minimum(value = "0")))]
    pub active_signal_count: i64,
    /// Linked destinations that are enabled and not archived.
    #[oai(validator(minimum(value = "0")))]
    pub active_destination_count: i64,
}

impl From<AutomationView> for Automation {
    fn from(v: AutomationView) -> Self {
        let active_signal_count = v.active_signals() as i64;
        let active_destination_count = v.active_destinations() as i64;
        let m = v.automation;
        Self {
            id: uuid::Uuid::parse_str(&m.id).unwrap_or_default(),
            key: m.key,
            managed_by: parse_enum(&m.managed_by).unwrap_or(ManagedBy::Ui),
            name: m.name,
            description: m.description.into(),
            enabled: m.enabled,
            trigger_type: parse_enum(&m.trigger_type).unwrap_or(TriggerType::SignalOccurrence),
            trigger_json: m.trigger_json,
            audience_filter_json: m.audience_filter_json,
            agent_id: m
                .agent_id
                .and_then(|a| uuid::Uuid::parse_str(&a).ok())
                .into(),
            match_mode: parse_enum(&m.match_mode).unwrap_or(MatchMode::Any),
            schema_version: m.schema_version,
            config_hash: m.config_hash.into(),
            archived_at: ts_opt(m.archived_at),
            last_run_at: ts_opt(m.last_run_at),
            last_run_status: m.last_run_status.map(RunStatus::from).into(),
            next_run_at: ts_opt(m.next_run_at),
            created_at: m.created_at.into(),
            updated_at: m.updated_at.into(),
            signals: v.signals.into_iter().map(Signal::from).collect(),
            destinations: v.destinations.into_iter().map(Destination::from).collect(),
            active_signal_count,
            active_destination_count,
        }
    }
}

/// `data` of automation.list.
#[derive(Debug, Object)]
pub struct AutomationListData {
    pub automations: Vec<Automation>,
}
command_data!(AutomationListData, "automation.list");

macro_rules! automation_data {
    ($name:ident, $id:literal, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Object)]
        pub struct $name {
            pub automation: Automation,
        }
        command_data!($name, $id);
    };
}
automation_data!(
    AutomationGetData,
    "automation.get",
    "`data` of automation.get."
);
automation_data!(
    AutomationCreateData,
    "automation.create",
    "`data` of automation.create."
);
automation_data!(
    AutomationEnableData,
    "automation.enable",
    "`data` of automation.enable."
);
automation_data!(
    AutomationDisableData,
    "automation.disable",
    "`data` of automation.disable."
);

pub struct AutomationsApi {
    pub state: AppState,
}

#[OpenApi(tag = "ApiTags::Automations")]
impl AutomationsApi {
    /// List automations (extension)
    ///
    /// Oldest first, with their signals and destinations. Archived automations are left out
    /// unless `includeArchived=true`.
    #[oai(
        path = "/api/automations",
        method = "get",
        operation_id = "listAutomations"
    )]
    async fn list(
        &self,
        key: ApiKeyAuth,
        #[oai(name = "includeArchived", default)] include_archived: Query<bool>,
    ) -> ActionResponse<AutomationListData> {
        let auth = caller!(self.state, key, AutomationListData);
        reply(
            automations::list(&self.state.db, &auth.organization_id, include_archived.0)
                .await
                .map(|views| {
                    let resources = views
                        .iter()
                        .map(|v| {
                            crate::http::envelope::ResourceRef::new(
                                "automation",
                                v.automation.id.clone(),
                            )
                        })
                        .collect();
                    let automations = views.into_iter().map(Automation::from).collect();
                    (AutomationListData { automations }, resources, None)
                }),
        )
    }

    /// Get an automation (extension)
    #[oai(
        path = "/api/automations/:id",
        method = "get",
        operation_id = "getAutomation"
    )]
    async fn get(&self, key: ApiKeyAuth, id: Path<String>) -> ActionResponse<AutomationGetData> {
        let auth = caller!(self.state, key, AutomationGetData);
        reply(
            automations::get(&self.state.db, &auth.organization_id, &id)
                .await
                .map(|v| {
                    let r = vec![crate::http::envelope::ResourceRef::new(
                        "automation",
                        v.automation.id.clone(),
                    )];
                    (
                        AutomationGetData {
                            automation: v.into(),
                        },
                        r,
                        None,
                    )
                }),
        )
    }

    /// Create an automation (extension)
    ///
    /// Created disabled, managed by `UI`. `signalIds` and `destinationIds` must name the
    /// organization's resources. Needs the write scope.
    #[oai(
        path = "/api/automations",
        method = "post",
        operation_id = "createAutomation"
    )]
    async fn create(
        &self,
        key: ApiKeyAuth,
        body: JsonBody<AutomationCreate>,
    ) -> ActionResponse<AutomationCreateData> {
        let auth = caller!(self.state, key, AutomationCreateData);
        let ctx = action_ctx::<AutomationCreateData>(&auth);
        reply_change(
            automations::create(&self.state.db, &ctx, body.0.into()).await,
            |v| AutomationCreateData {
                automation: v.into(),
            },
        )
    }

    /// Enable an automation
    ///
    /// Enables the automation when its requirements hold: not archived, at least one active
    /// signal for a `SIGNAL_OCCURRENCE` trigger, and at least one enabled destination.
    /// Otherwise 409 `conflict` with `details.unmet` listing each unmet requirement. Enabling
    /// an enabled automation changes nothing. Needs the write scope.
    #[oai(
        path = "/api/automations/:id/enable",
        method = "post",
        operation_id = "enableAutomation"
    )]
    async fn enable(
        &self,
        key: ApiKeyAuth,
        id: Path<String>,
    ) -> ActionResponse<AutomationEnableData> {
        let auth = caller!(self.state, key, AutomationEnableData);
        let ctx = action_ctx::<AutomationEnableData>(&auth);
        reply_change(automations::enable(&self.state.db, &ctx, &id).await, |v| {
            AutomationEnableData {
                automation: v.into(),
            }
        })
    }

    /// Disable an automation
    ///
    /// Sets `enabled` to false and clears `nextRunAt`. Needs the write scope.
    #[oai(
        path = "/api/automations/:id/disable",
        method = "post",
        operation_id = "disableAutomation"
    )]
    async fn disable(
        &self,
        key: ApiKeyAuth,
        id: Path<String>,
    ) -> ActionResponse<AutomationDisableData> {
        let auth = caller!(self.state, key, AutomationDisableData);
        let ctx = action_ctx::<AutomationDisableData>(&auth);
        reply_change(automations::disable(&self.state.db, &ctx, &id).await, |v| {
            AutomationDisableData {
                automation: v.into(),
            }
        })
    }
}
