//! The demo's platform configuration: agents, signals, destinations and automations.

use super::*;
use crate::{
    engine::{
        automations::{link, AutomationContent},
        signals::SignalContent,
    },
    notify::destinations::DestinationContent,
};
use entity::destination::DestinationKind;

pub(super) async fn seed_agents(
    txn: &DatabaseTransaction,
    org_id: &str,
    now: DateTime<Utc>,
) -> Result<HashMap<&'static str, String>> {
    struct AgentSpec {
        key: &'static str,
        name: &'static str,
        instructions: &'static str,
        actions: &'static [&'static str],
        cron: &'static str,
        enabled: bool,
        next_run: Option<Duration>,
        last_run: Option<Duration>,
        last_success: Option<Duration>,
    }
    let specs = [
        AgentSpec {
            key: "churn-watch",
            name: "Churn Watch",
            instructions: "You watch for churn risk. When an automation hands you an account \
                           (its subject, signals and recent events), look it up with \
                           svc_get_customer (users, revenue, facts) and its recent timeline, \
                           then write the alert for the CS channel: what happened, why it \
                           matters for this account (MRR, billing status, open issues), and one \
                           next step, citing the facts you relied on. Tag the account \
                           `churn-risk` when the evidence is clear. On your morning schedule, \
                           review paying customers whose activity dropped or who raised an \
                           escalation in the last 14 days and summarize each risk in two \
                           sentences. Never contact customers directly.",
            actions: &["notify_destination", "tag_customer"],
            cron: "0 8 * * *",
            enabled: true,
            next_run: Some(hours(14)),
            last_run: Some(hours(10)),
            last_success: Some(hours(10)),
        },
        // Its last run failed, so the last successful run is a week older.
        AgentSpec {
            key: "expansion-scout",
            name: "Expansion Scout",
            instructions: "Once a week, find accounts that hit their seat limit, viewed pricing \
                           or mentioned new teams or headcount. For each, state the expansion \
                           opportunity and its evidence, and open a CRM task for the account \
                           owner.",
            actions: &["notify_destination", "create_crm_task"],
            cron: "0 9 * * 1",
            enabled: true,
            next_run: Some(days(3)),
            last_run: Some(days(4)),
            last_success: Some(days(11)),
        },
        AgentSpec {
            key: "weekly-digest",
            name: "Weekly Digest",
            instructions: "Write a short Friday digest for leadership: new customers, churn, \
                           notable facts from calls and tickets, and the accounts that need \
                           attention next week.",
            actions: &["notify_destination"],
            cron: "0 7 * * 5",
            enabled: false,
            next_run: None,
            last_run: None,
            last_success: None,
        },
    ];
    let mut ids = HashMap::new();
    for (i, spec) in specs.into_iter().enumerate() {
        let id = new_id();
        let created_at = now - days(100 - 5 * i as i64);
        let last_run_at = spec.last_run.map(|d| now - d);
        agent::ActiveModel {
            id: Set(id.clone()),
            organization_id: Set(org_id.to_string()),
            agent_key: Set(spec.key.to_string()),
            display_name: Set(spec.name.to_string()),
            template_version: Set("2026.10".to_string()),
            instructions: Set(spec.instructions.to_string()),
            action_keys: Set(json!(spec.actions)),
            schedule_enabled: Set(spec.enabled),
            schedule_cron: Set(Some(spec.cron.to_string())),
            schedule_timezone: Set("UTC".to_string()),
            next_run_at: Set(spec.next_run.map(|d| now + d)),
            last_run_at: Set(last_run_at),
            last_successful_run_at: Set(spec.last_success.map(|d| now - d)),
            created_at: Set(created_at),
            updated_at: Set(last_run_at.unwrap_or(created_at)),
        }
        .insert(txn)
        .await?;
        ids.insert(spec.key, id);
    }
    Ok(ids)
}

