//! The function tools a run offers the model: the gateway's read tools, with their descriptions
//! and input schemas, and the actions the agent's `actionKeys` allow.

use serde_json::Value;

use super::{actions, model_client::ToolDefinition};
use crate::tools::registry;

/// Gateway tools that act rather than read; an agent acts only through its actions.
const NOT_OFFERED: &[&str] = &["svc_send_notification"];

/// What a tool name in a model's call stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offered {
    /// A gateway read tool, run through `crate::tools::call`.
    ReadTool,
    /// An action in the agent's `actionKeys`.
    Action(actions::Action),
}

/// The tools of one run.
#[derive(Debug)]
pub struct Toolbox {
    pub definitions: Vec<ToolDefinition>,
    actions: Vec<actions::Action>,
    /// Action keys the service does not know (reported on the run, never offered).
    pub unknown_action_keys: Vec<String>,
}

impl Toolbox {
    /// The read tools plus the actions among `action_keys`.
    pub fn for_agent(action_keys: &[String]) -> Self {
        let mut definitions: Vec<ToolDefinition> = registry::all()
            .iter()
            .filter(|r| !NOT_OFFERED.contains(&r.tool.name))
            .map(|r| ToolDefinition::function(r.tool.name, r.tool.description, r.schema.clone()))
            .collect();
        let mut offered = Vec::new();
        let mut unknown = Vec::new();
        for key in action_keys {
            match actions::Action::from_key(key) {
                Some(action) if !offered.contains(&action) => {
                    definitions.push(ToolDefinition::function(
                        action.key(),
                        action.description(),
                        action.input_schema(),
                    ));
                    offered.push(action);
                }
                Some(_) => {}
                None => unknown.push(key.clone()),
            }
        }
        Self {
            definitions,
            actions: offered,
            unknown_action_keys: unknown,
        }
    }

    /// What `name` is in this run, or `None` when it was not offered (refused).
    pub fn lookup(&self, name: &str) -> Option<Offered> {
        if let Some(action) = actions::Action::from_key(name) {
            return self
                .actions
                .contains(&action)
                .then_some(Offered::Action(action));
        }
        if NOT_OFFERED.contains(&name) {
            return None;
        }
        registry::find(name).map(|_| Offered::ReadTool)
    }
}

/// The keys of the agent's `actionKeys` JSON.
pub fn action_keys(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
