//! The JSON that configures signals and automations, as types: a signal's definition, an
//! automation's `triggerJson` and `audienceFilterJson`. Their JSON Schema is what the API
//! description shows for these fields and what every reader checks (a create, `custintel apply`,
//! an enable), so what is documented and what is enforced come from one definition. Rules that
//! span fields (`atLeast` with `matchMode`, `cron` or `every`) are said in the field's
//! description and checked in [`super::config`].

use std::{collections::BTreeMap, sync::LazyLock};

use chrono::{DateTime, Datelike, Utc};
use entity::customer::BillingStatus;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::matching::Operator;
use crate::{
    tools::list_users::Stage,
    validation::{
        patterns::{time_zone_pattern, CRON_PATTERN, DURATION_PATTERN as SPAN_PATTERN},
        Contract,
    },
};

/// How often a subject may start a run of one automation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
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

/// What an occurrence is about.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
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
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
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

/// Whether every property condition must hold (`ALL`) or one (`ANY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum ConditionMode {
    #[serde(rename = "ALL")]
    All,
    #[serde(rename = "ANY")]
    Any,
}

/// The operator of a condition that compares the property with a `value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ComparisonOperator {
    Eq,
    Neq,
    Contains,
    Gt,
    Gte,
    Lt,
    Lte,
}

/// The operator of a condition that holds when the property is present and not null.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExistsOperator {
    Exists,
}

/// A condition comparing an event property with a value: `eq`/`neq` JSON equality (numbers
/// as numbers), `contains` a substring or an array element, `gt`/`gte`/`lt`/`lte` numbers or
/// numeric strings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComparisonCondition {
    /// A dot path looked up in the event's `properties`, then in its own fields (`url`, `path`,
    /// `utm.source`, ...).
    #[schemars(regex(pattern = r"\S"))]
    pub property: String,
    pub operator: ComparisonOperator,
    /// The value compared with; any JSON.
    pub value: Value,
}

/// A condition that holds when the event property is present and not null.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExistsCondition {
    /// A dot path, as for a comparison.
    #[schemars(regex(pattern = r"\S"))]
    pub property: String,
    pub operator: ExistsOperator,
}

/// One condition on an event property: a comparison with a `value`, or `exists` (no value).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PropertyCondition {
    Comparison(ComparisonCondition),
    Exists(ExistsCondition),
}

impl PropertyCondition {
    /// The property path, operator and compared value (null for `exists`).
    pub fn into_parts(self) -> (String, Operator, Value) {
        match self {
            PropertyCondition::Exists(c) => (c.property, Operator::Exists, Value::Null),
            PropertyCondition::Comparison(c) => {
                let operator = match c.operator {
                    ComparisonOperator::Eq => Operator::Eq,
                    ComparisonOperator::Neq => Operator::Neq,
                    ComparisonOperator::Contains => Operator::Contains,
                    ComparisonOperator::Gt => Operator::Gt,
                    ComparisonOperator::Gte => Operator::Gte,
                    ComparisonOperator::Lt => Operator::Lt,
                    ComparisonOperator::Lte => Operator::Lte,
                };
                (c.property, operator, c.value)
            }
        }
    }
}

/// Definition of an `EVENT_MATCH` signal: every event with one of `eventNames` that meets the
/// conditions is an occurrence. All five fields are required; other keys are refused.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventMatchDefinition {
    pub grain: Grain,
    pub subject_resolver: Resolver,
    /// A `custom` event matches by its `eventName`, every other type by `$` and its type
    /// (`$pageview`, `$form`, ...). Case-sensitive.
    #[schemars(length(min = 1), inner(length(min = 1)))]
    pub event_names: Vec<String>,
    pub property_conditions: Vec<PropertyCondition>,
    pub condition_mode: ConditionMode,
}

/// One step of a `sequence` pattern.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatternStep {
    #[schemars(length(min = 1), inner(length(min = 1)))]
    pub event_names: Vec<String>,
    #[serde(default)]
    pub property_conditions: Vec<PropertyCondition>,
    /// Default `ALL`.
    pub condition_mode: Option<ConditionMode>,
}

/// What an `EVENT_PATTERN` signal waits for.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Pattern {
    /// The subject reached `min` matching events within `within`.
    #[serde(rename_all = "camelCase")]
    Count {
        #[schemars(length(min = 1), inner(length(min = 1)))]
        event_names: Vec<String>,
        #[serde(default)]
        property_conditions: Vec<PropertyCondition>,
        /// Default `ALL`.
        condition_mode: Option<ConditionMode>,
        #[schemars(range(min = 1, max = u64::MAX))]
        min: u64,
        /// `<n>h|d|w`.
        #[schemars(regex(pattern = SPAN_PATTERN))]
        within: String,
    },
    /// The steps happened in order within `within`; it fires on the last.
    Sequence {
        #[schemars(length(min = 2))]
        steps: Vec<PatternStep>,
        /// `<n>h|d|w`.
        #[schemars(regex(pattern = SPAN_PATTERN))]
        within: String,
    },
}

/// Definition of an `EVENT_PATTERN` signal (declared with `custintel apply`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventPatternDefinition {
    pub grain: Grain,
    pub subject_resolver: Resolver,
    pub pattern: Pattern,
}

