//! OpenAPI links: which value of one operation's answer feeds which parameter of another, so a
//! reader, a generated client and a stateful contract test (schemathesis, Dredd) can walk the
//! API the way a client does: from a create to its reads and state changes, from a list to an
//! item and to its next page, from a connect to its status and its webhook route.
//! poem-openapi cannot declare links; they are added to the generated description here.

use serde_json::{json, Map, Value};

/// One link: from a 200 answer of `from` to the operation `to`, with each of `to`'s
/// parameters named in `parameters` taken from a runtime expression (`$response.body#/...`,
/// `$request.path.x`).
struct Link {
    from: &'static str,
    name: &'static str,
    to: &'static str,
    parameters: &'static [(&'static str, &'static str)],
    /// The request body of `to`, as JSON with runtime expressions in its values.
    request_body: Option<&'static str>,
    description: &'static str,
}

const SIGNAL: &str = "$response.body#/result/data/signal/id";
const AUTOMATION: &str = "$response.body#/result/data/automation/id";
const DESTINATION: &str = "$response.body#/result/data/destination/id";
const AGENT: &str = "$response.body#/result/data/agent/id";
const FIRST_RUN: &str = "$response.body#/result/data/runs/0/id";
const NEXT_CURSOR: &str = "$response.body#/result/data/nextCursor";

