//! The committed description is the code's description: regenerate it and compare.

use serde_json::Value;

#[test]
fn openapi_yaml_matches_the_code() {
    let generated = custintel::http::server::openapi_yaml();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml");
    if std::env::var("UPDATE_OPENAPI").as_deref() == Ok("1") {
        std::fs::write(path, &generated).expect("write openapi.yaml");
        return;
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi.yaml differs from the description the code generates; \
         run `UPDATE_OPENAPI=1 cargo test --test api contract` and commit the result"
    );
}

#[test]
fn description_is_version_1_with_bearer_security() {
    let doc = custintel::http::server::openapi_value();
    assert_eq!(
        doc["openapi"].as_str().map(|v| v.starts_with("3.")),
        Some(true)
    );
    assert_eq!(doc["info"]["version"], "1.0.0");
    let schemes = doc["components"]["securitySchemes"]
        .as_object()
        .expect("security schemes");
    assert!(schemes
        .values()
        .any(|s| s["type"] == "http" && s["scheme"] == "bearer"));
    // Every route of the spec's platform part is described.
    for (path, method) in [
        ("/api/agents", "get"),
        ("/api/agents/{id}", "get"),
        ("/api/agents/{id}", "patch"),
        ("/api/agents/{id}/disable", "post"),
        ("/api/signals", "get"),
        ("/api/signals", "post"),
        ("/api/signals/{id}", "get"),
        ("/api/signals/{id}/archive", "post"),
        ("/api/automations/{id}/enable", "post"),
        ("/api/automations/{id}/disable", "post"),
        ("/api/destinations/{id}", "patch"),
        ("/api/destinations/{id}/disable", "post"),
        ("/api/validate-api-key", "post"),
    ] {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} missing"
        );
    }
    // The spec's status codes for automation.enable.
    let responses = &doc["paths"]["/api/automations/{id}/enable"]["post"]["responses"];
    for code in ["200", "401", "403", "404", "409", "500", "503"] {
        assert!(responses[code].is_object(), "enable lacks {code}");
    }
    // Envelopes allow no extra properties.
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let envelope = schemas
        .iter()
        .find(|(k, _)| k.starts_with("ErrorEnvelope"))
        .map(|(_, v)| v)
        .expect("ErrorEnvelope");
    assert_eq!(envelope["additionalProperties"], Value::Bool(false));
}

/// Every `nullable: true` in the description lets `null` through a strict OpenAPI 3.0.3
/// validator: it stands beside a `type` (which it widens), and an `enum` beside it lists `null`.
/// (`allOf: [$ref]` + `nullable` does not: the referenced schema still refuses null.)
#[test]
fn nullable_schemas_accept_null_under_strict_validators() {
    fn walk(path: &str, v: &Value, bad: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if map.get("nullable") == Some(&Value::Bool(true)) {
                    let typed = map.contains_key("type");
                    let enum_ok = map
                        .get("enum")
                        .and_then(Value::as_array)
                        .is_none_or(|items| items.contains(&Value::Null));
                    if !typed || !enum_ok {
                        bad.push(path.to_string());
                    }
                }
                for (k, child) in map {
                    walk(&format!("{path}/{k}"), child, bad);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(&format!("{path}/{i}"), child, bad);
                }
            }
            _ => {}
        }
    }
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"))
        .expect("openapi.yaml");
    let doc: Value = serde_yaml::from_str(&text).expect("openapi.yaml parses");
    let mut bad = Vec::new();
    walk("", &doc, &mut bad);
    assert!(
        bad.is_empty(),
        "nullable schemas that refuse null under OpenAPI 3.0.3: {bad:#?}"
    );
}
