//! The patterns the service checks strings against (durations, cron expressions, endpoint URLs,
//! time zones), each beside the words an issue uses when a value does not match it: a pattern
//! is no message, and the time zones' one lists every zone. The features that take these
//! values, and the API description, read the patterns from here.

use std::sync::LazyLock;

use serde_json::Value;

use super::shown;

/// What a value that does not match `pattern` should be, in words (a pattern is no message;
/// one lists every time zone).
pub(crate) fn pattern_message(pattern: &str, value: &Value) -> String {
    let shown = shown(value);
    if pattern == DURATION_PATTERN {
        format!("`{shown}` is not a duration: a whole number from 1 to 100000 followed by h, d or w, e.g. `7d`")
    } else if pattern == r"\S" {
        "must not be empty".to_string()
    } else if pattern == CRON_PATTERN {
        format!(
            "`{shown}` is not a cron expression: five fields (minute hour day-of-month month \
             day-of-week) of numbers, `*`, `a-b` ranges, `,` lists and `/n` steps, e.g. `0 9 * * 1-5`"
        )
    } else if pattern == ENDPOINT_URL_PATTERN {
        "must start with https:// and a host name, or with http:// followed by localhost, \
         127.0.0.1, [::1] or ::1 and then a port, a path or the end"
            .to_string()
    } else if pattern == time_zone_pattern() {
        format!("`{shown}` is not an IANA time zone (e.g. `UTC`, `Europe/Berlin`)")
    } else if pattern.contains("whsec_") {
        "must be the endpoint's signing secret, starting with `whsec_`".to_string()
    } else {
        format!("`{shown}` is not in the form this field takes (see its description)")
    }
}

/// A duration as DESIGN.md writes it: a whole number from 1 to 100000 followed by `h`, `d` or
/// `w`. Issues with it say so in words.
pub const DURATION_PATTERN: &str = r"^\s*0*([1-9][0-9]{0,4}|100000)[hdw]\s*$";

/// One cron field's item pattern: `*` or `*/n`, a number, or a range `a-b` (optionally `/n`).
macro_rules! cron_field {
    ($value:literal) => {
        concat!(
            r"(\*(/[1-9][0-9]?)?|",
            $value,
            "(-",
            $value,
            r"(/[1-9][0-9]?)?)?)",
            r"(,(\*(/[1-9][0-9]?)?|",
            $value,
            "(-",
            $value,
            r"(/[1-9][0-9]?)?)?))*"
        )
    };
}

/// The cron expressions this service takes, as a pattern for the description: five fields
/// (minute 0-59, hour 0-23, day of month 1-31, month 1-12, day of week 0-7 with 0 and 7
/// Sunday) of `*`, numbers, `a-b` ranges and `,` lists, with `/n` steps on `*` and ranges. A
/// range from a higher to a lower number wraps around (`5-1` in day of week is Friday to
/// Monday). Every expression it admits parses.
pub const CRON_PATTERN: &str = concat!(
    "^ *",
    cron_field!("[0-5]?[0-9]"),
    " +",
    cron_field!("(0?[0-9]|1[0-9]|2[0-3])"),
    " +",
    cron_field!("(0?[1-9]|[12][0-9]|3[01])"),
    " +",
    cron_field!("(0?[1-9]|1[0-2])"),
    " +",
    cron_field!("[0-7]"),
    " *$"
);

/// `notify::destinations::check_endpoint_url`'s rule as a pattern, for the description: an `https://` URL with a
/// host name (a label with a letter last) and an optional port, or `http://` to a loopback host;
/// the rest printable ASCII (a URL's own alphabet; other text is percent-encoded).
/// Every URL it admits passes the check (a unit test holds the two together).
pub const ENDPOINT_URL_PATTERN: &str = concat!(
    r"^(https://([A-Za-z0-9-]+\.)*[A-Za-z0-9-]*[A-Za-z][A-Za-z0-9-]*",
    r"(:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?",
    r"([/?#][!-~]*)?",
    r"|http://(localhost|127\.0\.0\.1|\[::1\]|::1)([:/][!-~]*)?)$"
);

/// The IANA time zones a schedule may be read in (chrono-tz's list).
pub fn time_zone_names() -> Vec<&'static str> {
    chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect()
}

/// The time zone names as one pattern rather than an `enum`: SDK generators turn an enum into
/// constants, and `Etc/GMT+1` and `Etc/GMT-1` would become the same constant.
pub fn time_zone_pattern() -> &'static str {
    static PATTERN: LazyLock<String> = LazyLock::new(|| {
        let names: Vec<String> = time_zone_names()
            .into_iter()
            .map(|n| n.replace('+', "\\+").replace('.', "\\."))
            .collect();
        format!("^({})$", names.join("|"))
    });
    &PATTERN
}
