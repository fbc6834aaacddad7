//! `custintel bench tools`: the tool gateway's latency with concurrent callers, on a book shaped
//! like a real one, on SQLite or PostgreSQL.
//!
//! The data set is one large organization (and three small ones beside it) at a scale set by
//! `--customers` (users, sources, facts and events in proportion: 5, 2, 0.5 and 10 per
//! customer), with heavy tails: customers' users, sources and events follow a skewed
//! distribution, and three customers stand out (one with a thousandth of all users, one with a
//! hundredth of all sources, one with a hundredth of all events). Customers, users, sources and
//! facts go in through `custintel import` ([`crate::import::import_file`]), as a user's book
//! would; events, billing changes and 100,000 runs of one automation are written directly in
//! bulk, as the ingest applier and the automation engine would have left them.
//!
//! The application then serves in this process on 127.0.0.1:0 (as `custintel serve` does,
//! planner statistics and search index included), and each case is called by `--concurrency`
//! callers for `--seconds`, each call with a random input of its kind (random customers, most of
//! them small as in a real book, and the tails in cases of their own). `--with-ingest RATE` sends
//! that many events per second of the large organization's users (at random) meanwhile, and
//! reports how many the applier applied. Every case prints its p50
//! and p99 and the ratio of its p99 to its target. `--during-import` calls the cases while a
//! `custintel import` process fills the same database instead ([`beside_import`]).

use std::{
    collections::BTreeMap,
    io::{BufWriter, Write},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration as StdDuration, Instant},
};

use anyhow::{bail, Context, Result};
use chrono::{DateTime, Duration, Utc};
use rand::{rngs::StdRng, Rng, SeedableRng};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde_json::{json, Value};

use crate::{
    crypto::SecretBox,
    ops::{
        admin,
        bench_ingest::{self, BenchOptions},
    },
    state::AppState,
};
use entity::{automation, automation_run, billing_change, customer::BillingStatus, event};

mod beside_import;
mod startup;

pub use startup::{startup, StartupBenchArgs};

/// The benchmark's scale, callers and load.
#[derive(Debug, Clone, clap::Args)]
pub struct ToolsBenchArgs {
    /// Customers of the large organization; users, sources, facts and events follow in
    /// proportion (5, 2, 0.5 and 10 per customer).
    #[arg(long, default_value_t = 100_000)]
    pub customers: usize,
    /// Concurrent callers per case.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Seconds each case is called for (after a short warm-up).
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Events per second sent to the large organization's Ingest API while the cases run (0:
    /// none).
    #[arg(long, default_value_t = 0)]
    pub with_ingest: u64,
    /// Measure on this PostgreSQL database (`postgres://...`, in a fresh schema dropped at the
    /// end unless kept) instead of a temporary SQLite file.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// Only the cases whose label contains this text.
    #[arg(long)]
    pub only: Option<String>,
    /// Keep the generated database (the SQLite file's path, or the PostgreSQL schema's name,
    /// is printed) to inspect query plans or to measure again with `--reuse`.
    #[arg(long)]
    pub keep_database: bool,
    /// Measure on a database an earlier run kept (`--keep-database`) instead of loading a new
    /// one: a SQLite file's path, or with `--postgres` the name of the schema. The book is not
    /// imported again (migrations still run), so the cases can be measured again after a
    /// change in minutes rather than the load's hour at a million customers. `--customers`
    /// must be the scale that database was loaded with.
    #[arg(long, value_name = "PATH|SCHEMA", conflicts_with = "keep_database")]
    pub reuse: Option<String>,
    /// Instead of measuring each case on its own, run `custintel import` of a second book of
    /// the same scale into an organization of its own while the callers call the cases at
    /// random, and report the import's lines/s and each case's figures over the calls of the
    /// import's last minute (and of the minute before the import, the same callers without
    /// it). The imported organization stays in a kept database.
    #[arg(long)]
    pub during_import: bool,
}

/// Where the benchmark's database is, for another process (an import) to open it.
enum Location {
    Sqlite(std::path::PathBuf),
    Postgres { url: String, schema: String },
}

impl Location {
    /// The database's `DATABASE_URL` for a `custintel` command (on PostgreSQL with the
    /// schema as the connection's search path).
    fn url(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite://{}?mode=rw", path.display()),
            Self::Postgres { url, schema } => {
                let joiner = if url.contains('?') { '&' } else { '?' };
                format!("{url}{joiner}options=-c%20search_path%3D{schema}")
            }
        }
    }
}

pub(crate) const PLANS: [&str; 3] = ["free", "pro", "enterprise"];
pub(crate) const REGIONS: [&str; 3] = ["EU", "NA", "APAC"];
pub(crate) const ROLES: [&str; 2] = ["admin", "member"];
pub(crate) const STAGES: [&str; 5] = [
    "discovered",
    "signed_up",
    "activated",
    "engaged",
    "inactive",
];
pub(crate) const SOURCE_TYPES: [&str; 5] = [
    "CALL",
    "EMAIL",
    "CALENDAR_EVENT",
    "SUPPORT_TICKET",
    "OPPORTUNITY",
];
pub(crate) const WORDS: [&str; 12] = [
    "renewal",
    "pricing",
    "seats",
    "export",
    "integration",
    "latency",
    "onboarding",
    "budget",
    "security",
    "review",
    "dashboard",
    "migration",
];

/// Customers that stand out: index 0 has the most users, 1 the most sources, 2 the most events.
const TAIL_USERS: usize = 0;
const TAIL_SOURCES: usize = 1;
const TAIL_EVENTS: usize = 2;
/// Runs of the automation whose run list is measured.
const AUTOMATION_RUNS: usize = 100_000;
/// Customers of each small organization beside the large one.
const SMALL_ORG_CUSTOMERS: usize = 1_000;

fn domain(c: usize) -> String {
    format!("company-{c}.example.com")
}

/// The sizes that follow from `--customers`.
#[derive(Debug, Clone, Copy)]
struct Scale {
    customers: usize,
    users: usize,
    sources: usize,
    facts: usize,
    events: usize,
}

impl Scale {
    fn of(customers: usize) -> Self {
        let customers = customers.max(10);
        Self {
            customers,
            users: customers * 5,
            sources: customers * 2,
            facts: customers / 2,
            events: customers * 10,
        }
    }

