//! The actions an agent may take when its `actionKeys` name them: `notify_destination`,
//! `tag_customer`, `create_fact`. Each runs under the run's organization only.

use chrono::Utc;
use schemars::JsonSchema;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter, Set};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::tools::{self, registry, send_notification, ToolContext, ToolError};
use entity::{
    customer,
    fact::{self, FactStatus},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    NotifyDestination,
    TagCustomer,
    CreateFact,
}

/// The source type of facts an agent creates; their `sourceId` is the run's id.
pub const AGENT_RUN_SOURCE: &str = "AGENT_RUN";

impl Action {
    pub fn from_key(key: &str) -> Option<Self> {
        match key {
            "notify_destination" => Some(Action::NotifyDestination),
            "tag_customer" => Some(Action::TagCustomer),
            "create_fact" => Some(Action::CreateFact),
            _ => None,
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Action::NotifyDestination => "notify_destination",
            Action::TagCustomer => "tag_customer",
            Action::CreateFact => "create_fact",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Action::NotifyDestination => {
                "Send a notification (title and message) to the destinations of the automation \
                 this run is for, or to the organization's default destination."
            }
            Action::TagCustomer => {
                "Add a tag to a customer (its `traits.tags` list). `customer` is the customer's \
                 id, domain or externalId."
            }
            Action::CreateFact => {
                "Record a fact about a customer, with this run as its provenance. Use it for \
                 conclusions worth keeping, quoting the evidence in `sourceQuote`."
            }
        }
    }

