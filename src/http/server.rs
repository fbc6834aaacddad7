//! Assembles the HTTP application and runs it.

use std::net::SocketAddr;

use poem::{
    endpoint::make_sync,
    get, handler,
    http::{header, HeaderValue, StatusCode},
    listener::{Acceptor, Listener, TcpListener},
    web::Json,
    Endpoint, EndpointExt, IntoResponse, Request, Response, Route, Server,
};
use serde_json::{json, Value};

use crate::http::{api, correlation};

/// The published description as a JSON value. Post-processing adds what poem-openapi cannot
/// say: named objects allow no properties beyond their declared ones (the spec's envelopes
/// forbid extras; request bodies refuse unknown fields), and the links between operations.
pub fn openapi_document(service_spec_json: &str) -> Value {
    let mut doc: Value = serde_json::from_str(service_spec_json).unwrap_or(Value::Null);
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        for schema in schemas.values_mut() {
            if let Some(obj) = schema.as_object_mut() {
                // poem-openapi writes `type: object` beside the `anyOf` of a union of scalars
                // (PathSegment: string or integer), which no scalar could match.
                let has_scalar_member = ["anyOf", "oneOf"].iter().any(|k| {
                    obj.get(*k)
                        .and_then(Value::as_array)
                        .is_some_and(|members| {
                            members.iter().any(|m| {
                                m.get("type")
                                    .and_then(Value::as_str)
                                    .is_some_and(|t| t != "object")
                            })
                        })
                });
                if has_scalar_member && obj.get("type").and_then(Value::as_str) == Some("object") {
                    obj.remove("type");
                }
                let is_object = obj.get("type").and_then(Value::as_str) == Some("object");
                if is_object
                    && obj.contains_key("properties")
                    && !obj.contains_key("additionalProperties")
                {
                    obj.insert("additionalProperties".into(), Value::Bool(false));
                }
            }
        }
    }
    // The tool gateway's input contracts come from schemars, not poem-openapi.
    crate::tools::openapi::extend_description(&mut doc);
    crate::http::typed_json::add_contract_components(&mut doc);
    crate::http::described_rules::describe(&mut doc);
    crate::http::examples::add_request_examples(&mut doc);
    crate::http::links::add_links(&mut doc);
    doc
}

/// The description of the code as built, independent of any database.
pub fn openapi_value() -> Value {
    let db = sea_orm::DatabaseConnection::default();
    let Ok(search) = crate::search::SearchIndex::new(db.clone()) else {
        return Value::Null;
    };
    let state = crate::state::AppState {
        db,
        secrets: crate::crypto::SecretBox::from_key(&[0u8; 32]),
        public_url: String::new(),
        integrations: Default::default(),
        search,
        agents: Default::default(),
        name_trigrams: Default::default(),
        allowance: Default::default(),
    };
    let ingest = configured_ingest(&state.db);
    openapi_document(&api::service(state, ingest).spec())
}

/// The Ingest API over `db` with this process's `messageId` window (`CUSTINTEL_DEDUP_WINDOW`)
/// and backlog (`CUSTINTEL_INGEST_BACKLOG_MB`), or their defaults.
pub fn configured_ingest(db: &sea_orm::DatabaseConnection) -> crate::ingest::Ingest {
    crate::ingest::Ingest::new(
        db.clone(),
        crate::config::dedup_window().unwrap_or(crate::ingest::dedup::DEFAULT_WINDOW),
        crate::config::ingest_backlog_bytes().unwrap_or(crate::ingest::backlog::DEFAULT_BYTES),
    )
}

/// `openapi.yaml` as committed.
pub fn openapi_yaml() -> String {
    serde_yaml::to_string(&openapi_value()).unwrap_or_default()
}

#[handler]
fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// How long the readiness check waits for the database: within the 2 s every route answers in
/// while the database cannot be reached (on PostgreSQL the pool's acquire timeout, 1.5 s, ends
/// the wait first).
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1500);

