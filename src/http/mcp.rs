//! The tool gateway over the Model Context Protocol at `/mcp`: rmcp's streamable HTTP server
//! (stateless, JSON responses) mounted in the poem application. `tools/list` shows the same
//! names, descriptions and input schemas as `GET /api/tools`; `tools/call` runs the same code
//! path as `POST /api/tools/call` (validation, allowance, organization scoping). Every HTTP
//! request must carry the organization's `Authorization: Bearer ok_...` key.

use std::sync::Arc;

use poem::{
    endpoint::{BoxEndpoint, TowerCompatExt},
    Endpoint, EndpointExt, Request, Response,
};
use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
    transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    },
    ErrorData, RoleServer, ServerHandler,
};
use serde_json::Value;

use crate::{
    auth::authenticate,
    http::api::errors,
    state::AppState,
    tools::{self, registry, ToolContext},
};

/// The organization an authenticated `/mcp` request acts for (set by [`McpEndpoint`]).
#[derive(Debug, Clone)]
struct McpCaller {
    organization_id: String,
}

/// The MCP server: one per request (stateless), sharing the application state.
#[derive(Clone)]
pub struct McpServer {
    state: AppState,
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("custintel", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Customer intelligence tools: browse customers, users, workspace users, facts \
                 and sources, read a customer's timeline. Results are JSON.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = registry::all()
            .iter()
            .map(|r| {
                let schema = r.schema.as_object().cloned().unwrap_or_default();
                Tool::new(r.tool.name, r.tool.description, Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = context
            .extensions
            .get::<poem::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<McpCaller>())
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("request without a caller", None))?;
        let ctx = ToolContext::new(self.state.clone(), caller.organization_id);
        let input = request.arguments.map(Value::Object);
        let result = match tools::call(ctx, &request.name, input).await {
            Ok(value) => CallToolResult::structured(value),
            Err(e) => CallToolResult::structured_error(errors::tool_error_json(e)),
        };
        Ok(result.into())
    }
}

type McpService = StreamableHttpService<McpServer, LocalSessionManager>;

/// `/mcp`: authenticates the Bearer key, then hands the request to rmcp.
pub struct McpEndpoint {
    state: AppState,
    inner: BoxEndpoint<'static, Response>,
}

/// The `/mcp` endpoint.
pub fn endpoint(state: AppState) -> McpEndpoint {
    let for_factory = state.clone();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        // Every request carries a Bearer key (no ambient cookies), so DNS rebinding gains an
        // attacker nothing; the service is reached under its public host name.
        .disable_allowed_hosts();
    let service: McpService = StreamableHttpService::new(
        move || {
            Ok(McpServer {
                state: for_factory.clone(),
            })
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    McpEndpoint {
        state,
        inner: service.compat().boxed(),
    }
}

impl Endpoint for McpEndpoint {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        let token = req
            .headers()
            .get(poem::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::to_string);
        let Some(token) = token else {
            return Ok(errors::mcp_unauthorized(crate::auth::MISSING_KEY));
        };
        match authenticate(&self.state.db, &token).await {
            Ok(auth) => {
                req.extensions_mut().insert(McpCaller {
                    organization_id: auth.organization_id,
                });
                self.inner.call(req).await
            }
            Err(e) => Ok(errors::mcp_auth_error(e)),
        }
    }
}
