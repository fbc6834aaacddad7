//! Follow-up steps after connect: the Stripe `webhooks` step and the CRM `mappings` step.

use crate::validation::Contract;
use chrono::Utc;
use sea_orm::{ActiveModelTrait, ConnectionTrait, IntoActiveModel, Set};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{connections, providers::Provider, IntegrationError, IntegrationResult};
use crate::crypto::SecretBox;
use entity::integration_connection as conn;

/// The Stripe events the webhook route handles.
pub const STRIPE_EVENTS: &[&str] = &[
    "customer.created",
    "customer.updated",
    "customer.subscription.created",
    "customer.subscription.updated",
    "customer.subscription.deleted",
];

/// Key of the sealed webhook secret in a connection's settings.
pub const WEBHOOK_SECRET_SETTING: &str = "webhookSecretCiphertext";
const MAPPINGS_SETTING: &str = "mappings";

pub const CONFIG_REQUIRED: &str = "config_required";
pub const CONFIGURED: &str = "configured";

/// A header the provider sends with each webhook.
#[derive(Debug, Clone)]
pub struct HeaderInfo {
    pub name: String,
    pub description: String,
}

/// How this service reads opportunities in a mapped stage.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StageStatus {
    Open,
    Won,
    Lost,
}

impl StageStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Open => "open",
            StageStatus::Won => "won",
            StageStatus::Lost => "lost",
        }
    }
}

/// A CRM stage mapped to how this service reads opportunities in it.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StageMapping {
    #[schemars(regex(pattern = r"\S"))]
    pub pipeline_id: String,
    #[schemars(regex(pattern = r"\S"))]
    pub stage_id: String,
    pub status: StageStatus,
}

/// `config` of the `mappings` step: how each CRM stage is read.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MappingsConfig {
    pub mappings: Vec<StageMapping>,
}

/// `config` of Stripe's `webhooks` step: the endpoint's signing secret.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhooksConfig {
    /// The endpoint's signing secret from the Stripe dashboard, `whsec_...`.
    #[schemars(regex(pattern = r"^\s*whsec_\S"))]
    pub webhook_secret: String,
}

pub static MAPPINGS_CONFIG: std::sync::LazyLock<Contract> =
    std::sync::LazyLock::new(Contract::of::<MappingsConfig>);
pub static WEBHOOKS_CONFIG: std::sync::LazyLock<Contract> =
    std::sync::LazyLock::new(Contract::of::<WebhooksConfig>);

/// The `config` contract of each step, by step id and the component name the description
/// gives it.
pub fn step_contracts() -> Vec<(&'static str, &'static str, &'static Contract)> {
    vec![
        ("mappings", "MappingsConfig", &*MAPPINGS_CONFIG),
        ("webhooks", "WebhooksConfig", &*WEBHOOKS_CONFIG),
    ]
}

/// What a step answers.
#[derive(Debug, Clone, Default)]
pub struct SetupOutcome {
    pub provider: String,
    pub step: String,
    pub status: String,
    pub message: String,
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub headers: Option<Vec<HeaderInfo>>,
    pub secret_configured: Option<bool>,
    pub pipelines: Option<Vec<String>>,
    pub mappings: Option<Vec<StageMapping>>,
}

/// Runs `step` for the organization's connection to `provider`.
pub async fn run<C: ConnectionTrait>(
    db: &C,
    secrets: &SecretBox,
    public_url: &str,
    org: &str,
    provider: &'static Provider,
    step: &str,
    config: Option<Map<String, Value>>,
) -> IntegrationResult<SetupOutcome> {
    let step = step.trim();
    let Some(known) = provider.step(step) else {
        let steps: Vec<&str> = provider.steps.iter().map(|s| s.id).collect();
        let choices = if steps.is_empty() {
            "it has no setup steps".to_string()
        } else {
            format!("its steps: {}", steps.join(", "))
        };
        return Err(IntegrationError::invalid_field(
            "step",
            format!("{} has no `{step}` step; {choices}", provider.id),
        ));
    };
    if !known.supported {
        return Err(IntegrationError::invalid_field(
            "step",
            format!(
                "the `{step}` step of {} is not supported by this service yet",
                provider.id
            ),
        ));
    }
    let row = connections::find(db, org, provider.id)
        .await?
        .ok_or_else(|| {
            IntegrationError::NotConnected(format!("{} is not connected", provider.id))
        })?;
    match step {
        "webhooks" => webhooks(db, secrets, public_url, provider, row, config).await,
        "mappings" => mappings(db, provider, row, config).await,
        other => Err(IntegrationError::Internal(format!(
            "step `{other}` has no handler"
        ))),
    }
}

fn config_issue(issues: Vec<crate::validation::ValidationIssue>) -> IntegrationError {
    let issues: Vec<_> = issues
        .into_iter()
        .map(|mut i| {
            i.path.insert(0, "config".into());
            i
        })
        .collect();
    let message = issues
        .first()
        .map(|i| format!("invalid config: {}", i.message))
        .unwrap_or_else(|| "invalid config".to_string());
    IntegrationError::BadRequest { message, issues }
}

