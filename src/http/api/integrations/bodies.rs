//! Request and response bodies of `/api/integrations`.

use super::*;

/// One provider and the organization's connection to it.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct IntegrationListItem {
    /// Provider ID, e.g. `stripe`, `google-mail`.
    pub id: String,
    pub name: String,
    /// `CRM`, `Communication`, `Calls`, `Calendar`, `Analytics`, `Billing` or `Support`.
    pub category: String,
    /// `connected` or `not_connected`.
    pub status: String,
    /// Null when not connected.
    pub connection_id: Nullable<String>,
    /// When data last arrived from the provider (a sync or a webhook); null until then.
    pub last_data_received_at: Nullable<Timestamp>,
    /// `SUCCESS`, `FAILED`, `RUNNING`, `PENDING` (connected, first sync not run yet), `NO_SYNC`
    /// (the provider has no sync in this service yet) or `NOT_CONNECTED`.
    pub sync_status: String,
    /// The latest failed sync's error, else null.
    pub error_message: Nullable<String>,
}

/// Providers with their connection state.
#[derive(Debug, Object)]
pub struct IntegrationList {
    pub items: Vec<IntegrationListItem>,
}

/// A credential field of a direct connection.
#[derive(Debug, Object)]
pub struct RequiredField {
    /// Key in `config`.
    pub key: String,
    pub label: String,
    /// Whether the value is a secret (stored encrypted, never returned).
    pub secret: bool,
}

/// A follow-up step after connecting.
#[derive(Debug, Object)]
pub struct PostConnectStep {
    /// Step name for `POST /api/integrations/setup-step`: `webhooks`, `mappings`.
    pub id: String,
    pub required: bool,
    /// False when this service does not implement the step yet.
    pub supported: bool,
    /// The command line that runs it.
    pub command: String,
}

/// How a provider connects and what works for it here.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct Capability {
    /// Name on the command line (`gmail` for `google-mail`).
    pub cli_name: String,
    pub provider_id: String,
    /// `direct_api_key` (credentials in `config`, or typed into the connect page) or
    /// `browser_session` (only through the connect page).
    pub setup_mode: String,
    /// `api_key`, `secret_key`, `service_role_key`, `api_token`, or `browser_authorization`
    /// (the connect page records the person's authorization; no provider OAuth happens in
    /// this version).
    pub credential_type: String,
    /// Fields `config` must carry for a direct connection; empty for browser-only providers.
    pub required_fields: Vec<RequiredField>,
    /// Commands that work for this provider. `sync-status` appears only for providers this
    /// service syncs (Stripe today).
    pub commands: Vec<String>,
    pub post_connect_steps: Vec<PostConnectStep>,
}

pub(super) fn capability(p: &Provider) -> Capability {
    Capability {
        cli_name: p.cli_name().to_string(),
        provider_id: p.id.to_string(),
        setup_mode: p.setup_mode.as_str().to_string(),
        credential_type: p.credential_type.to_string(),
        required_fields: p
            .fields
            .iter()
            .map(|f| RequiredField {
                key: f.key.to_string(),
                label: f.label.to_string(),
                secret: f.secret,
            })
            .collect(),
        commands: capabilities::commands(p),
        post_connect_steps: capabilities::post_connect_steps(p)
            .into_iter()
            .map(|s| PostConnectStep {
                id: s.id,
                required: s.required,
                supported: s.supported,
                command: s.command,
            })
            .collect(),
    }
}

/// The capability of the one provider asked for (the spec's `{provider: Capability}`).
#[derive(Debug, Object)]
pub struct ProviderCapability {
    pub provider: Capability,
}

/// `{provider: Capability}` when `provider` is given; without it an object keyed by provider
/// ID at the top level, `{<providerId>: Capability, ...}`, with every provider.
#[derive(Debug, Union)]
pub enum Capabilities {
    One(ProviderCapability),
    All(BTreeMap<String, Capability>),
}

/// Body of connect.
#[derive(Debug, Deserialize, Object)]
#[serde(deny_unknown_fields)]
pub struct ConnectRequest {
    /// Provider ID (`google-mail`, not the CLI alias `gmail`).
    pub provider: String,
    /// Credentials for a direct connection (see the capability's `requiredFields`). Omit it to
    /// open a browser connection session instead.
    pub config: Option<BTreeMap<String, Value>>,
}

/// A direct connection was made with the sent credentials.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct DirectConnection {
    pub connected: bool,
    pub connection_id: String,
    /// True when the provider was already connected (its credentials were replaced).
    pub already_connected: bool,
}

/// A browser connection session: open `connectUrl`, then poll the connect status.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct ConnectSession {
    pub session_id: String,
    /// The page this service serves where the person completes the connection (30 minutes).
    pub connect_url: String,
    pub already_connected: bool,
}

