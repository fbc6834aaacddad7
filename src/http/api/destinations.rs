//! `/api/destinations`: destination.list, .get, .create (extensions), .update, .disable.

use std::collections::BTreeMap;

use poem_openapi::{param::Path, Enum, Object, OpenApi};
use serde::Deserialize;
use serde_json::Value;

use super::{action_ctx, caller, reply, reply_change, ApiTags, AppState};
use crate::{
    command_data,
    http::api::ApiKeyAuth,
    http::envelope::{ActionResponse, ResourceRef},
    http::request::JsonBody,
    http::types::{parse_enum, ts_opt, Clearable, Nullable, Timestamp},
    notify::destinations,
};
use entity::destination;

/// The destination type a change applies to: only webhook destinations are changed through
/// this route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Enum)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DestinationUpdateType {
    WebhookEndpoint,
}

/// Changes to a webhook destination; only sent fields change.
#[derive(Debug, Deserialize, Object)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[oai(rename_all = "camelCase")]
pub struct DestinationUpdate {
    #[oai(rename = "type")]
    #[serde(rename = "type")]
    pub kind: DestinationUpdateType,
    /// 1 to 120 characters.
    #[oai(validator(min_length = 1, max_length = 120))]
    pub name: Option<String>,
    /// Up to 1000 characters, or null to clear it.
    #[oai(validator(max_length = 1000))]
    #[serde(default)]
    pub description: Clearable<String>,
    pub enabled: Option<bool>,
    /// `https://...`, or `http://` only for `localhost`, `127.0.0.1`, `[::1]` or `::1`.
    #[oai(validator(min_length = 1))]
    pub url: Option<String>,
}

/// What every new destination has.
#[derive(Debug, Deserialize, Object)]
#[serde(rename_all = "camelCase")]
#[oai(rename_all = "camelCase")]
pub struct NewDestinationFields {
    /// 1 to 120 characters.
    #[oai(validator(min_length = 1, max_length = 120))]
    pub name: String,
    /// Up to 1000 characters, or null.
    #[oai(validator(max_length = 1000))]
    #[serde(default)]
    pub description: Clearable<String>,
    /// Defaults to true.
    pub enabled: Option<bool>,
    /// Makes this the organization's default destination (clears the previous default).
    pub is_default: Option<bool>,
}

/// A new signed webhook endpoint. Its signing secret is in the answer, once.
#[derive(Debug, Deserialize, Object)]
#[serde(rename_all = "camelCase")]
#[oai(rename_all = "camelCase")]
pub struct WebhookEndpointDestinationCreate {
    #[oai(flatten)]
    #[serde(flatten)]
    pub fields: NewDestinationFields,
    /// `https://...`, or `http://` only for `localhost`, `127.0.0.1`, `[::1]` or `::1`.
    #[oai(validator(min_length = 1))]
    pub url: String,
}

/// A new Slack channel, reached through its incoming webhook.
#[derive(Debug, Deserialize, Object)]
#[serde(rename_all = "camelCase")]
#[oai(rename_all = "camelCase")]
pub struct SlackChannelDestinationCreate {
    #[oai(flatten)]
    #[serde(flatten)]
    pub fields: NewDestinationFields,
    /// The Slack incoming-webhook URL, `https://` only. Stored encrypted, never shown in full.
    #[oai(validator(min_length = 1))]
    pub webhook_url: String,
}

/// A new destination, by `type`: a signed webhook endpoint or a Slack channel.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum DestinationCreate {
    #[serde(rename = "WEBHOOK_ENDPOINT")]
    WebhookEndpoint(WebhookEndpointDestinationCreate),
    #[serde(rename = "SLACK_CHANNEL")]
    SlackChannel(SlackChannelDestinationCreate),
}

crate::tagged_body!(
    DestinationCreate,
    "A new destination, by `type`: a signed webhook endpoint or a Slack channel.",
    "type",
    {
        "WEBHOOK_ENDPOINT" => WebhookEndpoint(WebhookEndpointDestinationCreate),
        "SLACK_CHANNEL" => SlackChannel(SlackChannelDestinationCreate),
    }
);

impl From<DestinationUpdate> for destinations::DestinationChanges {
    fn from(body: DestinationUpdate) -> Self {
        Self {
            name: body.name,
            description: body.description.into(),
            enabled: body.enabled,
            url: body.url,
        }
    }
}