    /// The tails: a thousandth of all users on one customer, a hundredth of all sources on
    /// another, a hundredth of all events on a third (5,000, 20,000 and 100,000 at a million
    /// customers).
    fn tail_users(&self) -> usize {
        self.users / 1_000
    }
    fn tail_sources(&self) -> usize {
        self.sources / 100
    }
    fn tail_events(&self) -> usize {
        self.events / 100
    }
}

/// A customer drawn with a heavy tail: low indices far more often (density falling as one over
/// the square root of the index), past the three tail customers.
fn skewed_customer(rng: &mut StdRng, customers: usize) -> usize {
    let r: f64 = rng.gen();
    3 + ((customers - 3) as f64 * r * r) as usize
}

/// The `i`th source's title and body: a template over [`WORDS`], so every source holds four
/// of the twelve words (ten times each) and names one of them in its title.
pub(crate) fn source_text(i: usize, source_type: &str) -> (String, String) {
    let body: Vec<&str> = (0..40)
        .map(|k| WORDS[(i * 7 + k * 3) % WORDS.len()])
        .collect();
    (
        format!("{source_type} about {}", WORDS[i % WORDS.len()]),
        body.join(" "),
    )
}

/// The `f`th fact's statement.
pub(crate) fn fact_text(f: usize) -> String {
    format!("Cares about {} ({f})", WORDS[f % WORDS.len()])
}

/// The quote the `f`th fact rests on.
pub(crate) fn fact_quote(f: usize) -> &'static str {
    WORDS[f % WORDS.len()]
}

fn time(t: DateTime<Utc>) -> String {
    crate::timestamp::format(&t)
}

/// Writes the book of one organization; answers the number of lines.
fn write_book(path: &std::path::Path, s: Scale, seed: u64) -> Result<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    let now = Utc::now();
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    let mut lines = 0usize;
    let mut line = |out: &mut BufWriter<std::fs::File>, v: Value| -> Result<()> {
        serde_json::to_writer(&mut *out, &v)?;
        out.write_all(b"\n")?;
        lines += 1;
        Ok(())
    };
    for c in 0..s.customers {
        let status = match rng.gen_range(0..100) {
            0..=39 => BillingStatus::Paying,
            40..=54 => BillingStatus::Trialing,
            55..=69 => BillingStatus::Churned,
            _ => BillingStatus::None,
        };
        let mrr = if status == BillingStatus::Paying {
            1_000 + (rng.gen::<f64>().powi(3) * 2_000_000.0) as i64
        } else {
            0
        };
        let active = (rng.gen_range(0..100) < 85).then(|| {
            let r: f64 = rng.gen();
            time(now - Duration::minutes((r * r * 60.0 * 24.0 * 120.0) as i64))
        });
        let segment = if c % 1_000 == 7 { "strategic" } else { "smb" };
        line(
            &mut out,
            json!({"kind": "customer", "name": format!("Company {c} {}", WORDS[c % WORDS.len()]),
                "domain": domain(c), "externalId": format!("cus_{c}"),
                "billingStatus": status.as_str(), "mrrCents": mrr,
                "traits": {"plan": PLANS[c % 3], "region": REGIONS[(c / 3) % 3], "segment": segment},
                "lastActivityAt": active,
                "createdAt": time(now - Duration::days(rng.gen_range(100..900)))}),
        )?;
    }
    for u in 0..s.users {
        let c = if u < s.tail_users() {
            TAIL_USERS
        } else {
            skewed_customer(&mut rng, s.customers)
        };
        let active = (rng.gen_range(0..100) < 75).then(|| {
            let r: f64 = rng.gen();
            time(now - Duration::minutes((r * r * 60.0 * 24.0 * 120.0) as i64))
        });
        line(
            &mut out,
            json!({"kind": "user", "customer": domain(c), "email": format!("user{u}@{}", domain(c)),
                "externalId": format!("u_{u}"), "name": format!("User {u}"),
                "stage": STAGES[rng.gen_range(0..STAGES.len())],
                "traits": {"role": ROLES[u % 2]}, "lastActivityAt": active}),
        )?;
    }
    // Each source's customer and type, for the facts that cite it.
    let mut cited = Vec::with_capacity(s.sources);
    for i in 0..s.sources {
        let c = if i < s.tail_sources() {
            TAIL_SOURCES
        } else {
            skewed_customer(&mut rng, s.customers)
        };
        let source_type = SOURCE_TYPES[rng.gen_range(0..SOURCE_TYPES.len())];
        cited.push((c as u32, source_type));
        let (title, body) = source_text(i, source_type);
        line(
            &mut out,
            json!({"kind": "source", "sourceType": source_type, "sourceId": format!("src_{i}"),
                "customer": format!("cus_{c}"),
                "title": title,
                "body": body,
                "occurredAt": time(now - Duration::minutes(rng.gen_range(0..60 * 24 * 365))),
                "permalink": format!("https://crm.example.com/src_{i}"),
                "participants": [format!("user{c}@{}", domain(c))]}),
        )?;
    }
    for f in 0..s.facts {
        let i = rng.gen_range(0..s.sources);
        let (c, source_type) = cited[i];
        let c = c as usize;
        line(
            &mut out,
            json!({"kind": "fact", "customer": domain(c),
                "text": fact_text(f),
                "status": if f % 5 == 0 { "SUPERSEDED" } else { "ACTIVE" },
                "sourceType": source_type, "sourceId": format!("src_{i}"),
                "sourceQuote": fact_quote(f)}),
        )?;
    }
    out.flush()?;
    Ok(lines)
}

/// Customer ids by the index in their `externalId` (`cus_{index}`).
async fn customer_ids(db: &DatabaseConnection, org: &str, n: usize) -> Result<Vec<String>> {
    let rows: Vec<(String, Option<String>)> = entity::customer::Entity::find()
        .select_only()
        .columns([
            entity::customer::Column::Id,
            entity::customer::Column::ExternalId,
        ])
        .filter(entity::customer::Column::OrganizationId.eq(org))
        .into_tuple()
        .all(db)
        .await?;
    let mut ids = vec![String::new(); n];
    for (id, external) in rows {
        if let Some(i) = external
            .as_deref()
            .and_then(|e| e.strip_prefix("cus_"))
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|i| *i < n)
        {
            ids[i] = id;
        }
    }
    if ids.iter().any(String::is_empty) {
        bail!("the import left customers out");
    }
    Ok(ids)
}

