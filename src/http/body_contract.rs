//! Every JSON request body is checked against its schema in the published description before
//! it is deserialized, so the description is the contract the server enforces: each `enum`,
//! `pattern`, length, `required` and `additionalProperties: false` users' SDKs and contract
//! tests read is the one a request meets. Rules that span fields are checked by the domain
//! afterwards and said in the fields' descriptions.

use std::{collections::HashMap, sync::OnceLock};

use serde_json::{json, Map, Value};

use crate::validation::{discriminate, schema_issues, ValidationIssue};

/// Validators of the request body schemas, by component name.
pub struct BodyContracts {
    validators: HashMap<String, jsonschema::Validator>,
    /// Components that could not be compiled (a defect of the description; reported by a test).
    pub broken: Vec<(String, String)>,
}

static BODIES: OnceLock<BodyContracts> = OnceLock::new();

/// Builds the validators at start-up from the description the server publishes (once per
/// process), rather than on the first request.
pub fn prepare(doc: &Value) -> &'static BodyContracts {
    BODIES.get_or_init(|| BodyContracts::from_description(doc))
}

/// Checks a body against the component `name`; a name the description has no request body
/// of passes (its type is checked by deserializing alone). The application prepares the
/// contracts before it serves ([`prepare`]); a process that did not is refused rather than
/// left unchecked.
pub fn check(name: &str, body: &Value) -> Result<(), Vec<ValidationIssue>> {
    match BODIES.get() {
        Some(bodies) => bodies.check(name, body),
        None => Err(vec![ValidationIssue::root(
            "request bodies cannot be checked: this process did not load the API description",
        )]),
    }
}

const PREFIX: &str = "#/components/schemas/";

impl BodyContracts {
    pub fn from_description(doc: &Value) -> Self {
        let schemas = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut converted: Map<String, Value> = schemas
            .iter()
            .map(|(name, schema)| (name.clone(), as_json_schema(schema)))
            .collect();
        let lookup = converted.clone();
        let resolve = |member: &Value| -> Option<Value> {
            let name = member.get("$ref")?.as_str()?.strip_prefix(PREFIX)?;
            lookup.get(name).cloned()
        };
        for schema in converted.values_mut() {
            discriminate(schema, &resolve);
        }
        let components = Value::Object(converted);
        let mut validators = HashMap::new();
        let mut broken = Vec::new();
        // A tool call's `input` is checked by the tool gateway against the same schema, with
        // issue paths relative to `input` as tool-call errors give them (MCP calls too).
        for name in request_body_components(doc)
            .into_iter()
            .filter(|n| n != "ToolCallRequest")
        {
            let root = json!({
                "$ref": format!("{PREFIX}{name}"),
                "components": {"schemas": components},
            });
            match jsonschema::validator_for(&root) {
                Ok(v) => {
                    validators.insert(name, v);
                }
                Err(e) => broken.push((name, e.to_string())),
            }
        }
        Self { validators, broken }
    }

    pub fn check(&self, name: &str, body: &Value) -> Result<(), Vec<ValidationIssue>> {
        let Some(validator) = self.validators.get(name) else {
            return Ok(());
        };
        let issues = schema_issues(validator, body);
        if issues.is_empty() {
            Ok(())
        } else {
            Err(issues)
        }
    }

    /// The component names checked.
    pub fn names(&self) -> Vec<&str> {
        self.validators.keys().map(String::as_str).collect()
    }
}

/// The components the description's JSON request bodies refer to.
fn request_body_components(doc: &Value) -> Vec<String> {
    let mut names = Vec::new();
    let paths = doc.get("paths").and_then(Value::as_object);
    for operation in paths.into_iter().flat_map(|p| p.values()) {
        for op in operation.as_object().into_iter().flat_map(|o| o.values()) {
            let reference = op
                .pointer("/requestBody/content/application~1json/schema/$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(PREFIX));
            if let Some(name) = reference {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

/// An OpenAPI 3.0 schema object as JSON Schema: `nullable` becomes a `null` type (or a
/// `null` alternative beside a reference), the rest reads the same.
fn as_json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out: Map<String, Value> = map
                .iter()
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        // Maps of names to schemas, and schema lists.
                        "properties" => Value::Object(
                            v.as_object()
                                .map(|p| {
                                    p.iter()
                                        .map(|(n, s)| (n.clone(), as_json_schema(s)))
                                        .collect()
                                })
                                .unwrap_or_default(),
                        ),
                        "items" | "additionalProperties" | "not" | "oneOf" | "anyOf" | "allOf" => {
                            as_json_schema(v)
                        }
                        // Literal values stay as they are.
                        _ => v.clone(),
                    };
                    (k.clone(), v)
                })
                .collect();
            if out.remove("nullable") == Some(Value::Bool(true)) {
                match out.get("type").and_then(Value::as_str).map(str::to_string) {
                    Some(ty) => {
                        out.insert("type".into(), json!([ty, "null"]));
                        if let Some(Value::Array(values)) = out.get_mut("enum") {
                            if !values.contains(&Value::Null) {
                                values.push(Value::Null);
                            }
                        }
                    }
                    None => {
                        return json!({"anyOf": [Value::Object(out), {"type": "null"}]});
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(as_json_schema).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nullable_admits_null_and_keeps_the_rest() {
        let s = as_json_schema(&json!({"type": "string", "nullable": true, "maxLength": 3}));
        assert_eq!(s, json!({"type": ["string", "null"], "maxLength": 3}));
        let r = as_json_schema(&json!({"allOf": [{"$ref": "#/x"}], "nullable": true}));
        assert_eq!(
            r,
            json!({"anyOf": [{"allOf": [{"$ref": "#/x"}]}, {"type": "null"}]})
        );
    }

    fn paths(name: &str, body: Value) -> Vec<Value> {
        let contracts = BodyContracts::from_description(&crate::http::server::openapi_value());
        assert!(contracts.broken.is_empty(), "{:?}", contracts.broken);
        contracts
            .check(name, &body)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|i| serde_json::to_value(&i.path).unwrap_or_default())
            .collect()
    }

    /// Alternative shapes report the issues of the shape a body took, at their own paths.
    #[test]
    fn shapes_report_the_field_that_does_not_fit() {
        let schedule = |trigger: Value| json!({"name": "x", "triggerType": "SCHEDULE", "triggerJson": trigger, "matchMode": "ANY"});
        assert_eq!(
            paths("AutomationCreate", schedule(json!({"timezone": "UTC"}))),
            vec![
                json!(["triggerJson", "cron"]),
                json!(["triggerJson", "every"])
            ]
        );
        assert_eq!(
            paths("AutomationCreate", schedule(json!({"cron": "bad"}))),
            vec![json!(["triggerJson", "cron"])]
        );
        assert!(paths("AutomationCreate", schedule(json!({"every": "2h"}))).is_empty());
        assert_eq!(
            paths("AutomationTestRequest", json!({})),
            vec![json!(["eventId"]), json!(["subject"])]
        );
        assert_eq!(
            paths(
                "AutomationCreate",
                json!({"name": "x", "triggerType": "NEVER", "triggerJson": {}, "matchMode": "ANY"})
            ),
            vec![json!(["triggerType"])]
        );
    }
}
