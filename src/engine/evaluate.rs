//! Signal evaluation on ingested events, inside the ingest applier's transaction: behind the
//! acknowledgement, in order per organization, after identity resolution (so an event's user
//! and customer are known), and exactly once (the applier applies each batch once; on
//! PostgreSQL one instance applies at a time).
//!
//! The rules (enabled automations and their active signals, compiled) are kept by the applier
//! ([`RulesCache`]) and read again only when a version query says the configuration changed.
//! Events are first filtered by name against those signals without touching the database;
//! only candidates are matched,
//! resolved to a subject, remembered as signal hits, and may create runs. A run is unique per
//! (automation, dedupe key), so a subject starts at most one run per dedupe bucket.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, OnceLock},
};

use entity::{automation, automation_run, automation_signal, customer, signal, signal_hit, user};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect, Set,
};
use serde_json::{json, Map, Value};

use super::{
    config::{self, Combine, Grain, Pattern, Resolver, SignalRule, SignalTrigger},
    runs::{self, Subject},
};
use crate::timestamp;

/// An applied event as evaluation sees it: its stored row, with its resolved user and customer.
pub use crate::ingest::store::EventRow as AppliedEvent;

impl AppliedEvent {
    /// The name signals match: a custom event's `eventName`, else `$` and its type.
    pub fn signal_name(&self) -> String {
        match (&self.event_type[..], &self.event_name) {
            ("custom", Some(name)) => name.clone(),
            (ty, _) => format!("${ty}"),
        }
    }

    /// The object the matcher reads: its type-specific fields plus its own fields.
    pub fn match_view(&self) -> Value {
        // Valid JSON (it was read as such); an event's fields are always an object.
        let mut map: Map<String, Value> = serde_json::from_str(self.data.get()).unwrap_or_default();
        map.insert("type".into(), json!(self.event_type));
        if let Some(name) = &self.event_name {
            map.insert("eventName".into(), json!(name));
        }
        map.entry("url").or_insert_with(|| json!(self.url));
        map.entry("path").or_insert_with(|| json!(self.path));
        Value::Object(map)
    }

    /// The event as runs and webhook payloads show it (the `events` view's fields).
    pub fn record(&self) -> Value {
        json!({
            "id": self.id,
            "messageId": self.message_id,
            "type": self.event_type,
            "eventName": self.event_name,
            "visitorId": self.visitor_id,
            "userId": self.user_id,
            "customerId": self.customer_id,
            "url": self.url,
            "path": self.path,
            "occurredAt": timestamp::format(&self.occurred_at),
            "receivedAt": timestamp::format(&self.received_at),
            "data": self.data,
        })
    }
}

/// An active signal linked to at least one enabled automation.
#[derive(Debug, Clone)]
pub struct LoadedSignal {
    pub model: signal::Model,
    pub rule: Arc<SignalRule>,
}

impl LoadedSignal {
    pub fn reference(&self) -> Value {
        json!({ "id": self.model.id, "key": self.model.key, "name": self.model.name })
    }
}

/// An enabled `SIGNAL_OCCURRENCE` automation with its parsed trigger.
#[derive(Debug, Clone)]
pub struct LoadedAutomation {
    pub model: automation::Model,
    pub trigger: SignalTrigger,
    /// Its linked active signals.
    pub signal_ids: Vec<String>,
}

/// One organization's rules.
#[derive(Debug, Default)]
pub struct OrgRules {
    pub signals: Vec<LoadedSignal>,
    pub automations: Vec<LoadedAutomation>,
    /// Every event name some step of some signal wants.
    names: HashSet<String>,
    /// Signals whose occurrences something reads back (an `ALL`/`AT_LEAST` automation or a
    /// schedule's digest); occurrences of the others are not stored, since an `ANY` automation
    /// starts its run from the event alone.
    occurrences_read: HashSet<String>,
}

/// The rules of the organizations of one applied group.
#[derive(Debug, Default)]
pub struct Rules {
    by_org: HashMap<String, OrgRules>,
}

/// Compiled definitions, by signal id and `updated_at` (a changed signal compiles anew).
fn compiled(model: &signal::Model) -> Option<Arc<SignalRule>> {
    static CACHE: OnceLock<Mutex<HashMap<(String, i64), Option<Arc<SignalRule>>>>> =
        OnceLock::new();
    let key = (model.id.clone(), model.updated_at.timestamp_micros());
    let cache = CACHE.get_or_init(Default::default);
    if let Ok(map) = cache.lock() {
        if let Some(hit) = map.get(&key) {
            return hit.clone();
        }
    }
    let rule = config::compile_signal(model.kind, &model.definition)
        .ok()
        .map(Arc::new);
    if let Ok(mut map) = cache.lock() {
        if map.len() > 10_000 {
            map.clear();
        }
        map.insert(key, rule.clone());
    }
    rule
}

