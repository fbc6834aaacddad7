//! HTTP calls of the command-line client: Bearer key, JSON in and out, and the service's error
//! message when a call fails.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use super::{config::Credentials, CliError};

pub struct Client {
    http: reqwest::Client,
    creds: Credentials,
}

/// The human message in any of the service's error bodies.
pub fn error_message(body: &Value) -> Option<String> {
    body.get("error")
        .and_then(|e| {
            e.as_str()
                .map(str::to_string)
                .or_else(|| e.get("message").and_then(Value::as_str).map(str::to_string))
        })
        .or_else(|| {
            body.get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
}

impl Client {
    pub fn new(creds: Credentials) -> Result<Self, CliError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| CliError::Usage(e.to_string()))?;
        Ok(Self { http, creds })
    }

    pub fn base_url(&self) -> &str {
        &self.creds.base_url
    }

    /// Sends a request; a non-2xx answer becomes [`CliError::Service`] with the service's message.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let url = format!("{}{path}", self.creds.base_url);
        let mut req = self
            .http
            .request(method, &url)
            .bearer_auth(&self.creds.api_key)
            .query(query);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| CliError::Usage(format!("cannot reach {}: {e}", self.creds.base_url)))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| CliError::Usage(format!("unreadable answer: {e}")))?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
        if status.is_success() {
            return Ok(value);
        }
        let message = error_message(&value).unwrap_or_else(|| {
            if text.trim().is_empty() {
                format!("HTTP {status}")
            } else {
                text.trim().to_string()
            }
        });
        Err(CliError::Service {
            status: status.as_u16(),
            message,
            body: value,
        })
    }

    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, CliError> {
        self.call(Method::GET, path, query, None).await
    }

    pub async fn post(&self, path: &str, body: Option<&Value>) -> Result<Value, CliError> {
        self.call(Method::POST, path, &[], body).await
    }
}
