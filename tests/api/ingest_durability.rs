//! A server killed with SIGKILL under ingest load keeps every event it acknowledged.

use std::{
    collections::HashSet,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_custintel");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn serve(url: &str, port: u16) -> Child {
    Command::new(BIN)
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start custintel serve")
}

async fn wait_healthy(client: &reqwest::Client, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(r) = client
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
        {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("server did not become healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_events_survive_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/kill.db?mode=rwc", dir.path().display());
    let out = Command::new(BIN)
        .args([
            "admin",
            "create-org",
            "--name",
            "Kill Co",
            "--ingest-rate-limit",
            "100000",
        ])
        .env("DATABASE_URL", &url)
        .output()
        .expect("create-org");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).expect("create-org json");
    let public_key = created["publicKey"]
        .as_str()
        .expect("publicKey")
        .to_string();

    let port = free_port();
    let mut server = serve(&url, port);
    let client = reqwest::Client::new();
    wait_healthy(&client, port).await;

    // Eight clients send batches with unique messageIds and remember what was acknowledged.
    let acked = Arc::new(Mutex::new(HashSet::<String>::new()));
    let endpoint = format!("http://127.0.0.1:{port}/api/i/v1/{public_key}/events");
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let (client, endpoint, acked) = (client.clone(), endpoint.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0.. {
                let ids: Vec<String> = (0..50).map(|i| format!("w{worker}-b{n}-e{i}")).collect();
                let events: Vec<Value> = ids
                    .iter()
                    .map(|id| json!({"type": "pageview", "url": "https://a.example.com/", "path": "/", "messageId": id}))
                    .collect();
                let body = json!({"visitorId": "7d1f1c56-2b8f-4a43-9a8e-3f7f6f0b6d11", "events": events});
                match client.post(&endpoint).json(&body).send().await {
                    Ok(r) if r.status().is_success() => {
                        if let Ok(mut a) = acked.lock() {
                            a.extend(ids);
                        }
                    }
                    // The server is gone: stop.
                    _ => break,
                }
            }
        }));
    }
    // Let load build up, then kill the server without warning.
    let deadline = Instant::now() + Duration::from_secs(10);
    while acked.lock().map(|a| a.len()).unwrap_or(0) < 20_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill().expect("SIGKILL"); // Child::kill sends SIGKILL on Unix.
    let _ = server.wait();
    for t in tasks {
        let _ = t.await;
    }
    let acked = acked.lock().map(|a| a.clone()).unwrap_or_default();
    assert!(
        acked.len() >= 1_000,
        "too little load before the kill: {}",
        acked.len()
    );

    // Restart (recovery runs on open), then check every acknowledged event is stored.
    let mut restarted = serve(&url, port);
    wait_healthy(&client, port).await;
    let db = custintel::db::connect(&url, None).await.expect("db");
    let stored: HashSet<String> = entity::event::Entity::find()
        .select_only()
        .column(entity::event::Column::MessageId)
        .filter(entity::event::Column::MessageId.is_not_null())
        .into_tuple::<Option<String>>()
        .all(&db)
        .await
        .expect("events")
        .into_iter()
        .flatten()
        .collect();
    let _ = restarted.kill();
    let _ = restarted.wait();
    let missing: Vec<&String> = acked.iter().filter(|id| !stored.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged events lost, e.g. {:?}",
        missing.len(),
        acked.len(),
        missing.iter().take(5).collect::<Vec<_>>()
    );
    eprintln!(
        "{} acknowledged events all stored ({} stored in total)",
        acked.len(),
        stored.len()
    );
}