/// Enabled, non-archived automations with their active signals, as rules.
pub async fn load_enabled<C: ConnectionTrait>(
    conn: &C,
) -> Result<(Vec<automation::Model>, HashMap<String, Vec<LoadedSignal>>), DbErr> {
    let automations = automation::Entity::find()
        .filter(automation::Column::Enabled.eq(true))
        .filter(automation::Column::ArchivedAt.is_null())
        .all(conn)
        .await?;
    if automations.is_empty() {
        return Ok((automations, HashMap::new()));
    }
    let links = automation_signal::Entity::find()
        .filter(
            automation_signal::Column::AutomationId.is_in(automations.iter().map(|a| a.id.clone())),
        )
        .all(conn)
        .await?;
    let signals = signal::Entity::find()
        .filter(signal::Column::Id.is_in(links.iter().map(|l| l.signal_id.clone())))
        .filter(signal::Column::ArchivedAt.is_null())
        .all(conn)
        .await?;
    let by_id: HashMap<String, LoadedSignal> = signals
        .into_iter()
        .filter_map(|model| {
            let rule = compiled(&model)?;
            Some((model.id.clone(), LoadedSignal { model, rule }))
        })
        .collect();
    let mut per_automation: HashMap<String, Vec<LoadedSignal>> = HashMap::new();
    for link in links {
        if let Some(s) = by_id.get(&link.signal_id) {
            per_automation
                .entry(link.automation_id)
                .or_default()
                .push(s.clone());
        }
    }
    Ok((automations, per_automation))
}

impl Rules {
    /// Loads the rules of every organization; empty (one query) when none has an enabled
    /// automation.
    pub async fn load<C: ConnectionTrait>(conn: &C) -> Result<Self, DbErr> {
        let (automations, per_automation) = load_enabled(conn).await?;
        let mut by_org: HashMap<String, OrgRules> = HashMap::new();
        for model in automations {
            let linked = per_automation.get(&model.id).cloned().unwrap_or_default();
            let rules = by_org.entry(model.organization_id.clone()).or_default();
            for s in &linked {
                if !rules.signals.iter().any(|x| x.model.id == s.model.id) {
                    for step in s.rule.steps() {
                        rules.names.extend(step.event_names.iter().cloned());
                    }
                    rules.signals.push(s.clone());
                }
            }
            let parsed = config::parse_trigger(
                &model.trigger_type,
                &model.match_mode,
                &model.trigger_json,
                linked.len(),
            );
            let reads_occurrences = !matches!(
                &parsed,
                Ok(config::Trigger::Signal(t)) if t.combine == Combine::Any
            );
            if reads_occurrences {
                rules
                    .occurrences_read
                    .extend(linked.iter().map(|s| s.model.id.clone()));
            }
            if model.trigger_type != "SIGNAL_OCCURRENCE" {
                continue;
            }
            if let Ok(config::Trigger::Signal(trigger)) = parsed {
                rules.automations.push(LoadedAutomation {
                    signal_ids: linked.iter().map(|s| s.model.id.clone()).collect(),
                    model,
                    trigger,
                });
            }
        }
        Ok(Self { by_org })
    }

    pub fn is_empty(&self) -> bool {
        self.by_org.values().all(|r| r.signals.is_empty())
    }

    /// Whether some signal of the event's organization wants its name (no database access).
    pub fn wants(&self, organization_id: &str, event_type: &str, event_name: Option<&str>) -> bool {
        let Some(rules) = self.by_org.get(organization_id) else {
            return false;
        };
        match (event_type, event_name) {
            ("custom", Some(name)) => rules.names.contains(name),
            (ty, _) => rules.names.contains(&format!("${ty}")),
        }
    }
}

/// The rules, kept by an applier while the configuration they were read from is unchanged: each
/// apply reads only a version (counts and latest changes of automations, signals and their
/// links), not every enabled automation and signal with their JSON.
#[derive(Default)]
pub struct RulesCache {
    version: Option<String>,
    rules: Arc<Rules>,
}

impl RulesCache {
    pub async fn get<C: ConnectionTrait>(&mut self, conn: &C) -> Result<Arc<Rules>, DbErr> {
        let version = config_version(conn).await?;
        if self.version.as_deref() != Some(version.as_str()) {
            self.rules = Arc::new(Rules::load(conn).await?);
            self.version = Some(version);
        }
        Ok(self.rules.clone())
    }
}