/// Rows per multi-row INSERT and per transaction of the directly written tables.
const INSERT_ROWS: usize = 1_000;
const TRANSACTION_ROWS: usize = 50_000;

async fn insert_all<A>(db: &DatabaseConnection, rows: Vec<A>) -> Result<()>
where
    A: ActiveModelTrait + Send,
{
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let txn = crate::db::begin_write(db).await?;
        for _ in 0..TRANSACTION_ROWS / INSERT_ROWS {
            let chunk: Vec<A> = rows.by_ref().take(INSERT_ROWS).collect();
            if chunk.is_empty() {
                break;
            }
            A::Entity::insert_many(chunk)
                .exec_without_returning(&txn)
                .await?;
        }
        txn.commit().await?;
    }
    Ok(())
}

/// The organization's events over the last 30 days (the tail customer's among them), written as
/// the ingest applier leaves them, and its billing history.
async fn write_events(
    db: &DatabaseConnection,
    org: &str,
    customers: &[String],
    s: Scale,
) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(7);
    let now = Utc::now();
    // Written in the order ingest would have stored them, oldest first over the 30 days, so
    // the table's pages follow the events' times (and ids) as a served database's do.
    let span_ms: i64 = 30 * 86_400 * 1_000;
    let tail_every = (s.events / s.tail_events().max(1)).max(1);
    let mut written = 0;
    while written < s.events {
        let n = TRANSACTION_ROWS.min(s.events - written);
        let rows: Vec<event::ActiveModel> = (written..written + n)
            .map(|i| {
                let c = if i % tail_every == 0 {
                    TAIL_EVENTS
                } else {
                    skewed_customer(&mut rng, s.customers)
                };
                let age_ms = span_ms - (i as i64 * span_ms) / s.events as i64;
                let occurred = now - Duration::milliseconds(age_ms);
                let (event_type, name, data) = match rng.gen_range(0..100) {
                    0..=49 => ("pageview", None, json!({"title": "Dashboard"})),
                    50..=79 => (
                        "custom",
                        Some(WORDS[i % WORDS.len()].to_string()),
                        json!({"properties": {"plan": PLANS[i % 3]}}),
                    ),
                    80..=89 => ("identify", None, json!({"traits": {}})),
                    90..=96 => (
                        "engagement",
                        None,
                        json!({"activeTimeMs": 1000, "totalTimeMs": 2000}),
                    ),
                    _ => ("billing", None, json!({"status": "paid"})),
                };
                event::ActiveModel {
                    // As ingest would have made it when the event arrived: the messageId
                    // window's replay reads events by that order.
                    id: Set(crate::ids::time_ordered_id_at(occurred)),
                    organization_id: Set(org.to_string()),
                    message_id: Set(Some(uuid::Uuid::new_v4().to_string())),
                    event_type: Set(event_type.to_string()),
                    event_name: Set(name),
                    visitor_id: Set(None),
                    user_id: Set(None),
                    customer_id: Set(Some(customers[c].clone())),
                    url: Set("https://app.example.com/dashboard".into()),
                    path: Set("/dashboard".into()),
                    occurred_at: Set(occurred),
                    received_at: Set(occurred),
                    data: Set(data),
                }
            })
            .collect();
        insert_all(db, rows).await?;
        written += n;
        if written % 1_000_000 == 0 {
            eprintln!("bench: {written} events written");
        }
    }
    // Billing history: a change when each customer was created, a second for a third of them,
    // and 300 for the tail customer whose users stand out (the section shows the latest 100).
    let mut changes = Vec::new();
    for (c, id) in customers.iter().enumerate() {
        let count = match c {
            TAIL_USERS => 300,
            _ if c % 3 == 0 => 2,
            _ => 1,
        };
        for k in 0..count {
            changes.push(billing_change::ActiveModel {
                id: Set(uuid::Uuid::new_v4().to_string()),
                organization_id: Set(org.to_string()),
                customer_id: Set(id.clone()),
                at: Set(now - Duration::days(400) + Duration::days(k)),
                billing_status: Set(if k == 0 {
                    BillingStatus::Trialing
                } else {
                    BillingStatus::Paying
                }),
                mrr_cents: Set(1_000 * k),
                origin: Set("import".into()),
            });
        }
        if changes.len() >= TRANSACTION_ROWS {
            insert_all(db, std::mem::take(&mut changes)).await?;
        }
    }
    insert_all(db, changes).await
}

/// An automation with [`AUTOMATION_RUNS`] runs, as the engine leaves them; answers its id.
async fn write_automation_runs(db: &DatabaseConnection, org: &str) -> Result<String> {
    let now = Utc::now();
    let id = uuid::Uuid::new_v4().to_string();
    automation::ActiveModel {
        id: Set(id.clone()),
        organization_id: Set(org.to_string()),
        key: Set("bench-runs".into()),
        managed_by: Set("UI".into()),
        name: Set("Bench runs".into()),
        description: Set(None),
        enabled: Set(false),
        trigger_type: Set("SIGNAL_OCCURRENCE".into()),
        trigger_json: Set(json!({})),
        audience_filter_json: Set(json!({})),
        agent_id: Set(None),
        match_mode: Set("ANY".into()),
        schema_version: Set("1".into()),
        config_hash: Set(None),
        archived_at: Set(None),
        last_run_at: Set(Some(now)),
        last_run_status: Set(Some(automation_run::AutomationRunStatus::Delivered)),
        next_run_at: Set(None),
        enabled_at: Set(None),
        created_at: Set(now - Duration::days(60)),
        updated_at: Set(now),
    }
    .insert(db)
    .await?;
    let statuses = [
        automation_run::AutomationRunStatus::Delivered,
        automation_run::AutomationRunStatus::Skipped,
        automation_run::AutomationRunStatus::Failed,
        automation_run::AutomationRunStatus::PartialFailure,
    ];
    let runs: Vec<automation_run::ActiveModel> = (0..AUTOMATION_RUNS)
        .map(|i| {
            let at = now - Duration::seconds(i as i64 * 50);
            automation_run::ActiveModel {
                id: Set(uuid::Uuid::new_v4().to_string()),
                organization_id: Set(org.to_string()),
                automation_id: Set(id.clone()),
                dedupe_key: Set(format!("run:{i}")),
                status: Set(statuses[i % 7 % statuses.len()]),
                triggered_at: Set(at),
                started_at: Set(Some(at)),
                finished_at: Set(Some(at)),
                config_hash: Set(None),
                subject: Set(Some(json!({"grain": "customer", "id": format!("c{i}"),
                    "key": format!("company-{i}.example.com"), "name": null, "customerId": null}))),
                digest_since: Set(None),
                skip_reason: Set(None),
                title: Set(Some("Run".into())),
                message: Set(Some("A bench run".into())),
                warnings: Set(json!([])),
                events: Set(json!([])),
                signals: Set(json!([])),
                processor_attempts: Set(1),
                lease_until: Set(None),
                updated_at: Set(at),
            }
        })
        .collect();
    insert_all(db, runs).await?;
    Ok(id)
}

