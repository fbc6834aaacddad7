//! A database outage is an answer, not a hang: with PostgreSQL stopped under load, every route
//! answers 503 in its own error shape, with `Retry-After`, within 2 s; `/readyz` answers 503;
//! once PostgreSQL is back, calls succeed again by themselves, and every acknowledged ingest
//! event is stored exactly once.
//!
//! The test runs a PostgreSQL server of its own (`initdb` into a temp dir, a free port on
//! 127.0.0.1, a socket dir of its own), so it needs PostgreSQL's server binaries
//! (`/usr/lib/postgresql/*/bin`). It skips, saying why, when they are missing, or when it runs
//! as root (which `initdb` refuses) and cannot run them as the `postgres` user with `runuser`.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use serde_json::{json, Value};

use crate::helpers::check_schema;

/// The most a request may take while the database is down. Routes promise 2 s (the pool's
/// acquire timeout is 1.5 s); the half second on top is for this shared 2-core machine running
/// a debug build, the test's own clients and PostgreSQL at once, so that scheduling noise does
/// not fail the test while a hang (such as waiting out a 10 s pool timeout) still does.
const LIMIT: Duration = Duration::from_millis(2500);
/// The organization's tracking domain, and the page a browser client sends from.
const TRACKING_DOMAIN: &str = "app.outage.example";
const BROWSER_ORIGIN: &str = "https://app.outage.example";
/// How long PostgreSQL stays stopped: longer than a public key's configuration is cached, so
/// that the browser client's key expires during the outage.
const OUTAGE: Duration = Duration::from_secs(6);
/// How soon after PostgreSQL accepts connections again each route must succeed again.
const RECOVERY: Duration = Duration::from_secs(10);
/// Pause between one client's requests: load, without saturating the machine.
const PACE: Duration = Duration::from_millis(40);

/// The directory of PostgreSQL's server binaries (of the newest version installed).
fn postgres_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
        .collect();
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    dirs.pop()
}

/// How PostgreSQL's commands are run: directly, or (as root) as the `postgres` user, whose
/// uid and gid own the cluster's files.
enum RunAs {
    Me,
    Postgres { uid: u32, gid: u32 },
}

fn id_of(flag: &str) -> Option<u32> {
    let out = Command::new("id").args([flag, "postgres"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn run_as() -> Result<RunAs, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(RunAs::Me);
    }
    let runuser = Path::new("/usr/sbin/runuser").is_file() || Path::new("/sbin/runuser").is_file();
    match (runuser, id_of("-u"), id_of("-g")) {
        (true, Some(uid), Some(gid)) => Ok(RunAs::Postgres { uid, gid }),
        _ => Err("running as root (initdb refuses) without `runuser` and a `postgres` user".into()),
    }
}

/// A PostgreSQL cluster of this test's own; stopped when dropped.
struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    log: PathBuf,
    sockets: PathBuf,
    port: u16,
    run_as: RunAs,
}

