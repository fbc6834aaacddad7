//! The one text form of every `...At` value: RFC 3339 in UTC with a `Z` and millisecond
//! precision. The HTTP side's `Timestamp` writes the same form.

use chrono::{DateTime, SecondsFormat, Utc};

pub fn format(dt: &DateTime<Utc>) -> String {
    dt.to_rfc3339_opts(SecondsFormat::Millis, true)
}