    pub fn input_schema(self) -> Value {
        match self {
            Action::NotifyDestination => registry::input_schema::<NotifyInput>(),
            Action::TagCustomer => registry::input_schema::<TagInput>(),
            Action::CreateFact => registry::input_schema::<FactInput>(),
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NotifyInput {
    /// Headline, 1 to 200 characters.
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
    /// Plain-text body, 1 to 10000 characters.
    #[schemars(length(min = 1, max = 10000))]
    pub message: String,
    /// `info` (default), `warning` or `critical`.
    pub severity: Option<send_notification::Severity>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TagInput {
    /// The customer's id, domain or externalId.
    #[schemars(length(min = 1))]
    pub customer: String,
    /// The tag, 1 to 64 characters.
    #[schemars(length(min = 1, max = 64))]
    pub tag: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FactInput {
    /// The customer's id, domain or externalId.
    #[schemars(length(min = 1))]
    pub customer: String,
    /// The fact, 1 to 2000 characters.
    #[schemars(length(min = 1, max = 2000))]
    pub text: String,
    /// The evidence the fact rests on (defaults to the fact's text).
    #[schemars(length(max = 2000))]
    pub source_quote: Option<String>,
}

/// Where an action runs.
pub struct ActionScope<'a> {
    pub ctx: &'a ToolContext,
    pub run_id: &'a str,
    pub agent_id: &'a str,
    pub agent_name: &'a str,
    /// The automation's destinations; empty means the organization's default.
    pub destination_ids: &'a [String],
}

fn parse<T: serde::de::DeserializeOwned>(schema: Value, input: Value) -> Result<T, ToolError> {
    let validator = jsonschema::validator_for(&schema)
        .map_err(|e| ToolError::Internal(format!("action schema: {e}")))?;
    let problems: Vec<String> = validator
        .iter_errors(&input)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    if !problems.is_empty() {
        return Err(ToolError::Refused(format!(
            "invalid input: {}",
            problems.join("; ")
        )));
    }
    registry::parse_input(input)
}

/// Runs `action` with the model's `input`; the result goes back to the model.
pub async fn run(
    action: Action,
    scope: &ActionScope<'_>,
    input: Value,
) -> Result<Value, ToolError> {
    match action {
        Action::NotifyDestination => {
            let input: NotifyInput = parse(action.input_schema(), input)?;
            let destinations =
                (!scope.destination_ids.is_empty()).then(|| scope.destination_ids.to_vec());
            send_notification::run(
                scope.ctx,
                send_notification::Input {
                    title: input.title,
                    message: Some(input.message),
                    severity: input.severity,
                    source: Some(scope.agent_name.to_string()),
                    subject: None,
                    payload: None,
                    markdown: None,
                    destinations,
                },
            )
            .await
        }
        Action::TagCustomer => {
            let input: TagInput = parse(action.input_schema(), input)?;
            tag_customer(scope.ctx, &input.customer, input.tag.trim()).await
        }
        Action::CreateFact => {
            let input: FactInput = parse(action.input_schema(), input)?;
            create_fact(scope, input).await
        }
    }
}

async fn tag_customer(ctx: &ToolContext, customer: &str, tag: &str) -> Result<Value, ToolError> {
    if tag.is_empty() {
        return Err(ToolError::Refused("the tag is empty".into()));
    }
    let found = tools::common::resolve_customer(ctx, customer).await?;
    let txn = crate::db::begin_write(&ctx.state.db).await?;
    // Read again under the write lock so concurrent taggers never lose each other's tags.
    let current = customer::Entity::find_by_id(found.id.clone())
        .filter(customer::Column::OrganizationId.eq(ctx.organization_id.as_str()))
        .lock_exclusive_if_postgres(&txn)
        .one(&txn)
        .await?
        .ok_or_else(|| ToolError::NotFound(format!("customer `{customer}` not found")))?;
    let mut traits = match current.traits.clone() {
        Value::Object(map) => map,
        _ => Default::default(),
    };
    let mut tags: Vec<Value> = traits
        .get("tags")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let added = !tags.iter().any(|t| t.as_str() == Some(tag));
    if added {
        tags.push(Value::String(tag.to_string()));
        traits.insert("tags".into(), Value::Array(tags.clone()));
        let mut model = current.clone().into_active_model();
        model.traits = Set(Value::Object(traits));
        model.updated_at = Set(Utc::now());
        model.update(&txn).await?;
    }
    txn.commit().await?;
    Ok(json!({ "customerId": current.id, "tags": tags, "added": added }))
}

async fn create_fact(scope: &ActionScope<'_>, input: FactInput) -> Result<Value, ToolError> {
    let ctx = scope.ctx;
    let found = tools::common::resolve_customer(ctx, &input.customer).await?;
    let now = Utc::now();
    let id = uuid::Uuid::new_v4().to_string();
    let txn = crate::db::begin_write(&ctx.state.db).await?;
    let seq = crate::search::record_change(&txn, &ctx.organization_id, "fact", &id, now).await?;
    let text = input.text.trim().to_string();
    let row = fact::ActiveModel {
        id: Set(id.clone()),
        organization_id: Set(ctx.organization_id.clone()),
        customer_id: Set(found.id.clone()),
        text: Set(text.clone()),
        status: Set(FactStatus::Active),
        source_type: Set(AGENT_RUN_SOURCE.into()),
        source_id: Set(scope.run_id.to_string()),
        source_occurred_at: Set(now),
        source_quote: Set(input.source_quote.unwrap_or_else(|| text.clone())),
        permalink: Set(Some(format!(
            "{}/api/agents/{}/runs/{}",
            ctx.state.public_url, scope.agent_id, scope.run_id
        ))),
        change_seq: Set(seq),
        created_at: Set(now),
        updated_at: Set(now),
    };
    fact::Entity::insert(row)
        .exec_without_returning(&txn)
        .await?;
    txn.commit().await?;
    Ok(json!({ "factId": id, "customerId": found.id, "text": text }))
}

/// `SELECT ... FOR UPDATE` on PostgreSQL; SQLite's write lock already serializes writers.
trait LockIfPostgres: Sized {
    fn lock_exclusive_if_postgres<C: sea_orm::ConnectionTrait>(self, db: &C) -> Self;
}

impl<E: EntityTrait> LockIfPostgres for sea_orm::Select<E> {
    fn lock_exclusive_if_postgres<C: sea_orm::ConnectionTrait>(self, db: &C) -> Self {
        use sea_orm::QuerySelect;
        if db.get_database_backend() == sea_orm::DbBackend::Postgres {
            self.lock_exclusive()
        } else {
            self
        }
    }
}
