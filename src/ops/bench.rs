//! `custintel bench tools`: tool-gateway latency over HTTP on a generated data set.
//!
//! Loads customers, users, sources, facts, billing history and events into a temporary SQLite
//! database with multi-row INSERTs in one transaction per table, serves the application on
//! 127.0.0.1:0 in this process, then calls each case sequentially and reports p50/p99.

use std::time::{Duration as StdDuration, Instant};

use anyhow::{anyhow, Context, Result};
use chrono::{Duration, Utc};
use rand::{rngs::StdRng, Rng, SeedableRng};
use sea_orm::{ActiveModelTrait, DatabaseConnection, EntityTrait, Set, TransactionTrait};
use serde_json::{json, Value};

use crate::{crypto::SecretBox, db, ops::admin, state::AppState};
use entity::{
    billing_change,
    customer::{self, BillingStatus},
    event,
    fact::{self, FactStatus},
    source, user,
};

/// Sizes of the generated data set.
#[derive(Debug, Clone, clap::Args)]
pub struct ToolsBenchArgs {
    #[arg(long, default_value_t = 100_000)]
    pub customers: usize,
    #[arg(long, default_value_t = 500_000)]
    pub users: usize,
    #[arg(long, default_value_t = 200_000)]
    pub sources: usize,
    #[arg(long, default_value_t = 1_000_000)]
    pub events: usize,
    /// Timed calls per case (after 20 warm-up calls).
    #[arg(long, default_value_t = 300)]
    pub iterations: usize,
    /// Keep the generated database (its path is printed) to inspect query plans afterwards.
    #[arg(long)]
    pub keep_database: bool,
}

/// One measured call: a label, the tool and its input.
pub struct Case {
    pub label: String,
    pub tool: &'static str,
    pub input: Value,
}

/// Values of the generated data the cases refer to.
pub struct Sample {
    /// Domains of customers that have users, sources, facts and events.
    pub domains: Vec<String>,
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

/// Rows per multi-row INSERT: below SQLite's bound-parameter limit for the widest table.
const CHUNK: usize = 1_000;

async fn insert_chunked<A>(db: &DatabaseConnection, rows: Vec<A>) -> Result<()>
where
    A: ActiveModelTrait + Send,
{
    let txn = db.begin().await?;
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let chunk: Vec<A> = rows.by_ref().take(CHUNK).collect();
        A::Entity::insert_many(chunk)
            .exec_without_returning(&txn)
            .await?;
    }
    txn.commit().await?;
    Ok(())
}

