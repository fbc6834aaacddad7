//! Test harness: a real server on 127.0.0.1:0 over a fresh database, a reqwest client, and
//! response checks against the committed `openapi.yaml`.

use std::{net::SocketAddr, sync::OnceLock};

use custintel::{
    crypto::SecretBox,
    db,
    http::api::AppState,
    ops::admin::{self, CreatedOrganization, NewOrganization, Plan},
};
use reqwest::{Method, StatusCode};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    pub db: DatabaseConnection,
    pub state: AppState,
    _tmp: Option<tempfile::TempDir>,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

/// Starts the server on a fresh database of `backend`; `None` when PostgreSQL is not configured.
pub async fn spawn(backend: Backend) -> Option<TestApp> {
    spawn_with(backend, quiet_integrations()).await
}

/// The integration settings of test servers: as `serve`'s, except that the scheduler does not
/// run in the background, so a test that claims or ticks sync jobs is the only one to.
pub fn quiet_integrations() -> custintel::integrations::IntegrationsConfig {
    custintel::integrations::IntegrationsConfig {
        runs_scheduler: false,
        ..Default::default()
    }
}

/// A fresh, migrated database of `backend` (a temp SQLite file, or a new schema of
/// `TEST_DATABASE_URL`); `None` when PostgreSQL is not configured.
pub async fn fresh_db(backend: Backend) -> Option<(DatabaseConnection, Option<tempfile::TempDir>)> {
    let (db, tmp) = match backend {
        Backend::Sqlite => {
            let tmp = tempfile::tempdir().expect("tempdir");
            let url = format!("sqlite://{}/test.db?mode=rwc", tmp.path().display());
            (db::connect(&url, None).await.expect("sqlite"), Some(tmp))
        }
        Backend::Postgres => {
            let url = std::env::var("TEST_DATABASE_URL").ok()?;
            // One schema per test keeps tests independent inside the run's throwaway database.
            let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
            let admin_conn = db::connect(&url, None).await.expect("postgres");
            admin_conn
                .execute_unprepared(&format!("CREATE SCHEMA {schema}"))
                .await
                .expect("create schema");
            (
                db::connect(&url, Some(&schema)).await.expect("postgres"),
                None,
            )
        }
    };
    db::migrate(&db).await.expect("migrate");
    Some((db, tmp))
}

/// A Pro organization tracking `localhost`, created straight in the database.
pub async fn org_in(db: &DatabaseConnection, name: &str) -> CreatedOrganization {
    admin::create_org(
        db,
        NewOrganization {
            name: name.into(),
            plan: Plan::Pro,
            api_call_limit: None,
            connection_limit: None,
            ingest_rate_limit: None,
            tracking_domains: vec!["localhost".into()],
        },
    )
    .await
    .expect("create org")
}

/// The organization's tool-call count as stored (where the allowance keeps it), if any.
pub async fn stored_usage(
    db: &DatabaseConnection,
    organization_id: &str,
) -> Option<entity::api_usage::Model> {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let counts = custintel::tools::allowance::usage_db(db).await.unwrap();
    entity::api_usage::Entity::find()
        .filter(entity::api_usage::Column::OrganizationId.eq(organization_id))
        .one(&counts)
        .await
        .unwrap()
}

/// The state a server would get, over a fresh database, with no server (and so no background
/// task such as the ingest applier) running.
pub async fn state_without_server(
    backend: Backend,
) -> Option<(AppState, Option<tempfile::TempDir>)> {
    let (db, tmp) = fresh_db(backend).await?;
    let state = AppState {
        db: db.clone(),
        secrets: SecretBox::from_key(&[7u8; 32]),
        public_url: "http://127.0.0.1:0".into(),
        integrations: Default::default(),
        search: custintel::search::SearchIndex::new(db).expect("search index"),
        agents: Default::default(),
        name_trigrams: Default::default(),
        allowance: Default::default(),
    };
    Some((state, tmp))
}

/// [`spawn`] with chosen integration settings (e.g. a fake Stripe API base).
pub async fn spawn_with(
    backend: Backend,
    integrations: custintel::integrations::IntegrationsConfig,
) -> Option<TestApp> {
    spawn_configured(backend, integrations, Default::default(), None).await
}

/// [`spawn`] whose Ingest API holds at most `bytes` of unanswered batches.
pub async fn spawn_with_ingest_backlog(backend: Backend, bytes: usize) -> Option<TestApp> {
    spawn_configured(
        backend,
        quiet_integrations(),
        Default::default(),
        Some(bytes),
    )
    .await
}

/// [`spawn`] with chosen agent settings (e.g. a fake Chat Completions server).
pub async fn spawn_with_agents(
    backend: Backend,
    agents: custintel::agents::AgentsConfig,
) -> Option<TestApp> {
    spawn_configured(backend, quiet_integrations(), agents, None).await
}

