//! Agents that run: a language model behind an OpenAI-compatible Chat Completions endpoint,
//! reading the organization's data through the tool gateway's read tools and acting only through
//! the actions its `actionKeys` allow. Runs are bounded (model turns, time, tokens) and recorded.
//!
//! One file per concern: [`model_client`] speaks the wire format, [`tools_offered`] turns the
//! gateway's read tools into function tools, [`actions`] runs the agent's actions, [`run_loop`]
//! drives a run, [`run_records`] stores and lists runs, [`schedules`] runs agents on their cron,
//! and [`automation`] is the entry point the automation engine calls.

pub mod actions;
pub mod automation;
pub mod definition;
pub mod model_client;
pub mod run_loop;
pub mod run_records;
pub mod schedules;
pub mod tools_offered;

pub use crate::llm::{AgentsConfig, LlmConfig};
pub use automation::{run_for_automation, AgentOutcome, AutomationRunInput};

use crate::state::AppState;

/// What agent runs need: the service's state (database, secrets, search index) and, inside it,
/// the agents' configuration (model endpoint, bounds).
#[derive(Clone, Debug)]
pub struct AgentRuntime {
    pub state: AppState,
}

impl AgentRuntime {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }

    pub fn config(&self) -> &AgentsConfig {
        &self.state.agents
    }
}

/// Who started a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Schedule,
    Automation,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Automation => "automation",
        }
    }
}

/// The reason (and warning) when no model is configured.
pub const NO_MODEL: &str = "no language model configured (CUSTINTEL_LLM_BASE_URL)";
