//! The engine's reading of stored configuration, as DESIGN.md "Automation engine" decides:
//! an automation's `triggerJson` (signal occurrence or schedule) and `audienceFilterJson`, and a
//! signal's definition (`EVENT_MATCH` or `EVENT_PATTERN`) compiled into a rule.
//!
//! Every parser returns the issues it finds with paths relative to the JSON it was given, so a
//! create answers 400 naming the field and an enable answers 409 naming it too.

use std::str::FromStr;

use chrono::{DateTime, Datelike, Duration, Utc};
use chrono_tz::Tz;
use entity::{
    customer::{self, BillingStatus},
    user, StatusEnum,
};
use serde_json::{Map, Value};

use super::matching::EventMatcher;
use crate::{
    agents::schedules::Schedule,
    validation::{PathSegment, ValidationIssue},
};

/// Issues with paths relative to the parsed JSON.
pub type Issues = Vec<ValidationIssue>;

fn issue(path: &[&str], message: impl Into<String>) -> ValidationIssue {
    ValidationIssue::new(
        path.iter().map(|p| PathSegment::from(*p)).collect(),
        message,
    )
}

/// Prefixes every issue's path (e.g. with `triggerJson`).
pub fn under(prefix: &[&str], issues: Issues) -> Issues {
    issues
        .into_iter()
        .map(|mut i| {
            let mut path: Vec<PathSegment> = prefix.iter().map(|p| PathSegment::from(*p)).collect();
            path.append(&mut i.path);
            i.path = path;
            i
        })
        .collect()
}

/// A window in the `<n>h|d|w` form DESIGN.md uses (the tools' durations, zero excluded).
pub fn parse_span(raw: &str) -> Option<Duration> {
    crate::tools::common::duration(raw).filter(|d| *d > Duration::zero())
}

fn span_at(obj: &Map<String, Value>, key: &str, issues: &mut Issues) -> Option<Duration> {
    let raw = obj.get(key)?;
    match raw.as_str().and_then(parse_span) {
        Some(d) => Some(d),
        None => {
            let shown = raw.as_str().map_or_else(|| raw.to_string(), str::to_string);
            issues.push(issue(
                &[key],
                format!("`{shown}` is not a duration: a number followed by h, d or w, e.g. `7d`"),
            ));
            None
        }
    }
}

fn refuse_unknown(obj: &Map<String, Value>, known: &[&str], issues: &mut Issues) {
    for key in obj.keys() {
        if !known.contains(&key.as_str()) {
            issues.push(issue(
                &[key.as_str()],
                format!("unknown key; allowed: {}", known.join(", ")),
            ));
        }
    }
}

fn as_object<'a>(json: &'a Value, issues: &mut Issues) -> Option<&'a Map<String, Value>> {
    let obj = json.as_object();
    if obj.is_none() {
        issues.push(issue(&[], "must be a JSON object"));
    }
    obj
}

/// How often a subject may start a run of one automation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dedupe {
    Hour,
    Day,
    Week,
    None,
}

impl Dedupe {
    /// The bucket an instant falls in (UTC calendar hour, day or ISO week); `None` for `none`.
    pub fn bucket(self, at: DateTime<Utc>) -> Option<String> {
        match self {
            Dedupe::Hour => Some(at.format("%Y-%m-%dT%H").to_string()),
            Dedupe::Day => Some(at.format("%Y-%m-%d").to_string()),
            Dedupe::Week => {
                let w = at.iso_week();
                Some(format!("{}-W{:02}", w.year(), w.week()))
            }
            Dedupe::None => None,
        }
    }
}

/// How the linked signals combine for a subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    Any,
    /// Every linked active signal within the window.
    All,
    /// At least this many distinct linked active signals within the window.
    AtLeast(usize),
}

/// A `SIGNAL_OCCURRENCE` trigger.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalTrigger {
    pub combine: Combine,
    pub window: Duration,
    pub dedupe: Dedupe,
}

/// When a `SCHEDULE` automation runs.
#[derive(Debug, Clone)]
pub enum Cadence {
    Cron(Schedule),
    Every(Duration),
}

#[derive(Debug, Clone)]
pub struct ScheduleTrigger {
    pub cadence: Cadence,
    pub timezone: Tz,
}