async fn spawn_configured(
    backend: Backend,
    integrations: custintel::integrations::IntegrationsConfig,
    agents: custintel::agents::AgentsConfig,
    ingest_backlog: Option<usize>,
) -> Option<TestApp> {
    let (db, tmp) = fresh_db(backend).await?;
    let state = AppState {
        db: db.clone(),
        secrets: SecretBox::from_key(&[7u8; 32]),
        public_url: "http://127.0.0.1:0".into(),
        integrations,
        search: custintel::search::SearchIndex::start(db.clone()).expect("search index"),
        agents,
        name_trigrams: Default::default(),
        allowance: Default::default(),
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<SocketAddr>();
    let serve_state = state.clone();
    let ingest = match ingest_backlog {
        Some(bytes) => custintel::ingest::Ingest::new(
            db.clone(),
            custintel::ingest::dedup::DEFAULT_WINDOW,
            bytes,
        ),
        None => custintel::http::server::configured_ingest(&db),
    };
    tokio::spawn(async move {
        custintel::http::server::serve_ingest_until(
            serve_state,
            ingest,
            "127.0.0.1:0",
            move |addr| {
                let _ = tx.send(addr);
            },
            custintel::http::server::shutdown_signal(),
        )
        .await
        .expect("server");
    });
    let addr = rx.await.expect("bound address");
    Some(TestApp {
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
        db,
        state,
        _tmp: tmp,
    })
}

/// Declares a test that runs on SQLite, and on PostgreSQL when `TEST_DATABASE_URL` is set.
#[macro_export]
macro_rules! db_test {
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let app = $crate::helpers::spawn($crate::helpers::Backend::Sqlite)
                    .await
                    .expect("sqlite app");
                ($body)(app).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                match $crate::helpers::spawn($crate::helpers::Backend::Postgres).await {
                    Some(app) => ($body)(app).await,
                    None => eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped"),
                }
            }
        }
    };
}

impl TestApp {
    /// Starts another serving instance on the same database (its own ingest writer, applier
    /// and background tasks, as a second process would have); answers its base URL.
    pub async fn another_instance(&self) -> String {
        let (tx, rx) = tokio::sync::oneshot::channel::<SocketAddr>();
        let state = self.state.clone();
        tokio::spawn(async move {
            custintel::http::server::serve(state, "127.0.0.1:0", move |addr| {
                let _ = tx.send(addr);
            })
            .await
            .expect("second server");
        });
        format!("http://{}", rx.await.expect("bound address"))
    }

    /// Waits until the ingest applier has applied every acknowledged batch, so the events'
    /// effects (users, customers, resolved ids) are visible.
    pub async fn settle(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let backlog = custintel::ingest::journal::backlog(&self.db, None)
                .await
                .expect("journal backlog");
            if backlog.batches == 0 {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the applier did not apply {} journaled events within 20 s",
                backlog.events
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Keeps the ingest applier from applying anything until the answer is dropped, while
    /// acknowledgements go on: on SQLite by holding the main file's write lock (the journal has
    /// a file of its own), on PostgreSQL by holding the applier's advisory lock.
    pub async fn hold_applier(&self) -> sea_orm::DatabaseTransaction {
        use sea_orm::TransactionTrait;
        if self.db.get_database_backend() == sea_orm::DbBackend::Sqlite {
            return custintel::db::begin_write(&self.db)
                .await
                .expect("the write lock");
        }
        let txn = self.db.begin().await.expect("a transaction");
        txn.execute_unprepared(
            "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.ingest_applier'))",
        )
        .await
        .expect("the applier's lock");
        txn
    }

    pub async fn org(&self, name: &str) -> CreatedOrganization {
        org_in(&self.db, name).await
    }

    /// An organization seeded with the demo data set.
    pub async fn demo_org(&self) -> CreatedOrganization {
        let org = self.org("Demo Co").await;
        custintel::ops::demo::seed(&self.db, &self.state.secrets, &org.organization_id)
            .await
            .expect("seed demo");
        org
    }

    /// Sends a request and checks the response body against the description's schema for the
    /// route, method and status (`route` is the path template, e.g. `/api/agents/{id}`).
    pub async fn call(
        &self,
        method: Method,
        route: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut req = self
            .client
            .request(method.clone(), format!("{}{}", self.base, path));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let reply = read(resp).await;
        check_schema(method.as_str(), route, reply.status.as_u16(), &reply.body);
        reply
    }

    pub async fn get(&self, route: &str, path: &str, key: &str) -> Reply {
        self.call(Method::GET, route, path, Some(key), None).await
    }

    pub async fn post(&self, route: &str, path: &str, key: &str, body: Option<Value>) -> Reply {
        self.call(Method::POST, route, path, Some(key), body).await
    }

    pub async fn patch(&self, route: &str, path: &str, key: &str, body: Value) -> Reply {
        self.call(Method::PATCH, route, path, Some(key), Some(body))
            .await
    }

    /// Sends raw bytes with a chosen content type (no schema check: for malformed input).
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        key: &str,
        content_type: Option<&str>,
        body: &'static str,
    ) -> Reply {
        let mut req = self
            .client
            .request(method, format!("{}{}", self.base, path))
            .bearer_auth(key)
            .body(body);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        read(req.send().await.expect("request")).await
    }
}

pub async fn read(resp: reqwest::Response) -> Reply {
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Reply {
        status,
        headers,
        body,
    }
}

fn description() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"))
            .expect("openapi.yaml");
        serde_yaml::from_str(&text).expect("openapi.yaml parses")
    })
}

