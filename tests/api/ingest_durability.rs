//! A server stopped in the middle of an ingest load, with SIGKILL or with SIGTERM, keeps every
//! event it acknowledged: after a restart each is stored once with its effects applied, and
//! repeats of acknowledged batches sent after the restart are not stored again. SIGTERM
//! additionally exits within 10 s having applied what it acknowledged. On SQLite, and on
//! PostgreSQL (a throwaway database) when `TEST_DATABASE_URL` is set.

use std::{
    collections::HashMap,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_custintel");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn serve(url: &str, port: u16) -> Child {
    serve_with(url, port, &[])
}

fn serve_with(url: &str, port: u16, env: &[(&str, &str)]) -> Child {
    Command::new(BIN)
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .envs(env.iter().copied())
        .env("DATABASE_URL", url)
        // On SQLite, the window writes its recent keys to disk every 500 messages, so a
        // restart finds most of them in its runs.
        .env("CUSTINTEL_DEDUP_SEAL_KEYS", "500")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(server_log(port)).expect("server log"))
        .spawn()
        .expect("start custintel serve")
}

/// Where the server on `port` writes its warnings and errors, shown when it does not start.
fn server_log(port: u16) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("custintel-durability-{port}.log"))
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
    let log = std::fs::read_to_string(server_log(port)).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    panic!("server did not become healthy; its last lines:\n{tail}");
}

/// A database for one test: a SQLite file in `dir`, or a new PostgreSQL database.
struct TestDb {
    url: String,
    /// PostgreSQL: (server URL, database name) to drop at the end.
    drop: Option<(String, String)>,
}

async fn test_db(postgres: bool, dir: &std::path::Path) -> Option<TestDb> {
    if !postgres {
        return Some(TestDb {
            url: format!("sqlite://{}/stop.db?mode=rwc", dir.display()),
            drop: None,
        });
    }
    let base = std::env::var("TEST_DATABASE_URL").ok()?;
    let name = format!("custintel_stop_{}", uuid::Uuid::new_v4().simple());
    let admin = custintel::db::connect(&base, None).await.expect("postgres");
    admin
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    let server = base.rsplit_once('/').map(|(s, _)| s).unwrap_or(&base);
    Some(TestDb {
        url: format!("{server}/{name}"),
        drop: Some((base.clone(), name)),
    })
}

impl TestDb {
    async fn cleanup(&self) {
        if let Some((base, name)) = &self.drop {
            if let Ok(admin) = custintel::db::connect(base, None).await {
                let _ = admin
                    .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await;
            }
        }
    }
}

fn create_org(url: &str) -> String {
    let out = Command::new(BIN)
        .args([
            "admin",
            "create-org",
            "--name",
            "Stop Co",
            "--ingest-rate-limit",
            "100000",
        ])
        .env("DATABASE_URL", url)
        .output()
        .expect("create-org");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).expect("create-org json");
    created["publicKey"]
        .as_str()
        .expect("publicKey")
        .to_string()
}

/// A server batch of 50 custom events attributed to one user (so each has an effect: the
/// user is resolved and the event linked to it).
fn batch(worker: usize, n: usize) -> (Vec<String>, Value) {
    let ids: Vec<String> = (0..50).map(|i| format!("w{worker}-b{n}-e{i}")).collect();
    let events: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({"type": "custom", "eventName": "seat_added", "url": "server://billing",
                   "path": "/", "userId": format!("u-{worker}"), "messageId": id})
        })
        .collect();
    (ids, json!({"source": "server", "events": events}))
}

/// Acknowledged batches: their message ids and bodies.
type Acked = Arc<Mutex<Vec<(Vec<String>, Value)>>>;

/// Eight clients send batches until the server goes away; answers what was acknowledged.
fn load(client: &reqwest::Client, endpoint: &str) -> (Acked, Vec<tokio::task::JoinHandle<()>>) {
    let acked: Acked = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let (client, endpoint, acked) = (client.clone(), endpoint.to_string(), acked.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0.. {
                let (ids, body) = batch(worker, n);
                match client.post(&endpoint).json(&body).send().await {
                    Ok(r) if r.status().is_success() => {
                        if let Ok(mut a) = acked.lock() {
                            a.push((ids, body));
                        }
                    }
                    // The server is gone (or going): stop.
                    _ => break,
                }
            }
        }));
    }
    (acked, tasks)
}

