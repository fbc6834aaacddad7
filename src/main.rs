//! The `custintel` command line: the server, migrations, administration and the demo, and the
//! client commands that call a running service (`login`, `integrations`, `tools`, ...).

use clap::{Args, Parser, Subcommand};
use custintel::{config, db, ops::admin, ops::cli};
use serde::Serialize;

#[derive(Parser)]
#[command(name = "custintel", version, about = "Customer intelligence service")]
struct Cli {
    /// Database to use: `sqlite://custintel.db?mode=rwc` (default) or `postgres://...`.
    #[arg(long, global = true, env = "DATABASE_URL", default_value = db::DEFAULT_DATABASE_URL)]
    database_url: String,
    #[command(flatten)]
    output: cli::OutputArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Migrate the database, then serve the Platform API, the Ingest API and the docs.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "CUSTINTEL_BIND", default_value = "127.0.0.1:8080")]
        bind: String,
        /// Base URL the service hands out in links (connect pages, webhook URLs).
        #[arg(long, env = "CUSTINTEL_PUBLIC_URL")]
        public_url: Option<String>,
    },
    /// Apply pending database migrations.
    Migrate,
    /// Administration on the database (works while a server runs on it).
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Seed a realistic demo organization and print its keys.
    Demo,
    #[command(flatten)]
    Client(cli::ClientCommand),
    /// Import customers, users, workspace users, sources and facts from JSON Lines (one
    /// record with a `kind` per line); prints what was imported and the rejected lines, and
    /// exits 1 when any line was rejected. Runs at a lower CPU priority (nice 10) than a
    /// serving instance, which keeps answering first on a shared machine.
    Import {
        /// The organization to import into.
        #[arg(long = "org")]
        org: String,
        /// The JSON Lines file, or `-` for standard input.
        file: String,
    },
    /// Declare signals, destinations and automations as code (YAML or JSON): creates what
    /// the organization lacks, updates what differs (by `key`), prints
    /// `{created, updated, unchanged}`; a file with errors changes nothing and exits 1.
    Apply {
        /// The organization to apply to.
        #[arg(long = "org")]
        org: String,
        /// The YAML or JSON file, or `-` for standard input.
        file: String,
        /// Print the plan and change nothing (ids of items to create are null).
        #[arg(long)]
        dry_run: bool,
    },
    /// Benchmarks on generated data.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The Ingest API over loopback: acknowledged events/s against the physical floor, effects
    /// rate and lag, latency, memory.
    Ingest {
        /// Seconds of the peak-load phase (the half-load phase runs as long).
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Requests in flight at peak load.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Measure on this PostgreSQL database (`postgres://...`, in a fresh schema dropped at
        /// the end) instead of a temporary SQLite file.
        #[arg(long, value_name = "URL")]
        postgres: Option<String>,
        /// Serving instances on the one database (PostgreSQL only).
        #[arg(long, default_value_t = 1)]
        instances: usize,
    },
    /// Latency of the tool gateway over HTTP with concurrent callers, on a generated book with
    /// heavy tails loaded through `custintel import` (100,000 customers by default, with 5
    /// users, 2 sources, half a fact and 10 events per customer), on a temporary SQLite file or
    /// PostgreSQL, optionally beside ingest: p50/p99 per case against its target.
    Tools(custintel::ops::bench::ToolsBenchArgs),
    /// `custintel import` of a generated book (100,000 customers, 500,000 users, 200,000
    /// sources, 50,000 facts by default) while a serving instance on the same database (a
    /// temporary SQLite file, or PostgreSQL with `--postgres`) answers ingest and platform
    /// writes: lines/s, and the server's 5xx and latencies.
    Import(custintel::ops::bench_import::ImportBenchArgs),
    /// The search index alone, in memory (no database), at a million customers' documents by
    /// default, on `bench tools`' template text and on text with a natural vocabulary: the
    /// time of one search, and p50/p99 with concurrent callers.
    Search(custintel::ops::bench_search::SearchBenchArgs),
    /// The automation engine under ingest load (50 organizations x 20 signals and 10
    /// automations with a webhook destination by default): ingest's peak with and without the
    /// automations, and acknowledgement-to-delivery latency at 10,000 events/s with 5% matching.
    Automations(custintel::ops::bench_automations::AutomationsBenchArgs),
    /// The SQLite messageId window alone, filled to 100 million messages by default: checks/s,
    /// its memory as it fills, repeats and new messages when full, and the time to reopen it.
    Window(custintel::ops::bench_window::WindowBenchArgs),
    /// `custintel serve` started on a large database (50 million events and, on SQLite, 100
    /// million messages in the messageId window by default, loaded once and kept): the time to
    /// `/readyz` 200 and to the first ingest batch acknowledged, that a repeat from before the
    /// start is dropped, and the process's memory.
    Startup(custintel::ops::bench::StartupBenchArgs),
    /// How fast SQLite alone takes rows into the events table on this machine (no HTTP, no
    /// identity effects), with and without the messageId dedup index.
    SqliteFloor {
        /// Rows inserted per variant.
        #[arg(long, default_value_t = 2_000_000)]
        rows: usize,
        /// Rows per transaction.
        #[arg(long, default_value_t = 5_000)]
        rows_per_commit: usize,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create an organization with an API key and an Ingest public key.
    CreateOrg(CreateOrgArgs),
    /// Create another API key for an organization.
    CreateKey {
        #[arg(long = "org")]
        org: String,
        /// Without the write scope: platform writes answer 403.
        #[arg(long)]
        read_only: bool,
        #[arg(long)]
        name: Option<String>,
    },
    /// Disable an API key.
    DisableKey {
        #[arg(long)]
        key_id: String,
    },
}

#[derive(Args)]
struct CreateOrgArgs {
    #[arg(long)]
    name: String,
    #[arg(long, value_enum, default_value = "free")]
    plan: admin::Plan,
    /// Tool calls per billing cycle (overrides the plan).
    #[arg(long)]
    api_call_limit: Option<i64>,
    /// Integration connections (overrides the plan).
    #[arg(long)]
    connection_limit: Option<i64>,
    /// Ingest API requests per second per public key (default 100).
    #[arg(long)]
    ingest_rate_limit: Option<i32>,
    /// A domain whose pages may send tracking events from the browser (repeatable).
    #[arg(long = "tracking-domain")]
    tracking_domains: Vec<String>,
}

fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

async fn open_db(url: &str) -> anyhow::Result<sea_orm::DatabaseConnection> {
    let db = db::connect(url, None).await?;
    db::migrate(&db).await?;
    Ok(db)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let url = cli.database_url;
    match cli.command {
        Command::Serve { bind, public_url } => {
            config::dedup_window()?;
            config::dedup_shared_timing()?;
            config::ingest_backlog_bytes()?;
            let public = public_url.unwrap_or_else(|| format!("http://{bind}"));
            let state = config::open_state(&url, &public).await?;
            custintel::http::server::serve(state, &bind, |addr| {
                tracing::info!("custintel listening on http://{addr} (docs at /docs)");
            })
            .await
        }
        Command::Migrate => {
            open_db(&url).await?;
            print_json(&serde_json::json!({ "migrated": true }))
        }
        Command::Admin(cmd) => {
            let db = open_db(&url).await?;
            match cmd {
                AdminCommand::CreateOrg(a) => print_json(
                    &admin::create_org(
                        &db,
                        admin::NewOrganization {
                            name: a.name,
                            plan: a.plan,
                            api_call_limit: a.api_call_limit,
                            connection_limit: a.connection_limit,
                            ingest_rate_limit: a.ingest_rate_limit,
                            tracking_domains: a.tracking_domains,
                        },
                    )
                    .await?,
                ),
                AdminCommand::CreateKey {
                    org,
                    read_only,
                    name,
                } => print_json(&admin::create_key(&db, &org, name, read_only).await?),
                AdminCommand::DisableKey { key_id } => {
                    print_json(&admin::disable_key(&db, &key_id).await?)
                }
            }
        }
        Command::Client(_) => Ok(()),
        Command::Demo => {
            let db = open_db(&url).await?;
            let secrets = config::load_secrets(&url)?;
            let created = admin::create_org(
                &db,
                admin::NewOrganization {
                    name: "Demo Co".into(),
                    plan: admin::Plan::Pro,
                    api_call_limit: None,
                    connection_limit: None,
                    ingest_rate_limit: None,
                    tracking_domains: vec!["localhost".into()],
                },
            )
            .await?;
            custintel::ops::demo::seed(&db, &secrets, &created.organization_id).await?;
            print_json(&created)
        }
        Command::Import { org, file } => {
            // The import can wait for a serving instance's requests on the same machine.
            custintel::background::lower_this_process_priority();
            let chunks_at_once = custintel::config::import_chunks_at_once()?;
            let db = open_db(&url).await?;
            let report = custintel::import::import_file(&db, &org, &file, chunks_at_once).await?;
            print_json(&report)?;
            if !report.rejected.is_empty() {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Apply { org, file, dry_run } => {
            let db = open_db(&url).await?;
            let secrets = config::load_secrets(&url)?;
            match custintel::ops::apply::apply_file(&db, &secrets, &org, &file, dry_run).await {
                Ok(report) => print_json(&report),
                Err(err) => {
                    print_json(&err.body())?;
                    std::process::exit(1);
                }
            }
        }
        Command::Bench(bench) => {
            // The benchmarks serve in-process: Ctrl-C or SIGTERM ends the run (its temporary
            // files removed as the run is dropped) instead of leaving the load generator
            // waiting on a server that stopped.
            tokio::select! {
                done = run_bench(bench, &url) => done,
                _ = custintel::http::server::shutdown_signal() => {
                    anyhow::bail!("stopped by a signal before the benchmark finished")
                }
            }
        }
    }
}

async fn run_bench(command: BenchCommand, database_url: &str) -> anyhow::Result<()> {
    match command {
        BenchCommand::Ingest {
            seconds,
            concurrency,
            postgres,
            instances,
        } => {
            if postgres.is_none() && database_url.starts_with("postgres") {
                // The global option (or DATABASE_URL) names the service's own database; the
                // bench never writes there unless asked with `--postgres`.
                eprintln!(
                    "note: bench ingest measures a temporary SQLite file; give --postgres URL to \
                     measure PostgreSQL (--database-url and DATABASE_URL are not used)"
                );
            }
            custintel::ops::bench_ingest::run(custintel::ops::bench_ingest::BenchOptions {
                seconds: seconds.max(1),
                concurrency: concurrency.max(1),
                database_url: postgres,
                instances: instances.max(1),
            })
            .await
        }
        BenchCommand::Tools(args) => custintel::ops::bench::tools(args).await,
        BenchCommand::Startup(args) => custintel::ops::bench::startup(args).await,
        BenchCommand::Import(args) => custintel::ops::bench_import::run(args).await,
        BenchCommand::Search(args) => custintel::ops::bench_search::run(args).await,
        BenchCommand::Automations(args) => custintel::ops::bench_automations::run(args).await,
        BenchCommand::Window(args) => {
            tokio::task::spawn_blocking(move || custintel::ops::bench_window::run(args)).await?
        }
        BenchCommand::SqliteFloor {
            rows,
            rows_per_commit,
        } => {
            custintel::ops::bench_sqlite_floor::run(
                custintel::ops::bench_sqlite_floor::FloorOptions {
                    rows: rows.max(1),
                    rows_per_commit: rows_per_commit.max(1),
                },
            )
            .await
        }
    }
}

/// mimalloc instead of the system allocator: the ingest path allocates many small JSON values
/// per event, and glibc's malloc/free took about a third of the CPU under load
/// (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn,sea_orm=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let parsed = Cli::parse();
    if !matches!(parsed.command, Command::Serve { .. } | Command::Bench(_)) {
        restore_default_sigpipe();
    }
    // Client commands print the service's message as text; the admin commands keep their
    // one-JSON-object contract, errors included.
    if let Command::Client(command) = parsed.command {
        if let Err(err) = cli::run(command, parsed.output).await {
            eprintln!("error: {err}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(err) = run(parsed).await {
        eprintln!("{}", serde_json::json!({ "error": format!("{err:#}") }));
        std::process::exit(1);
    }
}

/// Commands that print end quietly when their reader goes away (`custintel ... | head`), as
/// other command-line tools do, instead of panicking on a broken pipe. Only for commands that
/// serve nothing: the server keeps Rust's default of ignoring SIGPIPE.
fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called at start-up, before any other thread writes to a pipe; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