/// Readiness: 200 while the database answers and the ingest writer has loaded its `messageId`
/// window; 503 `{error}` otherwise, so a load balancer sends no traffic to an instance that
/// would fail it or keep it waiting. (`/healthz` is liveness: the process answers, whatever the
/// database does.)
#[handler]
async fn readyz(
    db: poem::web::Data<&sea_orm::DatabaseConnection>,
    ingest: poem::web::Data<&crate::ingest::Ingest>,
) -> Response {
    match tokio::time::timeout(READY_TIMEOUT, db.ping()).await {
        Ok(Ok(())) if !ingest.window_loaded() => match ingest.window_failure() {
            Some(failure) => not_ready(&format!(
                "the messageId window cannot be loaded (retrying): {failure}"
            )),
            None => not_ready("the messageId window is loading"),
        },
        Ok(Ok(())) => Json(json!({ "status": "ready" })).into_response(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness check: the database cannot be reached");
            not_ready("the database cannot be reached")
        }
        Err(_) => not_ready("the database did not answer within 1.5 s"),
    }
}

/// Prometheus scrape endpoint (no key: it shows counts only, never an organization's data).
#[handler]
async fn metrics_text(state: poem::web::Data<&crate::state::AppState>) -> Response {
    crate::http::metrics::render(&state)
        .await
        .with_content_type("text/plain; version=0.0.4; charset=utf-8")
        .into_response()
}

fn not_ready(message: &str) -> Response {
    Json(json!({ "error": message }))
        .with_status(StatusCode::SERVICE_UNAVAILABLE)
        .into_response()
}

/// Seconds a 503 asks the client to wait before retrying (`Retry-After`).
const RETRY_AFTER_SECS: &str = "2";

/// Every 503 (the database cannot be reached, a provider is down, not ready) carries
/// `Retry-After`, so load balancers and SDKs retry instead of giving up: added here, in one
/// place, to a 503 whose route did not set one itself.
async fn retry_after<E: Endpoint>(ep: E, req: Request) -> poem::Result<Response> {
    let mut resp = match ep.call(req).await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    };
    if resp.status() == StatusCode::SERVICE_UNAVAILABLE
        && !resp.headers().contains_key(header::RETRY_AFTER)
    {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from_static(RETRY_AFTER_SECS),
        );
    }
    Ok(resp)
}

/// Unknown routes and methods, and any framework error that escaped a typed route, answer in
/// the Platform API's `{error}` shape instead of plain text.
async fn json_error(err: poem::Error) -> Response {
    let status = err.status();
    let message = match status {
        StatusCode::NOT_FOUND => "no such route".to_string(),
        StatusCode::METHOD_NOT_ALLOWED => "method not allowed on this route".to_string(),
        _ => err.to_string(),
    };
    Json(json!({ "error": message }))
        .with_status(status)
        .into_response()
}

/// The whole application: typed API, description, docs UI and health check, around an Ingest
/// API the caller has started ([`crate::ingest::Ingest::start`]): until its window is loaded the
/// application is not ready.
pub fn app(state: crate::state::AppState, ingest: crate::ingest::Ingest) -> impl Endpoint {
    let connect_page = get(api::connect_page::show)
        .post(api::connect_page::submit)
        .data(state.clone());
    let mcp = crate::http::mcp::endpoint(state.clone());
    let ready = get(readyz).data(state.db.clone()).data(ingest.clone());
    let metrics = get(metrics_text).data(state.clone());
    let service = api::service(state, ingest);
    let doc = openapi_document(&service.spec());
    // The request body contracts come from this description: built before the first request.
    let bodies = crate::http::body_contract::prepare(&doc);
    for (name, error) in &bodies.broken {
        tracing::error!(component = %name, %error, "a request body schema could not be compiled");
    }
    let allowed = crate::http::allow::AllowedMethods::of(
        &doc,
        &[
            ("/openapi.yaml", &["GET"]),
            ("/openapi.json", &["GET"]),
            ("/healthz", &["GET"]),
            ("/readyz", &["GET"]),
            ("/metrics", &["GET"]),
            ("/connect/:session_id", &["GET", "POST"]),
            ("/sdk/v1/custintel.js", &["GET"]),
        ],
    );
    let yaml = serde_yaml::to_string(&doc).unwrap_or_default();
    let json_text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    let docs = service.swagger_ui();
    Route::new()
        .nest("/", service)
        .at(
            "/openapi.yaml",
            get(make_sync(move |_| {
                yaml.clone()
                    .with_content_type("application/yaml; charset=utf-8")
            })),
        )
        .at(
            "/openapi.json",
            get(make_sync(move |_| {
                json_text
                    .clone()
                    .with_content_type("application/json; charset=utf-8")
            })),
        )
        .nest("/docs", docs)
        .at("/healthz", get(healthz))
        .at("/readyz", ready)
        .at("/metrics", metrics)
        .at("/connect/:session_id", connect_page)
        .at("/mcp", mcp)
        .at(
            "/sdk/v1/custintel.js",
            get(crate::http::tracker_script::script),
        )
        .catch_all_error(json_error)
        .around(retry_after)
        .around(move |ep, req| crate::http::allow::middleware(ep, req, allowed.clone()))
        .around(crate::http::metrics::middleware)
        .around(correlation::middleware)
}

