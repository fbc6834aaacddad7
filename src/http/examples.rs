//! Request body examples in the description: one per shape a body may take (each trigger type,
//! each destination type), shown by Swagger UI and used by contract tests, which send each one
//! and expect it to succeed.

use serde_json::{json, Value};

/// `(operationId, example name, summary, body)`.
fn examples() -> Vec<(&'static str, &'static str, &'static str, Value)> {
    vec![
        (
            "createSignal",
            "eventMatch",
            "Users who visit the pricing page",
            json!({
                "kind": "EVENT_MATCH",
                "name": "Pricing page visit",
                "description": "Someone looked at pricing.",
                "definition": {
                    "grain": "user",
                    "subjectResolver": "email",
                    "eventNames": ["$pageview"],
                    "propertyConditions": [
                        {"property": "path", "operator": "contains", "value": "/pricing"}
                    ],
                    "conditionMode": "ALL"
                }
            }),
        ),
        (
            "createAutomation",
            "signalOccurrence",
            "A run each time a linked signal occurs, at most once a day per subject",
            json!({
                "name": "Hot lead",
                "triggerType": "SIGNAL_OCCURRENCE",
                "triggerJson": {"window": "7d", "dedupe": "day"},
                "audienceFilterJson": {"billingStatus": ["TRIALING"], "minMrrCents": 0},
                "matchMode": "ANY"
            }),
        ),
        (
            "createAutomation",
            "schedule",
            "A digest every Monday at 09:00 in Berlin",
            json!({
                "name": "Weekly digest",
                "triggerType": "SCHEDULE",
                "triggerJson": {"cron": "0 9 * * 1", "timezone": "Europe/Berlin"},
                "matchMode": "ANY"
            }),
        ),
        (
            "createDestination",
            "webhookEndpoint",
            "A signed webhook endpoint",
            json!({
                "type": "WEBHOOK_ENDPOINT",
                "name": "CRM webhook",
                "url": "https://crm.example.com/hooks/custintel"
            }),
        ),
        (
            "createDestination",
            "slackChannel",
            "A Slack channel's incoming webhook",
            json!({
                "type": "SLACK_CHANNEL",
                "name": "#sales",
                "webhookUrl": "https://hooks.slack.com/services/T000/B000/XXXX"
            }),
        ),
        (
            "updateDestination",
            "moveEndpoint",
            "A new name and URL",
            json!({
                "type": "WEBHOOK_ENDPOINT",
                "name": "CRM webhook (EU)",
                "url": "https://eu.crm.example.com/hooks/custintel"
            }),
        ),
        (
            "testAutomation",
            "bySubject",
            "The run a customer would make now",
            json!({"subject": {"grain": "customer", "key": "acme.com"}}),
        ),
        (
            "testAutomation",
            "byEvent",
            "The run an event of the `events` view makes (or made)",
            json!({"eventId": "0193a5c4-6d2e-7c1a-9f4b-2b7d1e0c8a11"}),
        ),
    ]
}

/// Adds the examples to the JSON request bodies of their operations.
pub fn add_request_examples(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for item in paths.values_mut().filter_map(Value::as_object_mut) {
        for op in item.values_mut() {
            let Some(id) = op
                .get("operationId")
                .and_then(Value::as_str)
                .map(str::to_string)
            else {
                continue;
            };
            let Some(media) = op.pointer_mut("/requestBody/content/application~1json") else {
                continue;
            };
            for (_, name, summary, value) in examples().into_iter().filter(|e| e.0 == id) {
                media["examples"][name] = json!({"summary": summary, "value": value});
            }
        }
    }
}
