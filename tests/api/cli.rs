//! The `custintel` binary as users script it: one JSON object on stdout per admin command, and
//! `serve` answering the README's first request.

use std::{
    io::{BufRead, BufReader},
    process::Stdio,
};

use serde_json::Value;

use crate::helpers::custintel_bin;

fn run(db_url: &str, args: &[&str]) -> (i32, Value, String) {
    let out = custintel_bin()
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run custintel");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = stdout.lines().collect();
    let value = if out.status.success() {
        assert_eq!(lines.len(), 1, "exactly one line of JSON: {stdout}");
        serde_json::from_str(lines[0]).expect("stdout is JSON")
    } else {
        Value::Null
    };
    (
        out.status.code().unwrap_or(-1),
        value,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Kills the child server when the test ends, pass or fail.
struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn admin_commands_and_demo_then_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/cli.db?mode=rwc", tmp.path().display());

    let (code, org, _) = run(
        &url,
        &[
            "admin",
            "create-org",
            "--name",
            "Acme",
            "--plan",
            "pro",
            "--tracking-domain",
            "https://app.acme.com:443/x",
        ],
    );
    assert_eq!(code, 0);
    let org_id = org["organizationId"].as_str().unwrap().to_string();
    assert!(org["apiKey"].as_str().unwrap().starts_with("ok_"));
    assert!(org["publicKey"].as_str().unwrap().starts_with("pk_"));

    let (code, key, _) = run(
        &url,
        &[
            "admin",
            "create-key",
            "--org",
            &org_id,
            "--read-only",
            "--name",
            "ci",
        ],
    );
    assert_eq!(code, 0);
    assert!(key["apiKey"].as_str().unwrap().starts_with("ok_"));
    let key_id = key["keyId"].as_str().unwrap().to_string();
    let (code, disabled, _) = run(&url, &["admin", "disable-key", "--key-id", &key_id]);
    assert_eq!(code, 0);
    assert_eq!(
        disabled,
        serde_json::json!({"keyId": key_id, "disabled": true})
    );

    let (code, _, err) = run(&url, &["admin", "create-key", "--org", "no-such-org"]);
    assert_ne!(code, 0);
    assert!(err.contains("not found"), "{err}");
    let (code, _, _) = run(
        &url,
        &["admin", "create-org", "--name", "X", "--plan", "platinum"],
    );
    assert_ne!(code, 0);

    let (code, demo1, _) = run(&url, &["demo"]);
    assert_eq!(code, 0);
    let (code, demo2, _) = run(&url, &["demo"]);
    assert_eq!(code, 0);
    assert_ne!(demo1["organizationId"], demo2["organizationId"]);

    // serve on a free port, then the README's first request.
    let mut child = custintel_bin()
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env("DATABASE_URL", &url)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn serve");
    let stderr = child.stderr.take().expect("stderr");
    let child = Child(child);
    // Read the bound address, then keep draining stderr so the server never blocks on it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
                }
            }
        }
    });
    let addr = rx.recv_timeout(std::time::Duration::from_secs(60)).ok();
    let base = format!("http://{}", addr.expect("server reported its address"));
    let http = reqwest::Client::new();
    let health: Value = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    let yaml = http
        .get(format!("{base}/openapi.yaml"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(yaml, custintel::http::server::openapi_yaml());
    let json: Value = http
        .get(format!("{base}/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(json["info"]["version"], "1.0.0");
    let docs = http.get(format!("{base}/docs")).send().await.unwrap();
    assert_eq!(docs.status(), 200);
    assert!(docs.text().await.unwrap().contains("swagger"));

    let key = demo1["apiKey"].as_str().unwrap();
    let list: Value = http
        .get(format!("{base}/api/automations"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = list["result"]["data"]["automations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "churn-risk-alert")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let enabled: Value = http
        .post(format!("{base}/api/automations/{id}/enable"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(enabled["ok"], true);
    assert_eq!(enabled["result"]["data"]["automation"]["enabled"], true);
    drop(child);
}