/// Values of the loaded data that the cases draw their inputs from.
struct Sample {
    scale: Scale,
    fact_ids: Vec<String>,
    /// `(sourceType, sourceId)` pairs.
    sources: Vec<(String, String)>,
    automation_id: String,
    /// Second pages: a `nextCursor` of a PAYING customers list and of the tail customer's users.
    paying_cursor: String,
    tail_users_cursor: String,
}

impl Sample {
    fn customer(&self, rng: &mut StdRng) -> String {
        domain(rng.gen_range(0..self.scale.customers))
    }
    fn source(&self, rng: &mut StdRng) -> &(String, String) {
        &self.sources[rng.gen_range(0..self.sources.len())]
    }
}

/// One call of a case.
enum Call {
    Tool(&'static str, Value),
    Get(String),
}

/// A measured case: its label, its p99 target, and how it draws the input of each call.
struct Case {
    label: &'static str,
    target_ms: f64,
    make: Box<dyn Fn(&Sample, &mut StdRng) -> Call + Send + Sync>,
}

fn tool(
    label: &'static str,
    target_ms: f64,
    name: &'static str,
    input: impl Fn(&Sample, &mut StdRng) -> Value + Send + Sync + 'static,
) -> Case {
    Case {
        label,
        target_ms,
        make: Box::new(move |s, rng| Call::Tool(name, input(s, rng))),
    }
}

const LOOKUP_MS: f64 = 20.0;
const SEARCH_MS: f64 = 50.0;
const AGGREGATE_MS: f64 = 200.0;
const ALL_INCLUDES: [&str; 5] = ["users", "revenue", "recentTimeline", "facts", "sources"];

fn cases() -> Vec<Case> {
    let t = LOOKUP_MS;
    let mut cases = vec![
        tool(
            "get_customer, every include",
            t,
            "svc_get_customer",
            |s, r| json!({"customer": s.customer(r), "include": ALL_INCLUDES}),
        ),
        tool(
            "get_customer, every include, tail customers",
            t,
            "svc_get_customer",
            |_, r| json!({"customer": domain(r.gen_range(0..3)), "include": ALL_INCLUDES}),
        ),
        tool(
            "get_customer, no include",
            t,
            "svc_get_customer",
            |s, r| json!({"customer": format!("cus_{}", r.gen_range(0..s.scale.customers))}),
        ),
        tool(
            "list_customers billingStatus",
            t,
            "svc_list_customers",
            |_, r| {
                let status = BillingStatus::ALL[r.gen_range(0..BillingStatus::ALL.len())];
                json!({"billingStatus": status.as_str()})
            },
        ),
        tool(
            "list_customers minMrrCents",
            t,
            "svc_list_customers",
            |_, r| json!({"minMrrCents": r.gen_range(1..20) * 50_000}),
        ),
        tool(
            "list_customers MRR range",
            t,
            "svc_list_customers",
            |_, r| {
                let min = r.gen_range(1..20) * 10_000;
                json!({"minMrrCents": min, "maxMrrCents": min + 20_000})
            },
        ),
        tool(
            "list_customers traits",
            t,
            "svc_list_customers",
            |_, r| json!({"traits": {"plan": PLANS[r.gen_range(0..3)]}}),
        ),
        tool(
            "list_customers rare trait",
            t,
            "svc_list_customers",
            |_, _| json!({"traits": {"segment": "strategic"}}),
        ),
        tool(
            "list_customers name",
            t,
            "svc_list_customers",
            |s, r| json!({"name": format!("company {}", r.gen_range(0..s.scale.customers))}),
        ),
        tool(
            "list_customers activeWithin",
            t,
            "svc_list_customers",
            |_, r| json!({"activeWithin": format!("{}d", r.gen_range(1..60))}),
        ),
        tool(
            "list_customers inactiveFor",
            t,
            "svc_list_customers",
            |_, r| json!({"inactiveFor": format!("{}d", r.gen_range(1..90))}),
        ),
        tool(
            "list_customers PAYING+minMrrCents",
            t,
            "svc_list_customers",
            |_, r| json!({"billingStatus": "PAYING", "minMrrCents": r.gen_range(1..20) * 50_000}),
        ),
        tool(
            "list_customers combined",
            t,
            "svc_list_customers",
            |_, r| {
                json!({"billingStatus": "PAYING", "minMrrCents": r.gen_range(1..10) * 10_000,
                "traits": {"region": REGIONS[r.gen_range(0..3)]}, "activeWithin": "30d"})
            },
        ),
        tool(
            "list_customers PAYING, second page",
            t,
            "svc_list_customers",
            |s, _| json!({"billingStatus": "PAYING", "cursor": s.paying_cursor}),
        ),
        tool(
            "list_users customer",
            t,
            "svc_list_users",
            |s, r| json!({"customer": s.customer(r)}),
        ),
        tool(
            "list_users tail customer",
            t,
            "svc_list_users",
            |_, _| json!({"customer": domain(TAIL_USERS)}),
        ),
        tool(
            "list_users tail customer, second page",
            t,
            "svc_list_users",
            |s, _| json!({"customer": domain(TAIL_USERS), "cursor": s.tail_users_cursor}),
        ),
        tool(
            "list_users stage",
            t,
            "svc_list_users",
            |_, r| json!({"stage": STAGES[r.gen_range(0..STAGES.len())]}),
        ),
        tool(
            "list_users traits",
            t,
            "svc_list_users",
            |_, r| json!({"traits": {"role": ROLES[r.gen_range(0..2)]}}),
        ),
        tool(
            "list_users email",
            t,
            "svc_list_users",
            |s, r| json!({"email": format!("USER{}@example.com", r.gen_range(0..s.scale.users))}),
        ),
        tool(
            "list_users name",
            t,
            "svc_list_users",
            |s, r| json!({"name": format!("user {}", r.gen_range(0..s.scale.users))}),
        ),
        tool(
            "get_timeline 30d",
            t,
            "svc_get_timeline",
            |s, r| json!({"customer": s.customer(r), "timeframe": "30d"}),
        ),
        tool(
            "get_timeline 30d, tail customer",
            t,
            "svc_get_timeline",
            |_, _| json!({"customer": domain(TAIL_EVENTS), "timeframe": "30d"}),
        ),
    ];
    for channel in ["product", "billing", "support", "conversation"] {
        let label: &'static str = Box::leak(format!("get_timeline 30d {channel}").into_boxed_str());
        cases.push(tool(label, t, "svc_get_timeline", move |s, r| {
            json!({"customer": s.customer(r), "timeframe": "30d", "channels": [channel]})
        }));
    }
    cases.extend([
        tool("list_facts customer", t, "svc_list_facts", |s, r| {
            json!({"customer": s.customer(r)})
        }),
        tool("list_facts sourceTypes", t, "svc_list_facts", |_, r| {
            json!({"sourceTypes": [SOURCE_TYPES[r.gen_range(0..SOURCE_TYPES.len())]]})
        }),
        tool("list_sources customer", t, "svc_list_sources", |s, r| {
            json!({"customer": s.customer(r)})
        }),
        tool("list_sources tail customer", t, "svc_list_sources", |_, _| {
            json!({"customer": domain(TAIL_SOURCES)})
        }),
        tool("list_sources sourceTypes", t, "svc_list_sources", |_, r| {
            json!({"sourceTypes": [SOURCE_TYPES[r.gen_range(0..SOURCE_TYPES.len())]]})
        }),
        tool("get_fact", t, "svc_get_fact", |s, r| {
            json!({"factId": s.fact_ids[r.gen_range(0..s.fact_ids.len())]})
        }),
        tool("get_source", t, "svc_get_source", |s, r| {
            let (source_type, source_id) = s.source(r);
            json!({"sourceType": source_type, "sourceId": source_id})
        }),
        Case {
            label: "GET /api/automations",
            target_ms: t,
            make: Box::new(|_, _| Call::Get("/api/automations".into())),
        },
        Case {
            label: "GET /api/automations/{id}/runs (100,000 runs)",
            target_ms: t,
            make: Box::new(|s, _| Call::Get(format!("/api/automations/{}/runs", s.automation_id))),
        },
        tool("search, all customers", SEARCH_MS, "svc_search_customer_context", |_, r| {
            json!({"query": format!("{} {}", WORDS[r.gen_range(0..12)], WORDS[r.gen_range(0..12)]),
                "topK": 10})
        }),
        tool("search, one customer", SEARCH_MS, "svc_search_customer_context", |s, r| {
            json!({"query": WORDS[r.gen_range(0..12)], "customer": s.customer(r)})
        }),
        tool("svc_query customers by billing status", AGGREGATE_MS, "svc_query", |_, _| {
            json!({"sql": "SELECT billing_status, count(*) AS customers, sum(mrr_cents) AS mrr \
                FROM customers GROUP BY billing_status ORDER BY mrr DESC"})
        }),
        tool("svc_query revenue by status, written otherwise", AGGREGATE_MS, "svc_query", |_, _| {
            json!({"sql": "SELECT c.billing_status AS status, COUNT(1) AS n, \
                AVG(c.mrr_cents) / 100.0 AS average_dollars FROM customers c \
                WHERE c.billing_status IN ('PAYING', 'TRIALING', 'CHURNED') GROUP BY 1 \
                HAVING COUNT(*) > 0 ORDER BY n DESC"})
        }),
        tool("svc_query customer_totals", AGGREGATE_MS, "svc_query", |_, _| {
            json!({"sql": "SELECT billing_status, customers, mrr_cents AS mrr \
                FROM customer_totals ORDER BY mrr DESC"})
        }),
    ]);
    cases
}

fn percentile(sorted: &[StdDuration], p: f64) -> StdDuration {
    if sorted.is_empty() {
        return StdDuration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A client of the in-process server.
#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Client {
    /// The answer to `call`, parsed: for the calls that set up a run.
    async fn call(&self, call: &Call) -> Result<Value> {
        Ok(serde_json::from_slice(self.answer(call).await?.as_ref())?)
    }

    /// The answer's bytes, read to the end but not parsed: what a measured call waits for. A
    /// user's client parses on its own machine; parsing here would spend the two cores the
    /// service is measured on (as wrk, which reads and drops the body, does not).
    async fn answer(&self, call: &Call) -> Result<impl AsRef<[u8]>> {
        let request = match call {
            Call::Tool(name, input) => self
                .http
                .post(format!("{}/api/tools/call", self.base))
                .json(&json!({"tool": name, "input": input})),
            Call::Get(path) => self.http.get(format!("{}{path}", self.base)),
        };
        let response = request.bearer_auth(&self.key).send().await?;
        let status = response.status();
        let body = response.bytes().await?;
        if !status.is_success() {
            bail!("{status}: {}", String::from_utf8_lossy(&body));
        }
        Ok(body)
    }
}

/// What one case measured.
struct Measured {
    calls: usize,
    errors: usize,
    first_error: Option<String>,
    p50: StdDuration,
    p99: StdDuration,
}

impl Measured {
    /// The figures of the calls that answered in `times`, beside `errors` failed ones.
    fn of(mut times: Vec<StdDuration>, errors: usize, first_error: Option<String>) -> Self {
        times.sort();
        Self {
            calls: times.len(),
            errors,
            first_error,
            p50: percentile(&times, 50.0),
            p99: percentile(&times, 99.0),
        }
    }
}

async fn measure(
    case: Arc<Case>,
    sample: Arc<Sample>,
    client: &Client,
    concurrency: usize,
    seconds: u64,
) -> Measured {
    let callers: Vec<_> = (0..concurrency)
        .map(|k| {
            let (case, sample, client) = (case.clone(), sample.clone(), client.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(1_000 + k as u64);
                let (mut times, mut errors, mut first_error) = (Vec::new(), 0, None);
                // Warm-up: a few calls each, not counted. The measured seconds start after it
                // (a slow case's warm-up could otherwise use them all up and count nothing).
                for _ in 0..3 {
                    let _ = client.answer(&(case.make)(&sample, &mut rng)).await;
                }
                let deadline = Instant::now() + StdDuration::from_secs(seconds);
                while Instant::now() < deadline {
                    let call = (case.make)(&sample, &mut rng);
                    let started = Instant::now();
                    match client.answer(&call).await {
                        Ok(_) => times.push(started.elapsed()),
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
                (times, errors, first_error)
            })
        })
        .collect();
    let (mut times, mut errors, mut first_error) = (Vec::new(), 0, None);
    for caller in callers {
        if let Ok((t, e, f)) = caller.await {
            times.extend(t);
            errors += e;
            first_error = first_error.or(f);
        }
    }
    Measured::of(times, errors, first_error)
}

/// Sends one batch until it is acknowledged (at most 15 minutes): how long that took, in seconds.
async fn ingest_ready(base: &str, public_key: &str) -> Result<f64> {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let body = json!({"source": "server", "events": [{"type": "custom", "eventName": "ready",
        "url": "server://bench", "path": "/", "email": "ready@bench.example",
        "messageId": uuid::Uuid::new_v4().to_string()}]});
    loop {
        let answer = http
            .post(format!("{base}/api/i/v1/{public_key}/events"))
            .json(&body)
            .send()
            .await;
        // 200: the event was stored (207 would say it was refused on its own).
        if answer
            .as_ref()
            .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
        {
            return Ok(started.elapsed().as_secs_f64());
        }
        if started.elapsed() > StdDuration::from_secs(900) {
            bail!("ingest: no batch acknowledged in 15 minutes (last answer: {answer:?})");
        }
        tokio::time::sleep(StdDuration::from_millis(500)).await;
    }
}

/// Sends `rate` events per second to the organization's Ingest API (batches of 100, open loop)
/// until `stop`; counts the events acknowledged and the batches that failed, by why (the
/// status, or the client's error).
///
/// Each event is one of the book's users' (`userId`, the user's `externalId`, at random), as a
/// server-side tracker sends them: the applier finds the user and its customer and moves both
/// one's last activity, as real traffic makes it. (An email made of a random user and a random
/// customer's domain named a user the book did not hold, so each event created a user of no
/// customer and no customer's row was ever written.)
fn spawn_ingest(
    base: String,
    public_key: String,
    rate: u64,
    users: usize,
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
    failed: Arc<std::sync::Mutex<BTreeMap<String, u64>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let http = reqwest::Client::new();
        let batches_per_sec = (rate as f64 / 100.0).max(0.01);
        let mut tick = tokio::time::interval(StdDuration::from_secs_f64(1.0 / batches_per_sec));
        let mut rng = StdRng::seed_from_u64(99);
        let mut in_flight = tokio::task::JoinSet::new();
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let events: Vec<Value> = (0..100)
                .map(|_| {
                    let u = rng.gen_range(0..users);
                    json!({"type": "custom", "eventName": WORDS[u % WORDS.len()],
                        "url": "server://bench", "path": "/",
                        "userId": format!("u_{u}"),
                        "properties": {"plan": PLANS[u % 3]},
                        "messageId": uuid::Uuid::new_v4().to_string()})
                })
                .collect();
            let request = http
                .post(format!("{base}/api/i/v1/{public_key}/events"))
                .json(&json!({"source": "server", "events": events}));
            let (acknowledged, failed) = (acknowledged.clone(), failed.clone());
            in_flight.spawn(async move {
                let why = match request.send().await {
                    Ok(r) if r.status() == reqwest::StatusCode::OK => {
                        acknowledged.fetch_add(100, Ordering::Relaxed);
                        return;
                    }
                    Ok(r) => r.status().as_u16().to_string(),
                    Err(e) if e.is_timeout() => "time-out".to_string(),
                    Err(_) => "no answer".to_string(),
                };
                *failed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(why)
                    .or_default() += 1;
            });
            while in_flight.try_join_next().is_some() {}
        }
        while in_flight.join_next().await.is_some() {}
    })
}