/// Generates and loads the data set; returns what the cases need.
async fn load(db: &DatabaseConnection, org: &str, a: &ToolsBenchArgs) -> Result<Sample> {
    let mut rng = StdRng::seed_from_u64(42);
    let now = Utc::now();
    let started = Instant::now();
    let customer_ids: Vec<String> = (0..a.customers)
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let domain = |i: usize| format!("company-{i}.example.com");

    let mut rows = Vec::with_capacity(a.customers);
    let mut history = Vec::with_capacity(a.customers * 2);
    for (i, id) in customer_ids.iter().enumerate() {
        let status = BillingStatus::ALL[rng.gen_range(0..BillingStatus::ALL.len())];
        let mrr = if status == BillingStatus::Paying {
            rng.gen_range(1_000..500_000)
        } else {
            0
        };
        let created = now - Duration::days(rng.gen_range(100..700));
        let active = (rng.gen_range(0..10) > 0)
            .then(|| now - Duration::minutes(rng.gen_range(0..60 * 24 * 120)));
        rows.push(customer::ActiveModel {
            id: Set(id.clone()),
            organization_id: Set(org.to_string()),
            name: Set(format!("Company {i} {}", WORDS[i % WORDS.len()])),
            domain: Set(Some(domain(i))),
            external_id: Set(Some(format!("cus_{i}"))),
            billing_status: Set(status),
            mrr_cents: Set(mrr),
            traits: Set(json!({ "plan": PLANS[i % 3], "region": REGIONS[i % 3] })),
            last_activity_at: Set(active),
            created_at: Set(created),
            updated_at: Set(created),
        });
        history.push(billing_change::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org.to_string()),
            customer_id: Set(id.clone()),
            at: Set(created),
            billing_status: Set(BillingStatus::Trialing),
            mrr_cents: Set(0),
            origin: Set("import".into()),
        });
        history.push(billing_change::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org.to_string()),
            customer_id: Set(id.clone()),
            at: Set(created + Duration::days(14)),
            billing_status: Set(status),
            mrr_cents: Set(mrr),
            origin: Set("import".into()),
        });
    }
    insert_chunked(db, rows).await?;
    insert_chunked(db, history).await?;
    eprintln!(
        "bench: {} customers loaded ({:?})",
        a.customers,
        started.elapsed()
    );

    let mut rows = Vec::with_capacity(a.users);
    for i in 0..a.users {
        let c = i % a.customers.max(1);
        let active = (rng.gen_range(0..4) > 0)
            .then(|| now - Duration::minutes(rng.gen_range(0..60 * 24 * 120)));
        let created = now - Duration::days(rng.gen_range(120..700));
        rows.push(user::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org.to_string()),
            customer_id: Set(customer_ids.get(c).cloned()),
            email: Set(Some(format!("user{i}@{}", domain(c)))),
            external_id: Set(Some(format!("u_{i}"))),
            name: Set(Some(format!("User {i}"))),
            stage: Set(STAGES[i % STAGES.len()].to_string()),
            traits: Set(json!({ "role": ROLES[i % 2] })),
            last_activity_at: Set(active),
            created_at: Set(created),
            updated_at: Set(created),
        });
    }
    insert_chunked(db, rows).await?;
    eprintln!("bench: {} users loaded ({:?})", a.users, started.elapsed());

    let mut sources = Vec::with_capacity(a.sources);
    let mut facts = Vec::with_capacity(a.sources / 2);
    for i in 0..a.sources {
        let c = i % a.customers.max(1);
        let source_type = SOURCE_TYPES[i % SOURCE_TYPES.len()];
        let occurred = now - Duration::minutes(rng.gen_range(0..60 * 24 * 365));
        let body: String = (0..60)
            .map(|k| WORDS[(i * 7 + k * 3) % WORDS.len()])
            .collect::<Vec<_>>()
            .join(" ");
        let source_id = format!("src_{i}");
        sources.push(source::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org.to_string()),
            source_type: Set(source_type.to_string()),
            source_id: Set(source_id.clone()),
            customer_id: Set(customer_ids.get(c).cloned()),
            title: Set(format!("{} about {}", source_type, WORDS[i % WORDS.len()])),
            body: Set(body),
            occurred_at: Set(occurred),
            permalink: Set(Some(format!("https://crm.example.com/{source_id}"))),
            participants: Set(json!([format!("user{c}@{}", domain(c))])),
            change_seq: Set(i as i64 + 1),
            created_at: Set(occurred),
            updated_at: Set(occurred),
        });
        if i % 2 == 0 {
            facts.push(fact::ActiveModel {
                id: Set(uuid::Uuid::new_v4().to_string()),
                organization_id: Set(org.to_string()),
                customer_id: Set(customer_ids[c].clone()),
                text: Set(format!("Customer cares about {}", WORDS[i % WORDS.len()])),
                status: Set([
                    FactStatus::Active,
                    FactStatus::Active,
                    FactStatus::Superseded,
                ][i % 3]),
                source_type: Set(source_type.to_string()),
                source_id: Set(source_id),
                source_occurred_at: Set(occurred),
                source_quote: Set(WORDS[i % WORDS.len()].to_string()),
                permalink: Set(None),
                change_seq: Set((a.sources + i) as i64 + 1),
                created_at: Set(occurred),
                updated_at: Set(occurred),
            });
        }
    }
    let fact_count = facts.len();
    insert_chunked(db, sources).await?;
    insert_chunked(db, facts).await?;
    eprintln!(
        "bench: {} sources and {fact_count} facts loaded ({:?})",
        a.sources,
        started.elapsed()
    );

    // Events go in batches so a million rows never sit in memory at once.
    let batch = 100_000;
    let mut done = 0;
    while done < a.events {
        let n = batch.min(a.events - done);
        let mut rows = Vec::with_capacity(n);
        for i in done..done + n {
            let c = i % a.customers.max(1);
            let occurred = now - Duration::minutes(rng.gen_range(0..60 * 24 * 90));
            let (event_type, name) = match i % 4 {
                0 | 1 => ("pageview", None),
                2 => ("custom", Some(WORDS[i % WORDS.len()].to_string())),
                _ => ("identify", None),
            };
            rows.push(event::ActiveModel {
                id: Set(uuid::Uuid::new_v4().to_string()),
                organization_id: Set(org.to_string()),
                message_id: Set(None),
                event_type: Set(event_type.to_string()),
                event_name: Set(name),
                visitor_id: Set(None),
                user_id: Set(None),
                customer_id: Set(customer_ids.get(c).cloned()),
                url: Set("https://app.example.com/dashboard".into()),
                path: Set("/dashboard".into()),
                occurred_at: Set(occurred),
                received_at: Set(occurred),
                data: Set(json!({ "title": "Dashboard" })),
            });
        }
        insert_chunked(db, rows).await?;
        done += n;
    }
    eprintln!(
        "bench: {} events loaded ({:?})",
        a.events,
        started.elapsed()
    );
    // Fresh statistics let SQLite's planner pick the selective index.
    sea_orm::ConnectionTrait::execute_unprepared(db, "ANALYZE").await?;

    let domains = (0..20)
        .map(|k| domain((k * 7919) % a.customers.max(1)))
        .collect();
    Ok(Sample { domains })
}