impl destinations::NewDestination {
    fn of(
        kind: destination::DestinationKind,
        fields: NewDestinationFields,
        url: Option<String>,
        webhook_url: Option<String>,
    ) -> Self {
        Self {
            kind,
            name: fields.name,
            description: fields.description.into(),
            enabled: fields.enabled,
            is_default: fields.is_default,
            url,
            webhook_url,
        }
    }
}

impl From<DestinationCreate> for destinations::NewDestination {
    fn from(body: DestinationCreate) -> Self {
        match body {
            DestinationCreate::WebhookEndpoint(b) => Self::of(
                destination::DestinationKind::WebhookEndpoint,
                b.fields,
                Some(b.url),
                None,
            ),
            DestinationCreate::SlackChannel(b) => Self::of(
                destination::DestinationKind::SlackChannel,
                b.fields,
                None,
                Some(b.webhook_url),
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DestinationProvider {
    Slack,
    Outpost,
    Webhook,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DestinationKind {
    SlackChannel,
    WebhookEndpoint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DestinationSyncStatus {
    PendingProviderSync,
    Synced,
    ProviderError,
    DisabledByProvider,
}

impl From<destination::DestinationSyncStatus> for DestinationSyncStatus {
    fn from(stored: destination::DestinationSyncStatus) -> Self {
        use destination::DestinationSyncStatus as Stored;
        match stored {
            Stored::PendingProviderSync => DestinationSyncStatus::PendingProviderSync,
            Stored::Synced => DestinationSyncStatus::Synced,
            Stored::ProviderError => DestinationSyncStatus::ProviderError,
            Stored::DisabledByProvider => DestinationSyncStatus::DisabledByProvider,
        }
    }
}

/// Where deliveries go. Secrets are never returned in full.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct Destination {
    pub id: uuid::Uuid,
    pub key: String,
    pub name: String,
    pub description: Nullable<String>,
    pub provider: DestinationProvider,
    pub kind: DestinationKind,
    pub enabled: bool,
    /// Configuration with secrets masked: `{url, signingSecret}` for webhooks,
    /// `{webhookUrl}` for Slack channels.
    pub masked_config: Nullable<BTreeMap<String, Value>>,
    pub sync_status: DestinationSyncStatus,
    pub last_synced_at: Nullable<Timestamp>,
    pub provider_error_code: Nullable<String>,
    pub provider_error_message: Nullable<String>,
    pub is_default: bool,
    pub schema_version: String,
    pub config_hash: Nullable<String>,
    pub archived_at: Nullable<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<destination::Model> for Destination {
    fn from(m: destination::Model) -> Self {
        let masked = match m.config {
            Value::Object(map) => Some(map.into_iter().collect()),
            _ => None,
        };
        Self {
            id: uuid::Uuid::parse_str(&m.id).unwrap_or_default(),
            key: m.key,
            name: m.name,
            description: m.description.into(),
            provider: parse_enum(&m.provider).unwrap_or(DestinationProvider::Webhook),
            kind: parse_enum(m.kind.as_str()).unwrap_or(DestinationKind::WebhookEndpoint),
            enabled: m.enabled,
            masked_config: masked.into(),
            sync_status: m.sync_status.into(),
            last_synced_at: ts_opt(m.last_synced_at),
            provider_error_code: m.provider_error_code.into(),
            provider_error_message: m.provider_error_message.into(),
            is_default: m.is_default,
            schema_version: m.schema_version,
            config_hash: m.config_hash.into(),
            archived_at: ts_opt(m.archived_at),
            created_at: m.created_at.into(),
            updated_at: m.updated_at.into(),
        }
    }
}

/// `data` of destination.list.
#[derive(Debug, Object)]
pub struct DestinationListData {
    pub destinations: Vec<Destination>,
}
command_data!(DestinationListData, "destination.list");

/// `data` of destination.get.
#[derive(Debug, Object)]
pub struct DestinationGetData {
    pub destination: Destination,
}
command_data!(DestinationGetData, "destination.get");

/// `data` of destination.create.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct DestinationCreateData {
    pub destination: Destination,
    /// Webhook destinations: the Standard Webhooks signing secret (`whsec_...`), shown only
    /// here. Verify deliveries with it.
    #[oai(skip_serializing_if_is_none)]
    pub signing_secret: Option<String>,
}
command_data!(DestinationCreateData, "destination.create");

/// `data` of destination.update.
#[derive(Debug, Object)]
pub struct DestinationUpdateData {
    pub destination: Destination,
}
command_data!(DestinationUpdateData, "destination.update");

/// `data` of destination.disable.
#[derive(Debug, Object)]
pub struct DestinationDisableData {
    pub destination: Destination,
}
command_data!(DestinationDisableData, "destination.disable");

fn touched(d: &destination::Model) -> Vec<ResourceRef> {
    vec![ResourceRef::new("destination", d.id.clone())]
}

pub struct DestinationsApi {
    pub state: AppState,
}

#[OpenApi(tag = "ApiTags::Destinations")]
impl DestinationsApi {
    /// List destinations (extension)
    #[oai(
        path = "/api/destinations",
        method = "get",
        operation_id = "listDestinations"
    )]
    async fn list(&self, key: ApiKeyAuth) -> ActionResponse<DestinationListData> {
        let auth = caller!(self.state, key, DestinationListData);
        reply(
            destinations::list(&self.state.db, &auth.organization_id)
                .await
                .map(|rows| {
                    let resources = rows.iter().flat_map(touched).collect();
                    let destinations = rows.into_iter().map(Destination::from).collect();
                    (DestinationListData { destinations }, resources, None)
                }),
        )
    }

    /// Get a destination (extension)
    #[oai(
        path = "/api/destinations/:id",
        method = "get",
        operation_id = "getDestination"
    )]
    async fn get(&self, key: ApiKeyAuth, id: Path<String>) -> ActionResponse<DestinationGetData> {
        let auth = caller!(self.state, key, DestinationGetData);
        reply(
            destinations::get(&self.state.db, &auth.organization_id, &id)
                .await
                .map(|d| {
                    let r = touched(&d);
                    (
                        DestinationGetData {
                            destination: d.into(),
                        },
                        r,
                        None,
                    )
                }),
        )
    }

    /// Create a destination (extension)
    ///
    /// `WEBHOOK_ENDPOINT` with `url`, or `SLACK_CHANNEL` with a Slack incoming-webhook
    /// `webhookUrl`. A webhook's signing secret is returned once, in `data.signingSecret`.
    /// Needs the write scope.
    #[oai(
        path = "/api/destinations",
        method = "post",
        operation_id = "createDestination"
    )]
    async fn create(
        &self,
        key: ApiKeyAuth,
        body: JsonBody<DestinationCreate>,
    ) -> ActionResponse<DestinationCreateData> {
        let auth = caller!(self.state, key, DestinationCreateData);
        let ctx = action_ctx::<DestinationCreateData>(&auth);
        reply_change(
            destinations::create(&self.state.db, &self.state.secrets, &ctx, body.0.into()).await,
            |c| DestinationCreateData {
                destination: c.destination.into(),
                signing_secret: c.signing_secret,
            },
        )
    }

    /// Update a webhook destination
    ///
    /// `type` must be `WEBHOOK_ENDPOINT`; the other sent fields change. `url` must start with
    /// `https://`, or with `http://` followed by `localhost`, `127.0.0.1`, `[::1]` or `::1` and
    /// then a port, a path or the end. Needs the write scope.
    #[oai(
        path = "/api/destinations/:id",
        method = "patch",
        operation_id = "updateDestination"
    )]
    async fn update(
        &self,
        key: ApiKeyAuth,
        id: Path<String>,
        body: JsonBody<DestinationUpdate>,
    ) -> ActionResponse<DestinationUpdateData> {
        let auth = caller!(self.state, key, DestinationUpdateData);
        let ctx = action_ctx::<DestinationUpdateData>(&auth);
        reply_change(
            destinations::update(&self.state.db, &ctx, &id, body.0.into()).await,
            |v| DestinationUpdateData {
                destination: v.into(),
            },
        )
    }

    /// Disable a destination
    ///
    /// Sets `enabled` to false; nothing is delivered to it until it is enabled again (PATCH
    /// with `enabled: true`). Needs the write scope.
    #[oai(
        path = "/api/destinations/:id/disable",
        method = "post",
        operation_id = "disableDestination"
    )]
    async fn disable(
        &self,
        key: ApiKeyAuth,
        id: Path<String>,
    ) -> ActionResponse<DestinationDisableData> {
        let auth = caller!(self.state, key, DestinationDisableData);
        let ctx = action_ctx::<DestinationDisableData>(&auth);
        reply_change(
            destinations::disable(&self.state.db, &ctx, &id).await,
            |v| DestinationDisableData {
                destination: v.into(),
            },
        )
    }
}