impl ScheduleTrigger {
    /// The first scheduled time strictly after `after`; `every` counts from `anchor` (the time
    /// the automation was enabled).
    pub fn next_after(&self, after: DateTime<Utc>, anchor: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.cadence {
            Cadence::Cron(schedule) => schedule.next_after(after),
            Cadence::Every(step) => {
                let step_ms = step.num_milliseconds().max(1);
                let since = (after - anchor).num_milliseconds();
                let n = if since < 0 { 0 } else { since / step_ms + 1 };
                Some(anchor + Duration::milliseconds(n * step_ms))
            }
        }
    }
}

#[derive(Debug, Clone)]
pub enum Trigger {
    Signal(SignalTrigger),
    Schedule(ScheduleTrigger),
}

/// Reads `triggerJson` for a trigger type and match mode. `active_signals` is how many active
/// signals are linked (for `AT_LEAST`'s bound).
pub fn parse_trigger(
    trigger_type: &str,
    match_mode: &str,
    json: &Value,
    active_signals: usize,
) -> Result<Trigger, Issues> {
    let mut issues = Issues::new();
    let Some(obj) = as_object(json, &mut issues) else {
        return Err(issues);
    };
    let trigger = match trigger_type {
        "SCHEDULE" => parse_schedule(obj, &mut issues).map(Trigger::Schedule),
        _ => {
            parse_signal_trigger(obj, match_mode, active_signals, &mut issues).map(Trigger::Signal)
        }
    };
    match trigger {
        Some(t) if issues.is_empty() => Ok(t),
        _ => Err(issues),
    }
}

fn parse_signal_trigger(
    obj: &Map<String, Value>,
    match_mode: &str,
    active_signals: usize,
    issues: &mut Issues,
) -> Option<SignalTrigger> {
    refuse_unknown(obj, &["window", "atLeast", "dedupe"], issues);
    let window = span_at(obj, "window", issues).unwrap_or_else(|| Duration::days(7));
    let dedupe = match obj.get("dedupe") {
        None => Dedupe::Day,
        Some(v) => match v.as_str() {
            Some("hour") => Dedupe::Hour,
            Some("day") => Dedupe::Day,
            Some("week") => Dedupe::Week,
            Some("none") => Dedupe::None,
            _ => {
                issues.push(issue(
                    &["dedupe"],
                    format!("`{v}` is not one of hour, day, week, none"),
                ));
                Dedupe::Day
            }
        },
    };
    let at_least = obj.get("atLeast");
    let combine = match match_mode {
        "ALL" => Combine::All,
        "AT_LEAST" => match at_least.and_then(Value::as_u64) {
            Some(n) if n >= 1 && (n as usize) <= active_signals.max(1) => {
                Combine::AtLeast(n as usize)
            }
            Some(_) | None => {
                let message = match at_least {
                    None => "required when matchMode is AT_LEAST".to_string(),
                    Some(v) => format!(
                        "`{v}` must be an integer from 1 to the number of linked active signals ({active_signals})"
                    ),
                };
                issues.push(issue(&["atLeast"], message));
                Combine::Any
            }
        },
        _ => Combine::Any,
    };
    if match_mode != "AT_LEAST" && at_least.is_some() {
        issues.push(issue(&["atLeast"], "only used when matchMode is AT_LEAST"));
    }
    Some(SignalTrigger {
        combine,
        window,
        dedupe,
    })
}

fn parse_schedule(obj: &Map<String, Value>, issues: &mut Issues) -> Option<ScheduleTrigger> {
    refuse_unknown(obj, &["cron", "every", "timezone"], issues);
    let tz_text = match obj.get("timezone") {
        None => "UTC",
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            issues.push(issue(&["timezone"], format!("`{other}` is not a string")));
            "UTC"
        }
    };
    let timezone = match Tz::from_str(tz_text.trim()) {
        Ok(tz) => tz,
        Err(_) => {
            issues.push(issue(
                &["timezone"],
                format!("`{tz_text}` is not an IANA time zone (e.g. `UTC`, `Europe/Berlin`)"),
            ));
            Tz::UTC
        }
    };
    let cadence = match (obj.get("cron"), obj.get("every")) {
        (Some(_), Some(_)) => {
            issues.push(issue(&["every"], "give either cron or every, not both"));
            None
        }
        (None, None) => {
            issues.push(issue(&["cron"], "a schedule needs cron or every"));
            None
        }
        (Some(cron), None) => match cron.as_str() {
            Some(text) => match Schedule::parse(text, tz_text) {
                Ok(s) => Some(Cadence::Cron(s)),
                Err(crate::agents::schedules::ScheduleError::Cron(m)) => {
                    issues.push(issue(&["cron"], m));
                    None
                }
                // The time zone was reported above.
                Err(_) => None,
            },
            None => {
                issues.push(issue(&["cron"], "must be a string such as `0 9 * * 1`"));
                None
            }
        },
        (None, Some(every)) => match every.as_str().and_then(parse_span) {
            Some(d) => Some(Cadence::Every(d)),
            None => {
                issues.push(issue(
                    &["every"],
                    format!("`{every}` is not a duration: a number followed by h, d or w"),
                ));
                None
            }
        },
    };
    cadence.map(|cadence| ScheduleTrigger { cadence, timezone })
}