pub(super) async fn seed_signals(
    txn: &DatabaseTransaction,
    org_id: &str,
    now: DateTime<Utc>,
) -> Result<HashMap<&'static str, String>> {
    // (key, name, description, managed by, definition, archived days ago)
    let specs: [(&str, &str, &str, &'static str, Value, Option<i64>); 4] = [
        (
            "seat-limit-reached",
            "Seat limit reached",
            "A Pro account tried to add a user beyond its seat limit.",
            "CODE",
            json!({
                "grain": "customer",
                "subjectResolver": "customerId",
                "eventNames": ["seat_limit_reached"],
                "propertyConditions": [{ "property": "plan", "operator": "eq", "value": "pro" }],
                "conditionMode": "ALL",
            }),
            None,
        ),
        (
            "export-failures",
            "Export failures",
            "A user hit an error while exporting a report.",
            "UI",
            json!({
                "grain": "user",
                "subjectResolver": "email",
                "eventNames": ["export_failed", "report_export_failed"],
                "propertyConditions": [{ "property": "errorCode", "operator": "exists" }],
                "conditionMode": "ANY",
            }),
            None,
        ),
        (
            "pricing-interest",
            "Pricing interest",
            "A user of a larger account looked at pricing or compared plans.",
            "UI",
            json!({
                "grain": "user",
                "subjectResolver": "userId",
                "eventNames": ["pricing_viewed", "plan_compared"],
                "propertyConditions": [
                    { "property": "seats", "operator": "gte", "value": 25 },
                    { "property": "path", "operator": "contains", "value": "/billing" },
                ],
                "conditionMode": "ANY",
            }),
            None,
        ),
        (
            "legacy-trial-expiring",
            "Legacy trial expiring",
            "Replaced by billing-status audiences; kept for its history.",
            "UI",
            json!({
                "grain": "user",
                "subjectResolver": "visitorId",
                "eventNames": ["trial_expiring"],
                "propertyConditions": [
                    { "property": "plan", "operator": "neq", "value": "enterprise" },
                ],
                "conditionMode": "ALL",
            }),
            Some(30),
        ),
    ];
    let mut ids = HashMap::new();
    for (i, (key, name, description, managed_by, definition, archived)) in
        specs.into_iter().enumerate()
    {
        let created_at = now - days(90 - 3 * i as i64);
        let archived_at = archived.map(|d| now - days(d));
        let mut row = SignalContent {
            kind: entity::signal::SignalKind::EventMatch,
            name: name.to_string(),
            description: Some(description.to_string()),
            definition,
        }
        .new_row(org_id, key, managed_by, created_at);
        row.archived_at = Set(archived_at);
        row.updated_at = Set(archived_at.unwrap_or(created_at));
        ids.insert(key, row.insert(txn).await?.id);
    }
    Ok(ids)
}

pub(super) async fn seed_destinations(
    txn: &DatabaseTransaction,
    secrets: &SecretBox,
    org_id: &str,
    now: DateTime<Utc>,
) -> Result<HashMap<&'static str, String>> {
    let slack_url = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX";
    // (key, name, description, kind, endpoint, enabled, default, updated days ago)
    let specs = [
        (
            "slack-cs-alerts",
            "#cs-alerts",
            "Churn and expansion alerts for the customer success team.",
            DestinationKind::SlackChannel,
            slack_url,
            true,
            true,
            80,
        ),
        (
            "crm-webhook",
            "CRM sync webhook",
            "Pushes automation results to the CRM bridge running next to the demo.",
            DestinationKind::WebhookEndpoint,
            "http://localhost:9000/hooks/custintel",
            true,
            false,
            75,
        ),
        // Disabled after repeated delivery failures; the expansion digest still points here.
        (
            "staging-webhook",
            "Staging webhook",
            "Staging receiver, disabled until the endpoint is redeployed.",
            DestinationKind::WebhookEndpoint,
            "https://hooks.example.com/custintel",
            false,
            false,
            18,
        ),
    ];
    let mut ids = HashMap::new();
    for (i, (key, name, description, kind, endpoint, enabled, is_default, updated)) in
        specs.into_iter().enumerate()
    {
        let created_at = now - days(85 - 5 * i as i64);
        let (mut row, _signing_secret) = DestinationContent {
            kind,
            name: name.to_string(),
            description: Some(description.to_string()),
            enabled: Some(enabled),
            is_default,
            endpoint: endpoint.to_string(),
        }
        .new_row(secrets, org_id, key, "UI", created_at);
        row.updated_at = Set(now - days(updated));
        ids.insert(key, row.insert(txn).await?.id);
    }
    Ok(ids)
}

/// Looks up an id seeded earlier in this run by its key.
pub(super) fn id_of(ids: &HashMap<&'static str, String>, key: &str) -> Result<String> {
    ids.get(key)
        .cloned()
        .ok_or_else(|| anyhow!("demo data has no `{key}`"))
}

