//! Validation issues (`{path, message}`) and serde parsing that reports the path of what does
//! not fit. Shared by every domain module; the HTTP side turns issues into its error bodies.

pub mod patterns;

use patterns::pattern_message;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// One segment of a validation path: an object key or an array index.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum PathSegment {
    Key(String),
    Index(i64),
}

impl From<&str> for PathSegment {
    fn from(value: &str) -> Self {
        Self::Key(value.to_string())
    }
}

impl From<usize> for PathSegment {
    fn from(value: usize) -> Self {
        Self::Index(value as i64)
    }
}

/// A validation issue: where in the input, and what is wrong there.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ValidationIssue {
    /// Keys and array indexes from the root of the input to the offending value; empty for the
    /// input as a whole.
    pub path: Vec<PathSegment>,
    pub message: String,
}

impl ValidationIssue {
    pub fn new(path: Vec<PathSegment>, message: impl Into<String>) -> Self {
        Self {
            path,
            message: message.into(),
        }
    }

    pub fn at(field: &str, message: impl Into<String>) -> Self {
        Self::new(vec![field.into()], message)
    }

    pub fn root(message: impl Into<String>) -> Self {
        Self::new(vec![], message)
    }
}

/// Collects issues while validating a parsed body.
#[derive(Debug, Default)]
pub struct Issues(pub Vec<ValidationIssue>);

impl Issues {
    pub fn push(&mut self, path: Vec<PathSegment>, message: impl Into<String>) {
        self.0.push(ValidationIssue::new(path, message));
    }

    /// Checks a string's length in characters against inclusive bounds.
    pub fn length(&mut self, path: &[&str], value: &str, min: usize, max: usize) {
        let n = value.chars().count();
        let path: Vec<PathSegment> = path.iter().map(|p| (*p).into()).collect();
        if n < min {
            self.push(path, format!("must be at least {min} character(s) long"));
        } else if n > max {
            self.push(path, format!("must be at most {max} characters long"));
        }
    }

    pub fn into_result(self) -> Result<(), Vec<ValidationIssue>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }
}

/// Parses a JSON value into `T`, reporting the path of the first value that does not fit.
pub fn parse_value<T: DeserializeOwned>(value: Value) -> Result<T, Vec<ValidationIssue>> {
    parse_from(value)
}

/// [`parse_value`] from any JSON deserializer, e.g. `&Value` when the caller keeps the value
/// (no copy of it is made).
pub fn parse_from<'de, T, D>(value: D) -> Result<T, Vec<ValidationIssue>>
where
    T: serde::Deserialize<'de>,
    D: serde::Deserializer<'de>,
    D::Error: std::fmt::Display,
{
    serde_path_to_error::deserialize::<_, T>(value).map_err(|err| {
        let mut path: Vec<PathSegment> = err
            .path()
            .iter()
            .filter_map(|seg| match seg {
                serde_path_to_error::Segment::Seq { index } => Some(PathSegment::from(*index)),
                serde_path_to_error::Segment::Map { key } => Some(key.as_str().into()),
                _ => None,
            })
            .collect();
        let message = err.inner().to_string();
        // serde reports a missing field at its parent; name the field itself. (An unknown
        // field's key is already the last segment of the path.)
        if let Some(rest) = message.strip_prefix("missing field `") {
            if let Some(end) = rest.find('`') {
                path.push(rest[..end].into());
            }
        }
        vec![ValidationIssue::new(path, describe_serde_error(&message))]
    })
}

fn describe_serde_error(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or_default();
        return format!("`{field}` is required");
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let field = rest.split('`').next().unwrap_or_default();
        return format!("unknown property `{field}`");
    }
    message.to_string()
}

/// Parses raw body bytes as JSON; an empty body is refused.
pub fn parse_json(bytes: &[u8]) -> Result<Value, Vec<ValidationIssue>> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(vec![ValidationIssue::root(
            "a JSON request body is required",
        )]);
    }
    serde_json::from_slice(bytes)
        .map_err(|e| vec![ValidationIssue::root(format!("malformed JSON: {e}"))])
}

