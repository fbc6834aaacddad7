//! The description's request bodies are the contract the server enforces: each example in the
//! description succeeds, and for each rule the description states on a field of those bodies
//! (`required`, `enum`, `pattern`, lengths, bounds, item counts, `additionalProperties: false`,
//! the type) a body that breaks only that rule answers the documented 400 naming the field.

use reqwest::{Method, StatusCode};
use serde_json::{json, Map, Value};

use crate::{db_test, helpers::TestApp};

fn description() -> Value {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"))
        .expect("openapi.yaml");
    serde_yaml::from_str(&text).expect("openapi.yaml parses")
}

/// A request body example: the operation, its method and route, and the body.
struct Example {
    operation: String,
    method: Method,
    route: String,
    name: String,
    body: Value,
    schema: Value,
}

fn examples(doc: &Value) -> Vec<Example> {
    let mut out = Vec::new();
    for (route, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let media = &op["requestBody"]["content"]["application/json"];
            for (name, example) in media["examples"].as_object().into_iter().flatten() {
                out.push(Example {
                    operation: op["operationId"].as_str().unwrap_or_default().to_string(),
                    method: method.to_uppercase().parse().expect("method"),
                    route: route.clone(),
                    name: name.clone(),
                    body: example["value"].clone(),
                    schema: media["schema"].clone(),
                });
            }
        }
    }
    out
}

/// Follows `$ref`s and picks, for a discriminated `oneOf`, the member the body's tag names.
fn resolve(doc: &Value, schema: &Value, body: &Value) -> Value {
    if let Some(target) = schema["$ref"].as_str() {
        let name = target.trim_start_matches("#/components/schemas/");
        return resolve(doc, &doc["components"]["schemas"][name], body);
    }
    if let Some(members) = schema["oneOf"].as_array() {
        if let Some(tag) = schema["discriminator"]["propertyName"].as_str() {
            let value = body[tag].as_str().unwrap_or_default();
            let target = schema["discriminator"]["mapping"][value].clone();
            return resolve(doc, &json!({"$ref": target}), body);
        }
        return resolve(doc, &alternative(doc, members, body), body);
    }
    if let Some(members) = schema["anyOf"].as_array() {
        return resolve(doc, &alternative(doc, members, body), body);
    }
    if let Some([only]) = schema["allOf"].as_array().map(Vec::as_slice) {
        return resolve(doc, only, body);
    }
    schema.clone()
}

/// Of alternative shapes, the one the body is: all of its required keys present, the most of
/// them.
fn alternative(doc: &Value, members: &[Value], body: &Value) -> Value {
    let required = |m: &Value| -> Option<usize> {
        let m = resolve(doc, m, body);
        let keys = m["required"].as_array().cloned().unwrap_or_default();
        keys.iter()
            .all(|k| body.get(k.as_str().unwrap_or_default()).is_some())
            .then_some(keys.len())
    };
    members
        .iter()
        .filter_map(|m| required(m).map(|n| (n, m)))
        .max_by_key(|(n, _)| *n)
        .map(|(_, m)| m.clone())
        .unwrap_or_else(|| members[0].clone())
}

/// One body that breaks one rule, and the path the 400 must name.
struct Broken {
    rule: String,
    body: Value,
    path: Vec<Value>,
}

fn set_at(body: &Value, path: &[Value], value: Option<Value>) -> Value {
    let mut out = body.clone();
    let mut at = &mut out;
    for segment in &path[..path.len() - 1] {
        at = match segment {
            Value::String(k) => &mut at[k.as_str()],
            Value::Number(i) => &mut at[i.as_u64().unwrap_or(0) as usize],
            _ => unreachable!(),
        };
    }
    let last = path.last().expect("a path");
    match (last, value) {
        (Value::String(k), Some(v)) => {
            at[k.as_str()] = v;
        }
        (Value::String(k), None) => {
            at.as_object_mut().map(|o| o.remove(k));
        }
        (Value::Number(i), Some(v)) => {
            at[i.as_u64().unwrap_or(0) as usize] = v;
        }
        _ => unreachable!(),
    }
    out
}

