//! `/api/integrations`: providers, connections, connect sessions, setup steps and sync status.

use std::collections::BTreeMap;

use chrono::Utc;
use poem_openapi::{
    param::Query,
    payload::Json,
    types::{ParseFromJSON, ToJSON},
    ApiResponse, Object, OpenApi, Union,
};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{ApiTags, AppState};
use crate::{
    api::ApiKeyAuth,
    auth::{authenticate, AuthContext},
    envelope::{request_issues, ErrorBody},
    integrations::{
        capabilities, connections, providers, sessions, setup, IntegrationError, IntegrationResult,
        Provider,
    },
    request::{JsonBody, ValidationIssue},
    types::{ts_opt, Nullable, Timestamp},
};

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

fn capability(p: &Provider) -> Capability {
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

/// The capability of the one provider asked for.
#[derive(Debug, Object)]
pub struct ProviderCapability {
    pub provider: Capability,
}

/// Every provider's capability, keyed by provider ID.
#[derive(Debug, Object)]
pub struct AllCapabilities {
    pub providers: BTreeMap<String, Capability>,
}

/// One provider's capability when `provider` is given, else every provider's.
#[derive(Debug, Union)]
#[oai(one_of)]
pub enum Capabilities {
    One(ProviderCapability),
    All(AllCapabilities),
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

/// The plan allows no more integration connections.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct PlanConnectionLimit {
    pub error: String,
    /// `plan_connection_limit_exceeded`.
    pub code: String,
    /// `integration_connections`.
    pub feature: String,
    pub plan: String,
    pub current_connections: i64,
    pub limit: i64,
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

fn setup_result(o: setup::SetupOutcome) -> SetupStepResult {
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
                    status: m.status,
                })
                .collect()
        }),
    }
}

/// Every integration route answers with one of these.
#[derive(ApiResponse)]
#[oai(bad_request_handler = "integration_bad_request")]
pub enum IntegrationResponse<T: ParseFromJSON + ToJSON + Send + Sync> {
    #[oai(status = 200)]
    Ok(Json<T>),
    /// Invalid provider, malformed JSON, or a missing or invalid field (named in `details`).
    #[oai(status = 400)]
    BadRequest(Json<ErrorBody>),
    /// Missing, unknown or disabled API key.
    #[oai(status = 401)]
    Unauthorized(Json<ErrorBody>),
    /// The plan's connection limit is reached (connect), or the key is read-only (changes need
    /// the write scope).
    #[oai(status = 403)]
    Forbidden(Json<Forbidden>),
    /// No such session, or (setup-step) the provider is not connected.
    #[oai(status = 404)]
    NotFound(Json<ErrorBody>),
    /// Internal error.
    #[oai(status = 500)]
    Internal(Json<ErrorBody>),
    /// A provider's API or the database could not be reached; retry.
    #[oai(status = 503)]
    Unavailable(Json<ErrorBody>),
}

/// Framework errors (bad JSON, content type, parameters, missing key) in the spec's shapes.
fn integration_bad_request<T: ParseFromJSON + ToJSON + Send + Sync>(
    err: poem::Error,
) -> IntegrationResponse<T> {
    if err.is::<poem_openapi::error::AuthorizationError>() {
        return IntegrationResponse::Unauthorized(ErrorBody::new(crate::auth::MISSING_KEY));
    }
    bad_request(request_issues(&err))
}

fn bad_request<T: ParseFromJSON + ToJSON + Send + Sync>(
    issues: Vec<ValidationIssue>,
) -> IntegrationResponse<T> {
    let error = match issues.first() {
        Some(first) if issues.len() == 1 => format!("invalid request: {}", first.message),
        _ => format!("invalid request: {} problems", issues.len()),
    };
    IntegrationResponse::BadRequest(Json(ErrorBody {
        error,
        details: Some(issues),
    }))
}