/// Runs the benchmark: loads, serves, measures every case, prints the table and a JSON line.
pub async fn tools(args: ToolsBenchArgs) -> Result<()> {
    if let Some(kept) = &args.reuse {
        let (conn, label, location) = match &args.postgres {
            Some(url) => {
                let conn = crate::db::connect(url, Some(kept)).await?;
                let settings = bench_ingest::postgres_settings(&conn).await?;
                (
                    conn,
                    format!("PostgreSQL ({url}, schema {kept}; {settings}), reused"),
                    Location::Postgres {
                        url: url.clone(),
                        schema: kept.clone(),
                    },
                )
            }
            None => {
                let path = std::path::Path::new(kept);
                if !path.is_file() {
                    bail!("--reuse: no database at {}", path.display());
                }
                let location = Location::Sqlite(path.to_path_buf());
                (
                    crate::db::connect(&location.url(), None).await?,
                    format!(
                        "SQLite (WAL, synchronous=NORMAL), reused from {}",
                        path.display()
                    ),
                    location,
                )
            }
        };
        crate::db::migrate(&conn).await?;
        let loaded = reuse(&conn).await?;
        let work = tempfile::tempdir()?;
        return measure_all(&args, &conn, &label, &loaded, &location, work.path()).await;
    }
    let dir = tempfile::tempdir()?;
    let options = BenchOptions {
        seconds: 0,
        concurrency: 0,
        database_url: args.postgres.clone(),
        instances: 1,
    };
    let (conn, label, schema) = bench_ingest::open(&options, dir.path()).await?;
    let location = match (&args.postgres, &schema) {
        (Some(url), Some(schema)) => Location::Postgres {
            url: url.clone(),
            schema: schema.clone(),
        },
        _ => Location::Sqlite(dir.path().join("bench.db")),
    };
    let result = run(&args, &conn, &label, dir.path(), &location).await;
    match (&schema, args.keep_database) {
        (Some(schema), true) => eprintln!("bench: PostgreSQL schema kept: {schema}"),
        (Some(_), false) => bench_ingest::drop_schema(&options, schema.as_deref()).await?,
        (None, true) => {
            let kept = dir.keep();
            eprintln!(
                "bench: database kept at {}",
                kept.join("bench.db").display()
            );
        }
        (None, false) => {}
    }
    result
}

