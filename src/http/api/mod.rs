//! The HTTP surface: poem-openapi endpoint structs, one file per tag. Handlers parse, call a
//! domain function and map its result; nothing here touches the database directly.

pub mod agents;
pub mod automation_runs;
pub mod automations;
pub mod connect_page;
pub mod destinations;
pub mod errors;
pub mod ingest;
pub mod ingest_batch;
pub mod ingest_body;
pub mod integrations;
pub mod keys;
pub mod signals;
pub mod tools;
pub mod webhooks;

use poem_openapi::{OpenApiService, Tags};

use crate::{
    auth::{authenticate, AuthContext},
    http::envelope::{ActionResponse, CommandData, ResourceRef},
    platform::{ActionContext, Change, PlatformError, PlatformResult},
};

pub use crate::state::AppState;

/// `Authorization: Bearer ok_...`: an API key of your organization (`custintel admin create-org`,
/// `custintel admin create-key` or `custintel demo` print one).
#[derive(poem_openapi::SecurityScheme)]
#[oai(ty = "bearer", bearer_format = "ok_ API key")]
pub struct ApiKeyAuth(pub poem_openapi::auth::Bearer);

// The HTTP side's view of the state: who a request's Bearer key belongs to.
impl AppState {
    pub async fn auth(&self, key: &ApiKeyAuth) -> Result<AuthContext, PlatformError> {
        Ok(authenticate(&self.db, &key.0.token).await?)
    }
}

#[derive(Tags)]
pub enum ApiTags {
    /// AI agents of your organization: read them, rename them, change their instructions and
    /// actions, or disable them.
    Agents,
    /// Signals say which tracked events matter (by event name and property conditions).
    /// Automations trigger on them.
    Signals,
    /// Automations run when a signal occurs or on a schedule, and deliver to destinations.
    Automations,
    /// Destinations receive deliveries: signed webhooks (Standard Webhooks) and Slack channels.
    Destinations,
    /// API key validation.
    Keys,
    /// Connect data providers (CRM, calls, calendar, email, analytics, billing, support) with
    /// credentials or through a browser connect page, follow their setup steps and sync status.
    /// Stripe syncs customers' billing status and MRR in the background.
    Integrations,
    /// The Ingest API: tracking events from browsers and servers, authenticated by the
    /// organization's public key (`pk_...`) in the path. No `Authorization` header.
    Ingest,
    /// The tool gateway: read customers, users, facts, sources and timelines, for people and
    /// AI agents (also over MCP at `/mcp`).
    Tools,
}

/// A platform action's outcome: its data, the resources it touched, its audit row.
pub type Outcome<T> = (T, Vec<ResourceRef>, Option<String>);

/// Wraps a platform action's outcome in the command envelope, or maps its error
/// ([`errors`]).
pub fn reply<T: CommandData>(result: PlatformResult<Outcome<T>>) -> ActionResponse<T> {
    match result {
        Ok((data, resources, audit_id)) => ActionResponse::ok(data, resources, audit_id, vec![]),
        Err(e) => e.into(),
    }
}

/// Wraps a write action's change in the command envelope, its `data` made from the changed
/// resource, or maps its error.
pub fn reply_change<V, T: CommandData>(
    result: PlatformResult<Change<V>>,
    data: impl FnOnce(V) -> T,
) -> ActionResponse<T> {
    reply(result.map(|c| {
        let resources = c.resources.into_iter().map(ResourceRef::from).collect();
        (data(c.view), resources, Some(c.audit_id))
    }))
}

/// The caller of a platform action, or the response that refuses it.
macro_rules! caller {
    ($state:expr, $key:expr, $data:ty) => {
        match $state.auth(&$key).await {
            Ok(auth) => auth,
            Err(e) => return <$crate::http::envelope::ActionResponse<$data>>::from(e),
        }
    };
}
pub(crate) use caller;

/// Context for a write action of command `T`.
pub fn action_ctx<T: CommandData>(auth: &AuthContext) -> ActionContext<'_> {
    ActionContext {
        auth,
        command_id: T::COMMAND_ID,
    }
}

pub type Apis = (
    keys::KeysApi,
    agents::AgentsApi,
    signals::SignalsApi,
    automations::AutomationsApi,
    automation_runs::AutomationRunsApi,
    destinations::DestinationsApi,
    integrations::IntegrationsApi,
    webhooks::WebhooksApi,
    ingest::IngestApi,
    tools::ToolsApi,
);

/// The OpenAPI service for every typed route.
pub fn service(state: AppState, ingest: crate::ingest::Ingest) -> OpenApiService<Apis, ()> {
    OpenApiService::new(
        (
            keys::KeysApi {
                state: state.clone(),
            },
            agents::AgentsApi {
                state: state.clone(),
            },
            signals::SignalsApi {
                state: state.clone(),
            },
            automations::AutomationsApi {
                state: state.clone(),
            },
            automation_runs::AutomationRunsApi {
                state: state.clone(),
            },
            destinations::DestinationsApi {
                state: state.clone(),
            },
            integrations::IntegrationsApi {
                state: state.clone(),
            },
            webhooks::WebhooksApi {
                state: state.clone(),
            },
            ingest::IngestApi { ingest },
            tools::ToolsApi { state },
        ),
        "custintel",
        "1.0.0",
    )
    .description(include_str!("description.md"))
}