impl<T: ParseFromJSON + ToJSON + Send + Sync> From<IntegrationError> for IntegrationResponse<T> {
    fn from(err: IntegrationError) -> Self {
        match err {
            IntegrationError::BadRequest { message, issues } => Self::BadRequest(Json(ErrorBody {
                error: message,
                details: (!issues.is_empty()).then_some(issues),
            })),
            IntegrationError::Unauthorized(m) => Self::Unauthorized(ErrorBody::new(m)),
            IntegrationError::Forbidden(m) => {
                Self::Forbidden(Json(Forbidden::Scope(ErrorBody::new(m).0)))
            }
            IntegrationError::ConnectionLimit {
                plan,
                current,
                limit,
            } => Self::Forbidden(Json(Forbidden::Limit(PlanConnectionLimit {
                error: format!(
                    "the {plan} plan allows {limit} integration connection(s) and {current} are \
                     in use: disconnect one or upgrade the plan"
                ),
                code: "plan_connection_limit_exceeded".to_string(),
                feature: "integration_connections".to_string(),
                plan,
                current_connections: current,
                limit,
            }))),
            IntegrationError::NotConnected(m) | IntegrationError::NotFound(m) => {
                Self::NotFound(ErrorBody::new(m))
            }
            IntegrationError::Upstream(m) | IntegrationError::Unavailable(m) => {
                Self::Unavailable(ErrorBody::new(m))
            }
            IntegrationError::Internal(m) => {
                tracing::error!(message = %m, "integration request failed");
                Self::Internal(ErrorBody::new("internal error"))
            }
        }
    }
}

fn answer<T: ParseFromJSON + ToJSON + Send + Sync>(
    result: IntegrationResult<T>,
) -> IntegrationResponse<T> {
    match result {
        Ok(v) => IntegrationResponse::Ok(Json(v)),
        Err(e) => e.into(),
    }
}

/// Disconnect answers.
#[derive(ApiResponse)]
#[oai(bad_request_handler = "disconnect_bad_request")]
pub enum DisconnectResponse {
    /// The connection, its credentials and its sync history are removed.
    #[oai(status = 200)]
    Ok(Json<Disconnected>),
    /// Invalid provider or malformed JSON.
    #[oai(status = 400)]
    BadRequest(Json<ErrorBody>),
    /// Missing, unknown or disabled API key.
    #[oai(status = 401)]
    Unauthorized(Json<ErrorBody>),
    /// The key is read-only: changes need the write scope.
    #[oai(status = 403)]
    Forbidden(Json<ErrorBody>),
    /// The provider is valid but not connected.
    #[oai(status = 404)]
    NotConnected(Json<NotConnected>),
    /// Internal error.
    #[oai(status = 500)]
    Internal(Json<ErrorBody>),
}

fn disconnect_bad_request(err: poem::Error) -> DisconnectResponse {
    match integration_bad_request::<Disconnected>(err) {
        IntegrationResponse::Unauthorized(b) => DisconnectResponse::Unauthorized(b),
        IntegrationResponse::BadRequest(b) => DisconnectResponse::BadRequest(b),
        _ => DisconnectResponse::Internal(ErrorBody::new("internal error")),
    }
}

impl From<IntegrationError> for DisconnectResponse {
    fn from(err: IntegrationError) -> Self {
        match err {
            IntegrationError::NotConnected(message) => {
                DisconnectResponse::NotConnected(Json(NotConnected {
                    success: false,
                    message,
                }))
            }
            IntegrationError::Forbidden(m) => DisconnectResponse::Forbidden(ErrorBody::new(m)),
            other => match IntegrationResponse::<Disconnected>::from(other) {
                IntegrationResponse::BadRequest(b) => DisconnectResponse::BadRequest(b),
                IntegrationResponse::Unauthorized(b) => DisconnectResponse::Unauthorized(b),
                _ => DisconnectResponse::Internal(ErrorBody::new("internal error")),
            },
        }
    }
}

pub struct IntegrationsApi {
    pub state: AppState,
}

impl IntegrationsApi {
    async fn caller(&self, key: &ApiKeyAuth) -> IntegrationResult<AuthContext> {
        Ok(authenticate(&self.state.db, &key.0.token).await?)
    }

    /// A caller allowed to change connections: the write scope is needed, as for platform
    /// actions, so a read-only key cannot connect or disconnect providers.
    async fn writer(&self, key: &ApiKeyAuth) -> IntegrationResult<AuthContext> {
        let auth = self.caller(key).await?;
        if !auth.can_write() {
            return Err(IntegrationError::Forbidden(
                "this API key is read-only: the write scope is required".to_string(),
            ));
        }
        Ok(auth)
    }
}

fn object(config: Option<BTreeMap<String, Value>>) -> Option<Map<String, Value>> {
    config.map(|c| c.into_iter().collect())
}

fn provider_param(raw: &str) -> IntegrationResult<&'static Provider> {
    crate::integrations::provider_for_api(raw)
}

