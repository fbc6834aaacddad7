//! A client for OpenAI-compatible Chat Completions with tool calling (OpenAI, Ollama, vLLM):
//! `POST {base}/chat/completions`, bearer key, time-outs, and retries with backoff on 429, 5xx,
//! time-outs and connection errors. The wire types cover the subset the run loop uses; fields a
//! server adds are ignored. Errors never carry the key.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::time::Instant;

use super::LlmConfig;

/// One message of the conversation.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Servers send `null` content beside tool calls; it is then written back as `null`.
    #[serde(default)]
    pub content: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_empty"
    )]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<ToolCall>, D::Error> {
    Ok(Option::<Vec<ToolCall>>::deserialize(d)?.unwrap_or_default())
}

impl ChatMessage {
    pub fn system(text: impl Into<String>) -> Self {
        Self {
            role: "system".into(),
            content: Some(text.into()),
            ..Self::default()
        }
    }
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: "user".into(),
            content: Some(text.into()),
            ..Self::default()
        }
    }
    pub fn tool_result(call_id: &str, text: impl Into<String>) -> Self {
        Self {
            role: "tool".into(),
            content: Some(text.into()),
            tool_call_id: Some(call_id.to_string()),
            ..Self::default()
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".into()
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// A JSON text per the API; some local servers send an object, which is kept as its text.
    #[serde(default, deserialize_with = "arguments_text")]
    pub arguments: String,
}

fn arguments_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

/// A function tool offered to the model.
#[derive(Clone, Debug, Serialize)]
pub struct ToolDefinition {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionDefinition,
}

#[derive(Clone, Debug, Serialize)]
pub struct FunctionDefinition {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

impl ToolDefinition {
    pub fn function(name: &str, description: &str, parameters: Value) -> Self {
        Self {
            kind: "function",
            function: FunctionDefinition {
                name: name.to_string(),
                description: description.to_string(),
                parameters,
            },
        }
    }
}

#[derive(Debug, Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: &'a [ToolDefinition],
}

#[derive(Debug, Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    message: ChatMessage,
}

/// Token counts of one completion.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: i64,
    #[serde(default)]
    pub completion_tokens: i64,
    #[serde(default)]
    pub total_tokens: i64,
}

/// One answer of the model.
#[derive(Debug)]
pub struct Completion {
    pub message: ChatMessage,
    pub usage: Usage,
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The model kept failing (429, 5xx, time-outs) through every attempt, or refused the
    /// request (4xx).
    #[error("the model endpoint answered {status}{detail} after {attempts} attempt(s)")]
    Status {
        status: u16,
        detail: String,
        attempts: u32,
    },
    #[error("the model endpoint could not be reached after {attempts} attempt(s): {error}")]
    Transport { error: String, attempts: u32 },
    #[error("the model's answer is not a Chat Completions response: {0}")]
    Malformed(String),
    #[error("the run's time ran out while waiting for the model")]
    Deadline,
}

/// Talks to one configured endpoint.
#[derive(Clone, Debug)]
pub struct ModelClient {
    config: LlmConfig,
    http: reqwest::Client,
}

impl ModelClient {
    pub fn new(config: LlmConfig) -> Self {
        Self {
            config,
            http: reqwest::Client::new(),
        }
    }

    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// Asks for the next message, retrying transient failures until `deadline`.
    pub async fn complete(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDefinition],
        deadline: Instant,
    ) -> Result<Completion, ModelError> {
        let url = format!("{}/chat/completions", self.config.base_url);
        let body = ChatRequest {
            model: &self.config.model,
            messages,
            tools,
        };
        let mut backoff = self.config.first_backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(ModelError::Deadline);
            }
            let mut request = self
                .http
                .post(&url)
                .timeout(remaining.min(self.config.request_timeout))
                .json(&body);
            if let Some(key) = &self.config.api_key {
                request = request.bearer_auth(key);
            }
            let failure = match request.send().await {
                Ok(resp) if resp.status().is_success() => {
                    let text = resp.text().await.map_err(|e| ModelError::Transport {
                        error: self.clean(&e.without_url().to_string()),
                        attempts: attempt,
                    })?;
                    return parse(&text);
                }
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let retry_after = resp
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let text = resp.text().await.unwrap_or_default();
                    let error = ModelError::Status {
                        status,
                        detail: self.detail(&text),
                        attempts: attempt,
                    };
                    if status != 429 && status < 500 {
                        return Err(error);
                    }
                    (error, retry_after)
                }
                Err(e) if e.is_timeout() && Instant::now() >= deadline => {
                    return Err(ModelError::Deadline)
                }
                Err(e) => (
                    ModelError::Transport {
                        error: self.clean(&chain(&e.without_url())),
                        attempts: attempt,
                    },
                    None,
                ),
            };
            let (error, retry_after) = failure;
            if attempt >= self.config.max_attempts {
                return Err(error);
            }
            let wait = retry_after.unwrap_or(backoff).min(Duration::from_secs(10));
            if Instant::now() + wait >= deadline {
                return Err(error);
            }
            tracing::info!(attempt, error = %error, "model call failed; retrying");
            tokio::time::sleep(wait).await;
            backoff = backoff.saturating_mul(2);
        }
    }

    /// A short, key-free excerpt of an error body.
    fn detail(&self, body: &str) -> String {
        let message = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| {
                v.pointer("/error/message")
                    .or_else(|| v.get("error"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_else(|| body.trim().to_string());
        if message.is_empty() {
            return String::new();
        }
        let short: String = message.chars().take(300).collect();
        format!(": {}", self.clean(&short))
    }

    /// Removes the key from text that came back from the server or the HTTP stack.
    fn clean(&self, text: &str) -> String {
        match &self.config.api_key {
            Some(key) if !key.is_empty() => text.replace(key.as_str(), "<redacted>"),
            _ => text.to_string(),
        }
    }
}

/// An error with its causes ("error sending request: connection refused").
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn parse(text: &str) -> Result<Completion, ModelError> {
    let response: ChatResponse =
        serde_json::from_str(text).map_err(|e| ModelError::Malformed(e.to_string()))?;
    let choice = response
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::Malformed("no choices".into()))?;
    Ok(Completion {
        message: choice.message,
        usage: response.usage.unwrap_or_default(),
    })
}