async fn save_setting<C: ConnectionTrait>(
    db: &C,
    row: conn::Model,
    key: &str,
    value: Value,
) -> IntegrationResult<()> {
    let mut settings = row.settings.clone();
    if !settings.is_object() {
        settings = Value::Object(Map::new());
    }
    if let Some(map) = settings.as_object_mut() {
        map.insert(key.to_string(), value);
    }
    let mut active = row.into_active_model();
    active.settings = Set(settings);
    active.updated_at = Set(Utc::now());
    active.update(db).await?;
    Ok(())
}

async fn webhooks<C: ConnectionTrait>(
    db: &C,
    secrets: &SecretBox,
    public_url: &str,
    provider: &Provider,
    row: conn::Model,
    config: Option<Map<String, Value>>,
) -> IntegrationResult<SetupOutcome> {
    let url = format!(
        "{}/api/webhooks/stripe/{}",
        public_url.trim_end_matches('/'),
        row.id
    );
    let mut outcome = SetupOutcome {
        provider: provider.id.to_string(),
        step: "webhooks".to_string(),
        url: Some(url),
        events: Some(STRIPE_EVENTS.iter().map(|e| e.to_string()).collect()),
        headers: Some(vec![HeaderInfo {
            name: "Stripe-Signature".to_string(),
            description: "Stripe sets it on every delivery, signed with the endpoint's signing \
                          secret (whsec_...); this service verifies it and refuses unsigned or \
                          stale deliveries (5 minute tolerance)"
                .to_string(),
        }]),
        ..Default::default()
    };
    let already = row
        .settings
        .get(WEBHOOK_SECRET_SETTING)
        .is_some_and(|v| v.is_string());
    match config {
        None => {
            outcome.status = CONFIG_REQUIRED.to_string();
            outcome.secret_configured = Some(already);
            outcome.message = "In the Stripe dashboard add a webhook endpoint with this URL and \
                               these events, then send its signing secret with config \
                               {\"webhookSecret\": \"whsec_...\"}"
                .to_string();
        }
        Some(map) => {
            let parsed: WebhooksConfig = WEBHOOKS_CONFIG
                .parse(&Value::Object(map))
                .map_err(config_issue)?;
            let secret = parsed.webhook_secret.trim().to_string();
            save_setting(
                db,
                row,
                WEBHOOK_SECRET_SETTING,
                Value::String(secrets.encrypt(&secret)),
            )
            .await?;
            outcome.status = CONFIGURED.to_string();
            outcome.secret_configured = Some(true);
            outcome.message =
                "Signing secret stored; signed deliveries to the URL now update customers"
                    .to_string();
        }
    }
    Ok(outcome)
}

fn stored_mappings(row: &conn::Model) -> Vec<StageMapping> {
    row.settings
        .get(MAPPINGS_SETTING)
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

async fn mappings<C: ConnectionTrait>(
    db: &C,
    provider: &Provider,
    row: conn::Model,
    config: Option<Map<String, Value>>,
) -> IntegrationResult<SetupOutcome> {
    let mut outcome = SetupOutcome {
        provider: provider.id.to_string(),
        step: "mappings".to_string(),
        ..Default::default()
    };
    match config {
        None => {
            outcome.status = CONFIG_REQUIRED.to_string();
            // No CRM sync exists yet, so no pipeline has been read from the CRM: the list holds
            // the pipelines named by stored mappings only, and the message says so.
            let current = stored_mappings(&row);
            let mut pipelines: Vec<String> =
                current.iter().map(|m| m.pipeline_id.clone()).collect();
            pipelines.sort();
            pipelines.dedup();
            outcome.pipelines = Some(pipelines);
            outcome.mappings = Some(current);
            outcome.message = format!(
                "This service does not read pipelines from {} yet (no CRM sync in this version); \
                 send config {{\"mappings\": [{{\"pipelineId\", \"stageId\", \"status\": \"open\" | \
                 \"won\" | \"lost\"}}]}} to store how its stages are read",
                provider.name
            );
        }
        Some(map) => {
            let parsed: MappingsConfig = MAPPINGS_CONFIG
                .parse(&Value::Object(map))
                .map_err(config_issue)?;
            let value = serde_json::to_value(&parsed.mappings)
                .map_err(|e| IntegrationError::Internal(e.to_string()))?;
            save_setting(db, row, MAPPINGS_SETTING, value).await?;
            let mut pipelines: Vec<String> = parsed
                .mappings
                .iter()
                .map(|m| m.pipeline_id.clone())
                .collect();
            pipelines.sort();
            pipelines.dedup();
            outcome.status = CONFIGURED.to_string();
            outcome.pipelines = Some(pipelines);
            outcome.mappings = Some(parsed.mappings);
            outcome.message = "Mappings stored".to_string();
        }
    }
    Ok(outcome)
}