/// OpenAPI 3.0 schema -> JSON Schema, as strictly as OpenAPI 3.0.3 reads `nullable`: it adds
/// `null` to the `type` of its own schema object only. It does not reach into `allOf`/`$ref`
/// beside it, and an `enum` must list `null` itself; strict contract-test tools read it so.
fn to_json_schema(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (k, val) in map {
                if k == "nullable" || k == "example" || k == "discriminator" {
                    continue;
                }
                out.insert(k.clone(), to_json_schema(val));
            }
            if map.get("nullable") == Some(&Value::Bool(true)) {
                if let Some(ty) = out.get("type").cloned() {
                    out.insert("type".into(), json!([ty, "null"]));
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(to_json_schema).collect()),
        other => other.clone(),
    }
}

/// Fails unless `body` matches the description's schema for this route, method and status.
pub fn check_schema(method: &str, route: &str, status: u16, body: &Value) {
    let doc = description();
    let op = doc
        .pointer(&format!(
            "/paths/{}/{}",
            route.replace('~', "~0").replace('/', "~1"),
            method.to_ascii_lowercase()
        ))
        .unwrap_or_else(|| panic!("{method} {route} is not in openapi.yaml"));
    let schema = op
        .pointer(&format!(
            "/responses/{status}/content/application~1json/schema"
        ))
        .or_else(|| {
            op.pointer(&format!(
                "/responses/{status}/content/application~1json; charset=utf-8/schema"
            ))
        })
        .unwrap_or_else(|| panic!("{method} {route} documents no JSON body for {status}: {body}"));
    let mut root = to_json_schema(schema);
    let components = to_json_schema(doc.get("components").unwrap_or(&Value::Null));
    if let Value::Object(m) = &mut root {
        m.insert("components".into(), components);
    } else {
        panic!("schema for {method} {route} {status} is not an object");
    }
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&root)
        .expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {route} {status}: body does not match openapi.yaml: {errors:?}\n{body:#}"
    );
}

/// Replaces ids, timestamps, secrets and hashes so snapshots are stable.
pub fn redact(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, val)| {
                    let red = match k.as_str() {
                        "correlationId" | "auditId" => Value::String("[id]".into()),
                        "signingSecret" => Value::String("[secret]".into()),
                        "configHash" if !val.is_null() => Value::String("[hash]".into()),
                        // Cursors encode ids and times; the reset time depends on the month.
                        "nextCursor" if val != "" => Value::String("[cursor]".into()),
                        "resetAt" => Value::String("[resetAt]".into()),
                        "organizationId" | "apiKey" | "publicKey" | "keyId" => {
                            Value::String(format!("[{k}]"))
                        }
                        _ => redact(val),
                    };
                    (k.clone(), red)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        Value::String(s) if uuid::Uuid::parse_str(s).is_ok() => Value::String("[uuid]".into()),
        Value::String(s) if chrono::DateTime::parse_from_rfc3339(s).is_ok() => {
            Value::String("[timestamp]".into())
        }
        Value::String(s) if s.starts_with("whsec_") => Value::String("[secret]".into()),
        other => other.clone(),
    }
}

/// Snapshot of a JSON body after [`redact`].
#[macro_export]
macro_rules! snap {
    ($name:expr, $value:expr) => {
        insta::assert_json_snapshot!($name, $crate::helpers::redact(&$value))
    };
}

/// The `custintel` binary this test build made.
pub fn custintel_bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_custintel"))
}

/// Runs `custintel ARGS` on `db_url`, feeding `stdin` when given (the command reads it for a
/// `-` file), and answers its exit code and the one line of JSON it printed.
pub fn run_cli_json(db_url: &str, args: &[&str], stdin: Option<&str>) -> (i32, Value) {
    use std::{io::Write, process::Stdio};
    let mut child = custintel_bin()
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run custintel");
    {
        let mut input = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).expect("write stdin");
        }
    }
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "one line of JSON: {stdout} / {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_str(lines[0]).expect("JSON"),
    )
}
