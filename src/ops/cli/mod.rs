//! The client side of the `custintel` command line: `login`, `integrations ...`, `tools ...`
//! and the platform actions, against a running service. Tables by default, `--json` for scripts;
//! a failed call prints the service's message and exits non-zero.

pub mod client;
pub mod config;
pub mod integrations;
pub mod output;
pub mod platform;
pub mod tools;

use clap::{Args, Subcommand};
use serde_json::Value;

/// Why a client command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The service answered with an error status.
    #[error("{message}")]
    Service {
        status: u16,
        message: String,
        body: Value,
    },
    /// Bad input, no login, no connection.
    #[error("{0}")]
    Usage(String),
}

/// Output format shared by the client commands.
#[derive(Debug, Clone, Copy, Args)]
pub struct OutputArgs {
    /// Print the service's raw JSON response instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Check an API key with the service and store it for the client commands.
    Login {
        /// An `ok_...` API key.
        #[arg(long)]
        api_key: String,
        /// The service's base URL.
        #[arg(long, default_value = config::DEFAULT_BASE_URL)]
        base_url: String,
    },
    /// Connect providers and follow their setup and syncs.
    #[command(subcommand)]
    Integrations(integrations::IntegrationsCommand),
    /// The tool gateway: list tools and call one.
    #[command(subcommand)]
    Tools(tools::ToolsCommand),
    /// AI agents.
    #[command(subcommand)]
    Agents(platform::AgentsCommand),
    /// Signals.
    #[command(subcommand)]
    Signals(platform::SignalsCommand),
    /// Automations.
    #[command(subcommand)]
    Automations(platform::AutomationsCommand),
    /// Destinations.
    #[command(subcommand)]
    Destinations(platform::DestinationsCommand),
}

/// Parses a `--config`/`--input` JSON object.
pub fn json_object(flag: &str, text: &str) -> Result<Value, CliError> {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(CliError::Usage(format!("{flag} must be a JSON object"))),
        Err(e) => Err(CliError::Usage(format!("{flag} is not valid JSON: {e}"))),
    }
}

async fn login(api_key: String, base_url: String, out: OutputArgs) -> Result<(), CliError> {
    let base_url = base_url.trim().trim_end_matches('/').to_string();
    let api_key = api_key.trim().to_string();
    let client = client::Client::new(config::Credentials {
        api_key: api_key.clone(),
        base_url: base_url.clone(),
    })?;
    let answer = client.post("/api/validate-api-key", None).await?;
    let path = config::save(&config::StoredConfig {
        api_key,
        base_url: base_url.clone(),
    })?;
    if out.json {
        output::json(&answer);
    } else {
        println!(
            "Logged in to {base_url} (organization {}). Key stored in {}",
            output::cell(output::at(&answer, "/organizationId")),
            path.display()
        );
    }
    Ok(())
}

/// Runs one client command.
pub async fn run(command: ClientCommand, out: OutputArgs) -> Result<(), CliError> {
    let command = match command {
        ClientCommand::Login { api_key, base_url } => return login(api_key, base_url, out).await,
        other => other,
    };
    let client = client::Client::new(config::credentials()?)?;
    match command {
        ClientCommand::Login { .. } => Ok(()),
        ClientCommand::Integrations(c) => integrations::run(&client, c, out).await,
        ClientCommand::Tools(c) => tools::run(&client, c, out).await,
        ClientCommand::Agents(c) => platform::agents(&client, c, out).await,
        ClientCommand::Signals(c) => platform::signals(&client, c, out).await,
        ClientCommand::Automations(c) => platform::automations(&client, c, out).await,
        ClientCommand::Destinations(c) => platform::destinations(&client, c, out).await,
    }
}
