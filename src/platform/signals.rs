//! Signals: event-matching definitions that automations trigger on.

use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, QuerySelect, Set,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    config_hash, unique_key, uuid_id, ActionContext, Change, Patch, PlatformError, PlatformResult,
    ResourceRef,
};
use crate::validation::{Issues, PathSegment};
use entity::signal;

/// A new signal. Only `EVENT_MATCH` signals can be created through the API.
#[derive(Debug)]
pub struct NewSignal {
    pub kind: String,
    pub name: String,
    pub definition: EventMatchDefinition,
    pub description: Patch<String>,
}

/// Definition of an `EVENT_MATCH` signal, as sent (also read from `custintel apply` files).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventMatchDefinition {
    pub grain: String,
    pub subject_resolver: String,
    pub event_names: Vec<String>,
    pub property_conditions: Vec<PropertyCondition>,
    pub condition_mode: String,
}

/// One condition on an event property.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PropertyCondition {
    pub property: String,
    pub operator: String,
    /// Compared value; omitted for `exists`.
    #[serde(default)]
    pub value: Option<Value>,
}

const GRAINS: &[&str] = &["user", "customer"];
const RESOLVERS: &[&str] = &["userId", "email", "customerId", "visitorId"];
const MODES: &[&str] = &["ALL", "ANY"];
const OPERATORS: &[&str] = &["eq", "neq", "contains", "gt", "gte", "lt", "lte", "exists"];

fn one_of(issues: &mut Issues, path: Vec<PathSegment>, value: &str, allowed: &[&str]) {
    if !allowed.contains(&value) {
        issues.push(path, format!("must be one of {}", allowed.join(", ")));
    }
}

fn validate(body: &NewSignal) -> PlatformResult<()> {
    let mut issues = Issues::default();
    if body.kind != "EVENT_MATCH" {
        issues.push(vec!["kind".into()], "must be EVENT_MATCH");
    }
    issues.length(&["name"], &body.name, 1, 120);
    if let Some(d) = body.description.as_value() {
        issues.length(&["description"], d, 0, 1000);
    }
    let d = &body.definition;
    let at = |field: &str| -> Vec<PathSegment> { vec!["definition".into(), field.into()] };
    one_of(&mut issues, at("grain"), &d.grain, GRAINS);
    one_of(
        &mut issues,
        at("subjectResolver"),
        &d.subject_resolver,
        RESOLVERS,
    );
    one_of(&mut issues, at("conditionMode"), &d.condition_mode, MODES);
    if d.event_names.is_empty() {
        issues.push(at("eventNames"), "must list at least one event name");
    }
    for (i, name) in d.event_names.iter().enumerate() {
        if name.trim().is_empty() {
            issues.push(
                vec!["definition".into(), "eventNames".into(), i.into()],
                "must not be empty",
            );
        }
    }
    for (i, c) in d.property_conditions.iter().enumerate() {
        let path = |f: &str| -> Vec<PathSegment> {
            vec![
                "definition".into(),
                "propertyConditions".into(),
                i.into(),
                f.into(),
            ]
        };
        if c.property.trim().is_empty() {
            issues.push(path("property"), "must not be empty");
        }
        one_of(&mut issues, path("operator"), &c.operator, OPERATORS);
        if c.operator == "exists" && c.value.is_some() {
            issues.push(path("value"), "must be omitted for the `exists` operator");
        }
        if c.operator != "exists" && OPERATORS.contains(&c.operator.as_str()) && c.value.is_none() {
            issues.push(path("value"), "is required for this operator");
        }
    }
    issues.into_result().map_err(Into::into)
}

pub fn definition_json(d: &EventMatchDefinition) -> Value {
    let conditions: Vec<Value> = d
        .property_conditions
        .iter()
        .map(|c| {
            let mut m = Map::new();
            m.insert("property".into(), json!(c.property));
            m.insert("operator".into(), json!(c.operator));
            if let Some(v) = &c.value {
                m.insert("value".into(), v.clone());
            }
            Value::Object(m)
        })
        .collect();
    json!({
        "grain": d.grain,
        "subjectResolver": d.subject_resolver,
        "eventNames": d.event_names,
        "propertyConditions": conditions,
        "conditionMode": d.condition_mode,
    })
}

/// Lists the organization's signals, newest first; archived ones only when asked.
pub async fn list(
    db: &DatabaseConnection,
    org: &str,
    include_archived: bool,
) -> PlatformResult<Vec<signal::Model>> {
    let mut q = signal::Entity::find().filter(signal::Column::OrganizationId.eq(org));
    if !include_archived {
        q = q.filter(signal::Column::ArchivedAt.is_null());
    }
    Ok(q.order_by_desc(signal::Column::CreatedAt)
        .order_by_asc(signal::Column::Key)
        .all(db)
        .await?)
}

pub async fn get<C: ConnectionTrait>(db: &C, org: &str, id: &str) -> PlatformResult<signal::Model> {
    let id = uuid_id(id, "signal")?;
    signal::Entity::find_by_id(id.clone())
        .filter(signal::Column::OrganizationId.eq(org))
        .one(db)
        .await?
        .ok_or_else(|| PlatformError::NotFound(format!("signal `{id}` not found")))
}

pub async fn create(
    db: &DatabaseConnection,
    ctx: &ActionContext<'_>,
    body: NewSignal,
) -> PlatformResult<Change<signal::Model>> {
    ctx.auth.require_write()?;
    validate(&body)?;
    let org = ctx.org().to_string();
    let txn = crate::db::begin_write(db).await?;
    let existing: Vec<String> = signal::Entity::find()
        .select_only()
        .column(signal::Column::Key)
        .filter(signal::Column::OrganizationId.eq(org.as_str()))
        .into_tuple()
        .all(&txn)
        .await?;
    let key = unique_key(&body.name, &existing);
    let definition = definition_json(&body.definition);
    let now = Utc::now();
    let signal = signal::ActiveModel {
        id: Set(uuid::Uuid::new_v4().to_string()),
        organization_id: Set(org.clone()),
        key: Set(key),
        managed_by: Set("UI".into()),
        name: Set(body.name),
        description: Set(body.description.value()),
        kind: Set("EVENT_MATCH".into()),
        config_hash: Set(Some(config_hash(&definition))),
        definition: Set(definition),
        schema_version: Set(super::SCHEMA_VERSION.into()),
        archived_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    let resources = vec![ResourceRef::new("signal", signal.id.clone())];
    let details = json!({ "key": signal.key });
    Change::commit(txn, ctx, signal, resources, details).await
}

/// Archives a signal; archiving an archived signal keeps its first `archivedAt`.
pub async fn archive(
    db: &DatabaseConnection,
    ctx: &ActionContext<'_>,
    id: &str,
) -> PlatformResult<Change<signal::Model>> {
    ctx.auth.require_write()?;
    let txn = crate::db::begin_write(db).await?;
    let current = get(&txn, ctx.org(), id).await?;
    if current.managed_by == "CODE" {
        let message = format!(
            "signal `{}` is managed by code (custintel apply); change its file instead",
            current.key
        );
        return Err(PlatformError::Conflict {
            unmet: vec![message.clone()],
            message,
        });
    }
    let signal = if current.archived_at.is_some() {
        current
    } else {
        let now = Utc::now();
        let mut model = current.into_active_model();
        model.archived_at = Set(Some(now));
        model.updated_at = Set(now);
        model.update(&txn).await?
    };
    let resources = vec![ResourceRef::new("signal", signal.id.clone())];
    Change::commit(txn, ctx, signal, resources, json!({})).await
}
