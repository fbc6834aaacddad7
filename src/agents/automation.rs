//! The entry point of the automation engine: an automation run that names an agent asks it for
//! the message its destinations receive.

use serde_json::Value;
use uuid::Uuid;

use super::definition;
use super::{
    run_loop::{self, RunRequest},
    run_records::RunRecord,
    AgentRuntime, Trigger, NO_MODEL,
};
use entity::agent_run::AgentRunStatus;

/// What the engine hands over.
#[derive(Clone, Debug)]
pub struct AutomationRunInput {
    pub organization_id: Uuid,
    pub agent_id: Uuid,
    pub automation_run_id: Uuid,
    /// The payload built so far: subject, signals, events, customer.
    pub context: Value,
    /// The automation's destinations (what `notify_destination` reaches).
    pub destination_ids: Vec<Uuid>,
}

/// What the engine gets back.
#[derive(Clone, Debug, Default)]
pub struct AgentOutcome {
    /// The model's final message; `None` when there is none (no model, a failed run): the
    /// engine then uses its template message.
    pub message: Option<String>,
    /// For the automation run's warnings.
    pub warnings: Vec<String>,
    /// The agent run recorded, when one was.
    pub agent_run_id: Option<Uuid>,
}

/// Runs the agent for an automation run and records it with trigger `automation`. Never fails:
/// whatever goes wrong becomes a warning, and the engine falls back to its template.
pub async fn run_for_automation(runtime: &AgentRuntime, input: AutomationRunInput) -> AgentOutcome {
    let org = input.organization_id.to_string();
    let agent = match definition::get(&runtime.state.db, &org, &input.agent_id.to_string()).await {
        Ok(agent) => agent,
        Err(e) => {
            return AgentOutcome {
                warnings: vec![format!("agent {} could not be run: {e}", input.agent_id)],
                ..Default::default()
            }
        }
    };
    let run = RunRecord::new(
        &org,
        &agent.id,
        Trigger::Automation,
        Some(input.automation_run_id.to_string()),
        None,
    );
    let request = RunRequest {
        context: input.context,
        destination_ids: input.destination_ids.iter().map(Uuid::to_string).collect(),
    };
    match run_loop::execute(runtime, &agent, run, request).await {
        Ok(Some(run)) => {
            let mut warnings = run.warnings.clone();
            let message = match run.status {
                AgentRunStatus::Succeeded => run.message.clone(),
                AgentRunStatus::Skipped => {
                    warnings.push(NO_MODEL.to_string());
                    None
                }
                _ => {
                    warnings.push(format!(
                        "agent run failed ({}); the template message was used",
                        run.reason.as_deref().unwrap_or("no reason")
                    ));
                    None
                }
            };
            AgentOutcome {
                message,
                warnings,
                agent_run_id: Uuid::parse_str(&run.id).ok(),
            }
        }
        Ok(None) => AgentOutcome::default(),
        Err(e) => AgentOutcome {
            warnings: vec![format!("the agent run could not be recorded: {e}")],
            ..Default::default()
        },
    }
}
