//! What a provider can do here, as the command line shows it: the commands that work for it and
//! its follow-up steps. Providers without a sync list no sync command.

use super::providers::{Provider, SetupMode};

/// A follow-up step and the command that runs it.
#[derive(Debug, Clone)]
pub struct PostConnectStep {
    pub id: String,
    pub required: bool,
    pub supported: bool,
    pub command: String,
}

/// The commands that work for `provider`, as a user types them.
pub fn commands(provider: &Provider) -> Vec<String> {
    let name = provider.cli_name();
    let mut out = Vec::new();
    match provider.setup_mode {
        SetupMode::DirectApiKey => {
            let example: Vec<String> = provider
                .fields
                .iter()
                .map(|f| format!("\"{}\":\"...\"", f.key))
                .collect();
            out.push(format!(
                "custintel integrations connect {name} --config '{{{}}}'",
                example.join(",")
            ));
            // Without --config the connect page asks for the same fields in a browser.
            out.push(format!("custintel integrations connect {name}"));
        }
        SetupMode::BrowserSession => {
            out.push(format!("custintel integrations connect {name}"));
        }
    }
    out.push("custintel integrations status SESSION_ID".to_string());
    if provider.has_sync() {
        out.push(format!("custintel integrations sync-status {name}"));
    }
    for step in provider.steps.iter().filter(|s| s.supported) {
        out.push(step_command(provider, step.id));
    }
    out.push(format!("custintel integrations disconnect {name}"));
    out
}

fn step_command(provider: &Provider, step: &str) -> String {
    format!(
        "custintel integrations setup-step {} {step}",
        provider.cli_name()
    )
}

/// Follow-up steps; `supported: false` marks a step this service does not implement yet.
pub fn post_connect_steps(provider: &Provider) -> Vec<PostConnectStep> {
    provider
        .steps
        .iter()
        .map(|s| PostConnectStep {
            id: s.id.to_string(),
            required: s.required,
            supported: s.supported,
            command: step_command(provider, s.id),
        })
        .collect()
}
