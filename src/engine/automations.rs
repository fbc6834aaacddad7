//! Automations: a trigger (signal occurrence or schedule), an audience, an optional agent, and
//! the destinations results go to.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, QuerySelect, Set,
};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::platform::{
    config_hash, taken_keys, unique_key, uuid_id, ActionContext, Change, Patch, PlatformError,
    PlatformResult, ResourceRef,
};
use crate::validation::{Issues, PathSegment};
use entity::{automation, automation_destination, automation_signal, destination, signal};

/// What starts an automation run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TriggerType {
    SignalOccurrence,
    Schedule,
}

impl TriggerType {
    /// The stored (and wire) form.
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerType::SignalOccurrence => "SIGNAL_OCCURRENCE",
            TriggerType::Schedule => "SCHEDULE",
        }
    }
}

/// How the automation's signals combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MatchMode {
    Any,
    All,
    AtLeast,
}

impl MatchMode {
    /// The stored (and wire) form.
    pub fn as_str(self) -> &'static str {
        match self {
            MatchMode::Any => "ANY",
            MatchMode::All => "ALL",
            MatchMode::AtLeast => "AT_LEAST",
        }
    }
}

/// A new automation. It is created disabled; enable it once its requirements are met.
#[derive(Debug)]
pub struct NewAutomation {
    pub name: String,
    pub description: Patch<String>,
    /// Unique in the organization; defaults to a slug of the name.
    pub key: Option<String>,
    pub trigger_type: TriggerType,
    pub trigger_json: BTreeMap<String, Value>,
    /// Defaults to `{}`, everyone.
    pub audience_filter_json: Option<BTreeMap<String, Value>>,
    pub agent_id: Patch<String>,
    pub match_mode: MatchMode,
    pub signal_ids: Vec<String>,
    pub destination_ids: Vec<String>,
}

/// An automation with the signals and destinations it is linked to.
pub struct AutomationView {
    pub automation: automation::Model,
    pub signals: Vec<signal::Model>,
    pub destinations: Vec<destination::Model>,
}

impl AutomationView {
    pub fn active_signals(&self) -> usize {
        self.signals
            .iter()
            .filter(|s| s.archived_at.is_none())
            .count()
    }

    pub fn active_destinations(&self) -> usize {
        self.destinations
            .iter()
            .filter(|d| d.enabled && d.archived_at.is_none())
            .count()
    }
}

/// Automations of any organization by id, with their links (the engine's processor).
pub async fn views_by_ids<C: ConnectionTrait>(
    conn: &C,
    ids: Vec<String>,
) -> PlatformResult<Vec<AutomationView>> {
    let rows = automation::Entity::find()
        .filter(automation::Column::Id.is_in(ids))
        .all(conn)
        .await?;
    views(conn, rows).await
}

/// Loads the links of several automations in two queries per kind.
async fn views<C: ConnectionTrait>(
    conn: &C,
    automations: Vec<automation::Model>,
) -> PlatformResult<Vec<AutomationView>> {
    let ids: Vec<String> = automations.iter().map(|a| a.id.clone()).collect();
    let sig_links = automation_signal::Entity::find()
        .filter(automation_signal::Column::AutomationId.is_in(ids.clone()))
        .all(conn)
        .await?;
    let dest_links = automation_destination::Entity::find()
        .filter(automation_destination::Column::AutomationId.is_in(ids))
        .all(conn)
        .await?;
    let signals: HashMap<String, signal::Model> = signal::Entity::find()
        .filter(signal::Column::Id.is_in(sig_links.iter().map(|l| l.signal_id.clone())))
        .all(conn)
        .await?
        .into_iter()
        .map(|s| (s.id.clone(), s))
        .collect();
    let destinations: HashMap<String, destination::Model> = destination::Entity::find()
        .filter(destination::Column::Id.is_in(dest_links.iter().map(|l| l.destination_id.clone())))
        .all(conn)
        .await?
        .into_iter()
        .map(|d| (d.id.clone(), d))
        .collect();
    Ok(automations
        .into_iter()
        .map(|a| {
            let mut sigs: Vec<signal::Model> = sig_links
                .iter()
                .filter(|l| l.automation_id == a.id)
                .filter_map(|l| signals.get(&l.signal_id).cloned())
                .collect();
            sigs.sort_by(|x, y| x.key.cmp(&y.key));
            let mut dests: Vec<destination::Model> = dest_links
                .iter()
                .filter(|l| l.automation_id == a.id)
                .filter_map(|l| destinations.get(&l.destination_id).cloned())
                .collect();
            dests.sort_by(|x, y| x.key.cmp(&y.key));
            AutomationView {
                automation: a,
                signals: sigs,
                destinations: dests,
            }
        })
        .collect())
}