/// `triggerJson` of a `SIGNAL_OCCURRENCE` automation whose `matchMode` is `ANY` or `ALL`; every
/// key is optional.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignalOccurrenceTrigger {
    /// For `matchMode` `ALL`: how far back the linked signals' occurrences count, `<n>h|d|w`
    /// (default `7d`).
    #[schemars(regex(pattern = SPAN_PATTERN))]
    pub window: Option<String>,
    /// Unread: `ANY` and `ALL` count every linked signal.
    #[schemars(range(min = 1, max = u32::MAX))]
    pub at_least: Option<u32>,
    /// A subject starts at most one run per automation per UTC calendar hour, day or ISO week;
    /// `none` does not limit (default `day`).
    pub dedupe: Option<Dedupe>,
}

/// `triggerJson` of a `SIGNAL_OCCURRENCE` automation whose `matchMode` is `AT_LEAST`: `atLeast`
/// is required.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AtLeastSignalOccurrenceTrigger {
    /// How far back the linked signals' occurrences count, `<n>h|d|w` (default `7d`).
    #[schemars(regex(pattern = SPAN_PATTERN))]
    pub window: Option<String>,
    /// How many distinct linked active signals must have occurred, from 1 to their number when
    /// the automation is enabled.
    #[schemars(range(min = 1, max = u32::MAX))]
    pub at_least: u32,
    /// A subject starts at most one run per automation per UTC calendar hour, day or ISO week;
    /// `none` does not limit (default `day`).
    pub dedupe: Option<Dedupe>,
}

/// An IANA time zone such as `Europe/Berlin`.
#[derive(Debug, Clone, Deserialize)]
pub struct TimeZone(pub String);

impl JsonSchema for TimeZone {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TimeZone".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "An IANA time zone such as `Europe/Berlin`.",
            "type": "string",
            "pattern": time_zone_pattern(),
        })
    }
}

/// `triggerJson` of a `SCHEDULE` automation on a cron.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CronSchedule {
    /// Five cron fields (minute, hour, day of month, month, day of week) read in `timezone`:
    /// `0 9 * * 1-5` is weekdays at 09:00. Numbers, `*`, `a-b` ranges (a range from a higher
    /// to a lower number wraps around), `,` lists and `/n` steps on `*` and ranges.
    #[schemars(regex(pattern = CRON_PATTERN))]
    pub cron: String,
    /// Default `UTC`.
    pub timezone: Option<TimeZone>,
}

/// `triggerJson` of a `SCHEDULE` automation at a fixed interval.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EverySchedule {
    /// A run every `<n>h|d|w`, counted from the time the automation is enabled.
    #[schemars(regex(pattern = SPAN_PATTERN))]
    pub every: String,
    /// Default `UTC`.
    pub timezone: Option<TimeZone>,
}

/// `triggerJson` of a `SCHEDULE` automation: a `cron` or an `every`, not both.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ScheduleTrigger {
    Cron(CronSchedule),
    Every(EverySchedule),
}

/// `audienceFilterJson`: who an automation's runs are for, checked against the subject (a user
/// subject's customer for the customer fields) when a run starts. `{}`, the default, is
/// everyone.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AudienceFilter {
    /// The customer's billing status is one of these.
    pub billing_status: Option<Vec<BillingStatus>>,
    /// The customer's MRR is at least this many cents.
    #[schemars(range(min = 0, max = i64::MAX))]
    pub min_mrr_cents: Option<i64>,
    /// The customer's MRR is at most this many cents.
    #[schemars(range(min = 0, max = i64::MAX))]
    pub max_mrr_cents: Option<i64>,
    /// Per trait key, the value the customer's trait must equal, or an array of values it must
    /// be one of.
    pub traits: Option<BTreeMap<String, Value>>,
    /// A user subject's journey stage is one of these.
    pub stage: Option<Vec<Stage>>,
    /// Active within `<n>h|d|w`.
    #[schemars(regex(pattern = SPAN_PATTERN))]
    pub active_within: Option<String>,
    /// Not active for `<n>h|d|w`.
    #[schemars(regex(pattern = SPAN_PATTERN))]
    pub inactive_for: Option<String>,
}

pub static EVENT_MATCH: LazyLock<Contract> = LazyLock::new(Contract::of::<EventMatchDefinition>);
pub static EVENT_PATTERN: LazyLock<Contract> =
    LazyLock::new(Contract::of::<EventPatternDefinition>);
pub static SIGNAL_OCCURRENCE: LazyLock<Contract> =
    LazyLock::new(Contract::of::<SignalOccurrenceTrigger>);
pub static AT_LEAST_SIGNAL_OCCURRENCE: LazyLock<Contract> =
    LazyLock::new(Contract::of::<AtLeastSignalOccurrenceTrigger>);
pub static SCHEDULE: LazyLock<Contract> = LazyLock::new(Contract::of::<ScheduleTrigger>);
pub static AUDIENCE: LazyLock<Contract> = LazyLock::new(Contract::of::<AudienceFilter>);

/// The contracts the API description shows, by the component name it gives them.
pub fn components() -> Vec<(&'static str, &'static Contract)> {
    vec![
        ("EventMatchDefinition", &*EVENT_MATCH),
        ("EventPatternDefinition", &*EVENT_PATTERN),
        ("SignalOccurrenceTrigger", &*SIGNAL_OCCURRENCE),
        (
            "AtLeastSignalOccurrenceTrigger",
            &*AT_LEAST_SIGNAL_OCCURRENCE,
        ),
        ("ScheduleTrigger", &*SCHEDULE),
        ("AudienceFilter", &*AUDIENCE),
    ]
}
