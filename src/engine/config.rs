//! The engine's reading of stored configuration, as DESIGN.md "Automation engine" decides:
//! an automation's `triggerJson` (signal occurrence or schedule) and `audienceFilterJson`, and a
//! signal's definition (`EVENT_MATCH` or `EVENT_PATTERN`) compiled into a rule.
//!
//! Every parser returns the issues it finds with paths relative to the JSON it was given, so a
//! create answers 400 naming the field and an enable answers 409 naming it too.

pub use super::contract::{Dedupe, Grain, Resolver};
use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use entity::{
    customer::{self, BillingStatus},
    signal::SignalKind,
    user,
};
use serde_json::Value;

use super::{
    contract,
    matching::{Condition, EventMatcher},
};
use crate::{
    cron::Schedule,
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
    if trigger_type == "SCHEDULE" {
        let schedule: contract::ScheduleTrigger = contract::SCHEDULE.parse(json)?;
        return read_schedule(schedule).map(Trigger::Schedule);
    }
    if match_mode == "AT_LEAST" {
        let trigger: contract::AtLeastSignalOccurrenceTrigger =
            contract::AT_LEAST_SIGNAL_OCCURRENCE.parse(json)?;
        let n = trigger.at_least;
        if n as usize > active_signals.max(1) {
            return Err(vec![issue(
                &["atLeast"],
                format!(
                    "`{n}` must be an integer from 1 to the number of linked active signals ({active_signals})"
                ),
            )]);
        }
        return Ok(Trigger::Signal(signal_trigger(
            Combine::AtLeast(n as usize),
            trigger.window.as_deref(),
            trigger.dedupe,
        )));
    }
    let trigger: contract::SignalOccurrenceTrigger = contract::SIGNAL_OCCURRENCE.parse(json)?;
    let combine = if match_mode == "ALL" {
        Combine::All
    } else {
        Combine::Any
    };
    Ok(Trigger::Signal(signal_trigger(
        combine,
        trigger.window.as_deref(),
        trigger.dedupe,
    )))
}

/// A duration the contract's pattern admitted.
fn span(raw: Option<&str>, default: Duration) -> Duration {
    raw.and_then(parse_span).unwrap_or(default)
}

fn signal_trigger(combine: Combine, window: Option<&str>, dedupe: Option<Dedupe>) -> SignalTrigger {
    SignalTrigger {
        combine,
        window: span(window, Duration::days(7)),
        dedupe: dedupe.unwrap_or(Dedupe::Day),
    }
}