/// Who an automation's runs are for (`{}` is everyone).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Audience {
    pub billing_status: Option<Vec<BillingStatus>>,
    pub min_mrr_cents: Option<i64>,
    pub max_mrr_cents: Option<i64>,
    /// Per trait key, the values it may have (one of).
    pub traits: Vec<(String, Vec<Value>)>,
    pub stage: Option<Vec<String>>,
    pub active_within: Option<Duration>,
    pub inactive_for: Option<Duration>,
}

use entity::user::STAGES;

fn string_list(
    obj: &Map<String, Value>,
    key: &str,
    allowed: &[&str],
    issues: &mut Issues,
) -> Option<Vec<String>> {
    let raw = obj.get(key)?;
    let Some(items) = raw.as_array() else {
        issues.push(issue(&[key], "must be an array of strings"));
        return None;
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(s) if allowed.contains(&s) => out.push(s.to_string()),
            _ => issues.push(ValidationIssue::new(
                vec![key.into(), PathSegment::from(i)],
                format!("`{item}` is not one of {}", allowed.join(", ")),
            )),
        }
    }
    Some(out)
}

fn int_at(obj: &Map<String, Value>, key: &str, issues: &mut Issues) -> Option<i64> {
    let raw = obj.get(key)?;
    match raw.as_i64() {
        Some(n) if n >= 0 => Some(n),
        _ => {
            issues.push(issue(&[key], format!("`{raw}` is not an integer >= 0")));
            None
        }
    }
}

/// Reads `audienceFilterJson`.
pub fn parse_audience(json: &Value) -> Result<Audience, Issues> {
    let mut issues = Issues::new();
    let Some(obj) = as_object(json, &mut issues) else {
        return Err(issues);
    };
    refuse_unknown(
        obj,
        &[
            "billingStatus",
            "minMrrCents",
            "maxMrrCents",
            "traits",
            "stage",
            "activeWithin",
            "inactiveFor",
        ],
        &mut issues,
    );
    let billing = BillingStatus::names();
    let mut audience = Audience {
        // Every listed string is one of `billing`, so each parses.
        billing_status: string_list(obj, "billingStatus", &billing, &mut issues).map(|listed| {
            listed
                .iter()
                .filter_map(|s| BillingStatus::parse(s))
                .collect()
        }),
        min_mrr_cents: int_at(obj, "minMrrCents", &mut issues),
        max_mrr_cents: int_at(obj, "maxMrrCents", &mut issues),
        stage: string_list(obj, "stage", &STAGES, &mut issues),
        active_within: span_at(obj, "activeWithin", &mut issues),
        inactive_for: span_at(obj, "inactiveFor", &mut issues),
        traits: Vec::new(),
    };
    match obj.get("traits") {
        None => {}
        Some(Value::Object(map)) => {
            for (k, v) in map {
                let values = match v {
                    Value::Array(items) => items.clone(),
                    other => vec![other.clone()],
                };
                audience.traits.push((k.clone(), values));
            }
        }
        Some(_) => issues.push(issue(&["traits"], "must be an object of trait values")),
    }
    if issues.is_empty() {
        Ok(audience)
    } else {
        Err(issues)
    }
}

impl Audience {
    pub fn is_everyone(&self) -> bool {
        *self == Audience::default()
    }

