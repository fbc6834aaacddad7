//! `custintel integrations ...`. Provider names accept the alias `gmail` for `google-mail`.

use std::{
    io::{IsTerminal, Write},
    time::{Duration, Instant},
};

use clap::Subcommand;
use serde_json::{json, Value};

use super::{client::Client, json_object, output, CliError, OutputArgs};
use crate::integrations::{providers, sessions::SESSION_LIFETIME_MINUTES};

#[derive(Debug, Subcommand)]
pub enum IntegrationsCommand {
    /// Providers and the organization's connections.
    List {
        /// Only connected integrations.
        #[arg(long)]
        connected_only: bool,
    },
    /// How a provider connects and what works for it (every provider without PROVIDER).
    Capabilities { provider: Option<String> },
    /// Connect a provider: with --config directly, else through the connect page in a browser.
    Connect {
        provider: String,
        /// Credentials as a JSON object, e.g. '{"apiKey":"sk_live_..."}'.
        #[arg(long)]
        config: Option<String>,
        /// Print the connect URL and return without waiting for the browser.
        #[arg(long)]
        no_wait: bool,
    },
    /// State of a browser connection session.
    Status { session_id: String },
    /// Remove a provider's connection.
    Disconnect { provider: String },
    /// The latest sync of each model of a provider.
    SyncStatus { provider: String },
    /// Run a follow-up step (`webhooks`, `mappings`).
    SetupStep {
        provider: String,
        step: String,
        /// Step-specific JSON object.
        #[arg(long)]
        config: Option<String>,
    },
}

/// The provider ID the API expects (`gmail` -> `google-mail`).
pub fn provider_id(name: &str) -> String {
    let name = name.trim();
    if name == providers::GMAIL_ALIAS {
        providers::GOOGLE_MAIL.to_string()
    } else {
        name.to_string()
    }
}

pub async fn run(
    client: &Client,
    command: IntegrationsCommand,
    out: OutputArgs,
) -> Result<(), CliError> {
    match command {
        IntegrationsCommand::List { connected_only } => {
            let answer = client
                .get(
                    "/api/integrations",
                    &[("connectedOnly", connected_only.to_string())],
                )
                .await?;
            if out.json {
                output::json(&answer);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = output::at(&answer, "/items")
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .map(|i| {
                            [
                                "/id",
                                "/name",
                                "/category",
                                "/status",
                                "/syncStatus",
                                "/lastDataReceivedAt",
                                "/errorMessage",
                            ]
                            .iter()
                            .map(|p| output::cell(output::at(i, p)))
                            .collect()
                        })
                        .collect()
                })
                .unwrap_or_default();
            output::table(
                &[
                    "PROVIDER",
                    "NAME",
                    "CATEGORY",
                    "STATUS",
                    "SYNC",
                    "LAST DATA",
                    "ERROR",
                ],
                &rows,
            );
        }
        IntegrationsCommand::Capabilities { provider } => {
            let asked_one = provider.is_some();
            let query: Vec<(&str, String)> = provider
                .map(|p| vec![("provider", p.trim().to_string())])
                .unwrap_or_default();
            let answer = client.get("/api/integrations/capabilities", &query).await?;
            if out.json {
                output::json(&answer);
            } else if asked_one {
                print_capability(output::at(&answer, "/provider"));
            } else if let Some(all) = answer.as_object() {
                let rows: Vec<Vec<String>> = all
                    .values()
                    .map(|c| {
                        let fields: Vec<String> = output::at(c, "/requiredFields")
                            .as_array()
                            .map(|f| {
                                f.iter()
                                    .map(|f| output::cell(output::at(f, "/key")))
                                    .collect()
                            })
                            .unwrap_or_default();
                        vec![
                            output::cell(output::at(c, "/providerId")),
                            output::cell(output::at(c, "/cliName")),
                            output::cell(output::at(c, "/setupMode")),
                            if fields.is_empty() {
                                "-".to_string()
                            } else {
                                fields.join(", ")
                            },
                        ]
                    })
                    .collect();
                output::table(&["PROVIDER", "CLI NAME", "SETUP", "FIELDS"], &rows);
            }
        }
        IntegrationsCommand::Connect {
            provider,
            config,
            no_wait,
        } => {
            let provider = provider_id(&provider);
            let mut body = json!({ "provider": provider });
            if let Some(text) = config {
                body["config"] = json_object("--config", &text)?;
            }
            let answer = client
                .post("/api/integrations/connect", Some(&body))
                .await?;
            if let Some(session_id) = answer.get("sessionId").and_then(Value::as_str) {
                let url = output::cell(output::at(&answer, "/connectUrl"));
                if out.json {
                    println!("{answer}");
                } else {
                    println!("Open this page in a browser to connect {provider}:");
                    println!("  {url}");
                    if answer["alreadyConnected"] == true {
                        println!(
                            "({provider} is already connected: completing the page replaces it.)"
                        );
                    }
                }
                if no_wait {
                    return Ok(());
                }
                let _ = std::io::stdout().flush();
                let last = wait_for_session(client, session_id).await?;
                if out.json {
                    println!("{last}");
                }
                let status = output::cell(output::at(&last, "/status"));
                if status == "connected" {
                    if !out.json {
                        println!("{provider} connected.");
                    }
                } else {
                    let reason = last
                        .get("error")
                        .and_then(Value::as_str)
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default();
                    return Err(CliError::Usage(format!(
                        "connecting {provider} {status}{reason}"
                    )));
                }
            } else if out.json {
                output::json(&answer);
            } else if answer["alreadyConnected"] == true {
                println!(
                    "{provider} was already connected; its credentials were replaced (connection {}).",
                    output::cell(output::at(&answer, "/connectionId"))
                );
            } else {
                println!(
                    "{provider} connected (connection {}).",
                    output::cell(output::at(&answer, "/connectionId"))
                );
            }
        }
        IntegrationsCommand::Status { session_id } => {
            let answer = client
                .get(
                    "/api/integrations/connect/status",
                    &[("sessionId", session_id.trim().to_string())],
                )
                .await?;
            if out.json {
                output::json(&answer);
            } else {
                output::fields(&answer);
            }
        }
        IntegrationsCommand::Disconnect { provider } => {
            let provider = provider_id(&provider);
            let answer = client
                .post(
                    "/api/integrations/disconnect",
                    Some(&json!({ "provider": provider })),
                )
                .await?;
            if out.json {
                output::json(&answer);
            } else {
                println!("{provider} disconnected.");
            }
        }
        IntegrationsCommand::SyncStatus { provider } => {
            let provider = provider_id(&provider);
            let answer = client
                .get("/api/integrations/sync-status", &[("provider", provider)])
                .await?;
            if out.json {
                output::json(&answer);
                return Ok(());
            }
            println!(
                "{} ({}, {}): {}",
                output::cell(output::at(&answer, "/provider")),
                output::cell(output::at(&answer, "/name")),
                output::cell(output::at(&answer, "/category")),
                output::cell(output::at(&answer, "/status")),
            );
            let rows: Vec<Vec<String>> = output::at(&answer, "/syncs")
                .as_array()
                .map(|syncs| {
                    syncs
                        .iter()
                        .map(|s| {
                            ["/model", "/status", "/lastSyncedAt", "/errorMessage"]
                                .iter()
                                .map(|p| output::cell(output::at(s, p)))
                                .collect()
                        })
                        .collect()
                })
                .unwrap_or_default();
            output::table(&["MODEL", "STATUS", "LAST SYNCED", "ERROR"], &rows);
        }
        IntegrationsCommand::SetupStep {
            provider,
            step,
            config,
        } => {
            let mut body = json!({ "provider": provider_id(&provider), "step": step });
            if let Some(text) = config {
                body["config"] = json_object("--config", &text)?;
            }
            let answer = client
                .post("/api/integrations/setup-step", Some(&body))
                .await?;
            if out.json {
                output::json(&answer);
            } else {
                output::fields(&answer);
            }
        }
    }
    Ok(())
}

