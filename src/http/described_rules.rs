//! Rules the server checks against lists and constants it keeps in code (the providers and
//! their setup steps, run statuses, page sizes, the cursor's alphabet), written into the
//! description from those same lists, so an SDK sees the values a request may carry and the
//! two cannot drift.

use serde_json::{json, Value};

use crate::{
    integrations::providers::{GMAIL_ALIAS, PROVIDERS},
    platform::paging::{CURSOR_PATTERN, MAX_LIMIT},
};
use entity::{agent_run::AgentRunStatus, automation_run::AutomationRunStatus, StatusEnum};

/// Adds the enums, bounds and patterns to a generated description.
pub fn describe(doc: &mut Value) {
    let providers: Vec<Value> = PROVIDERS.iter().map(|p| Value::from(p.id)).collect();
    let mut steps: Vec<Value> = Vec::new();
    for step in PROVIDERS.iter().flat_map(|p| p.steps) {
        if !steps.iter().any(|s| s == step.id) {
            steps.push(Value::from(step.id));
        }
    }
    for body in ["ConnectRequest", "DisconnectRequest", "SetupStepRequest"] {
        let pointer = format!("/components/schemas/{body}/properties/provider");
        set(doc, &pointer, "enum", Value::Array(providers.clone()));
    }
    set(
        doc,
        "/components/schemas/SetupStepRequest/properties/step",
        "enum",
        Value::Array(steps),
    );
    let mut with_alias = providers.clone();
    with_alias.push(Value::from(GMAIL_ALIAS));
    param(
        doc,
        "getIntegrationCapabilities",
        "provider",
        "enum",
        Value::Array(with_alias),
    );
    param(
        doc,
        "getSyncStatus",
        "provider",
        "enum",
        Value::Array(providers),
    );
    let runs = [
        ("listAutomationRuns", AutomationRunStatus::names()),
        ("listAgentRuns", AgentRunStatus::names()),
    ];
    for (operation, statuses) in runs {
        param(doc, operation, "status", "enum", json!(statuses));
        param(doc, operation, "limit", "minimum", json!(1));
        param(doc, operation, "limit", "maximum", json!(MAX_LIMIT));
        param(doc, operation, "cursor", "pattern", json!(CURSOR_PATTERN));
    }
}

fn set(doc: &mut Value, pointer: &str, key: &str, value: Value) {
    if let Some(obj) = doc.pointer_mut(pointer).and_then(Value::as_object_mut) {
        obj.insert(key.into(), value);
    }
}

/// Sets `key` on the schema of the parameter `name` of the operation `operation_id`.
fn param(doc: &mut Value, operation_id: &str, name: &str, key: &str, value: Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for item in paths.values_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for op in item.values_mut() {
            if op.get("operationId").and_then(Value::as_str) != Some(operation_id) {
                continue;
            }
            let params = op.get_mut("parameters").and_then(Value::as_array_mut);
            for p in params.into_iter().flatten() {
                if p.get("name").and_then(Value::as_str) == Some(name) {
                    if let Some(schema) = p.get_mut("schema").and_then(Value::as_object_mut) {
                        schema.insert(key.into(), value.clone());
                    }
                }
            }
        }
    }
}