impl Postgres {
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        match self.run_as {
            RunAs::Me => Command::new(program),
            RunAs::Postgres { .. } => {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(program);
                c
            }
        }
    }

    fn run(&self, what: &str, mut command: Command) {
        let out = command
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            out.status.success(),
            "{what} failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// `initdb` into `dir/data`.
    fn init(bin: PathBuf, dir: &Path, run_as: RunAs) -> Self {
        let pg = Self {
            bin,
            data: dir.join("data"),
            log: dir.join("postgres.log"),
            sockets: dir.join("sockets"),
            port: free_port(),
            run_as,
        };
        std::fs::create_dir_all(&pg.sockets).expect("socket dir");
        if let RunAs::Postgres { uid, gid } = pg.run_as {
            for path in [dir, pg.sockets.as_path()] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown to postgres");
            }
        }
        let mut initdb = pg.command("initdb");
        initdb
            .arg("-D")
            .arg(&pg.data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"])
            .arg("--no-sync");
        pg.run("initdb", initdb);
        pg
    }

    /// `pg_ctl start`, waiting until it accepts connections.
    fn start(&self) {
        let mut start = self.command("pg_ctl");
        start
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-c listen_addresses=127.0.0.1 -p {} -k {} -c shared_buffers=32MB",
                self.port,
                self.sockets.display()
            ))
            .arg("start");
        self.run("pg_ctl start", start);
    }

    /// `pg_ctl stop -m immediate`: every backend is gone at once, as in a crash.
    fn stop_immediately(&self) {
        let mut stop = self.command("pg_ctl");
        stop.arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"]);
        self.run("pg_ctl stop", stop);
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The `custintel serve` process; killed when dropped.
struct Serve {
    child: Child,
    log: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- custintel serve, last lines ---");
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// One answered request.
#[derive(Debug, Clone)]
struct Sample {
    family: &'static str,
    method: &'static str,
    route: &'static str,
    started: Instant,
    took: Duration,
    /// 0 when no HTTP answer came (the request failed or timed out).
    status: u16,
    retry_after: Option<String>,
    /// The `Origin` the request carried, and the `Access-Control-Allow-Origin` answered.
    origin: Option<&'static str>,
    allow_origin: Option<String>,
    body: Value,
}

#[derive(Default)]
struct Recorded {
    samples: Vec<Sample>,
    /// Every ingest `messageId` sent, and those acknowledged (200).
    sent: HashSet<String>,
    acked: HashSet<String>,
}

type Shared = Arc<Mutex<Recorded>>;

struct Client {
    http: reqwest::Client,
    base: String,
    api_key: String,
    /// The `Origin` a browser client's requests carry.
    origin: Option<&'static str>,
    recorded: Shared,
}

impl Client {
    /// Sends one request and records its answer.
    async fn send(
        &self,
        family: &'static str,
        method: &'static str,
        route: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> Sample {
        let url = format!("{}{path}", self.base);
        let mut req = match method {
            "GET" => self.http.get(url),
            _ => self.http.post(url),
        };
        if family != "ingest" && family != "ready" {
            req = req.bearer_auth(&self.api_key);
        }
        if family == "mcp" {
            req = req.header("Accept", "application/json, text/event-stream");
        }
        if let Some(origin) = self.origin {
            req = req.header("Origin", origin);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let started = Instant::now();
        let (status, retry_after, allow_origin, body) = match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let header = |name: &str| {
                    resp.headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                };
                let retry_after = header("retry-after");
                let allow_origin = header("access-control-allow-origin");
                let text = resp.text().await.unwrap_or_default();
                let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
                (status, retry_after, allow_origin, body)
            }
            Err(e) => (0, None, None, Value::String(e.to_string())),
        };
        let sample = Sample {
            family,
            method,
            route,
            started,
            took: started.elapsed(),
            status,
            retry_after,
            origin: self.origin,
            allow_origin,
            body,
        };
        if let Ok(mut r) = self.recorded.lock() {
            r.samples.push(sample.clone());
        }
        sample
    }
}

/// A batch of 10 custom events with `messageId`s of its own.
fn ingest_batch(client: usize, n: usize) -> (Vec<String>, Value) {
    let ids: Vec<String> = (0..10)
        .map(|i| format!("outage-c{client}-b{n}-e{i}"))
        .collect();
    let events: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({"type": "custom", "eventName": "seat_added", "url": "server://billing",
                   "path": "/", "userId": format!("u-{client}"), "messageId": id})
        })
        .collect();
    (ids, json!({"source": "server", "events": events}))
}