pub async fn list(
    db: &DatabaseConnection,
    org: &str,
    include_archived: bool,
) -> PlatformResult<Vec<AutomationView>> {
    let mut q = automation::Entity::find().filter(automation::Column::OrganizationId.eq(org));
    if !include_archived {
        q = q.filter(automation::Column::ArchivedAt.is_null());
    }
    let rows = q
        .order_by_asc(automation::Column::CreatedAt)
        .order_by_asc(automation::Column::Key)
        .all(db)
        .await?;
    views(db, rows).await
}

/// The organization's automation `id`, without its signals and destinations.
pub(crate) async fn find<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    id: &str,
) -> PlatformResult<automation::Model> {
    let id = uuid_id(id, "automation")?;
    automation::Entity::find_by_id(id.clone())
        .filter(automation::Column::OrganizationId.eq(org))
        .one(conn)
        .await?
        .ok_or_else(|| PlatformError::NotFound(format!("automation `{id}` not found")))
}

async fn view_one<C: ConnectionTrait>(
    conn: &C,
    model: automation::Model,
) -> PlatformResult<AutomationView> {
    views(conn, vec![model])
        .await?
        .pop()
        .ok_or_else(|| PlatformError::Internal("automation view vanished".into()))
}

pub async fn get(db: &DatabaseConnection, org: &str, id: &str) -> PlatformResult<AutomationView> {
    let model = find(db, org, id).await?;
    view_one(db, model).await
}

fn resources_of(view: &AutomationView) -> Vec<ResourceRef> {
    vec![ResourceRef::new("automation", view.automation.id.clone())]
}

/// What keeps an automation from being enabled; empty when it can be.
fn unmet_requirements(view: &AutomationView) -> Vec<String> {
    let mut unmet = Vec::new();
    if view.automation.archived_at.is_some() {
        unmet.push("the automation is archived".to_string());
    }
    if view.automation.trigger_type == "SIGNAL_OCCURRENCE" && view.active_signals() == 0 {
        unmet.push(
            "a SIGNAL_OCCURRENCE automation needs at least one active (non-archived) signal"
                .to_string(),
        );
    }
    if view.active_destinations() == 0 {
        unmet.push("at least one enabled destination is required".to_string());
    }
    // Stored JSON that no longer fits (written before the engine read it, or by hand).
    let a = &view.automation;
    let stored = [
        super::config::parse_trigger(
            &a.trigger_type,
            &a.match_mode,
            &a.trigger_json,
            view.active_signals(),
        )
        .err()
        .map(|issues| super::config::under(&["triggerJson"], issues)),
        super::config::parse_audience(&a.audience_filter_json)
            .err()
            .map(|issues| super::config::under(&["audienceFilterJson"], issues)),
    ];
    for issue in stored.into_iter().flatten().flatten() {
        unmet.push(format!("{}: {}", describe_path(&issue.path), issue.message));
    }
    unmet
}

/// A validation path as text (`triggerJson.cron`, `audienceFilterJson.billingStatus[0]`).
fn describe_path(path: &[PathSegment]) -> String {
    let mut text = String::new();
    for segment in path {
        match segment {
            PathSegment::Key(k) if text.is_empty() => text.push_str(k),
            PathSegment::Key(k) => {
                text.push('.');
                text.push_str(k);
            }
            PathSegment::Index(i) => text.push_str(&format!("[{i}]")),
        }
    }
    text
}