/// The issues a JSON Schema validator finds in `input`, each at the path of the offending value
/// (an unknown key and a missing required one at their own path, not their object's).
pub fn schema_issues(validator: &jsonschema::Validator, input: &Value) -> Vec<ValidationIssue> {
    let mut issues = Vec::new();
    for err in validator.iter_errors(input) {
        let mut path: Vec<PathSegment> = err
            .instance_path()
            .iter()
            .map(|seg| match seg {
                jsonschema::paths::LocationSegment::Property(p) => PathSegment::Key(p.to_string()),
                jsonschema::paths::LocationSegment::Index(i) => PathSegment::from(i),
            })
            .collect();
        match err.kind() {
            jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
                for name in unexpected {
                    let mut p = path.clone();
                    p.push(PathSegment::Key(name.clone()));
                    issues.push(ValidationIssue::new(
                        p,
                        format!("unknown property `{name}`"),
                    ));
                }
                continue;
            }
            jsonschema::error::ValidationErrorKind::Required { property } => {
                let name = property.as_str().unwrap_or_default().to_string();
                path.push(PathSegment::Key(name.clone()));
                issues.push(ValidationIssue::new(path, format!("`{name}` is required")));
                continue;
            }
            // Every allowed value, not the first two.
            jsonschema::error::ValidationErrorKind::Enum { options } => {
                let listed: Vec<String> = options
                    .as_array()
                    .map(|a| a.iter().map(shown).collect())
                    .unwrap_or_default();
                let message = format!(
                    "`{}` is not one of {}",
                    shown(err.instance()),
                    listed.join(", ")
                );
                issues.push(ValidationIssue::new(path, message));
                continue;
            }
            jsonschema::error::ValidationErrorKind::Pattern { pattern } => {
                let message = pattern_message(pattern, err.instance());
                issues.push(ValidationIssue::new(path, message));
                continue;
            }
            _ => {}
        }
        issues.push(ValidationIssue::new(path, err.to_string()));
    }
    // One issue per place: a value that breaks several rules (too short and off-pattern) is
    // reported once, by the first.
    let mut seen: Vec<Vec<PathSegment>> = Vec::new();
    issues.retain(|i| {
        let first = !seen.contains(&i.path);
        if first {
            seen.push(i.path.clone());
        }
        first
    });
    issues
}