    /// Whether a subject passes: a customer subject, or a user subject with its customer (the
    /// customer fields are checked against it; a user without a customer fails them).
    pub fn admits(
        &self,
        customer: Option<&customer::Model>,
        user: Option<&user::Model>,
        now: DateTime<Utc>,
    ) -> Result<(), String> {
        if let Some(wanted) = &self.billing_status {
            let status = customer.map(|c| c.billing_status);
            if !status.is_some_and(|s| wanted.contains(&s)) {
                let wanted: Vec<&str> = wanted.iter().map(|w| w.as_str()).collect();
                return Err(format!(
                    "billingStatus {} is not one of {}",
                    status.map_or("(no customer)", BillingStatus::as_str),
                    wanted.join(", ")
                ));
            }
        }
        let mrr = customer.map(|c| c.mrr_cents);
        if let Some(min) = self.min_mrr_cents {
            if !mrr.is_some_and(|m| m >= min) {
                return Err(format!("mrrCents is below {min}"));
            }
        }
        if let Some(max) = self.max_mrr_cents {
            if !mrr.is_some_and(|m| m <= max) {
                return Err(format!("mrrCents is above {max}"));
            }
        }
        for (key, values) in &self.traits {
            let found = customer.and_then(|c| c.traits.get(key));
            if !found.is_some_and(|f| values.contains(f)) {
                return Err(format!("trait `{key}` does not match"));
            }
        }
        if let Some(stages) = &self.stage {
            let stage = user.map(|u| u.stage.as_str());
            if !stage.is_some_and(|s| stages.iter().any(|w| w == s)) {
                return Err(format!(
                    "stage {} is not one of {}",
                    stage.unwrap_or("(not a user)"),
                    stages.join(", ")
                ));
            }
        }
        let last_activity = match user {
            Some(u) => u.last_activity_at,
            None => customer.and_then(|c| c.last_activity_at),
        };
        if let Some(within) = self.active_within {
            if !last_activity.is_some_and(|at| at >= now - within) {
                return Err("not active within the audience's activeWithin".into());
            }
        }
        if let Some(inactive) = self.inactive_for {
            if last_activity.is_some_and(|at| at >= now - inactive) {
                return Err("active more recently than the audience's inactiveFor".into());
            }
        }
        Ok(())
    }
}

/// What an occurrence is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Grain {
    User,
    Customer,
}

impl Grain {
    pub fn as_str(self) -> &'static str {
        match self {
            Grain::User => "user",
            Grain::Customer => "customer",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "user" => Some(Grain::User),
            "customer" => Some(Grain::Customer),
            _ => None,
        }
    }
}

/// The identifier that must be known for a subject; its value is the subject's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Resolver {
    UserId,
    Email,
    CustomerId,
    VisitorId,
}

impl Resolver {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "userId" => Some(Resolver::UserId),
            "email" => Some(Resolver::Email),
            "customerId" => Some(Resolver::CustomerId),
            "visitorId" => Some(Resolver::VisitorId),
            _ => None,
        }
    }
}

/// A compiled signal definition.
#[derive(Debug, Clone)]
pub enum Pattern {
    /// `EVENT_MATCH`: every matching event is an occurrence.
    Match(EventMatcher),
    /// The subject reached `min` matching events within `within`.
    Count {
        matcher: EventMatcher,
        min: u64,
        within: Duration,
    },
    /// The steps happened in order within `within`; it fires on the last.
    Sequence {
        steps: Vec<EventMatcher>,
        within: Duration,
    },
}

#[derive(Debug, Clone)]
pub struct SignalRule {
    pub grain: Grain,
    pub resolver: Resolver,
    pub pattern: Pattern,
}

impl SignalRule {
    /// The matchers whose hits the engine records (one per step; one for the others).
    pub fn steps(&self) -> Vec<&EventMatcher> {
        match &self.pattern {
            Pattern::Match(m) | Pattern::Count { matcher: m, .. } => vec![m],
            Pattern::Sequence { steps, .. } => steps.iter().collect(),
        }
    }
}

const MATCH_KEYS: [&str; 3] = ["eventNames", "propertyConditions", "conditionMode"];

fn compile_matcher(
    obj: &Map<String, Value>,
    path: &[&str],
    issues: &mut Issues,
) -> Option<EventMatcher> {
    let names_ok = obj
        .get("eventNames")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            !a.is_empty() && a.iter().all(|n| n.as_str().is_some_and(|s| !s.is_empty()))
        });
    if !names_ok {
        let mut p = path.to_vec();
        p.push("eventNames");
        issues.push(issue(
            &p,
            "a non-empty array of non-empty event names is required",
        ));
        return None;
    }
    match EventMatcher::compile(&Value::Object(obj.clone())) {
        Ok(m) => Some(m),
        Err(message) => {
            let field = message.split(':').next().unwrap_or("").trim().to_string();
            let mut p: Vec<&str> = path.to_vec();
            if MATCH_KEYS.contains(&field.as_str()) {
                p.push(
                    MATCH_KEYS
                        .iter()
                        .find(|k| **k == field)
                        .copied()
                        .unwrap_or(""),
                );
            }
            issues.push(issue(&p, message));
            None
        }
    }
}

