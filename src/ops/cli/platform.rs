//! `custintel agents|signals|automations|destinations ...`: the platform actions. Answers are
//! command envelopes; the client shows `result.data`.

use clap::{Args, Subcommand};
use serde_json::json;
use serde_json::Value;

use super::{client::Client, output, CliError, OutputArgs};

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Every agent.
    List,
    /// One agent by id or key.
    Get { id: String },
    /// Stop an agent's schedule.
    Disable { id: String },
    /// An agent's runs, newest first: status, turns, tool calls, tokens.
    Runs {
        /// The agent's id or key.
        id: String,
        /// Only runs with this status (RUNNING, SUCCEEDED, FAILED, SKIPPED).
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        page: PageArgs,
    },
}

/// Paging of a run list.
#[derive(Debug, Args)]
pub struct PageArgs {
    /// Runs per page, 1 to 100.
    #[arg(long)]
    limit: Option<u32>,
    /// The previous page's `nextCursor`.
    #[arg(long)]
    cursor: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum SignalsCommand {
    /// Every signal.
    List,
    /// One signal.
    Get { id: String },
    /// Archive a signal.
    Archive { id: String },
}

#[derive(Debug, Subcommand)]
pub enum AutomationsCommand {
    /// Every automation.
    List,
    /// One automation.
    Get { id: String },
    /// Enable an automation.
    Enable { id: String },
    /// Disable an automation.
    Disable { id: String },
    /// An automation's runs, newest first: status, subject, deliveries.
    Runs {
        id: String,
        /// Only runs with this status (PENDING, SKIPPED, RUNNING_PROCESSOR, READY_FOR_DELIVERY,
        /// PENDING_DELIVERY, DELIVERED, PARTIAL_FAILURE, FAILED).
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        page: PageArgs,
    },
    /// A dry run: the run an event or a subject would make and the body it would send
    /// (nothing is stored or sent).
    Test {
        id: String,
        /// An event of the `events` view.
        #[arg(long, conflicts_with_all = ["grain", "key"])]
        event_id: Option<String>,
        /// The subject's grain: `user` or `customer` (with `--key`).
        #[arg(long, requires = "key")]
        grain: Option<String>,
        /// The subject's key: a user's email or externalId, a customer's domain or externalId.
        #[arg(long, requires = "grain")]
        key: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum DestinationsCommand {
    /// Every destination.
    List,
    /// One destination.
    Get { id: String },
    /// Disable a destination.
    Disable { id: String },
}

/// How one resource kind is shown.
struct Kind {
    path: &'static str,
    one: &'static str,
    many: &'static str,
    /// (header, JSON pointer inside the resource)
    columns: &'static [(&'static str, &'static str)],
}

const AGENTS: Kind = Kind {
    path: "/api/agents",
    one: "agent",
    many: "agents",
    columns: &[
        ("ID", "/id"),
        ("KEY", "/agentKey"),
        ("NAME", "/displayName"),
        ("SCHEDULED", "/schedule/enabled"),
        ("NEXT RUN", "/schedule/nextRunAt"),
    ],
};
const SIGNALS: Kind = Kind {
    path: "/api/signals",
    one: "signal",
    many: "signals",
    columns: &[
        ("ID", "/id"),
        ("KEY", "/key"),
        ("NAME", "/name"),
        ("KIND", "/kind"),
        ("ARCHIVED", "/archivedAt"),
    ],
};
const AUTOMATIONS: Kind = Kind {
    path: "/api/automations",
    one: "automation",
    many: "automations",
    columns: &[
        ("ID", "/id"),
        ("KEY", "/key"),
        ("NAME", "/name"),
        ("ENABLED", "/enabled"),
        ("TRIGGER", "/triggerType"),
        ("LAST RUN", "/lastRunStatus"),
    ],
};
const DESTINATIONS: Kind = Kind {
    path: "/api/destinations",
    one: "destination",
    many: "destinations",
    columns: &[
        ("ID", "/id"),
        ("KEY", "/key"),
        ("NAME", "/name"),
        ("PROVIDER", "/provider"),
        ("ENABLED", "/enabled"),
        ("SYNC", "/syncStatus"),
    ],
};

fn data(answer: &Value) -> &Value {
    output::at(answer, "/result/data")
}

/// A path segment from user input.
fn segment(id: &str) -> String {
    url::form_urlencoded::byte_serialize(id.as_bytes()).collect()
}

async fn list(client: &Client, kind: &Kind, out: OutputArgs) -> Result<(), CliError> {
    let answer = client.get(kind.path, &[]).await?;
    if out.json {
        output::json(&answer);
        return Ok(());
    }
    let headers: Vec<&str> = kind.columns.iter().map(|(h, _)| *h).collect();
    let rows: Vec<Vec<String>> = output::at(data(&answer), &format!("/{}", kind.many))
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|item| {
                    kind.columns
                        .iter()
                        .map(|(_, p)| output::cell(output::at(item, p)))
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default();
    output::table(&headers, &rows);
    Ok(())
}

async fn show(
    client: &Client,
    kind: &Kind,
    id: &str,
    verb: Option<&str>,
    out: OutputArgs,
) -> Result<(), CliError> {
    let path = format!("{}/{}", kind.path, segment(id));
    let answer = match verb {
        None => client.get(&path, &[]).await?,
        Some(v) => client.post(&format!("{path}/{v}"), None).await?,
    };
    if out.json {
        output::json(&answer);
        return Ok(());
    }
    if let Some(v) = verb {
        println!("{} {}: {v}d", kind.one, id);
    }
    output::fields(output::at(data(&answer), &format!("/{}", kind.one)));
    Ok(())
}

pub async fn agents(client: &Client, c: AgentsCommand, out: OutputArgs) -> Result<(), CliError> {
    match c {
        AgentsCommand::List => list(client, &AGENTS, out).await,
        AgentsCommand::Get { id } => show(client, &AGENTS, &id, None, out).await,
        AgentsCommand::Disable { id } => show(client, &AGENTS, &id, Some("disable"), out).await,
        AgentsCommand::Runs { id, status, page } => {
            let columns = [
                ("ID", Cell::At("/id")),
                ("TRIGGER", Cell::At("/trigger")),
                ("STATUS", Cell::At("/status")),
                ("STARTED", Cell::At("/startedAt")),
                ("TURNS", Cell::At("/turns")),
                ("TOOLS", Cell::Count("/toolCalls")),
                ("ACTIONS", Cell::Count("/actions")),
                ("TOKENS", Cell::At("/usage/totalTokens")),
                ("REASON", Cell::At("/reason")),
            ];
            runs(client, &AGENTS, &id, status, page, &columns, out).await
        }
    }
}

/// A column of a run table.
enum Cell {
    /// The value at a JSON pointer.
    At(&'static str),
    /// The length of the array at a JSON pointer.
    Count(&'static str),
}

async fn runs(
    client: &Client,
    kind: &Kind,
    id: &str,
    status: Option<String>,
    page: PageArgs,
    columns: &[(&str, Cell)],
    out: OutputArgs,
) -> Result<(), CliError> {
    let mut query = Vec::new();
    // The API takes statuses in upper case; people type either.
    if let Some(s) = status {
        query.push(("status", s.trim().to_ascii_uppercase()));
    }
    if let Some(l) = page.limit {
        query.push(("limit", l.to_string()));
    }
    if let Some(c) = page.cursor {
        query.push(("cursor", c));
    }
    let answer = client
        .get(&format!("{}/{}/runs", kind.path, segment(id)), &query)
        .await?;
    if out.json {
        output::json(&answer);
        return Ok(());
    }
    let headers: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
    let rows: Vec<Vec<String>> = output::at(data(&answer), "/runs")
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|run| {
                    columns
                        .iter()
                        .map(|(_, cell)| match cell {
                            Cell::At(p) => output::cell(output::at(run, p)),
                            Cell::Count(p) => output::at(run, p)
                                .as_array()
                                .map_or(0, Vec::len)
                                .to_string(),
                        })
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default();
    output::table(&headers, &rows);
    let next = output::at(data(&answer), "/nextCursor");
    if next.as_str().is_some_and(|c| !c.is_empty()) {
        println!("next page: --cursor {}", output::cell(next));
    }
    Ok(())
}

pub async fn signals(client: &Client, c: SignalsCommand, out: OutputArgs) -> Result<(), CliError> {
    match c {
        SignalsCommand::List => list(client, &SIGNALS, out).await,
        SignalsCommand::Get { id } => show(client, &SIGNALS, &id, None, out).await,
        SignalsCommand::Archive { id } => show(client, &SIGNALS, &id, Some("archive"), out).await,
    }
}

pub async fn automations(
    client: &Client,
    c: AutomationsCommand,
    out: OutputArgs,
) -> Result<(), CliError> {
    match c {
        AutomationsCommand::List => list(client, &AUTOMATIONS, out).await,
        AutomationsCommand::Get { id } => show(client, &AUTOMATIONS, &id, None, out).await,
        AutomationsCommand::Enable { id } => {
            show(client, &AUTOMATIONS, &id, Some("enable"), out).await
        }
        AutomationsCommand::Disable { id } => {
            show(client, &AUTOMATIONS, &id, Some("disable"), out).await
        }
        AutomationsCommand::Runs { id, status, page } => {
            let columns = [
                ("ID", Cell::At("/id")),
                ("STATUS", Cell::At("/status")),
                ("TRIGGERED", Cell::At("/triggeredAt")),
                ("SUBJECT", Cell::At("/subject/key")),
                ("EVENTS", Cell::Count("/events")),
                ("DELIVERIES", Cell::Count("/deliveries")),
                ("SKIP REASON", Cell::At("/skipReason")),
            ];
            runs(client, &AUTOMATIONS, &id, status, page, &columns, out).await
        }
        AutomationsCommand::Test {
            id,
            event_id,
            grain,
            key,
        } => {
            let body = match (event_id, grain, key) {
                (Some(event), _, _) => json!({ "eventId": event }),
                (None, Some(grain), Some(key)) => {
                    json!({ "subject": { "grain": grain, "key": key } })
                }
                _ => {
                    return Err(CliError::Usage(
                        "give --event-id, or --grain and --key".to_string(),
                    ))
                }
            };
            let answer = client
                .post(
                    &format!("{}/{}/test", AUTOMATIONS.path, segment(&id)),
                    Some(&body),
                )
                .await?;
            if out.json {
                output::json(&answer);
            } else {
                output::fields(output::at(data(&answer), "/run"));
                println!("payload:");
                output::json(output::at(data(&answer), "/payload"));
            }
            Ok(())
        }
    }
}

pub async fn destinations(
    client: &Client,
    c: DestinationsCommand,
    out: OutputArgs,
) -> Result<(), CliError> {
    match c {
        DestinationsCommand::List => list(client, &DESTINATIONS, out).await,
        DestinationsCommand::Get { id } => show(client, &DESTINATIONS, &id, None, out).await,
        DestinationsCommand::Disable { id } => {
            show(client, &DESTINATIONS, &id, Some("disable"), out).await
        }
    }
}