pub(super) async fn seed_automations(
    txn: &DatabaseTransaction,
    org_id: &str,
    agents: &HashMap<&'static str, String>,
    signals: &HashMap<&'static str, String>,
    destinations: &HashMap<&'static str, String>,
    now: DateTime<Utc>,
) -> Result<()> {
    struct AutomationSpec {
        key: &'static str,
        name: &'static str,
        description: &'static str,
        trigger_type: &'static str,
        trigger: Value,
        audience: Value,
        match_mode: &'static str,
        agent: Option<&'static str>,
        signals: &'static [&'static str],
        destinations: &'static [&'static str],
        archived_days_ago: Option<i64>,
        last_run: Option<(AutomationRunStatus, i64)>,
    }
    let specs = [
        // Ready to go: an active signal and the enabled CRM webhook.
        AutomationSpec {
            key: "churn-risk-alert",
            name: "Churn risk alert",
            description: "Alert the CS channel when a paying account keeps failing to export.",
            trigger_type: "SIGNAL_OCCURRENCE",
            trigger: json!({ "dedupe": "day" }),
            audience: json!({ "billingStatus": ["PAYING"], "minMrrCents": 49_900 }),
            match_mode: "ANY",
            agent: Some("churn-watch"),
            signals: &["export-failures"],
            destinations: &["crm-webhook"],
            archived_days_ago: None,
            last_run: None,
        },
        AutomationSpec {
            key: "legacy-trial-nudge",
            name: "Legacy trial nudge",
            description: "Nudged expiring trials; replaced by the onboarding playbook.",
            trigger_type: "SIGNAL_OCCURRENCE",
            trigger: json!({ "dedupe": "week" }),
            audience: json!({ "billingStatus": ["TRIALING"] }),
            match_mode: "ANY",
            agent: None,
            signals: &["legacy-trial-expiring"],
            destinations: &["crm-webhook"],
            archived_days_ago: Some(30),
            last_run: Some((AutomationRunStatus::Delivered, 35)),
        },
        // Its only destination is disabled, so it cannot be enabled until one is added.
        AutomationSpec {
            key: "expansion-digest",
            name: "Expansion digest",
            description: "Monday digest of accounts showing expansion intent.",
            trigger_type: "SCHEDULE",
            trigger: json!({ "cron": "0 9 * * 1", "timezone": "UTC" }),
            audience: json!({ "billingStatus": ["PAYING"], "traits": { "plan": ["growth", "pro"] } }),
            match_mode: "ALL",
            agent: Some("expansion-scout"),
            signals: &["seat-limit-reached", "pricing-interest"],
            destinations: &["staging-webhook"],
            archived_days_ago: None,
            last_run: Some((AutomationRunStatus::Failed, 18)),
        },
    ];
    for (i, spec) in specs.into_iter().enumerate() {
        let agent_id = spec.agent.map(|key| id_of(agents, key)).transpose()?;
        let created_at = now - days(60 - 4 * i as i64);
        let archived_at = spec.archived_days_ago.map(|d| now - days(d));
        let last_run_at = spec.last_run.map(|(_, d)| now - days(d));
        let mut row = AutomationContent {
            name: spec.name.to_string(),
            description: Some(spec.description.to_string()),
            trigger_type: spec.trigger_type.to_string(),
            trigger_json: spec.trigger,
            audience_filter_json: spec.audience,
            agent_id,
            match_mode: spec.match_mode.to_string(),
        }
        .new_row(org_id, spec.key, "UI", created_at);
        row.archived_at = Set(archived_at);
        row.last_run_at = Set(last_run_at);
        row.last_run_status = Set(spec.last_run.map(|(status, _)| status));
        row.updated_at = Set(archived_at.or(last_run_at).unwrap_or(created_at));
        let id = row.insert(txn).await?.id;

        let ids_of = |keys: &[&str], seeded| -> Result<Vec<String>> {
            keys.iter().map(|key| id_of(seeded, key)).collect()
        };
        let signal_ids = ids_of(spec.signals, signals)?;
        let destination_ids = ids_of(spec.destinations, destinations)?;
        link(txn, &id, &signal_ids, &destination_ids)
            .await
            .map_err(|e| anyhow!("linking automation `{}`: {e}", spec.key))?;
    }
    Ok(())
}
