//! Schedules as users write them: a 5-field cron (`minute hour day-of-month month
//! day-of-week`) read in an IANA time zone. Agents and schedule automations both run on them.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;

/// Each field's bounds, for ranges that wrap around.
const FIELD_BOUNDS: [(u16, u16); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)];

/// Rewrites the fields into the form the cron parser takes: ranges that run from a higher to a
/// lower number as the two ranges they wrap around to (`5-1` -> `5-6,0-1`), keeping their
/// step, and a list with a bare `*` in it as `*` (which it means; the parser refuses `*` in a
/// list).
fn wrap_ranges(cron: &str) -> String {
    let fields: Vec<String> = cron
        .split_whitespace()
        .zip(FIELD_BOUNDS)
        .map(|(field, (min, max))| {
            if field.split(',').any(|item| item == "*") {
                return "*".to_string();
            }
            let items: Vec<String> = field
                .split(',')
                .map(|item| {
                    let (range, step) = match item.split_once('/') {
                        Some((r, s)) => (r, format!("/{s}")),
                        None => (item, String::new()),
                    };
                    let bounds = range
                        .split_once('-')
                        .and_then(|(a, b)| Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?)));
                    match bounds {
                        // Day of week 7 is Sunday, 0 after the wrap.
                        Some((a, b)) if a > b => {
                            let a = if max == 6 && a == 7 { 0 } else { a };
                            if a <= b {
                                format!("{a}-{b}{step}")
                            } else {
                                format!("{a}-{max}{step},{min}-{b}{step}")
                            }
                        }
                        _ => item.to_string(),
                    }
                })
                .collect();
            items.join(",")
        })
        .collect();
    fields.join(" ")
}

/// A parsed schedule.
#[derive(Clone, Debug)]
pub struct Schedule {
    cron: Cron,
    tz: Tz,
}

impl Schedule {
    /// Parses a 5-field POSIX cron (`minute hour day-of-month month day-of-week`) and an IANA
    /// time zone; the errors name what is wrong.
    pub fn parse(cron: &str, timezone: &str) -> Result<Self, ScheduleError> {
        let fields = cron.split_whitespace().count();
        if fields != 5 {
            return Err(ScheduleError::Cron(format!(
                "`{cron}` has {fields} fields; a schedule has 5: minute hour day-of-month month day-of-week"
            )));
        }
        let parsed = Cron::from_str(&wrap_ranges(cron.trim()))
            .map_err(|e| ScheduleError::Cron(format!("`{cron}` is not a cron expression: {e}")))?;
        let tz = Tz::from_str(timezone.trim()).map_err(|_| {
            ScheduleError::Timezone(format!(
                "`{timezone}` is not an IANA time zone (e.g. `UTC`, `Europe/Berlin`)"
            ))
        })?;
        Ok(Self { cron: parsed, tz })
    }

    /// The first time strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&after.with_timezone(&self.tz), false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0}")]
    Cron(String),
    #[error("{0}")]
    Timezone(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::patterns::CRON_PATTERN;

    /// Every expression the description's pattern admits parses, wrapped ranges included.
    #[test]
    fn the_cron_pattern_admits_only_expressions_that_parse() {
        let pattern = jsonschema::validator_for(
            &serde_json::json!({"type": "string", "pattern": CRON_PATTERN}),
        )
        .expect("pattern compiles");
        let admitted = [
            "0 9 * * 1",
            "*/15 * * * *",
            "0 9 * * 1-5",
            "0 22 * * 5-1",
            "0 0 31-2 * 7-2",
            "59 23 31 12 7",
            "0,30 8-18/2 1,15 */3 0",
            // Found by schemathesis: `*` inside lists, steps past the field's range.
            " 44,44-20/98    17,05,04-8,1,*/29,13,*/25,23,*,04-19,06-4,*  23-07,*,08,*  \
             *,*/2,*,*/4,*/21  0-0/28,*     ",
        ];
        for cron in admitted {
            assert!(pattern.is_valid(&serde_json::json!(cron)), "{cron} refused");
            assert!(
                Schedule::parse(cron, "UTC").is_ok(),
                "{cron} does not parse"
            );
        }
        for refused in [
            "0",
            "60 * * * *",
            "* * * * * *",
            "0/5 * * * *",
            "*/0 * * * *",
        ] {
            assert!(
                !pattern.is_valid(&serde_json::json!(refused)),
                "{refused} admitted"
            );
        }
        assert_eq!(wrap_ranges("0 22 * * 5-1"), "0 22 * * 5-6,0-1");
        assert_eq!(wrap_ranges("0 1,*,5-1 * * *"), "0 * * * *");
    }
}
