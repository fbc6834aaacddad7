//! `/api/integrations`: providers, connections, connect sessions, setup steps and sync status.

mod bodies;
mod responses;

pub use bodies::*;
pub use responses::*;

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

use super::{
    errors::{IntegrationFailure, PlanConnectionLimit},
    ApiTags, AppState,
};
use crate::{
    auth::{authenticate, AuthContext},
    http::api::ApiKeyAuth,
    http::envelope::{request_issues, ErrorBody},
    http::request::JsonBody,
    http::types::{ts_opt, Nullable, Timestamp},
    integrations::{
        capabilities, connections, providers, sessions, setup, IntegrationError, IntegrationResult,
        Provider,
    },
};

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
    /// and its follow-up steps. `provider` takes a provider ID or the CLI alias `gmail` and
    /// answers `{provider: Capability}`. Without it the answer is an object keyed by provider ID
    /// at the top level, `{"stripe": Capability, "hubspot": Capability, ...}`, with every
    /// provider: read `answer[providerId]`.
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
                    None => Ok(Capabilities::All(
                        providers::PROVIDERS
                            .iter()
                            .map(|p| (p.id.to_string(), capability(p)))
                            .collect(),
                    )),
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
                    status: v.session.status.to_string(),
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
                            status: s.status.to_string(),
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
