//! Whether an event matches an `EVENT_MATCH` signal's definition, as DESIGN.md decides:
//! event names (`custom` events by `eventName`, every other type as `$` and its type,
//! case-sensitive) and property conditions (a dot path looked up in the event's `properties`,
//! then in its own fields), combined by `conditionMode`.
//!
//! A definition is compiled once ([`EventMatcher::compile`]) and then checked against many
//! events without allocating.

use serde_json::Value;

/// How a condition compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Operator {
    Eq,
    Neq,
    Contains,
    Gt,
    Gte,
    Lt,
    Lte,
    Exists,
}

impl Operator {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "eq" => Operator::Eq,
            "neq" => Operator::Neq,
            "contains" => Operator::Contains,
            "gt" => Operator::Gt,
            "gte" => Operator::Gte,
            "lt" => Operator::Lt,
            "lte" => Operator::Lte,
            "exists" => Operator::Exists,
            _ => return None,
        })
    }
}

/// One compiled property condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The dot path, split once.
    pub path: Vec<String>,
    pub operator: Operator,
    pub value: Value,
}

/// A compiled `EVENT_MATCH` definition (names and conditions; grain and subject are resolved
/// by the caller, which knows the event's user and customer).
#[derive(Debug, Clone, PartialEq)]
pub struct EventMatcher {
    pub event_names: Vec<String>,
    pub conditions: Vec<Condition>,
    /// `conditionMode` `ALL` (true) or `ANY` (false).
    pub all: bool,
}

impl EventMatcher {
    /// Compiles a stored definition (`{eventNames, propertyConditions, conditionMode, ...}`);
    /// the error names the field that does not fit.
    pub fn compile(definition: &Value) -> Result<Self, String> {
        let event_names = definition
            .get("eventNames")
            .and_then(Value::as_array)
            .ok_or("eventNames: a list of event names is required")?
            .iter()
            .map(|n| {
                n.as_str()
                    .map(str::to_string)
                    .ok_or("eventNames: every name is a string")
            })
            .collect::<Result<Vec<_>, _>>()?;
        let all = match definition.get("conditionMode").and_then(Value::as_str) {
            None | Some("ALL") => true,
            Some("ANY") => false,
            Some(other) => return Err(format!("conditionMode: `{other}` is not ALL or ANY")),
        };
        let mut conditions = Vec::new();
        let listed = definition
            .get("propertyConditions")
            .and_then(Value::as_array);
        for (i, c) in listed.into_iter().flatten().enumerate() {
            let property = c
                .get("property")
                .and_then(Value::as_str)
                .filter(|p| !p.trim().is_empty())
                .ok_or_else(|| format!("propertyConditions[{i}].property: required"))?;
            let operator = c
                .get("operator")
                .and_then(Value::as_str)
                .and_then(Operator::parse)
                .ok_or_else(|| format!("propertyConditions[{i}].operator: not an operator"))?;
            conditions.push(Condition {
                path: property.split('.').map(str::to_string).collect(),
                operator,
                value: c.get("value").cloned().unwrap_or(Value::Null),
            });
        }
        Ok(Self {
            event_names,
            conditions,
            all,
        })
    }

    /// Whether `event` (an Ingest API event object: `type`, `eventName`, `properties`, its own
    /// fields) matches.
    pub fn matches(&self, event: &Value) -> bool {
        let name_matches = match event_name(event) {
            Some(name) => self.event_names.iter().any(|n| name.matches(n)),
            None => false,
        };
        if !name_matches {
            return false;
        }
        if self.conditions.is_empty() {
            return true;
        }
        let mut results = self.conditions.iter().map(|c| holds(c, event));
        if self.all {
            results.all(|ok| ok)
        } else {
            results.any(|ok| ok)
        }
    }
}

/// An event's name as signals see it: `custom` events by `eventName`, other types as `$type`.
enum EventName<'a> {
    Custom(&'a str),
    BuiltIn(&'a str),
}

impl EventName<'_> {
    fn matches(&self, wanted: &str) -> bool {
        match self {
            EventName::Custom(name) => *name == wanted,
            EventName::BuiltIn(ty) => wanted.strip_prefix('$') == Some(ty),
        }
    }
}

fn event_name(event: &Value) -> Option<EventName<'_>> {
    match event.get("type").and_then(Value::as_str)? {
        "custom" => event
            .get("eventName")
            .and_then(Value::as_str)
            .map(EventName::Custom),
        other => Some(EventName::BuiltIn(other)),
    }
}

/// The value at `path`: in `properties` first, then in the event's own fields.
fn lookup<'a>(event: &'a Value, path: &[String]) -> Option<&'a Value> {
    let walk = |root: &'a Value| {
        path.iter()
            .try_fold(root, |node, key| node.as_object()?.get(key.as_str()))
    };
    event
        .get("properties")
        .and_then(walk)
        .or_else(|| walk(event))
}

fn holds(condition: &Condition, event: &Value) -> bool {
    let found = lookup(event, &condition.path);
    let wanted = &condition.value;
    match condition.operator {
        Operator::Exists => found.is_some_and(|v| !v.is_null()),
        Operator::Eq => found.is_some_and(|v| json_eq(v, wanted)),
        Operator::Neq => !found.is_some_and(|v| json_eq(v, wanted)),
        Operator::Contains => match found {
            Some(Value::String(s)) => wanted.as_str().is_some_and(|w| s.contains(w)),
            Some(Value::Array(items)) => items.iter().any(|item| json_eq(item, wanted)),
            _ => false,
        },
        Operator::Gt | Operator::Gte | Operator::Lt | Operator::Lte => {
            let (Some(a), Some(b)) = (found.and_then(number), number(wanted)) else {
                return false;
            };
            match condition.operator {
                Operator::Gt => a > b,
                Operator::Gte => a >= b,
                Operator::Lt => a < b,
                _ => a <= b,
            }
        }
    }
}

