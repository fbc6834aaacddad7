//! The agents' configuration from the environment: the model endpoint and the bounds of a run.

use std::{fmt, time::Duration};

/// An OpenAI-compatible Chat Completions endpoint.
#[derive(Clone)]
pub struct LlmConfig {
    /// Base URL including `/v1` (`https://api.openai.com/v1`, `http://localhost:11434/v1`).
    pub base_url: String,
    /// Sent as `Authorization: Bearer ...` when set; local servers often need none.
    pub api_key: Option<String>,
    pub model: String,
    /// Time limit of one HTTP request to the model.
    pub request_timeout: Duration,
    /// Attempts per model call on 429, 5xx, time-outs and connection errors.
    pub max_attempts: u32,
    /// Wait before the first retry; doubled for each further one.
    pub first_backoff: Duration,
}

// The key never reaches a log line or an error message, also not through `{:?}`.
impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("request_timeout", &self.request_timeout)
            .field("max_attempts", &self.max_attempts)
            .field("first_backoff", &self.first_backoff)
            .finish()
    }
}

/// How agents run on this instance.
#[derive(Clone, Debug)]
pub struct AgentsConfig {
    /// `None` without `CUSTINTEL_LLM_BASE_URL`: scheduled runs are `SKIPPED` and automations use
    /// their template message.
    pub llm: Option<LlmConfig>,
    /// Model turns per run.
    pub max_turns: u32,
    /// Wall-clock limit of a run.
    pub run_timeout: Duration,
    /// Tokens (prompt + completion, summed over turns) a run may use.
    pub token_budget: i64,
    /// How often an instance looks for due schedules.
    pub schedule_tick: Duration,
}

pub const DEFAULT_MAX_TURNS: u32 = 8;
pub const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_TOKEN_BUDGET: i64 = 100_000;

impl Default for AgentsConfig {
    fn default() -> Self {
        Self {
            llm: None,
            max_turns: DEFAULT_MAX_TURNS,
            run_timeout: DEFAULT_RUN_TIMEOUT,
            token_budget: DEFAULT_TOKEN_BUDGET,
            schedule_tick: Duration::from_secs(15),
        }
    }
}

impl LlmConfig {
    /// A model at `base_url` with the defaults for time-outs and retries.
    pub fn new(base_url: &str, api_key: Option<String>, model: &str) -> Self {
        Self {
            base_url: base_url.trim().trim_end_matches('/').to_string(),
            api_key: api_key.filter(|k| !k.trim().is_empty()),
            model: model.trim().to_string(),
            request_timeout: Duration::from_secs(30),
            max_attempts: 4,
            first_backoff: Duration::from_millis(500),
        }
    }
}

impl AgentsConfig {
    /// `CUSTINTEL_LLM_BASE_URL`, `CUSTINTEL_LLM_API_KEY`, `CUSTINTEL_LLM_MODEL` (default
    /// `gpt-4o-mini`), `CUSTINTEL_AGENT_TOKEN_BUDGET` (default 100000),
    /// `CUSTINTEL_AGENT_SCHEDULE_TICK_SECS` (default 15).
    pub fn from_env() -> Self {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let llm = var("CUSTINTEL_LLM_BASE_URL").map(|base| {
            LlmConfig::new(
                &base,
                var("CUSTINTEL_LLM_API_KEY"),
                &var("CUSTINTEL_LLM_MODEL").unwrap_or_else(|| "gpt-4o-mini".into()),
            )
        });
        let mut config = Self {
            llm,
            ..Self::default()
        };
        if let Some(budget) = var("CUSTINTEL_AGENT_TOKEN_BUDGET").and_then(|v| v.parse().ok()) {
            config.token_budget = budget;
        }
        if let Some(secs) = var("CUSTINTEL_AGENT_SCHEDULE_TICK_SECS").and_then(|v| v.parse().ok()) {
            config.schedule_tick = Duration::from_secs(secs);
        }
        config
    }
}
