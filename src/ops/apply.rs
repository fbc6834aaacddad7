//! Configuration as code: `custintel apply --org ORG FILE [--dry-run]` (DESIGN.md "Automation
//! engine").
//!
//! A YAML or JSON file declares signals (`EVENT_MATCH` and `EVENT_PATTERN`), destinations and
//! automations under the top-level lists `signals`, `destinations` and `automations`. Each item
//! is the platform action's create body plus its `key`; an automation names its signals and
//! destinations by key (`signals`, `destinations`), keys of the file or of the organization.
//!
//! Applying is declarative and idempotent: an item whose key the organization does not have is
//! created (`managedBy` `CODE`; automations disabled), one whose stored content differs is
//! updated in place (a `UI` resource is taken over and becomes `CODE`; an archived one is
//! restored), the rest is `unchanged`. Nothing outside the file is archived, and no automation
//! is enabled or disabled. The whole file is checked before anything is written, and written in
//! one write transaction, so a file with errors (or a failed write) changes nothing.

use std::collections::{BTreeSet, HashMap, HashSet};

use chrono::Utc;
use entity::{
    automation, automation_destination, automation_signal,
    destination::{self, DestinationKind},
    signal::{self, SignalKind},
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction,
    EntityTrait, QueryFilter, Set, TransactionTrait,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::{
    crypto::SecretBox,
    engine::{
        automations::{self, AutomationContent},
        config::{compile_signal, parse_audience, parse_trigger, under},
        signals::{self, SignalContent},
    },
    notify::destinations::{self, DestinationContent},
    platform::PlatformError,
    validation::{parse_from, PathSegment, ValidationIssue},
};

/// What `managedBy` says of a resource this file wrote.
const CODE: &str = "CODE";

/// One resource in the plan: `{type, key, id}` (`id` null for a dry run's creations).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanItem {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub key: String,
    pub id: Option<String>,
}

/// What applying did (or, for a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    pub created: Vec<PlanItem>,
    pub updated: Vec<PlanItem>,
    pub unchanged: Vec<PlanItem>,
}

/// `{error, details: [{path, message}]}`.
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    pub error: &'a str,
    pub details: &'a [ValidationIssue],
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The file, or the organization, does not allow applying; nothing was written.
    #[error("{message}")]
    Invalid {
        message: String,
        details: Vec<ValidationIssue>,
    },
    /// Storing failed; the transaction was rolled back.
    #[error("{0}")]
    Store(String),
}