const LINKS: &[Link] = &[
    Link {
        from: "createSignal",
        name: "GetSignal",
        to: "getSignal",
        parameters: &[("id", SIGNAL)],
        description: "The signal just created.",
        request_body: None,
    },
    Link {
        from: "createSignal",
        name: "ArchiveSignal",
        to: "archiveSignal",
        parameters: &[("id", SIGNAL)],
        description: "Archives the signal just created.",
        request_body: None,
    },
    Link {
        from: "createAutomation",
        name: "GetAutomation",
        to: "getAutomation",
        parameters: &[("id", AUTOMATION)],
        description: "The automation just created.",
        request_body: None,
    },
    Link {
        from: "createAutomation",
        name: "EnableAutomation",
        to: "enableAutomation",
        parameters: &[("id", AUTOMATION)],
        description: "Enables the automation just created.",
        request_body: None,
    },
    Link {
        from: "createAutomation",
        name: "DisableAutomation",
        to: "disableAutomation",
        parameters: &[("id", AUTOMATION)],
        description: "Disables the automation just created.",
        request_body: None,
    },
    Link {
        from: "createAutomation",
        name: "TestAutomation",
        to: "testAutomation",
        parameters: &[("id", AUTOMATION)],
        description: "A dry run of the automation just created.",
        request_body: None,
    },
    Link {
        from: "createAutomation",
        name: "ListAutomationRuns",
        to: "listAutomationRuns",
        parameters: &[("id", AUTOMATION)],
        description: "The runs of the automation just created.",
        request_body: None,
    },
    Link {
        from: "getAutomation",
        name: "ListAutomationRuns",
        to: "listAutomationRuns",
        parameters: &[("id", AUTOMATION)],
        description: "The automation's runs.",
        request_body: None,
    },
    Link {
        from: "enableAutomation",
        name: "DisableAutomation",
        to: "disableAutomation",
        parameters: &[("id", AUTOMATION)],
        description: "Disables the automation again.",
        request_body: None,
    },
    Link {
        from: "disableAutomation",
        name: "EnableAutomation",
        to: "enableAutomation",
        parameters: &[("id", AUTOMATION)],
        description: "Enables the automation again.",
        request_body: None,
    },
    Link {
        from: "listAutomationRuns",
        name: "GetFirstRun",
        to: "getAutomationRun",
        parameters: &[("id", "$request.path.id"), ("run_id", FIRST_RUN)],
        description: "The first run of the page.",
        request_body: None,
    },
    Link {
        from: "listAutomationRuns",
        name: "NextPage",
        to: "listAutomationRuns",
        parameters: &[("id", "$request.path.id"), ("cursor", NEXT_CURSOR)],
        description: "The next page of runs (while `nextCursor` is not empty).",
        request_body: None,
    },
    Link {
        from: "createDestination",
        name: "GetDestination",
        to: "getDestination",
        parameters: &[("id", DESTINATION)],
        description: "The destination just created.",
        request_body: None,
    },
    Link {
        from: "createDestination",
        name: "UpdateDestination",
        to: "updateDestination",
        parameters: &[("id", DESTINATION)],
        description: "Changes the destination just created.",
        request_body: None,
    },
    Link {
        from: "createDestination",
        name: "DisableDestination",
        to: "disableDestination",
        parameters: &[("id", DESTINATION)],
        description: "Disables the destination just created.",
        request_body: None,
    },
    Link {
        from: "listAgents",
        name: "GetFirstAgent",
        to: "getAgent",
        parameters: &[("id", "$response.body#/result/data/agents/0/id")],
        description: "The first agent of the list.",
        request_body: None,
    },
    Link {
        from: "getAgent",
        name: "UpdateAgent",
        to: "updateAgent",
        parameters: &[("id", AGENT)],
        description: "Changes the agent.",
        request_body: None,
    },
    Link {
        from: "getAgent",
        name: "DisableAgent",
        to: "disableAgent",
        parameters: &[("id", AGENT)],
        description: "Disables the agent.",
        request_body: None,
    },
    Link {
        from: "getAgent",
        name: "ListAgentRuns",
        to: "listAgentRuns",
        parameters: &[("id", AGENT)],
        description: "The agent's runs.",
        request_body: None,
    },
    Link {
        from: "listAgentRuns",
        name: "GetFirstRun",
        to: "getAgentRun",
        parameters: &[("id", "$request.path.id"), ("run_id", FIRST_RUN)],
        description: "The first run of the page.",
        request_body: None,
    },
    Link {
        from: "listAgentRuns",
        name: "NextPage",
        to: "listAgentRuns",
        parameters: &[("id", "$request.path.id"), ("cursor", NEXT_CURSOR)],
        description: "The next page of runs (while `nextCursor` is not empty).",
        request_body: None,
    },
    Link {
        from: "connectIntegration",
        name: "GetConnectStatus",
        to: "getConnectStatus",
        parameters: &[("sessionId", "$response.body#/sessionId")],
        description: "The browser session's status (a connection through the connect page).",
        request_body: None,
    },
    Link {
        from: "connectIntegration",
        name: "ReceiveStripeWebhook",
        to: "receiveStripeWebhook",
        parameters: &[("connectionId", "$response.body#/connectionId")],
        description: "The webhook route of a Stripe connection made directly (with `config`).",
        request_body: None,
    },
    Link {
        from: "connectIntegration",
        name: "Disconnect",
        to: "disconnectIntegration",
        parameters: &[],
        request_body: Some(r#"{"provider": "$request.body#/provider"}"#),
        description: "Disconnects the provider just connected.",
    },
];

/// Adds every link to the 200 answer of its operation.
pub fn add_links(doc: &mut Value) {
    for link in LINKS {
        let Some(answer) = operation_mut(doc, link.from)
            .and_then(|op| op.pointer_mut("/responses/200"))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        let parameters: Map<String, Value> = link
            .parameters
            .iter()
            .map(|(name, expression)| (name.to_string(), json!(expression)))
            .collect();
        let links = answer
            .entry("links")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(links) = links.as_object_mut() {
            let mut entry = json!({
                "operationId": link.to,
                "description": link.description,
            });
            if !parameters.is_empty() {
                entry["parameters"] = Value::Object(parameters);
            }
            if let Some(body) = link
                .request_body
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
            {
                entry["requestBody"] = body;
            }
            links.insert(link.name.to_string(), entry);
        }
    }
}

fn operation_mut<'a>(doc: &'a mut Value, operation_id: &str) -> Option<&'a mut Value> {
    doc.get_mut("paths")?
        .as_object_mut()?
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|ops| ops.values_mut())
        .find(|op| op.get("operationId").and_then(Value::as_str) == Some(operation_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operation<'a>(doc: &'a Value, operation_id: &str) -> Option<&'a Value> {
        doc.get("paths")?
            .as_object()?
            .values()
            .filter_map(Value::as_object)
            .flat_map(|ops| ops.values())
            .find(|op| op.get("operationId").and_then(Value::as_str) == Some(operation_id))
    }

    /// The schema `pointer` reaches in `schema`, following `$ref`s, `properties`, array
    /// `items` (any index) and the members of a `oneOf`.
    fn reach<'a>(doc: &'a Value, schema: &'a Value, pointer: &[&str]) -> Option<&'a Value> {
        let schema = resolve(doc, schema)?;
        let Some((first, rest)) = pointer.split_first() else {
            return Some(schema);
        };
        if let Some(members) = schema.get("oneOf").and_then(Value::as_array) {
            return members.iter().find_map(|m| reach(doc, m, pointer));
        }
        if first.parse::<usize>().is_ok() {
            return reach(doc, schema.get("items")?, rest);
        }
        reach(doc, schema.get("properties")?.get(*first)?, rest)
    }

    fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> Option<&'a Value> {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => resolve(doc, doc.pointer(r.strip_prefix('#')?)?),
            None => Some(schema),
        }
    }

    /// Each link joins two operations of the description, names parameters its target
    /// takes, and reads values its source's answer (or request path) has: a renamed field or
    /// parameter fails here instead of leaving a link that leads nowhere.
    #[test]
    fn every_link_leads_somewhere() {
        let doc = crate::http::server::openapi_value();
        for link in LINKS {
            let from = operation(&doc, link.from)
                .unwrap_or_else(|| panic!("{}: no operation {}", link.name, link.from));
            let to = operation(&doc, link.to)
                .unwrap_or_else(|| panic!("{}: no operation {}", link.name, link.to));
            let taken: Vec<&str> = to["parameters"]
                .as_array()
                .map(|ps| ps.iter().filter_map(|p| p["name"].as_str()).collect())
                .unwrap_or_default();
            let answer = from["responses"]["200"]["content"]
                .as_object()
                .and_then(|c| c.values().next())
                .map(|media| &media["schema"])
                .unwrap_or_else(|| panic!("{}: {} has no 200 body", link.name, link.from));
            for (name, expression) in link.parameters {
                assert!(
                    taken.contains(name),
                    "{}: {} takes no parameter {name}",
                    link.name,
                    link.to
                );
                if let Some(path) = expression.strip_prefix("$response.body#/") {
                    let pointer: Vec<&str> = path.split('/').collect();
                    assert!(
                        reach(&doc, answer, &pointer).is_some(),
                        "{}: {}'s answer has no {path}",
                        link.name,
                        link.from
                    );
                } else if let Some(param) = expression.strip_prefix("$request.path.") {
                    let has = from["parameters"].as_array().is_some_and(|ps| {
                        ps.iter().any(|p| p["name"] == param && p["in"] == "path")
                    });
                    assert!(
                        has,
                        "{}: {} has no path parameter {param}",
                        link.name, link.from
                    );
                } else {
                    panic!("{}: unexpected expression {expression}", link.name);
                }
            }
            assert_eq!(
                from["responses"]["200"]["links"][link.name]["operationId"],
                link.to
            );
        }
    }
}