/// One client's loop until `stop`: `kind` picks what it sends.
async fn client_loop(client: Client, kind: usize, public_key: String, stop: Arc<AtomicBool>) {
    let mut n = 0usize;
    // An ingest batch is sent again, unchanged, until it is acknowledged (as an SDK retries).
    let mut pending: Option<(Vec<String>, Value)> = None;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        match kind {
            0 | 1 => {
                let (ids, body) = pending.take().unwrap_or_else(|| ingest_batch(kind, n));
                if let Ok(mut r) = client.recorded.lock() {
                    r.sent.extend(ids.iter().cloned());
                }
                let s = client
                    .send(
                        "ingest",
                        "POST",
                        "/api/i/v1/{publicKey}/events",
                        &format!("/api/i/v1/{public_key}/events"),
                        Some(body.clone()),
                    )
                    .await;
                if s.status == 200 {
                    if let Ok(mut r) = client.recorded.lock() {
                        r.acked.extend(ids);
                    }
                } else {
                    pending = Some((ids, body));
                }
            }
            // Each of the others alternates two routes: while the database is down each
            // request takes up to 1.5 s, and both must be asked during the outage.
            2 if n.is_multiple_of(2) => {
                client
                    .send(
                        "tools",
                        "POST",
                        "/api/tools/call",
                        "/api/tools/call",
                        Some(json!({"tool": "svc_list_customers", "input": {"limit": 5}})),
                    )
                    .await;
            }
            2 => {
                client
                    .send("tools", "GET", "/api/tools", "/api/tools", None)
                    .await;
            }
            3 if n.is_multiple_of(2) => {
                let definition = json!({
                    "grain": "user", "subjectResolver": "email",
                    "eventNames": ["seat_added"], "propertyConditions": [], "conditionMode": "ALL"
                });
                client
                    .send(
                        "platform",
                        "POST",
                        "/api/signals",
                        "/api/signals",
                        Some(json!({"kind": "EVENT_MATCH", "name": format!("Outage {n}"),
                                    "definition": definition, "description": null})),
                    )
                    .await;
            }
            3 => {
                client
                    .send("platform", "GET", "/api/signals", "/api/signals", None)
                    .await;
            }
            4 if n.is_multiple_of(2) => {
                client
                    .send(
                        "keys",
                        "POST",
                        "/api/validate-api-key",
                        "/api/validate-api-key",
                        None,
                    )
                    .await;
            }
            4 => {
                client
                    .send(
                        "integrations",
                        "GET",
                        "/api/integrations",
                        "/api/integrations",
                        None,
                    )
                    .await;
            }
            _ if n.is_multiple_of(2) => {
                client
                    .send(
                        "mcp",
                        "POST",
                        "/mcp",
                        "/mcp",
                        Some(json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                                    "params": {"name": "svc_list_customers",
                                               "arguments": {"limit": 5}}})),
                    )
                    .await;
            }
            _ => {
                client
                    .send("ready", "GET", "/readyz", "/readyz", None)
                    .await;
            }
        }
        tokio::time::sleep(PACE).await;
    }
}

/// Checks a 503: `Retry-After`, and the error shape of its route.
fn check_unavailable(s: &Sample) {
    assert!(
        s.retry_after
            .as_deref()
            .is_some_and(|v| v.parse::<u64>().is_ok_and(|v| v >= 1)),
        "{} {}: 503 without a Retry-After of whole seconds: {:?}",
        s.method,
        s.route,
        s.retry_after
    );
    match s.family {
        "ingest" => {
            assert_eq!(s.body["success"], false, "{}", s.body);
            assert_eq!(s.body["processed"], 0, "{}", s.body);
            assert_eq!(s.body["errors"][0]["index"], -1, "{}", s.body);
        }
        "platform" => {
            assert_eq!(s.body["ok"], false, "{}", s.body);
            assert_eq!(s.body["error"]["code"], "transient_failure", "{}", s.body);
            assert_eq!(s.body["error"]["retryable"], true, "{}", s.body);
        }
        _ => assert!(
            s.body["error"].is_string(),
            "{} {}: {}",
            s.method,
            s.route,
            s.body
        ),
    }
    if !matches!(s.family, "mcp" | "ready") {
        check_schema(s.method, s.route, 503, &s.body);
    }
    // The driver's words (the pool, the server's messages) stay in the server's log.
    let text = s.body.to_string().to_lowercase();
    for internal in [
        "pool",
        "sqlx",
        "connection refused",
        "error returned from database",
    ] {
        assert!(
            !text.contains(internal),
            "{} {}: a 503 shows the driver's words: {}",
            s.method,
            s.route,
            s.body
        );
    }
}