#[OpenApi(tag = "ApiTags::Integrations")]
impl IntegrationsApi {
    /// List integrations
    ///
    /// Every provider with the organization's connection state, or only the connected ones.
    #[oai(
        path = "/api/integrations",
        method = "get",
        operation_id = "listIntegrations"
    )]
    async fn list(
        &self,
        key: ApiKeyAuth,
        /// Only connected integrations.
        #[oai(name = "connectedOnly", default)]
        connected_only: Query<bool>,
    ) -> IntegrationResponse<IntegrationList> {
        answer(
            async {
                let auth = self.caller(&key).await?;
                let views =
                    connections::list(&self.state.db, &auth.organization_id, connected_only.0)
                        .await?;
                Ok(IntegrationList {
                    items: views
                        .into_iter()
                        .map(|v| IntegrationListItem {
                            id: v.provider.id.to_string(),
                            name: v.provider.name.to_string(),
                            category: v.provider.category.to_string(),
                            status: if v.connection.is_some() {
                                "connected"
                            } else {
                                "not_connected"
                            }
                            .to_string(),
                            connection_id: v.connection.as_ref().map(|c| c.id.clone()).into(),
                            last_data_received_at: ts_opt(
                                v.connection.as_ref().and_then(|c| c.last_data_received_at),
                            ),
                            sync_status: v.sync_status,
                            error_message: v.error_message.into(),
                        })
                        .collect(),
                })
            }
            .await,
        )
    }

    /// Provider capabilities
    ///
    /// How a provider connects (`setupMode`, `requiredFields`), the commands that work for it
    /// and its follow-up steps. `provider` takes a provider ID or the CLI alias `gmail`; without
    /// it every provider's capability is returned, keyed by provider ID.
    #[oai(
        path = "/api/integrations/capabilities",
        method = "get",
        operation_id = "getIntegrationCapabilities"
    )]
    async fn capabilities(
        &self,
        key: ApiKeyAuth,
        /// Provider ID or CLI alias.
        provider: Query<Option<String>>,
    ) -> IntegrationResponse<Capabilities> {
        answer(
            async {
                self.caller(&key).await?;
                match provider.0.as_deref().map(str::trim) {
                    Some(name) => {
                        let p = providers::by_id_or_alias(name).ok_or_else(|| {
                            IntegrationError::invalid_field(
                                "provider",
                                format!("unknown provider `{name}`; one of: {}", providers::ids()),
                            )
                        })?;
                        Ok(Capabilities::One(ProviderCapability {
                            provider: capability(p),
                        }))
                    }
                    None => Ok(Capabilities::All(AllCapabilities {
                        providers: providers::PROVIDERS
                            .iter()
                            .map(|p| (p.id.to_string(), capability(p)))
                            .collect(),
                    })),
                }
            }
            .await,
        )
    }

    /// Connect a provider
    ///
    /// With `config`: a direct connection with those credentials (stored encrypted, never
    /// returned); every required field must be present and non-empty. Without `config`: a
    /// browser connection session whose `connectUrl` the person opens; poll
    /// `GET /api/integrations/connect/status`. Connecting Stripe starts its first sync within
    /// seconds. Needs the write scope.
    #[oai(
        path = "/api/integrations/connect",
        method = "post",
        operation_id = "connectIntegration"
    )]
    async fn connect(
        &self,
        key: ApiKeyAuth,
        body: JsonBody<ConnectRequest>,
    ) -> IntegrationResponse<ConnectResult> {
        answer(
            async {
                let auth = self.writer(&key).await?;
                let provider = provider_param(&body.0.provider)?;
                let now = Utc::now();
                match object(body.0.config) {
                    Some(config) => {
                        let c = connections::connect_direct(
                            &self.state.db,
                            &self.state.secrets,
                            &auth.organization_id,
                            provider,
                            &config,
                            now,
                        )
                        .await?;
                        Ok(ConnectResult::Direct(DirectConnection {
                            connected: true,
                            connection_id: c.connection_id,
                            already_connected: c.already_connected,
                        }))
                    }
                    None => {
                        let s = sessions::create(
                            &self.state.db,
                            &auth.organization_id,
                            provider,
                            &self.state.public_url,
                            now,
                        )
                        .await?;
                        Ok(ConnectResult::Session(ConnectSession {
                            session_id: s.session_id,
                            connect_url: s.connect_url,
                            already_connected: s.already_connected,
                        }))
                    }
                }
            }
            .await,
        )
    }

    /// Connect session status
    ///
    /// `pending` until the person completes the connect page, then `connected` or `failed`
    /// (with `error`); `expired` 30 minutes after creation.
    #[oai(
        path = "/api/integrations/connect/status",
        method = "get",
        operation_id = "getConnectStatus"
    )]
    async fn status(
        &self,
        key: ApiKeyAuth,
        /// The `sessionId` connect returned.
        #[oai(name = "sessionId")]
        session_id: Query<String>,
    ) -> IntegrationResponse<SessionStatus> {
        answer(
            async {
                let auth = self.caller(&key).await?;
                let v = sessions::status(
                    &self.state.db,
                    &auth.organization_id,
                    &session_id.0,
                    Utc::now(),
                )
                .await?;
                Ok(SessionStatus {
                    status: v.session.status,
                    provider: v.provider.id.to_string(),
                    error: v.session.error,
                })
            }
            .await,
        )
    }

    /// Disconnect a provider
    ///
    /// Removes the connection, its stored credentials, its sync history and its scheduled
    /// syncs. Customers and billing data already imported stay. Needs the write scope.
    #[oai(
        path = "/api/integrations/disconnect",
        method = "post",
        operation_id = "disconnectIntegration"
    )]
    async fn disconnect(
        &self,
        key: ApiKeyAuth,
        body: JsonBody<DisconnectRequest>,
    ) -> DisconnectResponse {
        let result: IntegrationResult<()> = async {
            let auth = self.writer(&key).await?;
            let provider = provider_param(&body.0.provider)?;
            connections::disconnect(&self.state.db, &auth.organization_id, provider).await
        }
        .await;
        match result {
            Ok(()) => DisconnectResponse::Ok(Json(Disconnected { success: true })),
            Err(e) => e.into(),
        }
    }

    /// Sync status
    ///
    /// Each synced model's latest run. `not_connected` with empty `syncs` when the provider is
    /// not connected; a connected provider without a sync in this service has empty `syncs`.
    #[oai(
        path = "/api/integrations/sync-status",
        method = "get",
        operation_id = "getSyncStatus"
    )]
    async fn sync_status(
        &self,
        key: ApiKeyAuth,
        /// Provider ID.
        provider: Query<String>,
    ) -> IntegrationResponse<SyncStatus> {
        answer(
            async {
                let auth = self.caller(&key).await?;
                let p = provider_param(&provider.0)?;
                let (connected, syncs) =
                    connections::sync_status(&self.state.db, &auth.organization_id, p).await?;
                Ok(SyncStatus {
                    provider: p.id.to_string(),
                    name: p.name.to_string(),
                    category: p.category.to_string(),
                    status: if connected {
                        "connected"
                    } else {
                        "not_connected"
                    }
                    .to_string(),
                    syncs: syncs
                        .into_iter()
                        .map(|s| ModelSyncStatus {
                            model: s.model,
                            status: s.status,
                            last_synced_at: ts_opt(s.last_synced_at),
                            error_message: s.error_message.into(),
                        })
                        .collect(),
                })
            }
            .await,
        )
    }

    /// Run a setup step
    ///
    /// `webhooks` (Stripe): without `config` answers the URL this service receives Stripe
    /// webhooks on, the events to subscribe to and the signature header; with
    /// `{webhookSecret: "whsec_..."}` stores the endpoint's signing secret (encrypted). No
    /// browser session is created. `mappings` (HubSpot, Attio): without `config` lists the known
    /// pipelines and stored mappings (`config_required`); with `{mappings: [...]}` stores them.
    /// Needs the write scope.
    #[oai(
        path = "/api/integrations/setup-step",
        method = "post",
        operation_id = "runIntegrationSetupStep"
    )]
    async fn setup_step(
        &self,
        key: ApiKeyAuth,
        body: JsonBody<SetupStepRequest>,
    ) -> IntegrationResponse<SetupStepResult> {
        answer(
            async {
                let auth = self.writer(&key).await?;
                let provider = provider_param(&body.0.provider)?;
                let outcome = setup::run(
                    &self.state.db,
                    &self.state.secrets,
                    &self.state.public_url,
                    &auth.organization_id,
                    provider,
                    &body.0.step,
                    object(body.0.config),
                )
                .await?;
                Ok(setup_result(outcome))
            }
            .await,
        )
    }
}