/// Direct connection (with `config`) or browser session (without).
#[derive(Debug, Union)]
#[oai(one_of)]
pub enum ConnectResult {
    Direct(DirectConnection),
    Session(ConnectSession),
}

/// The plan's connection limit, or a read-only key.
#[derive(Debug, Union)]
#[oai(one_of)]
pub enum Forbidden {
    Limit(PlanConnectionLimit),
    Scope(ErrorBody),
}

/// State of a browser connection session.
#[derive(Debug, Object)]
pub struct SessionStatus {
    /// `pending`, `connected`, `failed` or `expired`.
    pub status: String,
    pub provider: String,
    /// Why the session failed or expired.
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
}

/// Body of disconnect.
#[derive(Debug, Deserialize, Object)]
#[serde(deny_unknown_fields)]
pub struct DisconnectRequest {
    pub provider: String,
}

/// The connection is gone.
#[derive(Debug, Object)]
pub struct Disconnected {
    /// Always `true`.
    pub success: bool,
}

/// The provider is valid but not connected.
#[derive(Debug, Object)]
pub struct NotConnected {
    /// Always `false`.
    pub success: bool,
    pub message: String,
}

/// State of one synced model.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct ModelSyncStatus {
    /// `customers` or `subscriptions` for Stripe.
    pub model: String,
    /// `PENDING` (not run yet), `RUNNING`, `SUCCESS` or `FAILED`: the latest run.
    pub status: String,
    /// End of the latest successful run; null until one succeeded.
    pub last_synced_at: Nullable<Timestamp>,
    /// The latest run's error, else null.
    pub error_message: Nullable<String>,
}

/// Sync status of one provider.
#[derive(Debug, Object)]
pub struct SyncStatus {
    pub provider: String,
    pub name: String,
    pub category: String,
    /// `connected` or `not_connected`.
    pub status: String,
    /// One entry per synced model; empty when not connected or when the provider has no sync.
    pub syncs: Vec<ModelSyncStatus>,
}

/// Body of setup-step.
#[derive(Debug, Deserialize, Object)]
#[serde(deny_unknown_fields)]
pub struct SetupStepRequest {
    pub provider: String,
    /// `webhooks` (Stripe) or `mappings` (CRMs).
    pub step: String,
    /// Step-specific: `{webhookSecret}` for `webhooks`, `{mappings: [...]}` for `mappings`.
    pub config: Option<BTreeMap<String, Value>>,
}

/// A header the provider sends with each webhook delivery.
#[derive(Debug, Object)]
pub struct WebhookHeader {
    pub name: String,
    pub description: String,
}

/// A CRM pipeline stage and how this service reads opportunities in it.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct StageMapping {
    pub pipeline_id: String,
    pub stage_id: String,
    /// `open`, `won` or `lost`.
    pub status: String,
}

/// Outcome of a setup step. `webhooks` answers `url`, `events`, `headers`, `secretConfigured`;
/// `mappings` answers `pipelines` and `mappings`.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct SetupStepResult {
    pub provider: String,
    pub step: String,
    /// `config_required` (without `config`) or `configured`.
    pub status: String,
    /// What to do next, for people.
    pub message: String,
    /// Where the provider must send webhooks.
    #[oai(skip_serializing_if_is_none)]
    pub url: Option<String>,
    /// Event types to subscribe the endpoint to.
    #[oai(skip_serializing_if_is_none)]
    pub events: Option<Vec<String>>,
    #[oai(skip_serializing_if_is_none)]
    pub headers: Option<Vec<WebhookHeader>>,
    /// Whether a signing secret is stored (it is never returned).
    #[oai(skip_serializing_if_is_none)]
    pub secret_configured: Option<bool>,
    /// CRM pipelines known to this service.
    #[oai(skip_serializing_if_is_none)]
    pub pipelines: Option<Vec<String>>,
    /// Stored stage mappings.
    #[oai(skip_serializing_if_is_none)]
    pub mappings: Option<Vec<StageMapping>>,
}

pub(super) fn setup_result(o: setup::SetupOutcome) -> SetupStepResult {
    SetupStepResult {
        provider: o.provider,
        step: o.step,
        status: o.status,
        message: o.message,
        url: o.url,
        events: o.events,
        headers: o.headers.map(|h| {
            h.into_iter()
                .map(|h| WebhookHeader {
                    name: h.name,
                    description: h.description,
                })
                .collect()
        }),
        secret_configured: o.secret_configured,
        pipelines: o.pipelines,
        mappings: o.mappings.map(|m| {
            m.into_iter()
                .map(|m| StageMapping {
                    pipeline_id: m.pipeline_id,
                    stage_id: m.stage_id,
                    status: m.status.as_str().to_string(),
                })
                .collect()
        }),
    }
}