/// The applier's work after applying a group: evaluation in its transaction, and the
/// processor woken when that made runs.
#[async_trait::async_trait]
impl crate::ingest::after_apply::AfterApply for RulesCache {
    async fn select(
        &mut self,
        txn: &crate::ingest::apply_txn::ApplyTxn,
        rows: &[AppliedEvent],
    ) -> Result<Vec<AppliedEvent>, DbErr> {
        let rules = self.get(txn).await?;
        if rules.is_empty() {
            return Ok(Vec::new());
        }
        // Only events some signal names are copied for evaluation.
        Ok(rows
            .iter()
            .filter(|r| rules.wants(&r.organization_id, &r.event_type, r.event_name.as_deref()))
            .cloned()
            .collect())
    }

    async fn apply(
        &mut self,
        txn: &crate::ingest::apply_txn::ApplyTxn,
        selected: &[AppliedEvent],
    ) -> Result<usize, DbErr> {
        evaluate(txn, &self.rules, selected).await
    }

    fn committed(&self, _runs_created: usize) {
        super::runs::wake();
    }
}

/// Changes whenever an automation, a signal or a link between them is added, changed, enabled,
/// disabled or archived (every such write moves `updated_at` or a count).
async fn config_version<C: ConnectionTrait>(conn: &C) -> Result<String, DbErr> {
    let backend = conn.get_database_backend();
    // Counts catch enables, disables, archives and links even from writes that leave
    // `updated_at` alone.
    let sql = "SELECT (SELECT CAST(COUNT(*) AS TEXT) || '/' \
        || CAST(COALESCE(SUM(CASE WHEN enabled THEN 1 ELSE 0 END), 0) AS TEXT) || '/' \
        || CAST(COUNT(archived_at) AS TEXT) || '/' \
        || COALESCE(CAST(MAX(updated_at) AS TEXT), '') || '/' \
        || COALESCE(CAST(MAX(enabled_at) AS TEXT), '') FROM automations) \
        || '|' || (SELECT CAST(COUNT(*) AS TEXT) || '/' || CAST(COUNT(archived_at) AS TEXT) \
        || '/' || COALESCE(CAST(MAX(updated_at) AS TEXT), '') FROM signals) \
        || '|' || (SELECT CAST(COUNT(*) AS TEXT) FROM automation_signals)";
    let row = conn
        .query_one_raw(sea_orm::Statement::from_string(backend, sql))
        .await?;
    Ok(match row {
        Some(r) => r.try_get_by_index::<String>(0)?,
        None => String::new(),
    })
}

/// Users and customers the candidates name, loaded once.
#[derive(Default)]
pub struct Identities {
    pub users: HashMap<String, user::Model>,
    pub customers: HashMap<String, customer::Model>,
}

impl Identities {
    /// The users and customers the events name (a user's customer too).
    pub async fn load<C: ConnectionTrait>(
        conn: &C,
        events: &[AppliedEvent],
    ) -> Result<Self, DbErr> {
        Self::of(
            conn,
            events.iter().filter_map(|e| e.user_id.as_deref()),
            events.iter().filter_map(|e| e.customer_id.as_deref()),
        )
        .await
    }

    /// These users and customers, and the users' customers: two queries per 500 ids.
    pub async fn of<'a, C: ConnectionTrait>(
        conn: &C,
        user_ids: impl Iterator<Item = &'a str>,
        customer_ids: impl Iterator<Item = &'a str>,
    ) -> Result<Self, DbErr> {
        let user_ids: HashSet<&str> = user_ids.collect();
        let mut me = Self::default();
        for chunk in user_ids.into_iter().collect::<Vec<_>>().chunks(500) {
            for u in user::Entity::find()
                .filter(user::Column::Id.is_in(chunk.iter().copied()))
                .all(conn)
                .await?
            {
                me.users.insert(u.id.clone(), u);
            }
        }
        let customer_ids: HashSet<String> = customer_ids
            .map(str::to_string)
            .chain(me.users.values().filter_map(|u| u.customer_id.clone()))
            .collect();
        for chunk in customer_ids.into_iter().collect::<Vec<_>>().chunks(500) {
            for c in customer::Entity::find()
                .filter(customer::Column::Id.is_in(chunk.iter().cloned()))
                .all(conn)
                .await?
            {
                me.customers.insert(c.id.clone(), c);
            }
        }
        Ok(me)
    }
}