/// A value as an issue quotes it: strings without their JSON quotes.
pub(crate) fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Rewrites, in place and at every depth, each `oneOf` whose members all pin one property to a
/// single value (a tagged union) as `if`/`then` on that property: a body then gets the issues of
/// the member its tag names, instead of "not valid under any of the schemas". `resolve`
/// resolves a member (e.g. a `$ref`) to the schema that pins the tag.
pub fn discriminate(schema: &mut Value, resolve: &dyn Fn(&Value) -> Option<Value>) {
    match schema {
        Value::Object(map) => {
            for value in map.values_mut() {
                discriminate(value, resolve);
            }
            if let Some(rewritten) = tagged_union(map, resolve) {
                map.remove("oneOf");
                map.remove("anyOf");
                map.remove("discriminator");
                for (k, v) in rewritten {
                    map.insert(k, v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| discriminate(v, resolve)),
        _ => {}
    }
}

/// The values a member pins `property` to (`const`, or an `enum`, itself perhaps behind a
/// `$ref`), when it requires it. A member that is itself a union pins the values its members
/// pin, when every one of them does.
fn pinned(
    member: &Value,
    property: &str,
    resolve: &dyn Fn(&Value) -> Option<Value>,
) -> Option<Vec<Value>> {
    if let Some(inner) = member
        .get("oneOf")
        .or_else(|| member.get("anyOf"))
        .and_then(Value::as_array)
    {
        let mut values: Vec<Value> = Vec::new();
        for m in inner {
            let m = resolve(m).unwrap_or_else(|| m.clone());
            for v in pinned(&m, property, resolve)? {
                if !values.contains(&v) {
                    values.push(v);
                }
            }
        }
        return Some(values);
    }
    let required = member.get("required")?.as_array()?;
    if !required.iter().any(|r| r.as_str() == Some(property)) {
        return None;
    }
    let p = member.get("properties")?.get(property)?;
    let p = resolve(p).unwrap_or_else(|| p.clone());
    match p.get("const") {
        Some(one) => Some(vec![one.clone()]),
        None => p.get("enum")?.as_array().cloned(),
    }
}

/// The names of a member's required properties.
fn required_of(member: &Value) -> Vec<String> {
    member
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect()
}

fn tagged_union(
    map: &Map<String, Value>,
    resolve: &dyn Fn(&Value) -> Option<Value>,
) -> Option<Map<String, Value>> {
    let members = map.get("oneOf").or_else(|| map.get("anyOf"))?.as_array()?;
    if members.len() < 2 {
        return None;
    }
    let resolved: Vec<Value> = members
        .iter()
        .map(|m| resolve(m).unwrap_or_else(|| m.clone()))
        .collect();
    let candidates: Vec<String> = match map
        .get("discriminator")
        .and_then(|d| d.get("propertyName"))
        .and_then(Value::as_str)
    {
        Some(name) => vec![name.to_string()],
        None => required_of(&resolved[0]),
    };
    // A tag: one property every member requires, each member with its own values.
    let tagged = candidates.into_iter().find_map(|p| {
        let sets: Vec<Vec<Value>> = resolved
            .iter()
            .map(|m| pinned(m, &p, resolve))
            .collect::<Option<_>>()?;
        let all: Vec<&Value> = sets.iter().flatten().collect();
        let disjoint = all.iter().enumerate().all(|(i, v)| !all[..i].contains(v));
        disjoint.then_some((p, sets))
    });
    let mut out = Map::new();
    let mut branches = Vec::new();
    if let Some((property, sets)) = tagged {
        for (member, values) in members.iter().zip(&sets) {
            branches.push(serde_json::json!({
                "if": {"required": [property], "properties": {&property: {"enum": values}}},
                "then": member,
            }));
        }
        let values: Vec<Value> = sets.into_iter().flatten().collect();
        out.insert("type".into(), Value::from("object"));
        out.insert("required".into(), serde_json::json!([property]));
        out.insert(
            "properties".into(),
            serde_json::json!({ &property: {"enum": values} }),
        );
    } else {
        // Members told apart by a key only each requires (`cron` or `every`): the keys present
        // pick the members (both present: each refuses the other's key), and one must be.
        let keys: Vec<String> = resolved
            .iter()
            .enumerate()
            .map(|(i, m)| {
                required_of(m).into_iter().find(|k| {
                    resolved.iter().enumerate().all(|(j, other)| {
                        i == j || other.get("properties").and_then(|p| p.get(k)).is_none()
                    })
                })
            })
            .collect::<Option<_>>()?;
        for (member, key) in members.iter().zip(&keys) {
            branches.push(serde_json::json!({"if": {"required": [key]}, "then": member}));
        }
        // None of the keys: each is reported missing, at its own path.
        let any_key: Vec<Value> = keys
            .iter()
            .map(|k| serde_json::json!({"required": [k]}))
            .collect();
        branches.push(serde_json::json!({
            "if": {"not": {"anyOf": any_key}},
            "then": {"required": keys},
        }));
        out.insert("type".into(), Value::from("object"));
    }
    out.insert("allOf".into(), Value::Array(branches));
    Some(out)
}

/// An optional field of a contract may be left out, not sent as null: schemars' `null`
/// alternatives (of `Option` fields) are taken out.
fn refuse_null(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Array(options)) = map.get("anyOf") {
                let rest: Vec<Value> = options
                    .iter()
                    .filter(|o| o.get("type").and_then(Value::as_str) != Some("null"))
                    .cloned()
                    .collect();
                if rest.len() == 1 && rest.len() < options.len() {
                    map.remove("anyOf");
                    if let Value::Object(inner) = &rest[0] {
                        for (k, v) in inner {
                            map.entry(k.clone()).or_insert_with(|| v.clone());
                        }
                    }
                }
            }
            if let Some(Value::Array(types)) = map.get("type") {
                let rest: Vec<Value> = types
                    .iter()
                    .filter(|t| t.as_str() != Some("null"))
                    .cloned()
                    .collect();
                if rest.len() == 1 {
                    map.insert("type".into(), rest[0].clone());
                }
            }
            if let Some(Value::Array(values)) = map.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            if map.get("default") == Some(&Value::Null) {
                map.remove("default");
            }
            for value in map.values_mut() {
                refuse_null(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(refuse_null),
        _ => {}
    }
}

/// A JSON contract defined by a type: its JSON Schema (from schemars, the types it is made of
/// under `$defs`) is
/// what the API description shows for the field and what every reader of such JSON checks
/// before deserializing it, so the two cannot drift.
pub struct Contract {
    schema: Value,
    validator: Option<jsonschema::Validator>,
}

impl Contract {
    pub fn of<T: schemars::JsonSchema>() -> Self {
        let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
        let mut schema = generator.into_root_schema_for::<T>().to_value();
        if let Some(obj) = schema.as_object_mut() {
            obj.remove("title");
            obj.remove("$schema");
        }
        refuse_null(&mut schema);
        let mut checked = schema.clone();
        let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
        let resolve = |member: &Value| -> Option<Value> {
            let name = member.get("$ref")?.as_str()?.strip_prefix("#/$defs/")?;
            defs.get(name).cloned()
        };
        discriminate(&mut checked, &resolve);
        let validator = jsonschema::validator_for(&checked).ok();
        Self { schema, validator }
    }

    /// The JSON Schema (draft 2020-12) as generated.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Checks `input` against the schema, then deserializes it.
    pub fn parse<T: DeserializeOwned>(&self, input: &Value) -> Result<T, Vec<ValidationIssue>> {
        let Some(validator) = &self.validator else {
            return Err(vec![ValidationIssue::root(
                "this field's contract could not be compiled",
            )]);
        };
        let issues = schema_issues(validator, input);
        if !issues.is_empty() {
            return Err(issues);
        }
        parse_from(input)
    }
}