/// Binds `bind` and serves until Ctrl-C or SIGTERM; returns the bound address through
/// `on_bound`.
pub async fn serve(
    state: crate::state::AppState,
    bind: &str,
    on_bound: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    serve_until(state, bind, on_bound, shutdown_signal()).await
}

/// Like [`serve`], but stops (as it does on a signal) when `stop` completes: benchmarks stop
/// their in-process instances before dropping what those instances use.
pub async fn serve_until(
    state: crate::state::AppState,
    bind: &str,
    on_bound: impl FnOnce(SocketAddr),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let ingest = configured_ingest(&state.db);
    serve_ingest_until(state, ingest, bind, on_bound, stop).await
}

/// Like [`serve_until`], with the Ingest API given (tests give one a small backlog).
pub async fn serve_ingest_until(
    mut state: crate::state::AppState,
    ingest: crate::ingest::Ingest,
    bind: &str,
    on_bound: impl FnOnce(SocketAddr),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let acceptor = TcpListener::bind(bind.to_string()).into_acceptor().await?;
    let addr = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().copied())
        .ok_or_else(|| anyhow::anyhow!("could not read the bound address"))?;
    // A public URL naming port 0 (`--bind 127.0.0.1:0` without `--public-url`) cannot be
    // opened: links then use the port actually bound.
    if state.public_url.ends_with(":0") {
        state.public_url = format!("http://{addr}");
    }
    on_bound(addr);
    // The messageId window loads while the rest starts: the instance is ready (and takes
    // batches at once) when it is loaded.
    ingest.start();
    let workers = crate::workers::Workers::start(&state).await?;
    // SIGTERM (containers, systemd, Kubernetes) stops the server as Ctrl-C does: no new
    // connections, requests in flight answered after their commits, then what was
    // acknowledged is applied, all within `SHUTDOWN_LIMIT`.
    let (stopping_tx, stopping) = tokio::sync::oneshot::channel::<tokio::time::Instant>();
    let (allowance, main_db) = (state.allowance.clone(), state.db.clone());
    let served = Server::new_with_acceptor(acceptor)
        .run_with_graceful_shutdown(
            app(state, ingest),
            async move {
                stop.await;
                tracing::info!("shutting down: answering requests in flight");
                let _ = stopping_tx.send(tokio::time::Instant::now() + SHUTDOWN_LIMIT);
            },
            Some(REQUEST_GRACE),
        )
        .await;
    workers.stop(stopping.await.ok()).await;
    // The tool calls this instance counted and did not make stop counting.
    if let Ok(counts) = crate::tools::allowance::usage_db(&main_db).await {
        allowance.give_back_all(&counts).await;
    }
    served?;
    Ok(())
}

/// From the shutdown signal to the process's exit at most.
pub const SHUTDOWN_LIMIT: std::time::Duration = std::time::Duration::from_secs(9);
/// How long requests in flight may take to finish after the signal.
const REQUEST_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Ctrl-C or SIGTERM, whichever comes first (also what ends a benchmark run).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(term) => term,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