/// The cases of the tools on this branch.
fn cases(s: &Sample) -> Vec<Case> {
    let d = |k: usize| s.domains[k % s.domains.len()].clone();
    let mut cases = vec![
        Case {
            label: "list_customers billingStatus+activeWithin".into(),
            tool: "svc_list_customers",
            input: json!({ "billingStatus": "PAYING", "activeWithin": "30d", "limit": 50 }),
        },
        Case {
            label: "list_customers minMrrCents+traits".into(),
            tool: "svc_list_customers",
            input: json!({ "minMrrCents": 100000, "traits": { "plan": "pro" }, "limit": 50 }),
        },
        Case {
            label: "list_customers inactiveFor".into(),
            tool: "svc_list_customers",
            input: json!({ "inactiveFor": "60d", "limit": 50 }),
        },
        Case {
            label: "list_customers name".into(),
            tool: "svc_list_customers",
            input: json!({ "name": "company 4242", "limit": 50 }),
        },
        Case {
            label: "list_users customer".into(),
            tool: "svc_list_users",
            input: json!({ "customer": d(1) }),
        },
        Case {
            label: "list_users stage".into(),
            tool: "svc_list_users",
            input: json!({ "stage": "engaged", "limit": 50 }),
        },
        Case {
            label: "get_customer all includes".into(),
            tool: "svc_get_customer",
            input: json!({
                "customer": d(2),
                "include": ["users", "revenue", "recentTimeline", "facts", "sources"],
                "timeframe": "90d",
            }),
        },
        Case {
            label: "get_timeline 90d".into(),
            tool: "svc_get_timeline",
            input: json!({ "customer": d(3), "timeframe": "90d", "limit": 100 }),
        },
        Case {
            label: "list_facts customer".into(),
            tool: "svc_list_facts",
            input: json!({ "customer": d(4) }),
        },
        Case {
            label: "list_facts sourceTypes (all customers)".into(),
            tool: "svc_list_facts",
            input: json!({ "sourceTypes": ["CALL", "EMAIL"], "limit": 50 }),
        },
        Case {
            label: "list_sources customer".into(),
            tool: "svc_list_sources",
            input: json!({ "customer": d(5) }),
        },
        Case {
            label: "get_source".into(),
            tool: "svc_get_source",
            input: json!({ "sourceType": "CALL", "sourceId": "src_5" }),
        },
    ];
    cases.extend(search_and_query_cases(s));
    cases
}

