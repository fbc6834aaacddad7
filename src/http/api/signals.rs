//! `/api/signals`: signal.list, signal.get, signal.create, signal.archive.

use poem_openapi::{
    param::{Path, Query},
    Enum, Object, OpenApi,
};
use serde::Deserialize;
use serde_json::Value;

use super::{action_ctx, caller, reply, reply_change, ApiTags, AppState};
use crate::{
    command_data,
    engine::signals,
    http::api::ApiKeyAuth,
    http::envelope::{ActionResponse, ResourceRef},
    http::request::JsonBody,
    http::typed_json::{ContractJson, EventMatchDefinitionJson},
    http::types::{parse_enum, ts_opt, Clearable, Nullable, Timestamp},
};
use entity::signal;

/// Who manages a configuration resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
pub enum ManagedBy {
    #[oai(rename = "UI")]
    Ui,
    #[oai(rename = "CODE")]
    Code,
}

/// How a signal matches events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SignalKind {
    EventMatch,
    EventPattern,
}

/// A signal: which tracked events matter.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct Signal {
    pub id: uuid::Uuid,
    pub key: String,
    pub managed_by: ManagedBy,
    pub name: String,
    pub description: Nullable<String>,
    pub kind: SignalKind,
    /// For `EVENT_MATCH`: `{grain, subjectResolver, eventNames, propertyConditions,
    /// conditionMode}`.
    pub definition: Value,
    pub schema_version: String,
    pub config_hash: Nullable<String>,
    pub archived_at: Nullable<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<signal::Model> for Signal {
    fn from(m: signal::Model) -> Self {
        Self {
            id: uuid::Uuid::parse_str(&m.id).unwrap_or_default(),
            key: m.key,
            managed_by: parse_enum(&m.managed_by).unwrap_or(ManagedBy::Ui),
            name: m.name,
            description: m.description.into(),
            kind: parse_enum(m.kind.as_str()).unwrap_or(SignalKind::EventMatch),
            definition: m.definition,
            schema_version: m.schema_version,
            config_hash: m.config_hash.into(),
            archived_at: ts_opt(m.archived_at),
            created_at: m.created_at.into(),
            updated_at: m.updated_at.into(),
        }
    }
}

/// The kind of signal the API creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Enum)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SignalCreateKind {
    EventMatch,
}

/// A new signal. Only `EVENT_MATCH` signals can be created through the API (`EVENT_PATTERN`
/// signals are declared with `custintel apply`).
#[derive(Debug, Deserialize, Object)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[oai(rename_all = "camelCase")]
pub struct SignalCreate {
    pub kind: SignalCreateKind,
    /// 1 to 120 characters.
    #[oai(validator(min_length = 1, max_length = 120))]
    pub name: String,
    pub definition: ContractJson<EventMatchDefinitionJson>,
    /// Up to 1000 characters, or null.
    #[oai(validator(max_length = 1000))]
    #[serde(default)]
    pub description: Clearable<String>,
}

impl From<SignalCreate> for signals::NewSignal {
    fn from(body: SignalCreate) -> Self {
        Self {
            name: body.name,
            definition: body.definition.into(),
            description: body.description.into(),
        }
    }
}

/// `data` of signal.list.
#[derive(Debug, Object)]
pub struct SignalListData {
    pub signals: Vec<Signal>,
}
command_data!(SignalListData, "signal.list");

/// `data` of signal.get.
#[derive(Debug, Object)]
pub struct SignalGetData {
    pub signal: Signal,
}
command_data!(SignalGetData, "signal.get");

/// `data` of signal.create.
#[derive(Debug, Object)]
pub struct SignalCreateData {
    pub signal: Signal,
}
command_data!(SignalCreateData, "signal.create");

/// The archived signal's id and archive time.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct ArchivedSignal {
    pub id: String,
    pub archived_at: Timestamp,
}

/// `data` of signal.archive.
#[derive(Debug, Object)]
pub struct SignalArchiveData {
    pub signal: ArchivedSignal,
}
command_data!(SignalArchiveData, "signal.archive");

fn touched(s: &signal::Model) -> Vec<ResourceRef> {
    vec![ResourceRef::new("signal", s.id.clone())]
}

pub struct SignalsApi {
    pub state: AppState,
}

#[OpenApi(tag = "ApiTags::Signals")]
impl SignalsApi {
    /// List signals
    ///
    /// The organization's signals, newest first. Archived signals are left out unless
    /// `includeArchived=true` (an extension).
    #[oai(path = "/api/signals", method = "get", operation_id = "listSignals")]
    async fn list(
        &self,
        key: ApiKeyAuth,
        #[oai(name = "includeArchived", default)] include_archived: Query<bool>,
    ) -> ActionResponse<SignalListData> {
        let auth = caller!(self.state, key, SignalListData);
        reply(
            signals::list(&self.state.db, &auth.organization_id, include_archived.0)
                .await
                .map(|rows| {
                    let resources = rows.iter().flat_map(touched).collect();
                    let signals = rows.into_iter().map(Signal::from).collect();
                    (SignalListData { signals }, resources, None)
                }),
        )
    }

    /// Get a signal
    #[oai(path = "/api/signals/:id", method = "get", operation_id = "getSignal")]
    async fn get(&self, key: ApiKeyAuth, id: Path<String>) -> ActionResponse<SignalGetData> {
        let auth = caller!(self.state, key, SignalGetData);
        reply(
            signals::get(&self.state.db, &auth.organization_id, &id)
                .await
                .map(|s| {
                    let r = touched(&s);
                    (SignalGetData { signal: s.into() }, r, None)
                }),
        )
    }

    /// Create a signal
    ///
    /// Creates an `EVENT_MATCH` signal. Its `key` is derived from the name and unique in the
    /// organization. Needs the write scope.
    #[oai(path = "/api/signals", method = "post", operation_id = "createSignal")]
    async fn create(
        &self,
        key: ApiKeyAuth,
        body: JsonBody<SignalCreate>,
    ) -> ActionResponse<SignalCreateData> {
        let auth = caller!(self.state, key, SignalCreateData);
        let ctx = action_ctx::<SignalCreateData>(&auth);
        reply_change(
            signals::create(&self.state.db, &ctx, body.0.into()).await,
            |v| SignalCreateData { signal: v.into() },
        )
    }

    /// Archive a signal
    ///
    /// Sets `archivedAt`; automations no longer count it as active. Archiving an archived
    /// signal changes nothing. Needs the write scope.
    #[oai(
        path = "/api/signals/:id/archive",
        method = "post",
        operation_id = "archiveSignal"
    )]
    async fn archive(
        &self,
        key: ApiKeyAuth,
        id: Path<String>,
    ) -> ActionResponse<SignalArchiveData> {
        let auth = caller!(self.state, key, SignalArchiveData);
        let ctx = action_ctx::<SignalArchiveData>(&auth);
        reply_change(signals::archive(&self.state.db, &ctx, &id).await, |s| {
            SignalArchiveData {
                signal: ArchivedSignal {
                    archived_at: s.archived_at.unwrap_or(s.updated_at).into(),
                    id: s.id,
                },
            }
        })
    }
}