/// Compiles a signal's stored definition; issues are relative to the definition.
pub fn compile_signal(kind: &str, definition: &Value) -> Result<SignalRule, Issues> {
    let mut issues = Issues::new();
    let Some(obj) = as_object(definition, &mut issues) else {
        return Err(issues);
    };
    let grain = obj
        .get("grain")
        .and_then(Value::as_str)
        .and_then(Grain::parse);
    if grain.is_none() {
        issues.push(issue(&["grain"], "must be one of user, customer"));
    }
    let resolver = obj
        .get("subjectResolver")
        .and_then(Value::as_str)
        .and_then(Resolver::parse);
    if resolver.is_none() {
        issues.push(issue(
            &["subjectResolver"],
            "must be one of userId, email, customerId, visitorId",
        ));
    }
    let pattern = if kind == "EVENT_PATTERN" {
        refuse_unknown(obj, &["grain", "subjectResolver", "pattern"], &mut issues);
        compile_pattern(obj.get("pattern"), &mut issues)
    } else {
        refuse_unknown(
            obj,
            &[
                "grain",
                "subjectResolver",
                "eventNames",
                "propertyConditions",
                "conditionMode",
            ],
            &mut issues,
        );
        compile_matcher(obj, &[], &mut issues).map(Pattern::Match)
    };
    match (grain, resolver, pattern) {
        (Some(grain), Some(resolver), Some(pattern)) if issues.is_empty() => Ok(SignalRule {
            grain,
            resolver,
            pattern,
        }),
        _ => Err(issues),
    }
}

fn compile_pattern(raw: Option<&Value>, issues: &mut Issues) -> Option<Pattern> {
    let Some(obj) = raw.and_then(Value::as_object) else {
        issues.push(issue(
            &["pattern"],
            "an object with type count or sequence is required",
        ));
        return None;
    };
    let within = match obj
        .get("within")
        .and_then(Value::as_str)
        .and_then(parse_span)
    {
        Some(d) => Some(d),
        None => {
            issues.push(issue(
                &["pattern", "within"],
                "a duration such as `1d` is required",
            ));
            None
        }
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("count") => {
            let mut known = MATCH_KEYS.to_vec();
            known.extend(["type", "min", "within"]);
            refuse_unknown_under(obj, &known, "pattern", issues);
            let min = match obj.get("min").and_then(Value::as_u64) {
                Some(n) if n >= 1 => Some(n),
                _ => {
                    issues.push(issue(&["pattern", "min"], "an integer >= 1 is required"));
                    None
                }
            };
            let mut matcher_obj = obj.clone();
            matcher_obj.retain(|k, _| MATCH_KEYS.contains(&k.as_str()));
            let matcher = compile_matcher(&matcher_obj, &["pattern"], issues);
            Some(Pattern::Count {
                matcher: matcher?,
                min: min?,
                within: within?,
            })
        }
        Some("sequence") => {
            refuse_unknown_under(obj, &["type", "steps", "within"], "pattern", issues);
            let Some(steps) = obj
                .get("steps")
                .and_then(Value::as_array)
                .filter(|s| s.len() >= 2)
            else {
                issues.push(issue(
                    &["pattern", "steps"],
                    "an array of at least two steps is required",
                ));
                return None;
            };
            let mut compiled = Vec::new();
            for (i, step) in steps.iter().enumerate() {
                let index = i.to_string();
                let path = ["pattern", "steps", index.as_str()];
                let Some(step_obj) = step.as_object() else {
                    issues.push(issue(&path, "each step is an object"));
                    continue;
                };
                let mut step_issues = Issues::new();
                refuse_unknown(step_obj, &MATCH_KEYS, &mut step_issues);
                issues.extend(under(&path, step_issues));
                if let Some(m) = compile_matcher(step_obj, &path, issues) {
                    compiled.push(m);
                }
            }
            if compiled.len() != steps.len() {
                return None;
            }
            Some(Pattern::Sequence {
                steps: compiled,
                within: within?,
            })
        }
        _ => {
            issues.push(issue(&["pattern", "type"], "must be count or sequence"));
            None
        }
    }
}