fn print_capability(c: &Value) {
    println!(
        "provider        {}",
        output::cell(output::at(c, "/providerId"))
    );
    println!(
        "cli name        {}",
        output::cell(output::at(c, "/cliName"))
    );
    println!(
        "setup mode      {}",
        output::cell(output::at(c, "/setupMode"))
    );
    println!(
        "credential type {}",
        output::cell(output::at(c, "/credentialType"))
    );
    println!("required fields:");
    for f in output::at(c, "/requiredFields")
        .as_array()
        .into_iter()
        .flatten()
    {
        println!(
            "  {} ({}){}",
            output::cell(output::at(f, "/key")),
            output::cell(output::at(f, "/label")),
            if f["secret"] == true { ", secret" } else { "" }
        );
    }
    println!("commands:");
    for cmd in output::at(c, "/commands").as_array().into_iter().flatten() {
        println!("  {}", output::cell(cmd));
    }
    println!("post-connect steps:");
    for s in output::at(c, "/postConnectSteps")
        .as_array()
        .into_iter()
        .flatten()
    {
        println!(
            "  {} ({}{}): {}",
            output::cell(output::at(s, "/id")),
            if s["required"] == true {
                "required"
            } else {
                "optional"
            },
            if s["supported"] == true {
                ""
            } else {
                ", not supported yet"
            },
            output::cell(output::at(s, "/command")),
        );
    }
}

/// Time between two status polls (`CUSTINTEL_POLL_INTERVAL_MS`, default 2 s).
fn poll_interval() -> Duration {
    std::env::var("CUSTINTEL_POLL_INTERVAL_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(2))
}

/// Polls the session until it leaves `pending`, with a spinner on a terminal; bounded by the
/// session lifetime (the service expires it then).
async fn wait_for_session(client: &Client, session_id: &str) -> Result<Value, CliError> {
    const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
    let interactive = std::io::stderr().is_terminal();
    let deadline = Instant::now() + Duration::from_secs(SESSION_LIFETIME_MINUTES as u64 * 60 + 60);
    let interval = poll_interval();
    let mut frame = 0usize;
    if !interactive {
        eprintln!("Waiting for the connection to complete...");
    }
    loop {
        let status = client
            .get(
                "/api/integrations/connect/status",
                &[("sessionId", session_id.to_string())],
            )
            .await?;
        if status.get("status").and_then(Value::as_str) != Some("pending") {
            if interactive {
                eprint!("\r\x1b[2K");
            }
            return Ok(status);
        }
        if Instant::now() >= deadline {
            return Err(CliError::Usage(
                "gave up waiting: the connect session did not complete".into(),
            ));
        }
        // Animate the spinner across the wait between two polls.
        let started = Instant::now();
        while started.elapsed() < interval {
            if interactive {
                eprint!(
                    "\r{} Waiting for the connection in the browser...",
                    FRAMES[frame % FRAMES.len()]
                );
                let _ = std::io::stderr().flush();
                frame += 1;
            }
            tokio::time::sleep(Duration::from_millis(120).min(interval)).await;
        }
    }
}