/// A value `schema` refuses, for the rule `keyword`, from a few candidates.
fn refused_by(schema: &Value, candidates: &[Value]) -> Option<Value> {
    let validator = jsonschema::validator_for(schema).ok()?;
    candidates.iter().find(|c| !validator.is_valid(c)).cloned()
}

/// The keywords that constrain one value, the type last (a value of the right type breaks
/// each of the others).
const KEYWORDS: [&str; 8] = [
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "type",
];

/// Every rule of `schema` (resolved) that applies to `value` at `path`, broken one at a time.
fn break_rules(doc: &Value, schema: &Value, body: &Value, path: &[Value], out: &mut Vec<Broken>) {
    let value = path.iter().fold(body.clone(), |v, s| match s {
        Value::String(k) => v[k.as_str()].clone(),
        Value::Number(i) => v[i.as_u64().unwrap_or(0) as usize].clone(),
        _ => Value::Null,
    });
    let schema = resolve(doc, schema, &value);
    let at = |rule: &str| format!("{} at {}", rule, Value::from(path.to_vec()));
    let mut push = |rule: &str, broken: Value, issue_path: Vec<Value>| {
        out.push(Broken {
            rule: at(rule),
            body: broken,
            path: issue_path,
        })
    };
    // Literal checks a plain JSON Schema validator can run on this one value.
    let mut local = Map::new();
    for k in KEYWORDS {
        if let Some(v) = schema.get(k) {
            local.insert(k.into(), v.clone());
        }
    }
    if schema["nullable"] == true {
        if let Some(t) = local.get("type").cloned() {
            local.insert("type".into(), json!([t, "null"]));
        }
    }
    let local = Value::Object(local);
    if !path.is_empty() {
        let mut candidates = vec![
            json!("NOT_ONE_OF_THEM"),
            json!(""),
            json!(" "),
            json!("7x"),
            json!(-1),
            json!(0),
            json!([]),
            json!({"unexpected": true}),
        ];
        if let Some(max) = schema["maxLength"].as_u64() {
            candidates.push(Value::from("x".repeat(max as usize + 1)));
        }
        if let Some(max) = schema["maximum"].as_f64() {
            candidates.push(json!(max + 1.0));
        }
        for keyword in KEYWORDS {
            if schema.get(keyword).is_none() {
                continue;
            }
            // A value of the right type that breaks this keyword (the type itself last).
            let mut only = local.clone();
            if keyword != "type" {
                only = json!({ keyword: schema[keyword] });
            }
            let typed: Vec<Value> = candidates
                .iter()
                .filter(|c| {
                    keyword == "type"
                        || jsonschema::validator_for(&json!({"type": local["type"]}))
                            .map(|v| v.is_valid(c))
                            .unwrap_or(true)
                })
                .cloned()
                .collect();
            if let Some(bad) = refused_by(&only, &typed) {
                push(keyword, set_at(body, path, Some(bad)), path.to_vec());
            }
        }
    }
    if let Some(props) = schema["properties"].as_object() {
        if schema["additionalProperties"] == false {
            let mut p = path.to_vec();
            p.push(json!("unexpectedKey"));
            push("additionalProperties", set_at(body, &p, Some(json!(1))), p);
        }
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap_or_default();
            if value.get(name).is_some() {
                let mut p = path.to_vec();
                p.push(json!(name));
                push("required", set_at(body, &p, None), p);
            }
        }
        for (name, prop) in props {
            if value.get(name).is_some() {
                let mut p = path.to_vec();
                p.push(json!(name));
                break_rules(doc, prop, body, &p, out);
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        if !list.is_empty() {
            let mut p = path.to_vec();
            p.push(json!(0));
            break_rules(doc, items, body, &p, out);
        }
    }
}

/// Fills the example's path and body with real ids of the organization.
async fn concrete(app: &TestApp, key: &str, ex: &Example) -> (String, Value) {
    let mut body = ex.body.clone();
    let mut path = ex.route.clone();
    if path.contains("{id}") {
        // A resource of the kind the route changes: (collection, create body, `data` field).
        let (collection, create, field) = match ex.operation.as_str() {
            "updateDestination" => (
                "/api/destinations",
                json!({"type": "WEBHOOK_ENDPOINT", "name": "Example target",
                    "url": "https://example.com/hook"}),
                "destination",
            ),
            _ => (
                "/api/automations",
                json!({"name": "Example subject", "triggerType": "SIGNAL_OCCURRENCE",
                    "triggerJson": {}, "matchMode": "ANY"}),
                "automation",
            ),
        };
        let r = app.post(collection, collection, key, Some(create)).await;
        let id = r.body["result"]["data"][field]["id"].clone();
        path = path.replace("{id}", id.as_str().expect("an id"));
    }
    if body.get("eventId").is_some() {
        let view = crate::ingest::query(app, key, "SELECT id FROM events LIMIT 1").await;
        body["eventId"] = view["rows"][0][0].clone();
    }
    (path, body)
}

db_test!(
    every_example_in_the_description_succeeds,
    |app: TestApp| async move {
        let doc = description();
        let org = app.demo_org().await;
        let key = org.api_key.as_str();
        // The subject the dry-run example names.
        let r = app
        .ingest(
            &org.public_key,
            json!({"source": "server",
                "events": [{"type": "pageview", "url": "https://acme.com/pricing", "path": "/pricing"}],
                "userIdentity": {"email": "ana@acme.com"},
                "customerIdentity": {"customerId": "acme.com"}}),
        )
        .await;
        assert!(r.status.is_success(), "{}", r.body);
        app.settle().await;
        let all = examples(&doc);
        let operations: std::collections::BTreeSet<&str> =
            all.iter().map(|e| e.operation.as_str()).collect();
        for wanted in [
            "createSignal",
            "createAutomation",
            "createDestination",
            "updateDestination",
            "testAutomation",
        ] {
            assert!(operations.contains(wanted), "no example for {wanted}");
        }
        for ex in &all {
            let (path, body) = concrete(&app, key, ex).await;
            let r = app
                .call(ex.method.clone(), &ex.route, &path, Some(key), Some(body))
                .await;
            assert!(
                r.status.is_success(),
                "{} example `{}` answered {}: {}",
                ex.operation,
                ex.name,
                r.status,
                r.body
            );
        }
    }
);

db_test!(
    every_described_rule_is_enforced,
    |app: TestApp| async move {
        let doc = description();
        let org = app.demo_org().await;
        let key = org.api_key.as_str();
        let mut checked = 0;
        for ex in examples(&doc) {
            let (path, body) = concrete(&app, key, &ex).await;
            let mut broken = Vec::new();
            break_rules(&doc, &ex.schema, &body, &[], &mut broken);
            assert!(!broken.is_empty(), "no rule found in {}", ex.operation);
            for b in broken {
                let r = app
                    .call(
                        ex.method.clone(),
                        &ex.route,
                        &path,
                        Some(key),
                        Some(b.body.clone()),
                    )
                    .await;
                assert_eq!(
                    r.status,
                    StatusCode::BAD_REQUEST,
                    "{} `{}`: breaking {} answered {}: {} (sent {})",
                    ex.operation,
                    ex.name,
                    b.rule,
                    r.status,
                    r.body,
                    b.body
                );
                assert_eq!(r.body["error"]["code"], "validation_failed", "{}", r.body);
                let issues = r.body["error"]["details"]["issues"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                assert!(
                    issues
                        .iter()
                        .any(|i| i["path"] == Value::from(b.path.clone())),
                    "{} `{}`: breaking {} named {:?}, not {:?}",
                    ex.operation,
                    ex.name,
                    b.rule,
                    issues,
                    b.path
                );
                checked += 1;
            }
        }
        eprintln!("{checked} broken rules refused");
        assert!(checked > 50, "only {checked} rules checked");
    }
);