async fn import_book(
    conn: &DatabaseConnection,
    dir: &std::path::Path,
    org: &str,
    scale: Scale,
    seed: u64,
) -> Result<(usize, f64)> {
    let book = dir.join(format!("book-{seed}.jsonl"));
    let lines = write_book(&book, scale, seed)?;
    let started = Instant::now();
    let chunks_at_once = crate::config::import_chunks_at_once()?;
    let report = crate::import::import_file(conn, org, &book.display().to_string(), chunks_at_once)
        .await
        .context("import")?;
    let took = started.elapsed().as_secs_f64();
    std::fs::remove_file(&book)?;
    if !report.rejected.is_empty() {
        bail!(
            "the import rejected lines: {:?}",
            &report.rejected[..report.rejected.len().min(5)]
        );
    }
    Ok((lines, took))
}

/// What the measured cases need to know of a loaded database.
struct LoadedBook {
    organization_id: String,
    api_key: String,
    public_key: String,
    automation_id: String,
}

/// The large organization of a kept database, with a new API key for this run.
async fn reuse(conn: &DatabaseConnection) -> Result<LoadedBook> {
    let org = entity::organization::Entity::find()
        .filter(entity::organization::Column::Name.eq("Bench"))
        .one(conn)
        .await?
        .context("--reuse: the database has no organization named Bench")?;
    let key = admin::create_key(conn, &org.id, Some("bench".into()), false).await?;
    let public_key = public_key_of(conn, &org.id).await.context("--reuse")?;
    let automation_id = automation::Entity::find()
        .filter(automation::Column::OrganizationId.eq(&org.id))
        .filter(automation::Column::Key.eq("bench-runs"))
        .one(conn)
        .await?
        .context("--reuse: the organization has no bench-runs automation")?
        .id;
    Ok(LoadedBook {
        organization_id: org.id,
        api_key: key.api_key,
        public_key,
        automation_id,
    })
}