fn refuse_unknown_under(
    obj: &Map<String, Value>,
    known: &[&str],
    prefix: &str,
    issues: &mut Issues,
) {
    let mut found = Issues::new();
    refuse_unknown(obj, known, &mut found);
    issues.extend(under(&[prefix], found));
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn paths(issues: &Issues) -> Vec<String> {
        issues
            .iter()
            .map(|i| serde_json::to_string(&i.path).unwrap_or_default())
            .collect()
    }

    #[test]
    fn signal_trigger_defaults_and_errors() {
        let t = parse_trigger("SIGNAL_OCCURRENCE", "ANY", &json!({}), 1).unwrap();
        let Trigger::Signal(s) = t else {
            panic!("signal trigger")
        };
        assert_eq!(s.dedupe, Dedupe::Day);
        assert_eq!(s.window, Duration::days(7));
        let err = parse_trigger(
            "SIGNAL_OCCURRENCE",
            "AT_LEAST",
            &json!({"atLeast": 3, "x": 1}),
            2,
        )
        .unwrap_err();
        assert_eq!(paths(&err), vec![r#"["x"]"#, r#"["atLeast"]"#]);
        assert!(parse_trigger("SIGNAL_OCCURRENCE", "AT_LEAST", &json!({"atLeast": 2}), 2).is_ok());
    }

    #[test]
    fn schedules_read_cron_the_posix_way_in_a_time_zone() {
        let t = parse_trigger(
            "SCHEDULE",
            "ANY",
            &json!({"cron": "0 9 * * 1", "timezone": "Europe/Berlin"}),
            0,
        )
        .unwrap();
        let Trigger::Schedule(s) = t else {
            panic!("schedule")
        };
        // Wednesday 2026-11-25 10:00 UTC -> Monday 2026-11-30 09:00 Berlin = 08:00 UTC.
        let now = Utc.with_ymd_and_hms(2026, 11, 25, 10, 0, 0).unwrap();
        let next = s.next_after(now, now).unwrap();
        assert_eq!(next, Utc.with_ymd_and_hms(2026, 11, 30, 8, 0, 0).unwrap());
        let err = parse_trigger(
            "SCHEDULE",
            "ANY",
            &json!({"every": "1d", "cron": "* * * * *"}),
            0,
        )
        .unwrap_err();
        assert_eq!(paths(&err), vec![r#"["every"]"#]);
        let every = parse_trigger("SCHEDULE", "ANY", &json!({"every": "2h"}), 0).unwrap();
        let Trigger::Schedule(e) = every else {
            panic!("schedule")
        };
        let anchor = now;
        assert_eq!(e.next_after(now, anchor).unwrap(), now + Duration::hours(2));
        assert_eq!(
            e.next_after(now + Duration::hours(5), anchor).unwrap(),
            now + Duration::hours(6)
        );
    }

    #[test]
    fn audience_keys_and_values_are_checked() {
        let err =
            parse_audience(&json!({"plans": ["pro"], "billingStatus": ["RICH"]})).unwrap_err();
        assert_eq!(paths(&err), vec![r#"["plans"]"#, r#"["billingStatus",0]"#]);
        let a = parse_audience(
            &json!({"billingStatus": ["PAYING"], "traits": {"plan": ["pro", "growth"]}}),
        )
        .unwrap();
        assert_eq!(a.traits[0].1.len(), 2);
    }

    #[test]
    fn patterns_compile_and_name_bad_fields() {
        let ok = compile_signal(
            "EVENT_PATTERN",
            &json!({"grain": "user", "subjectResolver": "email", "pattern": {
                "type": "sequence", "within": "1d",
                "steps": [{"eventNames": ["a"]}, {"eventNames": ["b"], "conditionMode": "ANY"}]}}),
        );
        assert!(
            matches!(ok.unwrap().pattern, Pattern::Sequence { ref steps, .. } if steps.len() == 2)
        );
        let err = compile_signal(
            "EVENT_PATTERN",
            &json!({"grain": "user", "subjectResolver": "email", "pattern": {
                "type": "count", "within": "1x", "min": 0, "eventNames": []}}),
        )
        .unwrap_err();
        assert_eq!(
            paths(&err),
            vec![
                r#"["pattern","within"]"#,
                r#"["pattern","min"]"#,
                r#"["pattern","eventNames"]"#
            ]
        );
    }

    #[test]
    fn dedupe_buckets_are_utc_calendar_periods() {
        let at = Utc.with_ymd_and_hms(2026, 1, 1, 13, 5, 0).unwrap();
        assert_eq!(Dedupe::Hour.bucket(at).unwrap(), "2026-01-01T13");
        assert_eq!(Dedupe::Week.bucket(at).unwrap(), "2026-W01");
        assert_eq!(Dedupe::None.bucket(at), None);
    }
}