pub async fn enable(
    db: &DatabaseConnection,
    ctx: &ActionContext<'_>,
    id: &str,
) -> PlatformResult<Change<AutomationView>> {
    ctx.auth.require_write()?;
    let txn = crate::db::begin_write(db).await?;
    let current = find(&txn, ctx.org(), id).await?;
    let view = view_one(&txn, current).await?;
    let view = if view.automation.enabled {
        view
    } else {
        let unmet = unmet_requirements(&view);
        if !unmet.is_empty() {
            return Err(PlatformError::Conflict {
                message: format!("automation cannot be enabled: {}", unmet.join("; ")),
                unmet,
            });
        }
        let AutomationView {
            automation,
            signals,
            destinations,
        } = view;
        let now = Utc::now();
        let next_run = super::schedules::next_run(&automation, now);
        let mut model = automation.into_active_model();
        model.enabled = Set(true);
        model.enabled_at = Set(Some(now));
        model.next_run_at = Set(next_run);
        model.updated_at = Set(now);
        AutomationView {
            automation: model.update(&txn).await?,
            signals,
            destinations,
        }
    };
    let resources = resources_of(&view);
    Change::commit(txn, ctx, view, resources, json!({ "enabled": true })).await
}

pub async fn disable(
    db: &DatabaseConnection,
    ctx: &ActionContext<'_>,
    id: &str,
) -> PlatformResult<Change<AutomationView>> {
    ctx.auth.require_write()?;
    let txn = crate::db::begin_write(db).await?;
    let mut current = find(&txn, ctx.org(), id).await?;
    if current.enabled {
        let mut model = current.into_active_model();
        model.enabled = Set(false);
        model.next_run_at = Set(None);
        model.updated_at = Set(Utc::now());
        current = model.update(&txn).await?;
    }
    let view = view_one(&txn, current).await?;
    let resources = resources_of(&view);
    Change::commit(txn, ctx, view, resources, json!({ "enabled": false })).await
}

/// Ids among `wanted` that are not rows of the organization in `table`.
async fn missing_ids<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    wanted: &[String],
    kind: &str,
) -> PlatformResult<Vec<usize>> {
    let normalized: Vec<String> = wanted
        .iter()
        .map(|w| {
            uuid::Uuid::parse_str(w.trim())
                .map(|u| u.to_string())
                .unwrap_or_default()
        })
        .collect();
    let found: Vec<String> = match kind {
        "signal" => {
            signal::Entity::find()
                .select_only()
                .column(signal::Column::Id)
                .filter(signal::Column::OrganizationId.eq(org))
                .filter(signal::Column::Id.is_in(normalized.clone()))
                .into_tuple()
                .all(conn)
                .await?
        }
        _ => {
            destination::Entity::find()
                .select_only()
                .column(destination::Column::Id)
                .filter(destination::Column::OrganizationId.eq(org))
                .filter(destination::Column::Id.is_in(normalized.clone()))
                .into_tuple()
                .all(conn)
                .await?
        }
    };
    Ok(normalized
        .iter()
        .enumerate()
        .filter(|(_, id)| !found.contains(id))
        .map(|(i, _)| i)
        .collect())
}