async fn count_rows(db: &DatabaseConnection, sql: &str) -> Vec<(String, i64)> {
    let rows = db
        .query_all_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
        .expect("query");
    rows.into_iter()
        .map(|row| {
            (
                row.try_get_by_index::<String>(0).expect("id"),
                row.try_get_by_index::<i64>(1).expect("count"),
            )
        })
        .collect()
}

/// How the database goes away.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cut {
    /// PostgreSQL stopped at once (`pg_ctl stop -m immediate`), and started again.
    Stopped,
    /// Every packet to and from PostgreSQL's port dropped (an nftables rule), and let through
    /// again: connections stay open, nothing answers.
    Partitioned,
}

impl Cut {
    /// How long the database stays away.
    fn lasts(self) -> Duration {
        match self {
            Cut::Stopped => OUTAGE,
            Cut::Partitioned => PARTITION,
        }
    }

    /// The most any request may take while the database is away. A partition leaves
    /// statements waiting on open connections until the server's host is found silent
    /// (`db::postgres_sockets`: 5 s of unacknowledged data, or a second of silence and then
    /// that); requests that start later are answered within [`LIMIT`].
    fn longest(self) -> Duration {
        match self {
            Cut::Stopped => LIMIT,
            Cut::Partitioned => {
                custintel::db::postgres_sockets::UNACKNOWLEDGED_LIMIT
                    + custintel::db::postgres_sockets::KEEPALIVE_IDLE
                    + LIMIT
            }
        }
    }
}

/// How long the network to PostgreSQL drops everything: long enough that requests started
/// after the connections open at its start were found dead are seen answered in time.
const PARTITION: Duration = Duration::from_secs(14);

/// The nftables table of one test's rules, dropping every packet to or from `port` on this
/// host; removed when dropped.
struct Partition {
    table: String,
}

impl Partition {
    /// Whether rules can be set here: root, with `nft`.
    fn available() -> Result<(), String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: packet filter rules cannot be set".into());
        }
        match Command::new("nft").args(["list", "tables"]).output() {
            Ok(out) if out.status.success() => Ok(()),
            _ => Err("no working `nft` (apt-get install nftables)".into()),
        }
    }

    fn start(port: u16) -> Self {
        let table = format!("custintel_partition_{port}");
        let rules = format!(
            "table inet {table} {{\n chain output {{\n type filter hook output priority 0;\n \
             tcp dport {port} drop\n tcp sport {port} drop\n }}\n}}\n"
        );
        let mut nft = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("nft");
        use std::io::Write;
        nft.stdin
            .take()
            .expect("stdin")
            .write_all(rules.as_bytes())
            .expect("write the rules");
        assert!(nft.wait().expect("nft").success(), "nft refused the rules");
        Self { table }
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", &self.table])
            .status();
    }
}

/// The advisory lock a transaction cut off by the partition holds.
const CAUGHT_LOCK: i64 = 7_305_001;

/// Connections caught by a partition: a statement whose answer the partition drops, and a
/// transaction holding [`CAUGHT_LOCK`] whose next statement the partition drops.
struct Caught {
    waiting: tokio::task::JoinHandle<(Result<(), String>, Duration)>,
    in_transaction: tokio::task::JoinHandle<(Result<(), String>, Duration)>,
    url: String,
}

/// Runs `sql`: whether it succeeded (or why not), and how long it took.
async fn timed<C: ConnectionTrait>(conn: &C, sql: &str) -> (Result<(), String>, Duration) {
    let started = Instant::now();
    let done = conn
        .execute_unprepared(sql)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    (done, started.elapsed())
}

