//! The tools' input contracts in the published OpenAPI 3.0 description. schemars writes JSON
//! Schema draft 2020-12; OpenAPI 3.0 says `nullable` instead of a `"null"` type and has no
//! `const`, so each schema is rewritten before it goes into `components.schemas`.

use serde_json::{json, Map, Value};

use super::registry;

/// `svc_list_customers` -> `SvcListCustomersInput`.
pub fn component_name(tool: &str) -> String {
    let mut out = String::new();
    for part in tool.split('_').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out.push_str("Input");
    out
}

/// Every tool's input schema, converted, by component name.
pub fn components() -> Vec<(String, Value)> {
    registry::all()
        .iter()
        .map(|r| {
            let mut schema = to_openapi_30(&r.schema);
            if let Some(obj) = schema.as_object_mut() {
                obj.insert(
                    "description".into(),
                    Value::String(format!(
                        "Input of `{}`: {}",
                        r.tool.name, r.tool.description
                    )),
                );
            }
            (component_name(r.tool.name), schema)
        })
        .collect()
}

/// Adds the tool schemas to a generated description and describes the call request as one
/// shape per tool (`oneOf` with a discriminator on `tool`), each with that tool's `input`.
pub fn extend_description(doc: &mut Value) {
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let mut members = Vec::new();
    let mut mapping = Map::new();
    for (r, (name, schema)) in registry::all().iter().zip(components()) {
        let needs_input = schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty());
        let call = name.replace("Input", "Call");
        let reference = format!("#/components/schemas/{call}");
        let required: Vec<&str> = if needs_input {
            vec!["tool", "input"]
        } else {
            vec!["tool"]
        };
        schemas.insert(
            call.clone(),
            json!({
                "type": "object",
                "description": format!("A call of `{}`.", r.tool.name),
                "properties": {
                    "tool": {"type": "string", "enum": [r.tool.name]},
                    "input": {"$ref": format!("#/components/schemas/{name}")},
                },
                "required": required,
                "additionalProperties": false,
            }),
        );
        schemas.insert(name, schema);
        mapping.insert(r.tool.name.to_string(), Value::from(reference.clone()));
        members.push(json!({"$ref": reference}));
    }
    schemas.insert(
        "ToolCallRequest".into(),
        json!({
            "description": "A tool call, by `tool` (`GET /api/tools` lists the tools with their input schemas); `input` defaults to `{}`.",
            "oneOf": members,
            "discriminator": {"propertyName": "tool", "mapping": mapping},
        }),
    );
}

/// Rewrites a draft 2020-12 schema (without `$ref`s) as an OpenAPI 3.0 schema object.
pub fn to_openapi_30(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => convert_object(map),
        Value::Bool(true) => json!({}),
        other => other.clone(),
    }
}

fn convert_object(map: &Map<String, Value>) -> Value {
    // `anyOf: [X, {type: null}]` (an optional enum or object) becomes X with `nullable`.
    if let Some(Value::Array(options)) = map.get("anyOf") {
        let (nulls, rest): (Vec<&Value>, Vec<&Value>) = options
            .iter()
            .partition(|o| o.get("type").and_then(Value::as_str) == Some("null"));
        if !nulls.is_empty() && rest.len() == 1 {
            let mut inner = to_openapi_30(rest[0]);
            if let Some(obj) = inner.as_object_mut() {
                obj.insert("nullable".into(), Value::Bool(true));
                for (k, v) in map {
                    if k != "anyOf" {
                        obj.entry(k.clone()).or_insert_with(|| to_openapi_30(v));
                    }
                }
                enum_admits_null(obj);
            }
            return inner;
        }
    }
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "$schema" | "$id" | "title" | "$defs" | "definitions" => {}
            "type" => match value {
                Value::Array(types) => {
                    let non_null: Vec<&Value> = types
                        .iter()
                        .filter(|t| t.as_str() != Some("null"))
                        .collect();
                    if non_null.len() < types.len() {
                        out.insert("nullable".into(), Value::Bool(true));
                    }
                    if let Some(first) = non_null.first() {
                        out.insert("type".into(), (*first).clone());
                    }
                }
                other => {
                    out.insert("type".into(), other.clone());
                }
            },
            "const" => {
                out.insert("enum".into(), json!([value]));
            }
            "format" => {
                // Only formats OpenAPI 3.0 defines for numbers survive (`uint32` etc. do not).
                let keep = matches!(
                    value.as_str(),
                    Some("int32" | "int64" | "float" | "double" | "date-time" | "date" | "email")
                );
                if keep {
                    out.insert(key.clone(), value.clone());
                }
            }
            "enum" => {
                let values: Vec<Value> = value
                    .as_array()
                    .map(|a| a.iter().filter(|v| !v.is_null()).cloned().collect())
                    .unwrap_or_default();
                if values.len() < value.as_array().map_or(0, Vec::len) {
                    out.insert("nullable".into(), Value::Bool(true));
                }
                out.insert("enum".into(), Value::Array(values));
                enum_admits_null(&mut out);
            }
            "properties" => {
                let props: Map<String, Value> = value
                    .as_object()
                    .map(|p| {
                        p.iter()
                            .map(|(k, v)| (k.clone(), to_openapi_30(v)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" | "not" => {
                out.insert(key.clone(), to_openapi_30(value));
            }
            "oneOf" | "anyOf" | "allOf" => {
                let list: Vec<Value> = value
                    .as_array()
                    .map(|a| a.iter().map(to_openapi_30).collect())
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Array(list));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    enum_admits_null(&mut out);
    Value::Object(out)
}

/// A nullable enum lists `null` among its values: under OpenAPI 3.0.3 `nullable` only widens
/// the `type`, and a strict validator still checks the value against `enum`.
fn enum_admits_null(schema: &mut Map<String, Value>) {
    if schema.get("nullable") != Some(&Value::Bool(true)) {
        return;
    }
    if let Some(Value::Array(values)) = schema.get_mut("enum") {
        if !values.contains(&Value::Null) {
            values.push(Value::Null);
        }
    }
}
