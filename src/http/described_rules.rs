//! Rules the server checks against lists and constants it keeps in code (the providers and
//! their setup steps, run statuses, page sizes, the cursor's alphabet), written into the
//! description from those same lists, so an SDK sees the values a request may carry and the
//! two cannot drift.

use serde_json::{json, Value};

use crate::{
    integrations::{
        connections::POSTHOG_REGIONS,
        providers::{Provider, SetupMode, GMAIL_ALIAS, PROVIDERS},
        setup::step_contracts,
    },
    platform::paging::{CURSOR_PATTERN, MAX_LIMIT},
    validation::patterns::{CRON_PATTERN, ENDPOINT_URL_PATTERN},
};
use entity::{agent_run::AgentRunStatus, automation_run::AutomationRunStatus, StatusEnum};

/// Adds the enums, bounds and patterns to a generated description.
pub fn describe(doc: &mut Value) {
    let providers: Vec<Value> = PROVIDERS.iter().map(|p| Value::from(p.id)).collect();
    set(
        doc,
        "/components/schemas/DisconnectRequest/properties/provider",
        "enum",
        Value::Array(providers.clone()),
    );
    per_provider_bodies(doc);
    // An agent's schedule takes the cron form and the time zones a schedule takes.
    set(
        doc,
        "/components/schemas/ScheduleUpdate/properties/cron",
        "pattern",
        json!(CRON_PATTERN),
    );
    if let Some(tz) = doc.pointer_mut("/components/schemas/ScheduleUpdate/properties/timezone") {
        *tz = json!({"$ref": "#/components/schemas/TimeZone"});
    }
    for url in [
        "DestinationUpdate/properties/url",
        "WebhookEndpointDestinationCreate/properties/url",
        "SlackChannelDestinationCreate/properties/webhookUrl",
    ] {
        let pointer = format!("/components/schemas/{url}");
        set(doc, &pointer, "pattern", json!(ENDPOINT_URL_PATTERN));
    }
    // poem-openapi has no validator for a list's items.
    set(
        doc,
        "/components/schemas/AgentUpdate/properties/actionKeys/items",
        "minLength",
        json!(1),
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

/// `google-calendar` -> `GoogleCalendar`.
fn pascal(id: &str) -> String {
    id.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect()
}

/// `connect` and `setup-step` bodies, one shape per provider (`oneOf` with a discriminator on
/// `provider`): the credentials `config` must carry (none for providers that connect only in
/// a browser) and the steps a provider has, each with its `config`.
fn per_provider_bodies(doc: &mut Value) {
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let mut connect = Vec::new();
    let mut setup = Vec::new();
    for p in PROVIDERS {
        let name = format!("{}ConnectRequest", pascal(p.id));
        schemas.insert(name.clone(), connect_schema(p));
        connect.push((p.id, name));
        let steps: Vec<(&str, &str)> = p
            .steps
            .iter()
            .filter(|s| s.supported)
            .filter_map(|s| {
                step_contracts()
                    .into_iter()
                    .find(|(id, _, _)| *id == s.id)
                    .map(|(id, component, _)| (id, component))
            })
            .collect();
        if !steps.is_empty() {
            let name = format!("{}SetupStepRequest", pascal(p.id));
            schemas.insert(name.clone(), setup_schema(p, &steps));
            setup.push((p.id, name));
        }
    }
    for (body, members, doc_text) in [
        ("ConnectRequest", connect, "Body of connect, by `provider`: `config` carries the credentials of a direct connection; leave it out to open a browser connection session instead."),
        ("SetupStepRequest", setup, "Body of setup-step, by `provider`: a step the provider has and its `config` (leave `config` out to see what the step needs)."),
    ] {
        let refs: Vec<Value> = members
            .iter()
            .map(|(_, m)| json!({"$ref": format!("#/components/schemas/{m}")}))
            .collect();
        let mapping: serde_json::Map<String, Value> = members
            .iter()
            .map(|(id, m)| (id.to_string(), json!(format!("#/components/schemas/{m}"))))
            .collect();
        schemas.insert(
            body.to_string(),
            json!({
                "description": doc_text,
                "oneOf": refs,
                "discriminator": {"propertyName": "provider", "mapping": mapping},
            }),
        );
    }
}

fn connect_schema(p: &Provider) -> Value {
    let mut properties = json!({"provider": {"type": "string", "enum": [p.id]}});
    if p.setup_mode != SetupMode::BrowserSession {
        let mut fields = serde_json::Map::new();
        for f in p.fields {
            let mut field = json!({"type": "string", "pattern": r"\S", "description": f.label});
            if f.secret {
                field["format"] = json!("password");
            }
            if p.id == "posthog" && f.key == "region" {
                field["enum"] = json!(POSTHOG_REGIONS);
            }
            fields.insert(f.key.to_string(), field);
        }
        let required: Vec<&str> = p.fields.iter().map(|f| f.key).collect();
        properties["config"] = json!({
            "type": "object",
            "description": "The credentials of a direct connection.",
            "properties": fields,
            "required": required,
            "additionalProperties": false,
        });
    }
    json!({
        "type": "object",
        "description": format!("Connect {}.", p.name),
        "properties": properties,
        "required": ["provider"],
        "additionalProperties": false,
    })
}

fn setup_schema(p: &Provider, steps: &[(&str, &str)]) -> Value {
    let ids: Vec<&str> = steps.iter().map(|(id, _)| *id).collect();
    let configs: Vec<Value> = steps
        .iter()
        .map(|(_, c)| json!({"$ref": format!("#/components/schemas/{c}")}))
        .collect();
    let config = match configs.as_slice() {
        [one] => one.clone(),
        _ => json!({"anyOf": configs}),
    };
    json!({
        "type": "object",
        "description": format!("A setup step of {}.", p.name),
        "properties": {
            "provider": {"type": "string", "enum": [p.id]},
            "step": {"type": "string", "enum": ids},
            "config": config,
        },
        "required": ["provider", "step"],
        "additionalProperties": false,
    })
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