pub async fn create(
    db: &DatabaseConnection,
    ctx: &ActionContext<'_>,
    body: NewAutomation,
) -> PlatformResult<Change<AutomationView>> {
    ctx.auth.require_write()?;
    let org = ctx.org().to_string();
    let mut issues = Issues::default();
    issues.length(&["name"], &body.name, 1, 120);
    if let Some(d) = body.description.as_value() {
        issues.length(&["description"], d, 0, 1000);
    }
    if let Some(key) = &body.key {
        issues.length(&["key"], key, 1, 120);
    }
    let txn = crate::db::begin_write(db).await?;
    // Ids that name nothing in the organization: 404, like an unknown id in a path (once the
    // body itself is valid).
    let mut unknown = Vec::new();
    for i in missing_ids(&txn, &org, &body.signal_ids, "signal").await? {
        unknown.push(format!("signal `{}`", body.signal_ids[i]));
    }
    for i in missing_ids(&txn, &org, &body.destination_ids, "destination").await? {
        unknown.push(format!("destination `{}`", body.destination_ids[i]));
    }
    // `atLeast` against the number of linked active signals is a requirement of enabling
    // (409 there): signals are archived and linked after a create too.
    let active_signals = usize::MAX;
    let trigger_value = Value::Object(body.trigger_json.clone().into_iter().collect());
    if let Err(found) = super::config::parse_trigger(
        body.trigger_type.as_str(),
        body.match_mode.as_str(),
        &trigger_value,
        active_signals,
    ) {
        issues
            .0
            .extend(super::config::under(&["triggerJson"], found));
    }
    if let Some(audience) = &body.audience_filter_json {
        let audience = Value::Object(audience.clone().into_iter().collect());
        if let Err(found) = super::config::parse_audience(&audience) {
            issues
                .0
                .extend(super::config::under(&["audienceFilterJson"], found));
        }
    }
    let agent_id = body.agent_id.value();
    if let Some(agent) = &agent_id {
        if crate::agents::definition::get(&txn, &org, agent)
            .await
            .is_err()
        {
            unknown.push(format!("agent `{agent}`"));
        }
    }
    issues.into_result()?;
    if !unknown.is_empty() {
        return Err(PlatformError::NotFound(format!(
            "no such {} in this organization",
            unknown.join(", ")
        )));
    }

    let existing = taken_keys::<automation::Entity>(
        &txn,
        &org,
        automation::Column::OrganizationId,
        automation::Column::Key,
    )
    .await?;
    let key = match body.key {
        Some(k) if existing.contains(&k) => {
            return Err(PlatformError::Conflict {
                message: format!("an automation with key `{k}` already exists"),
                unmet: vec![format!("key `{k}` must be unique in the organization")],
            })
        }
        Some(k) => k,
        None => unique_key(&body.name, &existing),
    };
    let content = AutomationContent {
        name: body.name,
        description: body.description.value(),
        trigger_type: body.trigger_type.as_str().into(),
        trigger_json: Value::Object(body.trigger_json.into_iter().collect()),
        audience_filter_json: Value::Object(
            body.audience_filter_json
                .unwrap_or_default()
                .into_iter()
                .collect(),
        ),
        agent_id,
        match_mode: body.match_mode.as_str().into(),
    };
    let model = store(
        &txn,
        &org,
        &key,
        content,
        "UI",
        None,
        &body.signal_ids,
        &body.destination_ids,
        Utc::now(),
    )
    .await?;
    let view = view_one(&txn, model).await?;
    let resources = resources_of(&view);
    let details = json!({ "key": view.automation.key });
    Change::commit(txn, ctx, view, resources, details).await
}

/// What an automation is, as a create body, a configuration file or a seed declares it; the
/// rest of a new automation's row starts empty: disabled, never run.
#[derive(Debug, Clone)]
pub struct AutomationContent {
    pub name: String,
    pub description: Option<String>,
    pub trigger_type: String,
    pub trigger_json: Value,
    pub audience_filter_json: Value,
    pub agent_id: Option<String>,
    pub match_mode: String,
}

impl AutomationContent {
    /// The `configHash`: of what the automation does (trigger, audience, match mode, agent),
    /// the same whoever wrote it.
    pub fn hash(&self) -> String {
        config_hash(&json!({
            "triggerType": self.trigger_type, "triggerJson": self.trigger_json,
            "audienceFilterJson": self.audience_filter_json, "matchMode": self.match_mode,
            "agentId": self.agent_id,
        }))
    }

    /// A new automation's row under `key`, disabled and never run, made `now`. The one builder
    /// of automation rows (the API's create, `custintel apply`, the demo and the benchmarks).
    pub fn new_row(
        self,
        org: &str,
        key: &str,
        managed_by: &'static str,
        now: DateTime<Utc>,
    ) -> automation::ActiveModel {
        automation::ActiveModel {
            id: Set(uuid::Uuid::new_v4().to_string()),
            organization_id: Set(org.to_string()),
            key: Set(key.to_string()),
            managed_by: Set(managed_by.into()),
            config_hash: Set(Some(self.hash())),
            name: Set(self.name),
            description: Set(self.description),
            enabled: Set(false),
            trigger_type: Set(self.trigger_type),
            trigger_json: Set(self.trigger_json),
            audience_filter_json: Set(self.audience_filter_json),
            agent_id: Set(self.agent_id),
            match_mode: Set(self.match_mode),
            schema_version: Set(crate::platform::SCHEMA_VERSION.into()),
            archived_at: Set(None),
            last_run_at: Set(None),
            last_run_status: Set(None),
            next_run_at: Set(None),
            enabled_at: Set(None),
            created_at: Set(now),
            updated_at: Set(now),
        }
    }