/// The subject an event is about under a signal's grain and resolver, when the resolver's
/// identifier is known after identity resolution.
pub fn resolve_subject(
    rule: &SignalRule,
    event: &AppliedEvent,
    ids: &Identities,
) -> Option<Subject> {
    let user = event.user_id.as_ref().and_then(|id| ids.users.get(id));
    let customer_id = event
        .customer_id
        .clone()
        .or_else(|| user.and_then(|u| u.customer_id.clone()));
    let customer = customer_id.as_ref().and_then(|id| ids.customers.get(id));
    let key = match rule.resolver {
        Resolver::UserId => user.and_then(|u| u.external_id.clone()),
        Resolver::Email => user.and_then(|u| u.email.clone()),
        Resolver::CustomerId => customer.and_then(|c| c.external_id.clone()),
        Resolver::VisitorId => event.visitor_id.clone(),
    }?;
    match rule.grain {
        Grain::Customer => {
            let c = customer?;
            Some(Subject {
                grain: Grain::Customer,
                id: c.id.clone(),
                key,
                name: Some(c.name.clone()),
                customer_id: Some(c.id.clone()),
            })
        }
        Grain::User => match user {
            Some(u) => Some(Subject {
                grain: Grain::User,
                id: u.id.clone(),
                key,
                name: u.name.clone().or_else(|| u.email.clone()),
                customer_id,
            }),
            // An anonymous visitor is a user subject when the resolver is its visitorId.
            None if rule.resolver == Resolver::VisitorId => Some(Subject {
                grain: Grain::User,
                id: format!("visitor:{key}"),
                key,
                name: None,
                customer_id,
            }),
            None => None,
        },
    }
}

/// Evaluates applied events (in order) against the rules; returns how many runs it created.
pub async fn evaluate<C: ConnectionTrait>(
    conn: &C,
    rules: &Rules,
    events: &[AppliedEvent],
) -> Result<usize, DbErr> {
    if events.is_empty() {
        return Ok(0);
    }
    let ids = Identities::load(conn, events).await?;
    let mut pending = Pending::default();
    for event in events {
        let Some(org_rules) = rules.by_org.get(&event.organization_id) else {
            continue;
        };
        let name = event.signal_name();
        let view = event.match_view();
        for signal in &org_rules.signals {
            let wanted = signal
                .rule
                .steps()
                .iter()
                .any(|m| m.event_names.contains(&name));
            if !wanted {
                continue;
            }
            let Some(subject) = resolve_subject(&signal.rule, event, &ids) else {
                continue;
            };
            if !occurs(conn, signal, &subject, event, &view, &mut pending).await? {
                continue;
            }
            if org_rules.occurrences_read.contains(&signal.model.id) {
                pending.hit(signal, &subject, event, signal_hit::OCCURRENCE);
            }
            for automation in &org_rules.automations {
                if !automation.signal_ids.contains(&signal.model.id) {
                    continue;
                }
                // Only events received after the automation was enabled start its runs.
                if automation
                    .model
                    .enabled_at
                    .is_some_and(|at| event.received_at < at)
                {
                    continue;
                }
                let occurred = combined(
                    conn,
                    automation,
                    org_rules,
                    signal,
                    &subject,
                    event,
                    &mut pending,
                )
                .await?;
                if let Some(signals) = occurred {
                    pending.runs.push(runs::subject_run(
                        &automation.model,
                        &automation.trigger,
                        &subject,
                        event,
                        signals,
                    ));
                }
            }
        }
    }
    pending.flush_hits(conn).await?;
    runs::insert_new(conn, std::mem::take(&mut pending.runs)).await
}

/// Whether the event makes the signal occur for the subject (recording pattern steps).
async fn occurs<C: ConnectionTrait>(
    conn: &C,
    signal: &LoadedSignal,
    subject: &Subject,
    event: &AppliedEvent,
    view: &Value,
    pending: &mut Pending,
) -> Result<bool, DbErr> {
    match &signal.rule.pattern {
        Pattern::Match(m) => Ok(m.matches(view)),
        Pattern::Count {
            matcher,
            min,
            within,
        } => {
            if !matcher.matches(view) {
                return Ok(false);
            }
            pending.hit(signal, subject, event, 0);
            pending.flush_hits(conn).await?;
            let count = signal_hit::Entity::find()
                .filter(signal_hit::Column::SignalId.eq(&signal.model.id))
                .filter(signal_hit::Column::SubjectId.eq(&subject.id))
                .filter(signal_hit::Column::Step.eq(0))
                .filter(signal_hit::Column::At.gte(event.occurred_at - *within))
                .filter(signal_hit::Column::At.lte(event.occurred_at))
                .count(conn)
                .await?;
            Ok(count >= *min)
        }
        Pattern::Sequence { steps, within } => {
            let mut fires = false;
            for (i, step) in steps.iter().enumerate() {
                if !step.matches(view) {
                    continue;
                }
                pending.hit(signal, subject, event, i as i32);
                if i + 1 == steps.len() {
                    pending.flush_hits(conn).await?;
                    fires = sequence_complete(conn, signal, subject, event, steps.len(), *within)
                        .await?;
                }
            }
            Ok(fires)
        }
    }
}