async fn count(db: &DatabaseConnection, sql: &str) -> i64 {
    let row = db
        .query_one_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
        .expect("count")
        .expect("a row");
    row.try_get_by_index::<i64>(0).expect("count value")
}

/// Journaled batches not yet applied (wherever the journal is kept).
async fn pending(db: &DatabaseConnection) -> i64 {
    custintel::ingest::journal::backlog(db, None)
        .await
        .expect("journal backlog")
        .batches
}

/// Every acknowledged event is stored once, linked to its user, and nothing is left in the
/// journal.
async fn check_stored_once(db: &DatabaseConnection, acked: &[(Vec<String>, Value)]) {
    assert_eq!(pending(db).await, 0, "journaled batches left unapplied");
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT message_id, count(*), count(user_id) FROM events GROUP BY message_id",
        ))
        .await
        .expect("events");
    let mut stored: HashMap<String, (i64, i64)> = HashMap::new();
    for row in rows {
        let id: Option<String> = row.try_get_by_index(0).expect("message_id");
        let n: i64 = row.try_get_by_index(1).expect("count");
        let linked: i64 = row.try_get_by_index(2).expect("linked");
        if let Some(id) = id {
            stored.insert(id, (n, linked));
        }
    }
    let mut missing = Vec::new();
    for (ids, _) in acked {
        for id in ids {
            match stored.get(id) {
                Some((1, 1)) => {}
                Some((n, linked)) => {
                    panic!("{id}: stored {n} times, {linked} linked to its user (want 1 and 1)")
                }
                None => missing.push(id.clone()),
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged events lost, e.g. {:?}",
        missing.len(),
        acked.len() * 50,
        &missing[..missing.len().min(5)]
    );
    assert_eq!(
        count(db, "SELECT count(*) FROM users").await,
        8,
        "one user per client"
    );
}

enum Stop {
    Kill,
    Term,
}

async fn stop_mid_load(stop: Stop, postgres: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(tdb) = test_db(postgres, dir.path()).await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let public_key = create_org(&tdb.url);
    let port = free_port();
    let mut server = serve(&tdb.url, port);
    let client = reqwest::Client::new();
    wait_healthy(&client, port).await;
    let endpoint = format!("http://127.0.0.1:{port}/api/i/v1/{public_key}/events");
    let (acked, tasks) = load(&client, &endpoint);

    // Let load build up (and the applier fall behind), then stop the server.
    let deadline = Instant::now() + Duration::from_secs(10);
    while acked.lock().map(|a| a.len()).unwrap_or(0) < 300 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match stop {
        Stop::Kill => {
            server.kill().expect("SIGKILL"); // Child::kill sends SIGKILL on Unix.
            let _ = server.wait();
        }
        Stop::Term => {
            let signalled = Instant::now();
            // SAFETY: sending a signal to our own child process by its pid.
            let rc = unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
            assert_eq!(rc, 0, "SIGTERM could not be sent");
            let status = loop {
                if let Some(status) = server.try_wait().expect("wait") {
                    break status;
                }
                assert!(
                    signalled.elapsed() < Duration::from_secs(10),
                    "serve did not exit within 10 s of SIGTERM"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            assert!(status.success(), "serve exited with {status} on SIGTERM");
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let acked = acked.lock().map(|a| a.clone()).unwrap_or_default();
    assert!(
        acked.len() >= 20,
        "too little load before the stop: {} batches",
        acked.len()
    );

    let db = custintel::db::connect(&tdb.url, None).await.expect("db");
    if matches!(stop, Stop::Term) {
        // A clean stop applied everything it acknowledged before exiting.
        check_stored_once(&db, &acked).await;
    }

    // Restart: the journal is applied, the messageId window is rebuilt.
    let mut restarted = serve(&tdb.url, port);
    wait_healthy(&client, port).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while pending(&db).await > 0 {
        assert!(
            Instant::now() < deadline,
            "journal not applied after restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check_stored_once(&db, &acked).await;

    // Clients retry after the restart: repeats are acknowledged and dropped.
    let sample: Vec<&(Vec<String>, Value)> = acked.iter().step_by(3).take(100).collect();
    for (_, body) in &sample {
        let r = client
            .post(&endpoint)
            .json(body)
            .send()
            .await
            .expect("retry");
        assert_eq!(r.status().as_u16(), 200);
        let answer: Value = r.json().await.expect("retry answer");
        assert_eq!(answer["processed"], 50);
    }
    wait_applied(&db).await;
    check_stored_once(&db, &acked).await;
    let _ = restarted.kill();
    let _ = restarted.wait();
    eprintln!("{} acknowledged batches each stored once", acked.len());
    drop(db);
    tdb.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_keeps_every_acknowledged_event_sqlite() {
    stop_mid_load(Stop::Kill, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_keeps_every_acknowledged_event_postgres() {
    stop_mid_load(Stop::Kill, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_applies_what_it_acknowledged_sqlite() {
    stop_mid_load(Stop::Term, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_applies_what_it_acknowledged_postgres() {
    stop_mid_load(Stop::Term, true).await;
}

/// Sends every batch to the endpoint (four at a time); each is acknowledged with all its
/// events counted as processed, repeats included.
async fn send_all(client: &reqwest::Client, endpoint: &str, batches: &[(Vec<String>, Value)]) {
    let mut sends = tokio::task::JoinSet::new();
    for chunk in batches.chunks(batches.len().div_ceil(4)) {
        let (client, endpoint, chunk) = (client.clone(), endpoint.to_string(), chunk.to_vec());
        sends.spawn(async move {
            for (_, body) in chunk {
                // A 503 (a slow transaction, a window catching up) is retried, as clients do.
                let mut tries = 0;
                let (status, answer) = loop {
                    let r = client
                        .post(&endpoint)
                        .json(&body)
                        .send()
                        .await
                        .expect("send");
                    let status = r.status().as_u16();
                    let answer: Value = r.json().await.expect("answer");
                    tries += 1;
                    if status != 503 || tries == 50 {
                        break (status, answer);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                };
                assert_eq!(status, 200, "{answer}");
                assert_eq!(answer["processed"], 50, "{answer}");
            }
        });
    }
    while let Some(done) = sends.join_next().await {
        done.expect("sender");
    }
}

/// Waits until the shared claims have all expired (PostgreSQL).
async fn wait_claims_expired(db: &DatabaseConnection) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(db, "SELECT count(*) FROM ingest_message_keys").await > 0 {
        assert!(Instant::now() < deadline, "claims not expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every journaled batch is applied.
async fn wait_applied(db: &DatabaseConnection) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while pending(db).await > 0 {
        assert!(Instant::now() < deadline, "journal not applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A PostgreSQL test's throwaway database with an organization, and the instances the test
/// starts on it (the shared claims kept 3 s).
struct Fleet {
    dir: tempfile::TempDir,
    tdb: TestDb,
    public_key: String,
    client: reqwest::Client,
    db: DatabaseConnection,
}

impl Fleet {
    /// `None` without `TEST_DATABASE_URL`.
    async fn start() -> Option<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        let tdb = test_db(true, dir.path()).await?;
        let public_key = create_org(&tdb.url);
        let db = custintel::db::connect(&tdb.url, None).await.expect("db");
        Some(Self {
            dir,
            tdb,
            public_key,
            client: reqwest::Client::new(),
            db,
        })
    }

    /// An instance with its window under the directory `windows` (instances given the same
    /// one take a window of their own there, or back), once it answers: with its port (a port
    /// of its own, as one a stopped instance had may have been taken meanwhile).
    async fn instance(&self, windows: &str) -> (Child, u16) {
        let port = free_port();
        let windows = self.dir.path().join(windows).display().to_string();
        let env = [
            ("CUSTINTEL_DEDUP_SHARED_SPAN", "3s"),
            ("CUSTINTEL_WINDOW_DIR", windows.as_str()),
        ];
        let child = serve_with(&self.tdb.url, port, &env);
        wait_healthy(&self.client, port).await;
        (child, port)
    }

    fn endpoint(&self, port: u16) -> String {
        format!(
            "http://127.0.0.1:{port}/api/i/v1/{}/events",
            self.public_key
        )
    }

    async fn send_all(&self, port: u16, batches: &[(Vec<String>, Value)]) {
        send_all(&self.client, &self.endpoint(port), batches).await;
    }

    /// Stops `servers` and drops the database.
    async fn finish(self, servers: &mut [&mut Child]) {
        for server in servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        drop(self.db);
        self.tdb.cleanup().await;
    }
}

/// Batches `ns` of eight workers.
fn batches(ns: std::ops::Range<usize>) -> Vec<(Vec<String>, Value)> {
    (0..8)
        .flat_map(|worker| ns.clone().map(move |n| batch(worker, n)))
        .collect()
}

/// PostgreSQL keeps a claim in the shared table for seconds only; after that, each instance's
/// own window drops the repeat: copies sent to two instances at once, copies sent to the
/// other instance after the table forgot them, to an instance restarted after SIGKILL, and
/// to a new instance with an empty window directory. Each message is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_are_dropped_by_every_instance_after_the_shared_claims_expire_postgres() {
    let Some(fleet) = Fleet::start().await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let db = &fleet.db;
    let (mut a, port_a) = fleet.instance("windows").await;
    let (mut b, port_b) = fleet.instance("windows").await;

    // The same batches to both instances at once.
    let first = batches(0..5);
    tokio::join!(
        fleet.send_all(port_a, &first),
        fleet.send_all(port_b, &first)
    );
    wait_claims_expired(db).await;
    // Both instances again, the shared table empty: each window knows every message.
    fleet.send_all(port_b, &first).await;
    fleet.send_all(port_a, &first).await;
    wait_applied(db).await;
    check_stored_once(db, &first).await;

    // B is killed; A takes new messages, and the table forgets them before B is back.
    b.kill().expect("SIGKILL");
    let _ = b.wait();
    let second = batches(5..10);
    fleet.send_all(port_a, &second).await;
    wait_claims_expired(db).await;
    let (mut b, port_b) = fleet.instance("windows").await;
    fleet.send_all(port_b, &second).await;
    fleet.send_all(port_b, &first).await;

    // A new instance whose window directory is empty reads the whole window back.
    let (mut c, port_c) = fleet.instance("fresh").await;
    fleet.send_all(port_c, &first).await;
    fleet.send_all(port_c, &second).await;
    wait_applied(db).await;
    let all: Vec<(Vec<String>, Value)> = first.iter().chain(&second).cloned().collect();
    check_stored_once(db, &all).await;
    fleet.finish(&mut [&mut a, &mut b, &mut c]).await;
}

/// A new PostgreSQL instance (an empty window directory) copies the window's runs that the
/// publishing instance keeps in the database instead of reading its whole window from the
/// events: a repeat of a message whose stored event is gone is still dropped by it. Of two
/// running instances, one publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_copies_the_published_window_postgres() {
    let Some(fleet) = Fleet::start().await else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
        return;
    };
    let db = &fleet.db;
    let (mut a, port_a) = fleet.instance("windows").await;
    let (mut b, _) = fleet.instance("windows").await;

    // 2,000 messages, then more to A: once a published run holds a later message, every one
    // of the first is in the published runs (a seal takes all the keys recorded before it).
    let first = batches(0..5);
    fleet.send_all(port_a, &first).await;
    fleet.send_all(port_a, &batches(5..8)).await;
    let published_keys = "SELECT coalesce((sum(octet_length(content)) \
         - 56 * count(DISTINCT (first_seal, last_seal))) / 20, 0)::bigint FROM ingest_window_runs";
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(db, published_keys).await <= 2_000 {
        assert!(Instant::now() < deadline, "the runs were not published");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        count(
            db,
            "SELECT count(DISTINCT publisher) FROM ingest_window_runs"
        )
        .await,
        1,
        "one instance publishes"
    );
    wait_applied(db).await;
    // The events are gone and the shared claims expired: only the copied runs can tell the new
    // instance the first messages.
    db.execute_unprepared("DELETE FROM events")
        .await
        .expect("delete the events");
    wait_claims_expired(db).await;

    let (mut c, port_c) = fleet.instance("fresh").await;
    fleet.send_all(port_c, &first).await;
    wait_applied(db).await;
    assert_eq!(
        count(db, "SELECT count(*) FROM events").await,
        0,
        "the new instance stored repeats its copied runs hold"
    );
    // Its own messages are new to it, and it keeps them.
    let own = vec![batch(9, 0)];
    fleet.send_all(port_c, &own).await;
    fleet.send_all(port_c, &own).await;
    wait_applied(db).await;
    assert_eq!(count(db, "SELECT count(*) FROM events").await, 50);
    fleet.finish(&mut [&mut a, &mut b, &mut c]).await;
}