fn read_schedule(schedule: contract::ScheduleTrigger) -> Result<ScheduleTrigger, Issues> {
    let (cadence, timezone) = match schedule {
        contract::ScheduleTrigger::Cron(c) => {
            let tz = c.timezone.map_or_else(|| "UTC".to_string(), |t| t.0);
            match Schedule::parse(&c.cron, &tz) {
                Ok(s) => (Cadence::Cron(s), tz),
                Err(crate::cron::ScheduleError::Cron(m)) => return Err(vec![issue(&["cron"], m)]),
                Err(crate::cron::ScheduleError::Timezone(m)) => {
                    return Err(vec![issue(&["timezone"], m)])
                }
            }
        }
        contract::ScheduleTrigger::Every(e) => (
            Cadence::Every(span(Some(&e.every), Duration::days(1))),
            e.timezone.map_or_else(|| "UTC".to_string(), |t| t.0),
        ),
    };
    let Ok(timezone) = Tz::from_str(timezone.trim()) else {
        return Err(vec![issue(
            &["timezone"],
            format!("`{timezone}` is not an IANA time zone (e.g. `UTC`, `Europe/Berlin`)"),
        )]);
    };
    Ok(ScheduleTrigger { cadence, timezone })
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

/// Reads `audienceFilterJson`.
pub fn parse_audience(json: &Value) -> Result<Audience, Issues> {
    let filter: contract::AudienceFilter = contract::AUDIENCE.parse(json)?;
    let duration = |raw: Option<String>| raw.as_deref().and_then(parse_span);
    Ok(Audience {
        billing_status: filter.billing_status,
        min_mrr_cents: filter.min_mrr_cents,
        max_mrr_cents: filter.max_mrr_cents,
        traits: filter
            .traits
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| match v {
                Value::Array(items) => (k, items),
                other => (k, vec![other]),
            })
            .collect(),
        stage: filter
            .stage
            .map(|stages| stages.iter().map(|s| s.as_str().to_string()).collect()),
        active_within: duration(filter.active_within),
        inactive_for: duration(filter.inactive_for),
    })
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
            if mrr.is_none_or(|m| m < min) {
                return Err(format!("mrrCents is below {min}"));
            }
        }
        if let Some(max) = self.max_mrr_cents {
            if mrr.is_none_or(|m| m > max) {
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
            if last_activity.is_none_or(|at| at < now - within) {
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

/// Compiles a signal's stored definition; issues are relative to the definition.
pub fn compile_signal(kind: SignalKind, definition: &Value) -> Result<SignalRule, Issues> {
    if kind == SignalKind::EventPattern {
        let d: contract::EventPatternDefinition = contract::EVENT_PATTERN.parse(definition)?;
        let pattern = match d.pattern {
            contract::Pattern::Count {
                event_names,
                property_conditions,
                condition_mode,
                min,
                within,
            } => Pattern::Count {
                matcher: matcher(event_names, property_conditions, condition_mode),
                min,
                within: span(Some(&within), Duration::days(1)),
            },
            contract::Pattern::Sequence { steps, within } => Pattern::Sequence {
                steps: steps
                    .into_iter()
                    .map(|s| matcher(s.event_names, s.property_conditions, s.condition_mode))
                    .collect(),
                within: span(Some(&within), Duration::days(1)),
            },
        };
        return Ok(SignalRule {
            grain: d.grain,
            resolver: d.subject_resolver,
            pattern,
        });
    }
    let d: contract::EventMatchDefinition = contract::EVENT_MATCH.parse(definition)?;
    Ok(SignalRule {
        grain: d.grain,
        resolver: d.subject_resolver,
        pattern: Pattern::Match(matcher(
            d.event_names,
            d.property_conditions,
            Some(d.condition_mode),
        )),
    })
}

fn matcher(
    event_names: Vec<String>,
    conditions: Vec<contract::PropertyCondition>,
    mode: Option<contract::ConditionMode>,
) -> EventMatcher {
    EventMatcher {
        event_names,
        conditions: conditions
            .into_iter()
            .map(|c| {
                let (property, operator, value) = c.into_parts();
                Condition {
                    path: property.split('.').map(str::to_string).collect(),
                    operator,
                    value,
                }
            })
            .collect(),
        all: mode != Some(contract::ConditionMode::Any),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    /// The issues' paths, sorted.
    fn paths(issues: &Issues) -> Vec<String> {
        let mut paths: Vec<String> = issues
            .iter()
            .map(|i| serde_json::to_string(&i.path).unwrap_or_default())
            .collect();
        paths.sort();
        paths
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
        // The contract's issues come first; the rules across fields are checked on JSON that
        // fits it.
        assert_eq!(paths(&err), vec![r#"["x"]"#]);
        let err =
            parse_trigger("SIGNAL_OCCURRENCE", "AT_LEAST", &json!({"atLeast": 3}), 2).unwrap_err();
        assert_eq!(paths(&err), vec![r#"["atLeast"]"#]);
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
        assert_eq!(paths(&err), vec![r#"["cron"]"#, r#"["every"]"#]);
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
        assert_eq!(paths(&err), vec![r#"["billingStatus",0]"#, r#"["plans"]"#]);
        let a = parse_audience(
            &json!({"billingStatus": ["PAYING"], "traits": {"plan": ["pro", "growth"]}}),
        )
        .unwrap();
        assert_eq!(a.traits[0].1.len(), 2);
    }

    #[test]
    fn patterns_compile_and_name_bad_fields() {
        let ok = compile_signal(
            SignalKind::EventPattern,
            &json!({"grain": "user", "subjectResolver": "email", "pattern": {
                "type": "sequence", "within": "1d",
                "steps": [{"eventNames": ["a"]}, {"eventNames": ["b"], "conditionMode": "ANY"}]}}),
        );
        assert!(
            matches!(ok.unwrap().pattern, Pattern::Sequence { ref steps, .. } if steps.len() == 2)
        );
        let err = compile_signal(
            SignalKind::EventPattern,
            &json!({"grain": "user", "subjectResolver": "email", "pattern": {
                "type": "count", "within": "1x", "min": 0, "eventNames": []}}),
        )
        .unwrap_err();
        assert_eq!(
            paths(&err),
            vec![
                r#"["pattern","eventNames"]"#,
                r#"["pattern","min"]"#,
                r#"["pattern","within"]"#
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