/// Whether steps 0..n-1 were hit in order within `within` before this last step.
async fn sequence_complete<C: ConnectionTrait>(
    conn: &C,
    signal: &LoadedSignal,
    subject: &Subject,
    event: &AppliedEvent,
    steps: usize,
    within: chrono::Duration,
) -> Result<bool, DbErr> {
    let since = event.occurred_at - within;
    let hits = signal_hit::Entity::find()
        .filter(signal_hit::Column::SignalId.eq(&signal.model.id))
        .filter(signal_hit::Column::SubjectId.eq(&subject.id))
        .filter(signal_hit::Column::Step.gte(0))
        .filter(signal_hit::Column::At.gte(since))
        .filter(signal_hit::Column::At.lte(event.occurred_at))
        .all(conn)
        .await?;
    // Greedy: the earliest hit of each step after the previous step's.
    let mut after = since;
    for step in 0..steps.saturating_sub(1) {
        let next = hits
            .iter()
            .filter(|h| h.step == step as i32 && h.at >= after && h.event_id != event.id)
            .map(|h| h.at)
            .min();
        match next {
            Some(at) => after = at,
            None => return Ok(false),
        }
    }
    Ok(after <= event.occurred_at)
}

/// Hits and runs of one evaluation, written in multi-row statements: hits before anything
/// reads them back (patterns, `ALL`/`AT_LEAST`) and at the end, runs at the end.
#[derive(Default)]
struct Pending {
    hits: Vec<signal_hit::ActiveModel>,
    runs: Vec<automation_run::ActiveModel>,
}

impl Pending {
    fn hit(&mut self, signal: &LoadedSignal, subject: &Subject, event: &AppliedEvent, step: i32) {
        self.hits.push(signal_hit::ActiveModel {
            id: Set(crate::ids::time_ordered_id()),
            organization_id: Set(event.organization_id.clone()),
            signal_id: Set(signal.model.id.clone()),
            subject_id: Set(subject.id.clone()),
            step: Set(step),
            at: Set(event.occurred_at),
            event_id: Set(event.id.clone()),
        });
    }

    async fn flush_hits<C: ConnectionTrait>(&mut self, conn: &C) -> Result<(), DbErr> {
        // 7 columns: 2,000 rows stay under every backend's bound-parameter limit.
        while !self.hits.is_empty() {
            let rest = self.hits.split_off(self.hits.len().min(2_000));
            let chunk = std::mem::replace(&mut self.hits, rest);
            signal_hit::Entity::insert_many(chunk)
                .exec_without_returning(conn)
                .await?;
        }
        Ok(())
    }
}

/// The signals that occurred for the subject when the automation's match mode is met by this
/// occurrence; `None` when it is not.
async fn combined<C: ConnectionTrait>(
    conn: &C,
    automation: &LoadedAutomation,
    rules: &OrgRules,
    signal: &LoadedSignal,
    subject: &Subject,
    event: &AppliedEvent,
    pending: &mut Pending,
) -> Result<Option<Vec<Value>>, DbErr> {
    let needed = match automation.trigger.combine {
        Combine::Any => return Ok(Some(vec![signal.reference()])),
        Combine::All => automation.signal_ids.len(),
        Combine::AtLeast(n) => n,
    };
    pending.flush_hits(conn).await?;
    let occurred: Vec<String> = signal_hit::Entity::find()
        .select_only()
        .column(signal_hit::Column::SignalId)
        .distinct()
        .filter(signal_hit::Column::SignalId.is_in(automation.signal_ids.clone()))
        .filter(signal_hit::Column::SubjectId.eq(&subject.id))
        .filter(signal_hit::Column::Step.eq(signal_hit::OCCURRENCE))
        .filter(signal_hit::Column::At.gte(event.occurred_at - automation.trigger.window))
        .into_tuple()
        .all(conn)
        .await?;
    if occurred.len() < needed {
        return Ok(None);
    }
    Ok(Some(
        rules
            .signals
            .iter()
            .filter(|s| occurred.contains(&s.model.id))
            .map(LoadedSignal::reference)
            .collect(),
    ))
}
