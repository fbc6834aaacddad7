//! The `custintel` client commands run as the real binary against a real server, with the
//! config directory in a temporary HOME.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::Value;

use crate::helpers::{spawn, Backend, TestApp};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn client(home: &Path, base: &str, env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_custintel"));
    cmd.args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("xdg"))
        .env_remove("CUSTINTEL_API_KEY")
        .env("CUSTINTEL_BASE_URL", base)
        .env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs the binary off the async workers, so the in-process server keeps serving.
async fn run(home: &Path, base: &str, env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut cmd = client(home, base, env, args);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run custintel"))
        .await
        .expect("join");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).to_string(),
    }
}

fn ok(r: &Run) -> &str {
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    &r.stdout
}

fn json(r: &Run) -> Value {
    serde_json::from_str(ok(r)).unwrap_or_else(|e| panic!("not JSON ({e}): {}", r.stdout))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_integrations_and_platform_commands() {
    let app: TestApp = spawn(Backend::Sqlite).await.expect("app");
    let org = app.demo_org().await;
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path();
    let base = app.base.as_str();

    // Not logged in yet.
    let r = run(home, base, &[], &["integrations", "list"]).await;
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("not logged in"), "{}", r.stderr);

    // A bad key is refused with the service's message and nothing is stored.
    let r = run(
        home,
        base,
        &[],
        &["login", "--api-key", "ok_wrong", "--base-url", base],
    )
    .await;
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("invalid API key"), "{}", r.stderr);
    let config_path = home.join("xdg").join("custintel").join("config.json");
    assert!(!config_path.exists());

    let r = run(
        home,
        base,
        &[],
        &["login", "--api-key", &org.api_key, "--base-url", base],
    )
    .await;
    assert!(ok(&r).contains("Logged in"), "{}", r.stdout);
    let stored: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    assert_eq!(stored["apiKey"], org.api_key.as_str());
    assert_eq!(stored["baseUrl"], base);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&config_path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // The environment overrides the stored key.
    let r = run(
        home,
        base,
        &[("CUSTINTEL_API_KEY", "ok_env_wrong")],
        &["agents", "list"],
    )
    .await;
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("invalid API key"), "{}", r.stderr);

    // Integrations.
    let r = run(home, base, &[], &["integrations", "capabilities", "gmail"]).await;
    let out = ok(&r);
    assert!(
        out.contains("google-mail") && out.contains("browser_session"),
        "{out}"
    );
    let r = run(home, base, &[], &["integrations", "capabilities"]).await;
    assert!(ok(&r).contains("posthog") && r.stdout.contains("apiKey, region, projectId"));
    let r = run(
        home,
        base,
        &[],
        &[
            "integrations",
            "connect",
            "fireflies",
            "--config",
            r#"{"apiKey":"ff_secret"}"#,
        ],
    )
    .await;
    assert!(ok(&r).contains("fireflies connected"), "{}", r.stdout);
    let r = run(
        home,
        base,
        &[],
        &[
            "integrations",
            "connect",
            "posthog",
            "--config",
            r#"{"apiKey":"p"}"#,
        ],
    )
    .await;
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("`region` is required") && r.stderr.contains("`projectId` is required"),
        "{}",
        r.stderr
    );
    let r = run(
        home,
        base,
        &[],
        &["integrations", "connect", "stripe", "--config", "not json"],
    )
    .await;
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("--config is not valid JSON"));
    let r = run(home, base, &[], &["integrations", "list"]).await;
    let out = ok(&r);
    assert!(out.lines().next().unwrap().starts_with("PROVIDER"));
    assert!(
        out.lines().any(|l| l.starts_with("fireflies")
            && l.contains("connected")
            && l.contains("NO_SYNC")),
        "{out}"
    );
    let listed = json(
        &run(
            home,
            base,
            &[],
            &["integrations", "list", "--connected-only", "--json"],
        )
        .await,
    );
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    assert!(!listed.to_string().contains("ff_secret"));
    let r = run(home, base, &[], &["integrations", "sync-status", "gmail"]).await;
    assert!(
        ok(&r).contains("google-mail (Gmail, Communication): not_connected"),
        "{}",
        r.stdout
    );

    // `connect gmail` without config: prints the URL and polls until the page completes.
    let mut child = client(
        home,
        base,
        &[("CUSTINTEL_POLL_INTERVAL_MS", "100")],
        &["integrations", "connect", "gmail"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn connect");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.trim().starts_with("http") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(line.trim().to_string());
                }
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let url = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("connect printed a URL");
    assert!(url.starts_with(&format!("{base}/connect/")), "{url}");
    let page = app
        .client
        .get(&url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("Connect Gmail"));
    let done = app
        .client
        .post(&url)
        .form(&[("action", "authorize")])
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(done.contains("data-status=\"connected\""));
    let status = tokio::task::spawn_blocking(move || child.wait().expect("wait connect"))
        .await
        .unwrap();
    let out = reader.join().unwrap();
    assert!(status.success(), "{out}");
    assert!(out.contains("google-mail connected."), "{out}");

    // A failed session exits non-zero with the reason.
    let mut child = client(
        home,
        base,
        &[("CUSTINTEL_POLL_INTERVAL_MS", "100")],
        &["integrations", "connect", "slack", "--json"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn connect");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::task::spawn_blocking(move || {
        let l = lines.next().and_then(Result::ok).unwrap_or_default();
        (l, lines)
    })
    .await
    .unwrap();
    let session: Value = serde_json::from_str(&first.0).expect("first line is the session JSON");
    let url = session["connectUrl"].as_str().unwrap().to_string();
    app.client
        .post(&url)
        .form(&[("action", "deny")])
        .send()
        .await
        .unwrap();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().expect("wait"))
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("declined"));

    let r = run(
        home,
        base,
        &[],
        &[
            "integrations",
            "status",
            session["sessionId"].as_str().unwrap(),
        ],
    )
    .await;
    assert!(ok(&r).contains("failed"));
    let r = run(
        home,
        base,
        &[],
        &[
            "integrations",
            "connect",
            "stripe",
            "--config",
            r#"{"apiKey":"sk_test_cli"}"#,
        ],
    )
    .await;
    ok(&r);
    let r = run(
        home,
        base,
        &[],
        &["integrations", "setup-step", "stripe", "webhooks", "--json"],
    )
    .await;
    let step = json(&r);
    assert_eq!(step["status"], "config_required");
    assert!(step["url"]
        .as_str()
        .unwrap()
        .starts_with(&format!("{base}/api/webhooks/stripe/")));
    let r = run(
        home,
        base,
        &[],
        &[
            "integrations",
            "setup-step",
            "stripe",
            "webhooks",
            "--config",
            r#"{"webhookSecret":"whsec_cli"}"#,
        ],
    )
    .await;
    assert!(ok(&r).contains("configured"));
    let r = run(
        home,
        base,
        &[],
        &["integrations", "disconnect", "fireflies"],
    )
    .await;
    assert!(ok(&r).contains("fireflies disconnected"));
    let r = run(
        home,
        base,
        &[],
        &["integrations", "disconnect", "fireflies"],
    )
    .await;
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("fireflies is not connected"),
        "{}",
        r.stderr
    );

    // Platform actions.
    let r = run(home, base, &[], &["automations", "list"]).await;
    let out = ok(&r);
    assert!(out.contains("churn-risk-alert"), "{out}");
    let listed = json(&run(home, base, &[], &["automations", "list", "--json"]).await);
    let id = listed["result"]["data"]["automations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "churn-risk-alert")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = run(home, base, &[], &["automations", "enable", &id]).await;
    assert!(ok(&r).contains("enabled"), "{}", r.stdout);
    let got = json(&run(home, base, &[], &["automations", "get", &id, "--json"]).await);
    assert_eq!(got["result"]["data"]["automation"]["enabled"], true);
    let r = run(home, base, &[], &["automations", "disable", &id]).await;
    ok(&r);
    // The engine's commands: a dry run for a customer, then the (empty) run history.
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let customer = entity::customer::Entity::find()
        .filter(entity::customer::Column::OrganizationId.eq(&org.organization_id))
        .filter(entity::customer::Column::Domain.is_not_null())
        .one(&app.db)
        .await
        .unwrap()
        .unwrap();
    let domain = customer.domain.unwrap();
    let tested = json(
        &run(
            home,
            base,
            &[],
            &[
                "automations",
                "test",
                &id,
                "--grain",
                "customer",
                "--key",
                &domain,
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(tested["commandId"], "automation.test");
    assert_eq!(
        tested["result"]["data"]["payload"]["type"],
        "automation.run"
    );
    let r = run(
        home,
        base,
        &[],
        &[
            "automations",
            "test",
            &id,
            "--grain",
            "customer",
            "--key",
            &domain,
        ],
    )
    .await;
    assert!(ok(&r).contains("payload:"), "{}", r.stdout);
    let r = run(home, base, &[], &["automations", "test", &id]).await;
    assert_eq!(r.code, 1, "{}", r.stdout);
    let r = run(home, base, &[], &["automations", "runs", &id]).await;
    assert!(ok(&r).starts_with("ID"), "{}", r.stdout);
    let runs = json(&run(home, base, &[], &["automations", "runs", &id, "--json"]).await);
    assert_eq!(runs["commandId"], "automation.run.list");
    let r = run(
        home,
        base,
        &[],
        &["automations", "get", &uuid::Uuid::new_v4().to_string()],
    )
    .await;
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("not found"), "{}", r.stderr);
    let agents = json(&run(home, base, &[], &["agents", "list", "--json"]).await);
    let agent = agents["result"]["data"]["agents"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = run(home, base, &[], &["agents", "get", &agent]).await;
    assert!(ok(&r).contains("displayName"));
    let r = run(home, base, &[], &["agents", "disable", &agent]).await;
    assert!(ok(&r).contains("disabled"));
    // A run recorded (no model configured: SKIPPED), then listed by the CLI.
    custintel::agents::run_for_automation(
        &custintel::agents::AgentRuntime::new(app.state.clone()),
        custintel::agents::AutomationRunInput {
            organization_id: uuid::Uuid::parse_str(&org.organization_id).unwrap(),
            agent_id: uuid::Uuid::parse_str(&agent).unwrap(),
            automation_run_id: uuid::Uuid::new_v4(),
            context: serde_json::json!({}),
            destination_ids: vec![],
        },
    )
    .await;
    let r = run(home, base, &[], &["agents", "runs", &agent]).await;
    let table = ok(&r);
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains("automation") && table.contains("SKIPPED"),
        "{table}"
    );
    let runs = json(
        &run(
            home,
            base,
            &[],
            &["agents", "runs", &agent, "--status", "skipped", "--json"],
        )
        .await,
    );
    assert_eq!(runs["commandId"], "agent.run.list");
    assert_eq!(runs["result"]["data"]["runs"].as_array().unwrap().len(), 1);
    let signals = json(&run(home, base, &[], &["signals", "list", "--json"]).await);
    let signal = signals["result"]["data"]["signals"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = run(home, base, &[], &["signals", "get", &signal]).await;
    ok(&r);
    let r = run(home, base, &[], &["signals", "archive", &signal]).await;
    assert!(ok(&r).contains("archivedAt"));
    let r = run(home, base, &[], &["destinations", "list"]).await;
    assert!(ok(&r).starts_with("ID"));
    let dests = json(&run(home, base, &[], &["destinations", "list", "--json"]).await);
    let dest = dests["result"]["data"]["destinations"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = run(home, base, &[], &["destinations", "disable", &dest]).await;
    ok(&r);
    let r = run(home, base, &[], &["destinations", "get", &dest, "--json"]).await;
    assert_eq!(json(&r)["result"]["data"]["destination"]["enabled"], false);

    // The tool gateway, when this build has it.
    let probe = app
        .client
        .get(format!("{base}/api/tools"))
        .bearer_auth(&org.api_key)
        .send()
        .await
        .unwrap()
        .status();
    if probe != reqwest::StatusCode::NOT_FOUND {
        let r = run(home, base, &[], &["tools", "list"]).await;
        assert!(ok(&r).contains("svc_list_customers"));
        let r = run(
            home,
            base,
            &[],
            &[
                "tools",
                "call",
                "svc_list_customers",
                "--input",
                r#"{"limit":1}"#,
            ],
        )
        .await;
        assert!(json(&r)["items"].is_array());
    }
    let r = run(
        home,
        base,
        &[],
        &["tools", "call", "svc_list_customers", "--input", "[1]"],
    )
    .await;
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("--input must be a JSON object"));

    // The admin commands keep their one-JSON-object contract.
    let db_url = format!("sqlite://{}/admin.db?mode=rwc", home.display());
    let r = run(
        home,
        base,
        &[("DATABASE_URL", &db_url)],
        &["admin", "create-org", "--name", "X"],
    )
    .await;
    assert_eq!(ok(&r).lines().count(), 1);
    assert!(json(&r)["apiKey"].as_str().unwrap().starts_with("ok_"));
}