/// The public (ingest) key of an organization a benchmark created earlier.
async fn public_key_of(conn: &DatabaseConnection, organization_id: &str) -> Result<String> {
    Ok(entity::tracking_config::Entity::find()
        .filter(entity::tracking_config::Column::OrganizationId.eq(organization_id))
        .one(conn)
        .await?
        .context("the organization has no public key")?
        .public_key)
}

async fn run(
    args: &ToolsBenchArgs,
    conn: &DatabaseConnection,
    label: &str,
    dir: &std::path::Path,
    location: &Location,
) -> Result<()> {
    let scale = Scale::of(args.customers);
    println!(
        "custintel bench tools on {label}: {} customers, {} users, {} sources, {} facts, {} events \
         in one organization (tails: {} users, {} sources, {} events on one customer each); \
         {} callers per case for {} s{}",
        scale.customers,
        scale.users,
        scale.sources,
        scale.facts,
        scale.events,
        scale.tail_users(),
        scale.tail_sources(),
        scale.tail_events(),
        args.concurrency,
        args.seconds,
        if args.with_ingest > 0 {
            format!(", beside {} ingested events/s", args.with_ingest)
        } else {
            String::new()
        }
    );
    let org = bench_ingest::create_org(conn, "Bench", 1_000_000).await?;
    let (lines, took) = import_book(conn, dir, &org.organization_id, scale, 42).await?;
    println!(
        "import: {lines} lines in {took:.1} s ({:.0} lines/s)",
        lines as f64 / took
    );
    for k in 0..3 {
        let small = admin::create_org(
            conn,
            admin::NewOrganization {
                name: format!("Small {k}"),
                plan: admin::Plan::Pro,
                api_call_limit: None,
                connection_limit: None,
                ingest_rate_limit: None,
                tracking_domains: vec![],
            },
        )
        .await?;
        import_book(
            conn,
            dir,
            &small.organization_id,
            Scale::of(SMALL_ORG_CUSTOMERS),
            100 + k,
        )
        .await?;
    }
    let started = Instant::now();
    let ids = customer_ids(conn, &org.organization_id, scale.customers).await?;
    write_events(conn, &org.organization_id, &ids, scale).await?;
    drop(ids);
    // The applier counts the events of the customers with many per hour as it stores them;
    // written straight to the table, they are counted from it once.
    let by_hour =
        crate::db::customer_event_hours::count_from_stored_events(conn, &org.organization_id)
            .await?;
    let automation_id = write_automation_runs(conn, &org.organization_id).await?;
    // Written directly, these rows would be vacuumed and analyzed by autovacuum (PostgreSQL)
    // or analyzed by a serving instance's refresh (SQLite) soon after they arrived; the book
    // is measured as a running service would have it, whatever the machine's autovacuum.
    crate::db::statistics::after_bulk_load(
        conn,
        &[
            "events",
            "billing_history",
            "automation_runs",
            "visitors",
            "customer_event_hours",
        ],
    )
    .await?;
    println!(
        "events, billing changes and {AUTOMATION_RUNS} automation runs written in {:.1} s \
         ({by_hour} customers' events counted per hour)",
        started.elapsed().as_secs_f64()
    );
    let loaded = LoadedBook {
        organization_id: org.organization_id,
        api_key: org.api_key,
        public_key: org.public_key,
        automation_id,
    };
    measure_all(args, conn, label, &loaded, location, dir).await
}