impl ApplyError {
    fn plain(message: impl Into<String>) -> Self {
        ApplyError::Invalid {
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// The one JSON object `custintel apply` prints on failure: `{error, details}`.
    pub fn body(&self) -> ErrorBody<'_> {
        match self {
            ApplyError::Invalid { message, details } => ErrorBody {
                error: message,
                details,
            },
            ApplyError::Store(message) => ErrorBody {
                error: message,
                details: &[],
            },
        }
    }
}

impl From<sea_orm::DbErr> for ApplyError {
    fn from(err: sea_orm::DbErr) -> Self {
        ApplyError::Store(format!("the database refused the change: {err}"))
    }
}

impl From<PlatformError> for ApplyError {
    fn from(err: PlatformError) -> Self {
        ApplyError::Store(err.to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// The file

/// The file's three lists (each item still to be checked).
#[derive(Debug, Default)]
struct FileDoc {
    signals: Vec<Value>,
    destinations: Vec<Value>,
    automations: Vec<Value>,
}

const SECTIONS: [&str; 3] = ["signals", "destinations", "automations"];

/// Splits the file into its lists; an unknown top-level key or a list that is not one is an
/// issue, and the rest is still checked.
fn sections(value: Value, problems: &mut Problems) -> FileDoc {
    let mut doc = FileDoc::default();
    let Value::Object(top) = value else {
        problems.at(
            vec![],
            "must be an object with the lists `signals`, `destinations` and `automations`",
        );
        return doc;
    };
    for (key, list) in top {
        let slot = match key.as_str() {
            "signals" => &mut doc.signals,
            "destinations" => &mut doc.destinations,
            "automations" => &mut doc.automations,
            _ => {
                problems.at(
                    vec![key.as_str().into()],
                    format!("unknown property `{key}`; allowed: {}", SECTIONS.join(", ")),
                );
                continue;
            }
        };
        match list {
            Value::Array(items) => *slot = items,
            Value::Null => {}
            _ => problems.at(vec![key.as_str().into()], "must be a list"),
        }
    }
    doc
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SignalSpec {
    key: String,
    kind: String,
    name: String,
    #[serde(default)]
    description: Option<String>,
    definition: Value,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DestinationSpec {
    key: String,
    #[serde(rename = "type")]
    kind: String,
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    is_default: Option<bool>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    webhook_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AutomationSpec {
    key: String,
    name: String,
    #[serde(default)]
    description: Option<String>,
    trigger_type: automations::TriggerType,
    trigger_json: Map<String, Value>,
    #[serde(default)]
    audience_filter_json: Option<Map<String, Value>>,
    #[serde(default)]
    agent_id: Option<String>,
    match_mode: automations::MatchMode,
    #[serde(default)]
    signals: Vec<String>,
    #[serde(default)]
    destinations: Vec<String>,
}

/// Collects issues with paths from the root of the file.
#[derive(Default)]
struct Problems(Vec<ValidationIssue>);

impl Problems {
    fn at(&mut self, path: Vec<PathSegment>, message: impl Into<String>) {
        self.0.push(ValidationIssue::new(path, message));
    }

    /// Issues whose paths are relative to `prefix`.
    fn extend_under(&mut self, prefix: &[PathSegment], issues: Vec<ValidationIssue>) {
        for mut issue in issues {
            let mut path = prefix.to_vec();
            path.append(&mut issue.path);
            issue.path = path;
            self.0.push(issue);
        }
    }

    fn length(&mut self, path: Vec<PathSegment>, value: &str, min: usize, max: usize) {
        let n = value.chars().count();
        if n < min {
            self.at(path, format!("must be at least {min} character(s) long"));
        } else if n > max {
            self.at(path, format!("must be at most {max} characters long"));
        }
    }
}

fn item_path(section: &str, index: usize, field: &str) -> Vec<PathSegment> {
    vec![section.into(), index.into(), field.into()]
}

/// Reads the file's text: JSON, else YAML (a superset of it).
fn parse_text(text: &str) -> Result<Value, ApplyError> {
    let value = match serde_json::from_str::<Value>(text) {
        Ok(v) => v,
        Err(json_err) => match serde_yaml::from_str::<Value>(text) {
            Ok(v) => v,
            Err(yaml_err) => {
                let looks_json = text.trim_start().starts_with('{');
                let message = if looks_json {
                    format!("not valid JSON: {json_err}")
                } else {
                    format!("not valid YAML: {yaml_err}")
                };
                return Err(ApplyError::Invalid {
                    message: "the file cannot be read".into(),
                    details: vec![ValidationIssue::root(message)],
                });
            }
        },
    };
    // An empty file declares nothing.
    Ok(if value.is_null() { json!({}) } else { value })
}

// ---------------------------------------------------------------------------------------------
// What the file asks for, checked

struct WantedSignal {
    key: String,
    content: SignalContent,
}

struct WantedDestination {
    key: String,
    content: DestinationContent,
}

/// A reference from an automation to a signal or destination, by key.
enum Ref {
    /// Declared in the file: index into its section.
    File(usize),
    /// Only in the organization: its id.
    Stored(String),
}

struct WantedAutomation {
    key: String,
    content: AutomationContent,
    signals: Vec<Ref>,
    destinations: Vec<Ref>,
}

/// The organization's configuration as stored, by key.
struct Stored {
    signals: HashMap<String, signal::Model>,
    destinations: HashMap<String, destination::Model>,
    automations: HashMap<String, automation::Model>,
    /// Linked signal and destination ids per automation id.
    signal_links: HashMap<String, BTreeSet<String>>,
    destination_links: HashMap<String, BTreeSet<String>>,
}

async fn load_stored<C: ConnectionTrait>(conn: &C, org: &str) -> Result<Stored, ApplyError> {
    let signals = signal::Entity::find()
        .filter(signal::Column::OrganizationId.eq(org))
        .all(conn)
        .await?;
    let destinations = destination::Entity::find()
        .filter(destination::Column::OrganizationId.eq(org))
        .all(conn)
        .await?;
    let automations = automation::Entity::find()
        .filter(automation::Column::OrganizationId.eq(org))
        .all(conn)
        .await?;
    let ids: Vec<String> = automations.iter().map(|a| a.id.clone()).collect();
    let mut signal_links: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut destination_links: HashMap<String, BTreeSet<String>> = HashMap::new();
    for chunk in ids.chunks(500) {
        for link in automation_signal::Entity::find()
            .filter(automation_signal::Column::AutomationId.is_in(chunk.to_vec()))
            .all(conn)
            .await?
        {
            signal_links
                .entry(link.automation_id)
                .or_default()
                .insert(link.signal_id);
        }
        for link in automation_destination::Entity::find()
            .filter(automation_destination::Column::AutomationId.is_in(chunk.to_vec()))
            .all(conn)
            .await?
        {
            destination_links
                .entry(link.automation_id)
                .or_default()
                .insert(link.destination_id);
        }
    }
    Ok(Stored {
        signals: signals.into_iter().map(|s| (s.key.clone(), s)).collect(),
        destinations: destinations
            .into_iter()
            .map(|d| (d.key.clone(), d))
            .collect(),
        automations: automations
            .into_iter()
            .map(|a| (a.key.clone(), a))
            .collect(),
        signal_links,
        destination_links,
    })
}

/// Parses every item of a section into `T`, reporting shape errors at the item's path.
fn items<T: serde::de::DeserializeOwned>(
    section: &str,
    raw: &[Value],
    problems: &mut Problems,
) -> Vec<(usize, T)> {
    let mut out = Vec::new();
    for (i, item) in raw.iter().enumerate() {
        match parse_from::<T, _>(item) {
            Ok(t) => out.push((i, t)),
            Err(mut issues) => {
                for issue in &mut issues {
                    if let [PathSegment::Key(field)] = issue.path.as_slice() {
                        if let Some(by_key) = match field.as_str() {
                            "signalIds" => Some("signals"),
                            "destinationIds" => Some("destinations"),
                            _ => None,
                        } {
                            issue.message = format!(
                                "unknown property `{field}`: a file names them by key in \
                                 `{by_key}`"
                            );
                        }
                    }
                }
                problems.extend_under(&[section.into(), i.into()], issues)
            }
        }
    }
    out
}

fn check_key(
    section: &str,
    index: usize,
    key: &str,
    seen: &mut HashMap<String, usize>,
    problems: &mut Problems,
) {
    problems.length(item_path(section, index, "key"), key, 1, 120);
    if let Some(first) = seen.get(key) {
        problems.at(
            item_path(section, index, "key"),
            format!("duplicate key `{key}`: item {first} of `{section}` has it too"),
        );
    } else {
        seen.insert(key.to_string(), index);
    }
}

fn check_texts(
    section: &str,
    index: usize,
    name: &str,
    description: &Option<String>,
    problems: &mut Problems,
) {
    problems.length(item_path(section, index, "name"), name, 1, 120);
    if let Some(d) = description {
        problems.length(item_path(section, index, "description"), d, 0, 1000);
    }
}

fn check_signals(raw: &[Value], problems: &mut Problems) -> Vec<WantedSignal> {
    let mut seen = HashMap::new();
    let mut wanted = Vec::new();
    for (i, spec) in items::<SignalSpec>("signals", raw, problems) {
        check_key("signals", i, &spec.key, &mut seen, problems);
        check_texts("signals", i, &spec.name, &spec.description, problems);
        let at_definition: Vec<PathSegment> = vec!["signals".into(), i.into()];
        // The engine's contract for each kind checks the definition below.
        let Some(kind) = SignalKind::parse(&spec.kind) else {
            problems.at(
                item_path("signals", i, "kind"),
                "must be EVENT_MATCH or EVENT_PATTERN",
            );
            continue;
        };
        let definition = spec.definition.clone();
        if let Err(issues) = compile_signal(kind, &definition) {
            problems.extend_under(&at_definition, under(&["definition"], issues));
        }
        wanted.push(WantedSignal {
            key: spec.key,
            content: SignalContent {
                kind,
                name: spec.name,
                description: spec.description,
                definition,
            },
        });
    }
    wanted
}

fn check_destinations(raw: &[Value], problems: &mut Problems) -> Vec<WantedDestination> {
    let mut seen = HashMap::new();
    let mut wanted = Vec::new();
    let mut default_at: Option<usize> = None;
    for (i, spec) in items::<DestinationSpec>("destinations", raw, problems) {
        check_key("destinations", i, &spec.key, &mut seen, problems);
        check_texts("destinations", i, &spec.name, &spec.description, problems);
        let at = |field: &str| item_path("destinations", i, field);
        let kind = DestinationKind::parse(&spec.kind);
        let target = match kind {
            Some(kind) => {
                let (endpoint, issues) = destinations::endpoint_of(
                    kind,
                    spec.url.as_deref(),
                    spec.webhook_url.as_deref(),
                );
                for (field, message) in issues {
                    problems.at(at(field), message);
                }
                endpoint
            }
            None => {
                problems.at(at("type"), "must be WEBHOOK_ENDPOINT or SLACK_CHANNEL");
                String::new()
            }
        };
        let is_default = spec.is_default.unwrap_or(false);
        if is_default {
            if let Some(first) = default_at {
                problems.at(
                    at("isDefault"),
                    format!("only one destination can be the default; item {first} is too"),
                );
            } else {
                default_at = Some(i);
            }
        }
        // A kind that is neither was reported above; the plan is not applied then.
        let Some(kind) = kind else {
            continue;
        };
        wanted.push(WantedDestination {
            key: spec.key,
            content: DestinationContent {
                kind,
                name: spec.name,
                description: spec.description,
                enabled: spec.enabled,
                is_default,
                endpoint: target,
            },
        });
    }
    wanted
}

/// The state applying leaves a destination in, for the enable requirements of automations.
fn destination_enabled_after(
    wanted: &WantedDestination,
    stored: Option<&destination::Model>,
) -> bool {
    wanted
        .content
        .enabled
        .unwrap_or_else(|| stored.map(|d| d.enabled).unwrap_or(true))
}

async fn check_automations<C: ConnectionTrait>(
    conn: &C,
    org: &str,
    raw: &[Value],
    signals: &[WantedSignal],
    destinations: &[WantedDestination],
    stored: &Stored,
    problems: &mut Problems,
) -> Result<Vec<WantedAutomation>, ApplyError> {
    let mut seen = HashMap::new();
    let mut wanted = Vec::new();
    for (i, spec) in items::<AutomationSpec>("automations", raw, problems) {
        check_key("automations", i, &spec.key, &mut seen, problems);
        check_texts("automations", i, &spec.name, &spec.description, problems);
        let at = |field: &str| item_path("automations", i, field);

        let mut signal_refs = Vec::new();
        let mut active_signals = 0;
        let mut seen_refs = HashSet::new();
        for (j, key) in spec.signals.iter().enumerate() {
            if !seen_refs.insert(key.clone()) {
                continue;
            }
            if let Some(n) = signals.iter().position(|s| &s.key == key) {
                signal_refs.push(Ref::File(n));
                active_signals += 1;
            } else if let Some(s) = stored.signals.get(key) {
                signal_refs.push(Ref::Stored(s.id.clone()));
                if s.archived_at.is_none() {
                    active_signals += 1;
                }
            } else {
                let mut path = at("signals");
                path.push(j.into());
                problems.at(
                    path,
                    format!("no signal with key `{key}` in the file or the organization"),
                );
            }
        }
        let mut destination_refs = Vec::new();
        let mut enabled_destinations = 0;
        let mut seen_refs = HashSet::new();
        for (j, key) in spec.destinations.iter().enumerate() {
            if !seen_refs.insert(key.clone()) {
                continue;
            }
            if let Some(n) = destinations.iter().position(|d| &d.key == key) {
                destination_refs.push(Ref::File(n));
                if destination_enabled_after(&destinations[n], stored.destinations.get(key)) {
                    enabled_destinations += 1;
                }
            } else if let Some(d) = stored.destinations.get(key) {
                destination_refs.push(Ref::Stored(d.id.clone()));
                if d.enabled && d.archived_at.is_none() {
                    enabled_destinations += 1;
                }
            } else {
                let mut path = at("destinations");
                path.push(j.into());
                problems.at(
                    path,
                    format!("no destination with key `{key}` in the file or the organization"),
                );
            }
        }

        let trigger_type = spec.trigger_type.as_str().to_string();
        let match_mode = spec.match_mode.as_str().to_string();
        let trigger_json = Value::Object(spec.trigger_json);
        let audience = Value::Object(spec.audience_filter_json.unwrap_or_default());
        let item: Vec<PathSegment> = vec!["automations".into(), i.into()];
        if let Err(issues) =
            parse_trigger(&trigger_type, &match_mode, &trigger_json, active_signals)
        {
            problems.extend_under(&item, under(&["triggerJson"], issues));
        }
        if let Err(issues) = parse_audience(&audience) {
            problems.extend_under(&item, under(&["audienceFilterJson"], issues));
        }
        let agent_id = match &spec.agent_id {
            None => None,
            Some(agent) => match crate::agents::definition::get(conn, org, agent).await {
                Ok(a) => Some(a.id),
                Err(PlatformError::NotFound(_)) => {
                    problems.at(at("agentId"), "no such agent in this organization");
                    None
                }
                Err(other) => return Err(other.into()),
            },
        };

        // An enabled automation stays enabled: the file may not take away what it needs.
        if let Some(current) = stored.automations.get(&spec.key) {
            if current.enabled && current.archived_at.is_none() {
                if trigger_type == "SIGNAL_OCCURRENCE" && active_signals == 0 {
                    problems.at(
                        at("signals"),
                        format!(
                            "automation `{}` is enabled and would be left without an active \
                             signal; disable it first",
                            spec.key
                        ),
                    );
                }
                if enabled_destinations == 0 {
                    problems.at(
                        at("destinations"),
                        format!(
                            "automation `{}` is enabled and would be left without an enabled \
                             destination; disable it first",
                            spec.key
                        ),
                    );
                }
            }
        }

        wanted.push(WantedAutomation {
            key: spec.key,
            content: AutomationContent {
                name: spec.name,
                description: spec.description,
                trigger_type,
                trigger_json,
                audience_filter_json: audience,
                agent_id,
                match_mode,
            },
            signals: signal_refs,
            destinations: destination_refs,
        });
    }
    Ok(wanted)
}

// ---------------------------------------------------------------------------------------------
// Comparing with what is stored

/// The ids an automation's references resolve to, when every referenced signal or destination
/// already exists (`None` when one is still to be created).
fn resolved_ids<T>(
    refs: &[Ref],
    declared: &[T],
    key_of: impl Fn(&T) -> &str,
    id_of_key: impl Fn(&str) -> Option<String>,
) -> Option<BTreeSet<String>> {
    refs.iter()
        .map(|r| match r {
            Ref::File(n) => id_of_key(key_of(&declared[*n])),
            Ref::Stored(id) => Some(id.clone()),
        })
        .collect()
}

fn automation_matches(
    w: &WantedAutomation,
    a: &automation::Model,
    stored: &Stored,
    signals: &[WantedSignal],
    destinations: &[WantedDestination],
) -> bool {
    let linked_signals = resolved_ids(
        &w.signals,
        signals,
        |s| s.key.as_str(),
        |k| stored.signals.get(k).map(|s| s.id.clone()),
    );
    let linked_destinations = resolved_ids(
        &w.destinations,
        destinations,
        |d| d.key.as_str(),
        |k| stored.destinations.get(k).map(|d| d.id.clone()),
    );
    let empty = BTreeSet::new();
    w.content.is_stored_in(a, CODE)
        && linked_signals.as_ref() == Some(stored.signal_links.get(&a.id).unwrap_or(&empty))
        && linked_destinations.as_ref()
            == Some(stored.destination_links.get(&a.id).unwrap_or(&empty))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Action {
    Create,
    Update,
    Keep,
}

fn action_for<M>(existing: Option<&M>, same: impl Fn(&M) -> bool) -> Action {
    match existing {
        None => Action::Create,
        Some(m) if same(m) => Action::Keep,
        Some(_) => Action::Update,
    }
}

// ---------------------------------------------------------------------------------------------
// Applying

/// Applies the file at `file` (`-`: standard input) to the organization.
pub async fn apply_file(
    db: &DatabaseConnection,
    secrets: &SecretBox,
    org: &str,
    file: &str,
    dry_run: bool,
) -> Result<ApplyReport, ApplyError> {
    let text = if file == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| ApplyError::plain(format!("cannot read standard input: {e}")))?;
        text
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| ApplyError::plain(format!("cannot read {file}: {e}")))?
    };
    apply_text(db, secrets, org, &text, dry_run).await
}

/// Applies a file's text (YAML or JSON) to the organization; with `dry_run` only plans.
pub async fn apply_text(
    db: &DatabaseConnection,
    secrets: &SecretBox,
    org: &str,
    text: &str,
    dry_run: bool,
) -> Result<ApplyReport, ApplyError> {
    let value = parse_text(text)?;
    let mut problems = Problems::default();
    let doc = sections(value, &mut problems);

    let exists = entity::organization::Entity::find_by_id(org.to_string())
        .one(db)
        .await?
        .is_some();
    if !exists {
        return Err(ApplyError::plain(format!("no organization `{org}`")));
    }

    // A dry run only reads; applying takes its turn among the organization's configuration
    // writers (other applies, the API's creates) from the first read to the commit, so what
    // was compared is what gets changed.
    let txn = if dry_run {
        db.begin().await?
    } else {
        let txn = crate::db::begin_write(db).await?;
        crate::db::take_turns(&txn, crate::db::CONFIGURATION, org).await?;
        txn
    };
    let stored = load_stored(&txn, org).await?;
    let signals = check_signals(&doc.signals, &mut problems);
    let destinations = check_destinations(&doc.destinations, &mut problems);
    let automations = check_automations(
        &txn,
        org,
        &doc.automations,
        &signals,
        &destinations,
        &stored,
        &mut problems,
    )
    .await?;
    if !problems.0.is_empty() {
        let n = problems.0.len();
        return Err(ApplyError::Invalid {
            message: format!(
                "the file has {n} error{}; nothing was applied",
                if n == 1 { "" } else { "s" }
            ),
            details: problems.0,
        });
    }

    let signal_actions: Vec<Action> = signals
        .iter()
        .map(|w| {
            action_for(stored.signals.get(&w.key), |s| {
                w.content.is_stored_in(s, CODE)
            })
        })
        .collect();
    let destination_actions: Vec<Action> = destinations
        .iter()
        .map(|w| {
            action_for(stored.destinations.get(&w.key), |d| {
                w.content.is_stored_in(d, CODE, secrets)
            })
        })
        .collect();
    let automation_actions: Vec<Action> = automations
        .iter()
        .map(|w| {
            action_for(stored.automations.get(&w.key), |a| {
                automation_matches(w, a, &stored, &signals, &destinations)
            })
        })
        .collect();

    if dry_run {
        txn.rollback().await?;
        let mut report = ApplyReport::default();
        let existing_signal = |k: &str| stored.signals.get(k).map(|s| s.id.clone());
        let existing_destination = |k: &str| stored.destinations.get(k).map(|d| d.id.clone());
        let existing_automation = |k: &str| stored.automations.get(k).map(|a| a.id.clone());
        for (w, a) in signals.iter().zip(&signal_actions) {
            report.push("signal", &w.key, *a, existing_signal(&w.key));
        }
        for (w, a) in destinations.iter().zip(&destination_actions) {
            report.push("destination", &w.key, *a, existing_destination(&w.key));
        }
        for (w, a) in automations.iter().zip(&automation_actions) {
            report.push("automation", &w.key, *a, existing_automation(&w.key));
        }
        return Ok(report);
    }

    let mut report = ApplyReport::default();
    let now = Utc::now();
    // Each resource is written by its own domain's `store`, as the API's create writes it.
    let signal_keys: Vec<String> = signals.iter().map(|w| w.key.clone()).collect();
    let destination_keys: Vec<String> = destinations.iter().map(|w| w.key.clone()).collect();
    let mut signal_ids: HashMap<String, String> = HashMap::new();
    for (w, action) in signals.into_iter().zip(&signal_actions) {
        let current = stored.signals.get(&w.key);
        let id = match (action, current) {
            (Action::Keep, Some(s)) => s.id.clone(),
            _ => {
                signals::store(&txn, org, &w.key, w.content, CODE, current.cloned(), now)
                    .await?
                    .id
            }
        };
        report.push("signal", &w.key, *action, Some(id.clone()));
        signal_ids.insert(w.key, id);
    }
    let mut destination_ids: HashMap<String, String> = HashMap::new();
    for (w, action) in destinations.into_iter().zip(&destination_actions) {
        let current = stored.destinations.get(&w.key);
        let id = match (action, current) {
            (Action::Keep, Some(d)) => d.id.clone(),
            _ => {
                let current = current.cloned();
                destinations::store(&txn, secrets, org, &w.key, w.content, CODE, current, now)
                    .await?
                    .destination
                    .id
            }
        };
        report.push("destination", &w.key, *action, Some(id.clone()));
        destination_ids.insert(w.key, id);
    }
    for (w, action) in automations.into_iter().zip(&automation_actions) {
        let current = stored.automations.get(&w.key);
        let id = match (action, current) {
            (Action::Keep, Some(a)) => a.id.clone(),
            _ => {
                let linked_signals = link_ids(&w.signals, &signal_keys, &signal_ids);
                let linked_destinations =
                    link_ids(&w.destinations, &destination_keys, &destination_ids);
                automations::store(
                    &txn,
                    org,
                    &w.key,
                    w.content,
                    CODE,
                    current.cloned(),
                    &linked_signals,
                    &linked_destinations,
                    now,
                )
                .await?
                .id
            }
        };
        report.push("automation", &w.key, *action, Some(id));
    }
    if !report.created.is_empty() || !report.updated.is_empty() {
        record_audit(&txn, org, &report).await?;
    }
    txn.commit().await?;
    Ok(report)
}

/// The ids an automation links to once the file's signals or destinations are written
/// (`keys`: the file's keys of that section, in order).
fn link_ids(refs: &[Ref], keys: &[String], written: &HashMap<String, String>) -> Vec<String> {
    refs.iter()
        .filter_map(|r| match r {
            Ref::File(n) => written.get(&keys[*n]).cloned(),
            Ref::Stored(id) => Some(id.clone()),
        })
        .collect()
}

impl ApplyReport {
    fn push(&mut self, kind: &'static str, key: &str, action: Action, id: Option<String>) {
        let item = PlanItem {
            kind,
            key: key.to_string(),
            id,
        };
        match action {
            Action::Create => self.created.push(item),
            Action::Update => self.updated.push(item),
            Action::Keep => self.unchanged.push(item),
        }
    }
}

/// One audit row for an apply that changed something (no API key: it ran on the database).
async fn record_audit(
    txn: &DatabaseTransaction,
    org: &str,
    report: &ApplyReport,
) -> Result<(), ApplyError> {
    let resources: Vec<Value> = report
        .created
        .iter()
        .chain(&report.updated)
        .map(|i| json!({ "type": i.kind, "id": i.id }))
        .collect();
    let keys = |items: &[PlanItem]| -> Vec<Value> {
        items
            .iter()
            .map(|i| json!({ "type": i.kind, "key": i.key }))
            .collect()
    };
    entity::audit_entry::ActiveModel {
        id: Set(uuid::Uuid::new_v4().to_string()),
        organization_id: Set(org.to_string()),
        api_key_id: Set(None),
        command_id: Set("apply".to_string()),
        correlation_id: Set(crate::correlation::current()),
        resources: Set(json!(resources)),
        details: Set(json!({
            "created": keys(&report.created),
            "updated": keys(&report.updated),
        })),
        created_at: Set(Utc::now()),
    }
    .insert(txn)
    .await?;
    Ok(())
}
