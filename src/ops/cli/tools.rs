//! `custintel tools list|call`: the tool gateway (`GET /api/tools`, `POST /api/tools/call`).

use clap::Subcommand;
use serde_json::{json, Value};

use super::{client::Client, json_object, output, CliError, OutputArgs};

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// The tools and what they do.
    List,
    /// Call a tool; its JSON result is printed.
    Call {
        /// Tool name, e.g. `svc_list_customers`.
        name: String,
        /// The tool's input as a JSON object.
        #[arg(long, default_value = "{}")]
        input: String,
    },
}

pub async fn run(client: &Client, command: ToolsCommand, out: OutputArgs) -> Result<(), CliError> {
    match command {
        ToolsCommand::List => {
            let answer = client.get("/api/tools", &[]).await?;
            if out.json {
                output::json(&answer);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = output::at(&answer, "/tools")
                .as_array()
                .map(|tools| {
                    tools
                        .iter()
                        .map(|t| {
                            let description = output::cell(output::at(t, "/description"));
                            vec![
                                output::cell(output::at(t, "/name")),
                                description.lines().next().unwrap_or("").to_string(),
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
            output::table(&["TOOL", "DESCRIPTION"], &rows);
        }
        ToolsCommand::Call { name, input } => {
            let input: Value = json_object("--input", &input)?;
            let answer = client
                .post(
                    "/api/tools/call",
                    Some(&json!({ "tool": name, "input": input })),
                )
                .await?;
            // A tool's result is JSON whatever the format asked.
            output::json(&answer);
        }
    }
    Ok(())
}