    /// Whether `stored` holds this content already, managed by `managed_by` and not archived
    /// (its links are compared by the caller).
    pub fn is_stored_in(&self, stored: &automation::Model, managed_by: &str) -> bool {
        stored.managed_by == managed_by
            && stored.archived_at.is_none()
            && stored.name == self.name
            && stored.description == self.description
            && stored.trigger_type == self.trigger_type
            && stored.trigger_json == self.trigger_json
            && stored.audience_filter_json == self.audience_filter_json
            && stored.agent_id == self.agent_id
            && stored.match_mode == self.match_mode
            && stored.config_hash.as_deref() == Some(self.hash().as_str())
    }
}

/// The one write of an automation's row and links, for the API's create and `custintel
/// apply`: a new automation under `key`, or `current` given this content and these links in
/// place (restored if archived, managed by `managed_by` from now on). Whether it is enabled is
/// left as it is: enabling is an action of its own.
#[allow(clippy::too_many_arguments)]
pub async fn store<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    key: &str,
    content: AutomationContent,
    managed_by: &'static str,
    current: Option<automation::Model>,
    signal_ids: &[String],
    destination_ids: &[String],
    now: DateTime<Utc>,
) -> PlatformResult<automation::Model> {
    let stored = match current {
        None => {
            content
                .new_row(org, key, managed_by, now)
                .insert(conn)
                .await?
        }
        Some(current) => {
            let mut model = current.into_active_model();
            model.managed_by = Set(managed_by.into());
            model.config_hash = Set(Some(content.hash()));
            model.name = Set(content.name);
            model.description = Set(content.description);
            model.trigger_type = Set(content.trigger_type);
            model.trigger_json = Set(content.trigger_json);
            model.audience_filter_json = Set(content.audience_filter_json);
            model.agent_id = Set(content.agent_id);
            model.match_mode = Set(content.match_mode);
            model.archived_at = Set(None);
            model.updated_at = Set(now);
            let stored = model.update(conn).await?;
            automation_signal::Entity::delete_many()
                .filter(automation_signal::Column::AutomationId.eq(stored.id.as_str()))
                .exec(conn)
                .await?;
            automation_destination::Entity::delete_many()
                .filter(automation_destination::Column::AutomationId.eq(stored.id.as_str()))
                .exec(conn)
                .await?;
            stored
        }
    };
    link(conn, &stored.id, signal_ids, destination_ids).await?;
    Ok(stored)
}

/// Links an automation to signals and destinations (ids already checked).
pub async fn link<C: ConnectionTrait>(
    conn: &C,
    automation_id: &str,
    signal_ids: &[String],
    destination_ids: &[String],
) -> PlatformResult<()> {
    let norm = |ids: &[String]| -> Vec<String> {
        let mut v: Vec<String> = ids
            .iter()
            .filter_map(|i| uuid::Uuid::parse_str(i.trim()).ok().map(|u| u.to_string()))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let sigs = norm(signal_ids);
    if !sigs.is_empty() {
        automation_signal::Entity::insert_many(sigs.into_iter().map(|s| {
            automation_signal::ActiveModel {
                automation_id: Set(automation_id.to_string()),
                signal_id: Set(s),
            }
        }))
        .exec(conn)
        .await?;
    }
    let dests = norm(destination_ids);
    if !dests.is_empty() {
        automation_destination::Entity::insert_many(dests.into_iter().map(|d| {
            automation_destination::ActiveModel {
                automation_id: Set(automation_id.to_string()),
                destination_id: Set(d),
            }
        }))
        .exec(conn)
        .await?;
    }
    Ok(())
}