/// Full-text search over every source and fact, and grouped aggregates through svc_query.
fn search_and_query_cases(s: &Sample) -> Vec<Case> {
    vec![
        Case {
            label: "search all customers".into(),
            tool: "svc_search_customer_context",
            input: json!({ "query": "renewal pricing concerns", "topK": 10 }),
        },
        Case {
            label: "search one customer, calls+emails".into(),
            tool: "svc_search_customer_context",
            input: json!({
                "query": "security review",
                "customer": s.domains[0],
                "sourceTypes": ["CALL", "EMAIL"],
            }),
        },
        Case {
            label: "query customers grouped by billing status".into(),
            tool: "svc_query",
            input: json!({
                "sql": "SELECT billing_status, count(*) AS customers, sum(mrr_cents) AS mrr \
                        FROM customers GROUP BY billing_status ORDER BY mrr DESC",
            }),
        },
        Case {
            label: "query events grouped by type".into(),
            tool: "svc_query",
            input: json!({
                "sql": "SELECT type, count(*) AS events FROM events \
                        GROUP BY type ORDER BY events DESC",
            }),
        },
    ]
}

fn percentile(sorted: &[StdDuration], p: f64) -> StdDuration {
    if sorted.is_empty() {
        return StdDuration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs the benchmark and prints one line per case (and a JSON summary on stdout).
pub async fn tools(args: ToolsBenchArgs) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("custintel-bench-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}?mode=rwc", dir.join("bench.db").display());
    let result = run(&url, &args).await;
    if args.keep_database {
        eprintln!("bench: database kept at {}", dir.join("bench.db").display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run(url: &str, args: &ToolsBenchArgs) -> Result<()> {
    let conn = db::connect(url, None).await?;
    db::migrate(&conn).await?;
    let org = admin::create_org(
        &conn,
        admin::NewOrganization {
            name: "Bench".into(),
            plan: admin::Plan::Enterprise,
            api_call_limit: None,
            connection_limit: None,
            ingest_rate_limit: None,
            tracking_domains: vec![],
        },
    )
    .await?;
    let sample = load(&conn, &org.organization_id, args).await?;
    let state = AppState {
        db: conn.clone(),
        secrets: SecretBox::from_key(&[7u8; 32]),
        public_url: "http://127.0.0.1".into(),
        integrations: Default::default(),
        search: crate::search::SearchIndex::start(conn.clone())?,
        agents: Default::default(),
    };
    // Steady-state latency: the index build at start would otherwise share the two cores with
    // the first cases (its own time is logged as `search index built`).
    let started = Instant::now();
    if !state.search.wait_built(StdDuration::from_secs(600)).await {
        return Err(anyhow!("the search index was not built within 10 minutes"));
    }
    eprintln!("bench: search index built ({:?})", started.elapsed());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        crate::http::server::serve(state, "127.0.0.1:0", move |addr| {
            let _ = tx.send(addr);
        })
        .await
    });
    let addr = rx.await.map_err(|_| anyhow!("the server did not start"))?;
    let client = reqwest::Client::new();
    let endpoint = format!("http://{addr}/api/tools/call");
    let mut summary = Vec::new();
    println!(
        "{:<45} {:>9} {:>9} {:>9}",
        "case", "p50 ms", "p99 ms", "items"
    );
    for case in cases(&sample) {
        let body = json!({ "tool": case.tool, "input": case.input });
        let mut times = Vec::with_capacity(args.iterations);
        let mut items = 0;
        for i in 0..args.iterations + 20 {
            let started = Instant::now();
            let resp = client
                .post(&endpoint)
                .bearer_auth(&org.api_key)
                .json(&body)
                .send()
                .await
                .context("calling the gateway")?;
            let status = resp.status();
            let value: Value = resp.json().await?;
            let elapsed = started.elapsed();
            if !status.is_success() {
                return Err(anyhow!("{} answered {status}: {value}", case.label));
            }
            if i >= 20 {
                times.push(elapsed);
            }
            // Lists answer `items`, search `results`, svc_query `rows`; a lookup is one record.
            items = ["items", "results", "rows"]
                .iter()
                .find_map(|k| value[*k].as_array())
                .map_or(1, Vec::len);
        }
        times.sort();
        let (p50, p99) = (percentile(&times, 50.0), percentile(&times, 99.0));
        println!(
            "{:<45} {:>9.2} {:>9.2} {:>9}",
            case.label,
            p50.as_secs_f64() * 1000.0,
            p99.as_secs_f64() * 1000.0,
            items
        );
        summary.push(json!({
            "case": case.label,
            "p50Ms": p50.as_secs_f64() * 1000.0,
            "p99Ms": p99.as_secs_f64() * 1000.0,
        }));
    }
    server.abort();
    println!("{}", json!({ "results": summary }));
    Ok(())
}