/// JSON equality, with numbers compared as numbers (`1` equals `1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// A number, or a string that reads as one.
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn matcher(definition: Value) -> EventMatcher {
        EventMatcher::compile(&definition).expect("definition compiles")
    }

    fn export_failed() -> Value {
        json!({"type": "custom", "eventName": "export_failed", "url": "https://app.acme.com/x",
               "path": "/x", "utm": {"source": "newsletter"},
               "properties": {"format": "csv", "rows": 1200, "size": "42.5", "tags": ["beta", "eu"],
                              "nested": {"plan": "pro"}, "gone": null}})
    }

    #[test]
    fn names_custom_by_event_name_and_built_in_types_by_dollar_type() {
        let m = matcher(json!({"eventNames": ["export_failed", "$pageview"]}));
        assert!(m.matches(&export_failed()));
        assert!(m.matches(&json!({"type": "pageview", "url": "u", "path": "/"})));
        assert!(!m.matches(&json!({"type": "form", "formId": "f"})));
        assert!(!m.matches(&json!({"type": "custom", "eventName": "Export_Failed"})));
        // A custom event named like a built-in type is not that type.
        let dollar = matcher(json!({"eventNames": ["$pageview"]}));
        assert!(!dollar.matches(&json!({"type": "custom", "eventName": "pageview"})));
    }

    #[test]
    fn every_operator() {
        let cases = [
            (
                json!({"property": "format", "operator": "eq", "value": "csv"}),
                true,
            ),
            (
                json!({"property": "rows", "operator": "eq", "value": 1200.0}),
                true,
            ),
            (
                json!({"property": "rows", "operator": "eq", "value": "1200"}),
                false,
            ),
            (
                json!({"property": "format", "operator": "neq", "value": "xlsx"}),
                true,
            ),
            (
                json!({"property": "missing", "operator": "neq", "value": "x"}),
                true,
            ),
            (
                json!({"property": "format", "operator": "neq", "value": "csv"}),
                false,
            ),
            (
                json!({"property": "format", "operator": "contains", "value": "sv"}),
                true,
            ),
            (
                json!({"property": "tags", "operator": "contains", "value": "eu"}),
                true,
            ),
            (
                json!({"property": "tags", "operator": "contains", "value": "us"}),
                false,
            ),
            (
                json!({"property": "rows", "operator": "contains", "value": 1}),
                false,
            ),
            (
                json!({"property": "rows", "operator": "gt", "value": 1000}),
                true,
            ),
            (
                json!({"property": "rows", "operator": "gte", "value": 1200}),
                true,
            ),
            (
                json!({"property": "rows", "operator": "lt", "value": 1200}),
                false,
            ),
            (
                json!({"property": "rows", "operator": "lte", "value": "1200"}),
                true,
            ),
            (
                json!({"property": "size", "operator": "gt", "value": 42}),
                true,
            ),
            (
                json!({"property": "format", "operator": "gt", "value": 1}),
                false,
            ),
            (
                json!({"property": "missing", "operator": "lt", "value": 1}),
                false,
            ),
            (json!({"property": "format", "operator": "exists"}), true),
            (json!({"property": "gone", "operator": "exists"}), false),
            (json!({"property": "missing", "operator": "exists"}), false),
            (
                json!({"property": "nested.plan", "operator": "eq", "value": "pro"}),
                true,
            ),
            // Own fields after properties.
            (
                json!({"property": "path", "operator": "eq", "value": "/x"}),
                true,
            ),
            (
                json!({"property": "utm.source", "operator": "eq", "value": "newsletter"}),
                true,
            ),
        ];
        for (condition, expected) in cases {
            let m = matcher(json!({"eventNames": ["export_failed"],
                                   "propertyConditions": [condition.clone()]}));
            assert_eq!(m.matches(&export_failed()), expected, "{condition}");
        }
    }

    #[test]
    fn condition_mode_all_any_and_none() {
        let yes = json!({"property": "format", "operator": "eq", "value": "csv"});
        let no = json!({"property": "format", "operator": "eq", "value": "pdf"});
        let all = matcher(
            json!({"eventNames": ["export_failed"], "conditionMode": "ALL",
                                 "propertyConditions": [yes.clone(), no.clone()]}),
        );
        let any = matcher(
            json!({"eventNames": ["export_failed"], "conditionMode": "ANY",
                                 "propertyConditions": [yes, no]}),
        );
        let none = matcher(json!({"eventNames": ["export_failed"], "propertyConditions": []}));
        assert!(!all.matches(&export_failed()));
        assert!(any.matches(&export_failed()));
        assert!(none.matches(&export_failed()));
    }

    #[test]
    fn definitions_that_do_not_fit_name_the_field() {
        let err = |d: Value| EventMatcher::compile(&d).unwrap_err();
        assert!(err(json!({})).starts_with("eventNames"));
        assert!(
            err(json!({"eventNames": ["a"], "conditionMode": "SOME"})).starts_with("conditionMode")
        );
        assert!(err(json!({"eventNames": ["a"], "propertyConditions": [{"property": "x", "operator": "like"}]}))
            .starts_with("propertyConditions[0].operator"));
    }
}
