//! Validation issues (`{path, message}`) and serde parsing that reports the path of what does
//! not fit. Shared by every domain module; the HTTP side turns issues into its error bodies.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// One segment of a validation path: an object key or an array index.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum PathSegment {
    Key(String),
    Index(i64),
}

impl From<&str> for PathSegment {
    fn from(value: &str) -> Self {
        Self::Key(value.to_string())
    }
}

impl From<usize> for PathSegment {
    fn from(value: usize) -> Self {
        Self::Index(value as i64)
    }
}

/// A validation issue: where in the input, and what is wrong there.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ValidationIssue {
    /// Keys and array indexes from the root of the input to the offending value; empty for the
    /// input as a whole.
    pub path: Vec<PathSegment>,
    pub message: String,
}

impl ValidationIssue {
    pub fn new(path: Vec<PathSegment>, message: impl Into<String>) -> Self {
        Self {
            path,
            message: message.into(),
        }
    }

    pub fn at(field: &str, message: impl Into<String>) -> Self {
        Self::new(vec![field.into()], message)
    }

    pub fn root(message: impl Into<String>) -> Self {
        Self::new(vec![], message)
    }
}

/// Collects issues while validating a parsed body.
#[derive(Debug, Default)]
pub struct Issues(pub Vec<ValidationIssue>);

impl Issues {
    pub fn push(&mut self, path: Vec<PathSegment>, message: impl Into<String>) {
        self.0.push(ValidationIssue::new(path, message));
    }

    /// Checks a string's length in characters against inclusive bounds.
    pub fn length(&mut self, path: &[&str], value: &str, min: usize, max: usize) {
        let n = value.chars().count();
        let path: Vec<PathSegment> = path.iter().map(|p| (*p).into()).collect();
        if n < min {
            self.push(path, format!("must be at least {min} character(s) long"));
        } else if n > max {
            self.push(path, format!("must be at most {max} characters long"));
        }
    }

    pub fn into_result(self) -> Result<(), Vec<ValidationIssue>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }
}

/// Parses a JSON value into `T`, reporting the path of the first value that does not fit.
pub fn parse_value<T: DeserializeOwned>(value: Value) -> Result<T, Vec<ValidationIssue>> {
    parse_from(value)
}

/// [`parse_value`] from any JSON deserializer, e.g. `&Value` when the caller keeps the value
/// (no copy of it is made).
pub fn parse_from<'de, T, D>(value: D) -> Result<T, Vec<ValidationIssue>>
where
    T: serde::Deserialize<'de>,
    D: serde::Deserializer<'de>,
    D::Error: std::fmt::Display,
{
    serde_path_to_error::deserialize::<_, T>(value).map_err(|err| {
        let mut path: Vec<PathSegment> = err
            .path()
            .iter()
            .filter_map(|seg| match seg {
                serde_path_to_error::Segment::Seq { index } => Some(PathSegment::from(*index)),
                serde_path_to_error::Segment::Map { key } => Some(key.as_str().into()),
                _ => None,
            })
            .collect();
        let message = err.inner().to_string();
        // serde reports a missing field at its parent; name the field itself. (An unknown
        // field's key is already the last segment of the path.)
        if let Some(rest) = message.strip_prefix("missing field `") {
            if let Some(end) = rest.find('`') {
                path.push(rest[..end].into());
            }
        }
        vec![ValidationIssue::new(path, describe_serde_error(&message))]
    })
}

fn describe_serde_error(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or_default();
        return format!("`{field}` is required");
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let field = rest.split('`').next().unwrap_or_default();
        return format!("unknown property `{field}`");
    }
    message.to_string()
}

/// Parses raw body bytes: JSON syntax first, then the shape of `T`.
pub fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Vec<ValidationIssue>> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(vec![ValidationIssue::root(
            "a JSON request body is required",
        )]);
    }
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| vec![ValidationIssue::root(format!("malformed JSON: {e}"))])?;
    parse_value(value)
}