/// Starts both, half a second before the partition begins.
async fn caught_by_the_partition(url: &str) -> Caught {
    let db = custintel::db::connect(url, None).await.expect("connect");
    let waiting = {
        let db = db.clone();
        tokio::spawn(async move { timed(&db, "SELECT pg_sleep(2)").await })
    };
    let txn = sea_orm::TransactionTrait::begin(&db).await.expect("begin");
    txn.execute_unprepared(&format!("SELECT pg_advisory_xact_lock({CAUGHT_LOCK})"))
        .await
        .expect("lock");
    let in_transaction = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        timed(&txn, "SELECT 1").await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    Caught {
        waiting,
        in_transaction,
        url: url.to_string(),
    }
}

impl Caught {
    /// Both statements failed as lost connections within [`Cut::longest`], instead of waiting
    /// for the partition's end; and the server dropped the cut-off transaction, so its lock
    /// is free again soon after the partition ends.
    async fn check(self, healed: Instant) {
        for (what, task) in [
            ("a statement waiting for its answer", self.waiting),
            ("a statement in a transaction", self.in_transaction),
        ] {
            let (done, took) = task.await.expect("task");
            eprintln!(
                "{what}, caught by the partition: {done:?} after {:.2} s",
                took.as_secs_f64()
            );
            assert!(done.is_err(), "{what} succeeded through the partition");
            assert!(
                took < Cut::Partitioned.longest(),
                "{what} waited {:.2} s",
                took.as_secs_f64()
            );
        }
        let db = custintel::db::connect(&self.url, None)
            .await
            .expect("connect");
        loop {
            let free = db
                .query_one_raw(Statement::from_string(
                    db.get_database_backend(),
                    format!("SELECT pg_try_advisory_lock({CAUGHT_LOCK})"),
                ))
                .await
                .expect("try the lock")
                .expect("a row")
                .try_get_by_index::<bool>(0)
                .expect("bool");
            if free {
                eprintln!(
                    "the cut-off transaction's lock free {:.2} s after the partition",
                    healed.elapsed().as_secs_f64()
                );
                break;
            }
            assert!(
                healed.elapsed() < Duration::from_secs(10),
                "the cut-off transaction still holds its lock 10 s after the partition"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_is_answered_503_and_work_resumes() {
    outage_under_load(Cut::Stopped).await;
}

/// The network to PostgreSQL drops every packet: open connections get no answer and no
/// refusal. Without keepalive and a limit on unacknowledged data, a statement sent then waited
/// for the system's retransmission time-outs (about 15 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_partition_from_the_database_is_answered_503_and_work_resumes() {
    if let Err(reason) = Partition::available() {
        eprintln!("skipped: {reason}");
        return;
    }
    outage_under_load(Cut::Partitioned).await;
}

async fn outage_under_load(cut: Cut) {
    let Some(bin) = postgres_bin() else {
        eprintln!("skipped: no PostgreSQL server binaries under /usr/lib/postgresql/*/bin");
        return;
    };
    let run_as = match run_as() {
        Ok(r) => r,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    // As root, under /tmp, which the `postgres` user can reach whatever TMPDIR says.
    let dir = match run_as {
        RunAs::Me => tempfile::tempdir(),
        RunAs::Postgres { .. } => tempfile::tempdir_in("/tmp"),
    }
    .expect("tempdir");
    let pg = Postgres::init(bin, dir.path(), run_as);
    pg.start();
    let url = pg.url();

    // The organization, created straight in the database (migrated here first).
    let db = custintel::db::connect(&url, None).await.expect("connect");
    custintel::db::migrate(&db).await.expect("migrate");
    let org = custintel::ops::admin::create_org(
        &db,
        custintel::ops::admin::NewOrganization {
            name: "Outage Co".into(),
            plan: custintel::ops::admin::Plan::Pro,
            api_call_limit: None,
            connection_limit: None,
            ingest_rate_limit: Some(100_000),
            tracking_domains: vec![TRACKING_DOMAIN.into()],
        },
    )
    .await
    .expect("create org");

    let port = free_port();
    let log = dir.path().join("custintel.log");
    let child = Command::new(env!("CARGO_BIN_EXE_custintel"))
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .current_dir(dir.path())
        .env("DATABASE_URL", &url)
        .env(
            "CUSTINTEL_SECRET_KEY",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        )
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start custintel serve");
    let _serve = Serve { child, log };
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .expect("client");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = http.get(format!("{base}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "custintel serve did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Six clients: two ingest; tool calls and the tool list; signal creates and the signal list;
    // key checks and integrations; MCP tool calls and readiness.
    let recorded: Shared = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..6)
        .map(|kind| {
            let client = Client {
                http: http.clone(),
                base: base.clone(),
                api_key: org.api_key.clone(),
                // The second ingest client is a browser on the organization's site.
                origin: (kind == 1).then_some(BROWSER_ORIGIN),
                recorded: recorded.clone(),
            };
            tokio::spawn(client_loop(
                client,
                kind,
                org.public_key.clone(),
                stop.clone(),
            ))
        })
        .collect();

    tokio::time::sleep(Duration::from_secs(3)).await;
    // In a partition, two connections of this process (set up as the service's are) are caught
    // in the middle: one waiting for a statement's answer, one holding a lock in an open
    // transaction.
    let caught = match cut {
        Cut::Stopped => None,
        Cut::Partitioned => Some(caught_by_the_partition(&url).await),
    };
    let stopping = Instant::now();
    let partition = match cut {
        Cut::Stopped => {
            pg.stop_immediately();
            None
        }
        Cut::Partitioned => Some(Partition::start(pg.port)),
    };
    let stopped = Instant::now();
    tokio::time::sleep(cut.lasts()).await;
    let restarting = Instant::now();
    match partition {
        None => pg.start(),
        Some(partition) => drop(partition),
    }
    let restarted = Instant::now();
    if let Some(caught) = caught {
        caught.check(restarted).await;
    }

    // Load goes on until every family has succeeded again (or RECOVERY has passed).
    let families = [
        "ingest",
        "tools",
        "platform",
        "keys",
        "integrations",
        "mcp",
        "ready",
    ];
    let recovered_by = restarted + RECOVERY + Duration::from_secs(2);
    loop {
        let all = recorded.lock().map(|r| {
            families.iter().all(|f| {
                r.samples.iter().any(|s| {
                    s.family == *f && s.started >= restarted && (200..300).contains(&s.status)
                })
            })
        });
        if all.unwrap_or(false) || Instant::now() > recovered_by {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Each family a few more calls after it recovered, then stop.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("client");
    }

    let recorded = std::mem::take(&mut *recorded.lock().expect("recorded"));
    let samples = &recorded.samples;
    let at = |t: Instant| t.saturating_duration_since(stopping).as_secs_f64();
    let mut summary: BTreeMap<(&str, &str, u16), (usize, Duration)> = BTreeMap::new();
    for s in samples {
        let e = summary.entry((s.family, s.route, s.status)).or_default();
        e.0 += 1;
        e.1 = e.1.max(s.took);
    }
    eprintln!(
        "PostgreSQL {cut:?} in {:.2} s, back in {:.2} s; {} requests",
        (stopped - stopping).as_secs_f64(),
        (restarted - restarting).as_secs_f64(),
        samples.len()
    );
    for ((family, route, status), (n, longest)) in &summary {
        eprintln!(
            "{family:>12} {route:<32} {status}: {n:>4} answers, longest {:.3} s",
            longest.as_secs_f64()
        );
    }
    let longest_before = samples
        .iter()
        .filter(|s| s.started + s.took < stopping)
        .map(|s| s.took)
        .max()
        .unwrap_or_default();
    let longest_during = samples
        .iter()
        .filter(|s| s.started >= stopped && s.started < restarting)
        .map(|s| s.took)
        .max()
        .unwrap_or_default();
    eprintln!(
        "longest answer before the outage {:.3} s, during it {:.3} s",
        longest_before.as_secs_f64(),
        longest_during.as_secs_f64()
    );

    // Never a 500 or a hang, before, during or after; every 503 retryable in its route's shape.
    for s in samples {
        assert!(
            s.status != 0 && s.status != 500,
            "{} {} at {:.2} s answered {} after {:.2} s: {}",
            s.method,
            s.route,
            at(s.started),
            s.status,
            s.took.as_secs_f64(),
            s.body
        );
        // Requests that started once the connections open at the start of a partition were
        // found dead are held to the stopped server's limit.
        let limit = if s.started >= stopped + cut.longest() - LIMIT && s.started < restarting {
            LIMIT
        } else {
            cut.longest()
        };
        assert!(
            s.took < limit,
            "{} {} at {:.2} s took {:.2} s (status {})",
            s.method,
            s.route,
            at(s.started),
            s.took.as_secs_f64(),
            s.status
        );
        if s.status == 503 {
            check_unavailable(s);
        }
        // A browser reads every answer to its site's requests, the outage's 503s (and their
        // `Retry-After`) too: the key's configuration read last still answers.
        if let Some(origin) = s.origin {
            assert_eq!(
                s.allow_origin.as_deref(),
                Some(origin),
                "{} {} at {:.2} s answered {} without CORS headers: {}",
                s.method,
                s.route,
                at(s.started),
                s.status,
                s.body
            );
        }
    }
    // While PostgreSQL is down, every route answers 503 (and each family was asked). A request
    // still waiting for a connection when PostgreSQL is started again may succeed.
    for family in families {
        let during: Vec<&Sample> = samples
            .iter()
            .filter(|s| {
                s.family == family && s.started >= stopped && s.started + s.took <= restarting
            })
            .collect();
        assert!(!during.is_empty(), "{family}: no request during the outage");
        for s in during {
            assert_eq!(
                s.status,
                503,
                "{} {} at {:.2} s, during the outage: {}",
                s.method,
                s.route,
                at(s.started),
                s.body
            );
        }
    }
    // The browser client was answered after its key's cached configuration had expired (at
    // most KEY_CACHE_TTL after the load began, 3 s before the outage).
    let late = stopped + cut.lasts() - Duration::from_secs(2);
    assert!(
        samples.iter().any(|s| s.origin.is_some()
            && s.status == 503
            && s.started >= late
            && s.started + s.took <= restarting),
        "the browser client had no answer in the outage's last 2 s"
    );
    // Calls succeed again soon after PostgreSQL is back.
    for family in families {
        let first_ok = samples
            .iter()
            .filter(|s| s.family == family && s.started >= restarted)
            .find(|s| (200..300).contains(&s.status))
            .unwrap_or_else(|| panic!("{family}: no success after PostgreSQL came back"));
        let after = (first_ok.started + first_ok.took).duration_since(restarted);
        eprintln!(
            "{family:>12}: first success {:.2} s after the restart",
            after.as_secs_f64()
        );
        assert!(
            after < RECOVERY,
            "{family}: first success only after {after:?}"
        );
    }

    // Every acknowledged event is stored exactly once, and no event twice.
    assert!(
        !recorded.acked.is_empty(),
        "no ingest batch was acknowledged"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let backlog = custintel::ingest::journal::backlog(&db, None).await;
        if backlog.is_ok_and(|b| b.batches == 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the applier did not catch up within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stored: HashMap<String, i64> = count_rows(
        &db,
        "SELECT message_id, count(*) FROM events WHERE message_id LIKE 'outage-%' \
         GROUP BY message_id",
    )
    .await
    .into_iter()
    .collect();
    for (id, n) in &stored {
        assert_eq!(*n, 1, "{id} stored {n} times");
        assert!(recorded.sent.contains(id), "{id} stored but never sent");
    }
    let lost: Vec<&String> = recorded
        .acked
        .iter()
        .filter(|id| !stored.contains_key(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged events are not stored, e.g. {:?}",
        lost.len(),
        recorded.acked.len(),
        &lost[..lost.len().min(5)]
    );
    eprintln!(
        "{} events acknowledged, each stored once ({} sent, {} stored)",
        recorded.acked.len(),
        recorded.sent.len(),
        stored.len()
    );
}