/// Serves the loaded database as `custintel serve` does and measures every case.
async fn measure_all(
    args: &ToolsBenchArgs,
    conn: &DatabaseConnection,
    label: &str,
    loaded: &LoadedBook,
    location: &Location,
    dir: &std::path::Path,
) -> Result<()> {
    let scale = Scale::of(args.customers);
    println!("measuring on {label}");

    // Serve as `custintel serve` does on this database, and time its readiness.
    let started = Instant::now();
    let state = AppState {
        db: conn.clone(),
        secrets: SecretBox::from_key(&[7u8; 32]),
        public_url: "http://127.0.0.1".into(),
        integrations: Default::default(),
        search: crate::search::SearchIndex::start(conn.clone())?,
        agents: Default::default(),
        name_trigrams: Default::default(),
        allowance: Default::default(),
    };
    let search = state.search.clone();
    let server = bench_ingest::BenchInstance::serve(state).await?;
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::new();
    loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        tokio::time::sleep(StdDuration::from_millis(20)).await;
    }
    let ready = started.elapsed();
    if !search.wait_built(StdDuration::from_secs(3_600)).await {
        bail!("the search index was not built within an hour");
    }
    println!(
        "serve: /readyz 200 after {:.2} s; search index built after {:.1} s; resident memory {}",
        ready.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        crate::memory::MemoryReport::now(&search)
    );
    // The statistics refresh runs at start beside the search build; let it finish.
    crate::db::statistics::refresh(conn).await?;

    let client = Client {
        http,
        base: base.clone(),
        key: loaded.api_key.clone(),
    };
    // A thousand facts and sources at random, for the exact look-ups.
    let random = || sea_orm::sea_query::Expr::cust("random()");
    let fact_ids: Vec<String> = entity::fact::Entity::find()
        .select_only()
        .column(entity::fact::Column::Id)
        .filter(entity::fact::Column::OrganizationId.eq(&loaded.organization_id))
        .order_by(random(), sea_orm::Order::Asc)
        .limit(1_000)
        .into_tuple()
        .all(conn)
        .await?;
    let sources: Vec<(String, String)> = entity::source::Entity::find()
        .select_only()
        .columns([
            entity::source::Column::SourceType,
            entity::source::Column::SourceId,
        ])
        .filter(entity::source::Column::OrganizationId.eq(&loaded.organization_id))
        .order_by(random(), sea_orm::Order::Asc)
        .limit(1_000)
        .into_tuple()
        .all(conn)
        .await?;
    let cursor_of = |v: Value| {
        v["pagination"]["nextCursor"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let paying_cursor = cursor_of(
        client
            .call(&Call::Tool(
                "svc_list_customers",
                json!({"billingStatus": "PAYING"}),
            ))
            .await?,
    );
    let tail_users_cursor = cursor_of(
        client
            .call(&Call::Tool(
                "svc_list_users",
                json!({"customer": domain(TAIL_USERS)}),
            ))
            .await?,
    );
    let sample = Arc::new(Sample {
        scale,
        fact_ids,
        sources,
        automation_id: loaded.automation_id.clone(),
        paying_cursor,
        tail_users_cursor,
    });

    if args.with_ingest > 0 {
        // The first batch waits for the instance's messageId window to load (on PostgreSQL a
        // new instance reads it back from the stored events): the cases measure an instance
        // that ingests, not one that is starting to.
        let took = ingest_ready(&base, &loaded.public_key).await?;
        println!("ingest: first batch acknowledged after {took:.1} s");
    }
    let stop_ingest = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let ingest = (args.with_ingest > 0).then(|| {
        spawn_ingest(
            base.clone(),
            loaded.public_key.clone(),
            args.with_ingest,
            scale.users,
            stop_ingest.clone(),
            acknowledged.clone(),
            failed.clone(),
        )
    });
    let ingest_started = Instant::now();
    // What waits for the applier when the ingest starts and when it ends: the events it
    // applied meanwhile are those acknowledged less what the wait grew by.
    let waiting = || async {
        let backlog = crate::ingest::journal::backlog(conn, Some(&loaded.organization_id)).await?;
        Ok::<u64, sea_orm::DbErr>(u64::try_from(backlog.events).unwrap_or(0))
    };
    let waiting_before = if ingest.is_some() {
        waiting().await?
    } else {
        0
    };

    let selected: Vec<Arc<Case>> = cases()
        .into_iter()
        .filter(|case| {
            args.only
                .as_deref()
                .is_none_or(|only| case.label.contains(only))
        })
        .map(Arc::new)
        .collect();
    let mut summary = Vec::new();
    let mut missed = 0;
    let mut report = |case: &Case, m: &Measured| {
        let p99_ms = m.p99.as_secs_f64() * 1e3;
        let ratio = p99_ms / case.target_ms;
        let verdict = if m.errors > 0 {
            "ERRORS"
        } else if m.calls == 0 {
            "NO CALLS"
        } else if ratio <= 1.0 {
            "met"
        } else {
            "MISSED"
        };
        if verdict != "met" {
            missed += 1;
        }
        println!(
            "{:<48} {:>7} {:>7} {:>9.2} {:>9.2} {:>7.2}  {verdict}{}",
            case.label,
            case.target_ms,
            m.calls,
            m.p50.as_secs_f64() * 1e3,
            p99_ms,
            ratio,
            m.first_error
                .as_deref()
                .map(|e| format!(" ({} errors; first: {})", m.errors, truncate(e, 200)))
                .unwrap_or_default()
        );
        summary.push(
            json!({"case": case.label, "targetMs": case.target_ms, "calls": m.calls,
            "errors": m.errors, "p50Ms": m.p50.as_secs_f64() * 1e3, "p99Ms": p99_ms}),
        );
    };
    let header = || {
        println!(
            "{:<48} {:>7} {:>7} {:>9} {:>9} {:>7}  verdict",
            "case", "target", "calls", "p50 ms", "p99 ms", "p99/t"
        )
    };
    if args.during_import {
        let measured = beside_import::measure(
            conn,
            location,
            dir,
            scale,
            &selected,
            sample.clone(),
            &client,
            args.concurrency.max(1),
        )
        .await?;
        header();
        for (case, m) in selected.iter().zip(&measured) {
            report(case, m);
        }
    } else {
        header();
        for case in &selected {
            let m = measure(
                case.clone(),
                sample.clone(),
                &client,
                args.concurrency.max(1),
                args.seconds,
            )
            .await;
            report(case, &m);
        }
    }
    stop_ingest.store(true, Ordering::Relaxed);
    if let Some(ingest) = ingest {
        let _ = ingest.await;
        let secs = ingest_started.elapsed().as_secs_f64();
        let waiting_after = waiting().await?;
        let acknowledged = acknowledged.load(Ordering::Relaxed);
        let applied = (acknowledged + waiting_before).saturating_sub(waiting_after);
        let failed = failed.lock().unwrap_or_else(|p| p.into_inner());
        let why: Vec<String> = failed.iter().map(|(w, n)| format!("{w}: {n}")).collect();
        println!(
            "ingest beside the cases: {:.0} events/s acknowledged ({} batches failed{}) of {} \
             offered; {:.0} events/s applied ({waiting_after} events waiting for the applier at \
             the end, {waiting_before} at the start)",
            acknowledged as f64 / secs,
            failed.values().sum::<u64>(),
            if why.is_empty() {
                String::new()
            } else {
                format!(": {}", why.join(", "))
            },
            args.with_ingest,
            applied as f64 / secs,
        );
    }
    println!(
        "{} of {} cases within target; resident memory {}",
        summary.len() - missed,
        summary.len(),
        crate::memory::MemoryReport::now(&search)
    );
    println!("{}", json!({ "results": summary }));
    server.stop().await;
    Ok(())
}

fn truncate(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}
