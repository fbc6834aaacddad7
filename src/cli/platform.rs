//! `custintel agents|signals|automations|destinations ...`: the platform actions. Answers are
//! command envelopes; the client shows `result.data`.

use clap::Subcommand;
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
        /// Runs per page, 1 to 100.
        #[arg(long)]
        limit: Option<u32>,
        /// The previous page's `nextCursor`.
        #[arg(long)]
        cursor: Option<String>,
    },
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
        AgentsCommand::Runs {
            id,
            status,
            limit,
            cursor,
        } => agent_runs(client, &id, status, limit, cursor, out).await,
    }
}

async fn agent_runs(
    client: &Client,
    id: &str,
    status: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
    out: OutputArgs,
) -> Result<(), CliError> {
    let mut query = Vec::new();
    if let Some(s) = status {
        query.push(("status", s));
    }
    if let Some(l) = limit {
        query.push(("limit", l.to_string()));
    }
    if let Some(c) = cursor {
        query.push(("cursor", c));
    }
    let answer = client
        .get(&format!("{}/{}/runs", AGENTS.path, segment(id)), &query)
        .await?;
    if out.json {
        output::json(&answer);
        return Ok(());
    }
    let headers = [
        "ID", "TRIGGER", "STATUS", "STARTED", "TURNS", "TOOLS", "ACTIONS", "TOKENS", "REASON",
    ];
    let count = |run: &Value, p: &str| {
        output::at(run, p)
            .as_array()
            .map_or(0, Vec::len)
            .to_string()
    };
    let rows: Vec<Vec<String>> = output::at(data(&answer), "/runs")
        .as_array()
        .map(|runs| {
            runs.iter()
                .map(|run| {
                    vec![
                        output::cell(output::at(run, "/id")),
                        output::cell(output::at(run, "/trigger")),
                        output::cell(output::at(run, "/status")),
                        output::cell(output::at(run, "/startedAt")),
                        output::cell(output::at(run, "/turns")),
                        count(run, "/toolCalls"),
                        count(run, "/actions"),
                        output::cell(output::at(run, "/usage/totalTokens")),
                        output::cell(output::at(run, "/reason")),
                    ]
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
