//! `/api/agents`: agent.list, agent.get, agent.update, agent.disable, and the agent's runs
//! (agent.run.list, agent.run.get).

use poem_openapi::{
    param::{Path, Query},
    Enum, Object, OpenApi,
};
use serde::Deserialize;
use serde_json::Value;

use super::{action_ctx, caller, reply, reply_change, ApiTags, AppState};
use crate::{
    agents::definition as agents,
    agents::run_records,
    command_data,
    http::api::ApiKeyAuth,
    http::envelope::{ActionResponse, ResourceRef},
    http::request::JsonBody,
    http::types::{ts_opt, Nullable, Timestamp},
};
use entity::{agent, agent_run};

/// Changes to an agent; every field is optional and only sent fields change.
#[derive(Debug, Default, Deserialize, Object)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[oai(rename_all = "camelCase")]
pub struct AgentUpdate {
    /// New display name, 1 to 120 characters.
    #[oai(validator(min_length = 1, max_length = 120))]
    pub display_name: Option<String>,
    /// The agent's instructions, 1 to 10000 characters. Accepted here, never returned.
    #[oai(validator(min_length = 1, max_length = 10000))]
    pub instructions: Option<String>,
    /// Keys of the actions the agent may take; each at least 1 character. The service knows
    /// `notify_destination`, `tag_customer` and `create_fact`; other keys are reported on the
    /// agent's runs and never run.
    pub action_keys: Option<Vec<String>>,
    /// The agent's own schedule (extension).
    pub schedule: Option<ScheduleUpdate>,
}

/// When the agent runs on its own: a 5-field cron read in a time zone.
#[derive(Debug, Default, Deserialize, Object)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[oai(rename_all = "camelCase")]
pub struct ScheduleUpdate {
    /// Whether the schedule runs. Enabling needs a cron (sent now or set before).
    pub enabled: bool,
    /// 5-field POSIX cron: minute hour day-of-month month day-of-week (`0 9 * * 1` is Mondays
    /// at 09:00). Omitted: the current one is kept.
    pub cron: Option<String>,
    /// IANA time zone the cron is read in (`Europe/Berlin`). Omitted: the current one is kept
    /// (`UTC` by default).
    pub timezone: Option<String>,
}

impl From<AgentUpdate> for agents::AgentChanges {
    fn from(body: AgentUpdate) -> Self {
        Self {
            display_name: body.display_name,
            instructions: body.instructions,
            action_keys: body.action_keys,
            schedule: body.schedule.map(|s| agents::ScheduleChanges {
                enabled: s.enabled,
                cron: s.cron,
                timezone: s.timezone,
            }),
        }
    }
}

/// The agent's run schedule.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct AgentSchedule {
    pub enabled: bool,
    /// 5-field cron (minute hour day-of-month month day-of-week); null when never set.
    pub cron: Nullable<String>,
    /// IANA time zone the cron is read in.
    pub timezone: String,
    /// Next planned run; null when disabled or not scheduled.
    pub next_run_at: Nullable<Timestamp>,
    /// Null until the agent has run.
    pub last_run_at: Nullable<Timestamp>,
    /// Null until a run has succeeded.
    pub last_successful_run_at: Nullable<Timestamp>,
}

/// An AI agent. Its instructions are write-only and not returned.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct Agent {
    pub id: String,
    pub agent_key: String,
    pub display_name: String,
    pub template_version: String,
    pub action_keys: Vec<String>,
    pub schedule: AgentSchedule,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<agent::Model> for Agent {
    fn from(m: agent::Model) -> Self {
        let action_keys = m
            .action_keys
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            id: m.id,
            agent_key: m.agent_key,
            display_name: m.display_name,
            template_version: m.template_version,
            action_keys,
            schedule: AgentSchedule {
                enabled: m.schedule_enabled,
                cron: Nullable(m.schedule_cron),
                timezone: m.schedule_timezone,
                next_run_at: ts_opt(m.next_run_at),
                last_run_at: ts_opt(m.last_run_at),
                last_successful_run_at: ts_opt(m.last_successful_run_at),
            },
            created_at: m.created_at.into(),
            updated_at: m.updated_at.into(),
        }
    }
}

/// `data` of agent.list.
#[derive(Debug, Object)]
pub struct AgentListData {
    pub agents: Vec<Agent>,
}
command_data!(AgentListData, "agent.list");

/// `data` of agent.get.
#[derive(Debug, Object)]
pub struct AgentGetData {
    pub agent: Agent,
}
command_data!(AgentGetData, "agent.get");

/// `data` of agent.update.
#[derive(Debug, Object)]
pub struct AgentUpdateData {
    pub agent: Agent,
}
command_data!(AgentUpdateData, "agent.update");

/// `data` of agent.disable.
#[derive(Debug, Object)]
pub struct AgentDisableData {
    pub agent: Agent,
}
command_data!(AgentDisableData, "agent.disable");

/// What started a run.
#[derive(Debug, Enum)]
#[oai(rename_all = "lowercase")]
pub enum AgentRunTrigger {
    /// The agent's own schedule.
    Schedule,
    /// An automation run that names the agent.
    Automation,
}

/// Where a run stands.
#[derive(Debug, Enum)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AgentRunStatus {
    Running,
    Succeeded,
    Failed,
    /// Not run, e.g. no language model is configured; `reason` says why.
    Skipped,
}

impl From<agent_run::AgentRunStatus> for AgentRunStatus {
    fn from(stored: agent_run::AgentRunStatus) -> Self {
        match stored {
            agent_run::AgentRunStatus::Running => AgentRunStatus::Running,
            agent_run::AgentRunStatus::Succeeded => AgentRunStatus::Succeeded,
            agent_run::AgentRunStatus::Failed => AgentRunStatus::Failed,
            agent_run::AgentRunStatus::Skipped => AgentRunStatus::Skipped,
        }
    }
}

/// One call of a gateway read tool during a run.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct AgentRunToolCall {
    pub name: String,
    /// The input the model sent.
    pub input: Value,
    /// Size of the result the tool answered with.
    pub result_bytes: u64,
    pub duration_ms: u64,
    /// Null unless the call failed.
    pub error: Nullable<String>,
}

/// What became of an action.
#[derive(Debug, Enum)]
#[oai(rename_all = "lowercase")]
pub enum AgentRunActionStatus {
    Done,
    /// Not among the agent's `actionKeys`: never run.
    Refused,
    Failed,
}

/// One action the model asked for during a run.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct AgentRunAction {
    pub key: String,
    pub input: Value,
    pub status: AgentRunActionStatus,
    /// Null unless refused or failed.
    pub error: Nullable<String>,
}

/// Tokens the run used, summed over its model turns.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct AgentRunUsage {
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub total_tokens: i64,
}

/// One run of an agent: its model turns, tool calls, actions, token counts and final message.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct AgentRun {
    pub id: String,
    pub agent_id: String,
    pub trigger: AgentRunTrigger,
    /// The automation run this run made the message for; null for scheduled runs.
    pub automation_run_id: Nullable<String>,
    pub status: AgentRunStatus,
    /// Why the run failed or was skipped; null otherwise.
    pub reason: Nullable<String>,
    /// Things to know that did not stop the run (e.g. an action key the service does not know).
    pub warnings: Vec<String>,
    pub started_at: Timestamp,
    /// Null while running.
    pub finished_at: Nullable<Timestamp>,
    /// Model turns taken (at most 8).
    pub turns: i32,
    pub tool_calls: Vec<AgentRunToolCall>,
    pub actions: Vec<AgentRunAction>,
    pub usage: AgentRunUsage,
    /// The model's final message; null unless the run succeeded.
    pub message: Nullable<String>,
}

fn text_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

impl From<agent_run::Model> for AgentRun {
    fn from(m: agent_run::Model) -> Self {
        let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
        Self {
            id: m.id,
            agent_id: m.agent_id,
            trigger: match m.trigger.as_str() {
                "automation" => AgentRunTrigger::Automation,
                _ => AgentRunTrigger::Schedule,
            },
            automation_run_id: Nullable(m.automation_run_id),
            status: m.status.into(),
            reason: Nullable(m.reason),
            warnings: list(&m.warnings)
                .iter()
                .filter_map(|w| w.as_str().map(str::to_string))
                .collect(),
            started_at: m.started_at.into(),
            finished_at: ts_opt(m.finished_at),
            turns: m.turns,
            tool_calls: list(&m.tool_calls)
                .into_iter()
                .map(|c| AgentRunToolCall {
                    name: text_of(&c, "name").unwrap_or_default(),
                    result_bytes: c.get("resultBytes").and_then(Value::as_u64).unwrap_or(0),
                    duration_ms: c.get("durationMs").and_then(Value::as_u64).unwrap_or(0),
                    error: Nullable(text_of(&c, "error")),
                    input: c.get("input").cloned().unwrap_or(Value::Null),
                })
                .collect(),
            actions: list(&m.actions)
                .into_iter()
                .map(|a| AgentRunAction {
                    key: text_of(&a, "key").unwrap_or_default(),
                    status: match a.get("status").and_then(Value::as_str) {
                        Some("done") => AgentRunActionStatus::Done,
                        Some("refused") => AgentRunActionStatus::Refused,
                        _ => AgentRunActionStatus::Failed,
                    },
                    error: Nullable(text_of(&a, "error")),
                    input: a.get("input").cloned().unwrap_or(Value::Null),
                })
                .collect(),
            usage: AgentRunUsage {
                prompt_tokens: m.prompt_tokens,
                completion_tokens: m.completion_tokens,
                total_tokens: m.total_tokens,
            },
            message: Nullable(m.message),
        }
    }
}

/// `data` of agent.run.list.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct AgentRunListData {
    /// Newest first.
    pub runs: Vec<AgentRun>,
    /// Pass as `cursor` for the next page; `""` on the last page.
    pub next_cursor: String,
}
command_data!(AgentRunListData, "agent.run.list");

/// `data` of agent.run.get.
#[derive(Debug, Object)]
pub struct AgentRunGetData {
    pub run: AgentRun,
}
command_data!(AgentRunGetData, "agent.run.get");

fn touched(a: &agent::Model) -> Vec<ResourceRef> {
    vec![ResourceRef::new("agent", a.id.clone())]
}

pub struct AgentsApi {
    pub state: AppState,
}

#[OpenApi(tag = "ApiTags::Agents")]
impl AgentsApi {
    /// List agents
    ///
    /// Every agent of the key's organization, oldest first.
    #[oai(path = "/api/agents", method = "get", operation_id = "listAgents")]
    async fn list(&self, key: ApiKeyAuth) -> ActionResponse<AgentListData> {
        let auth = caller!(self.state, key, AgentListData);
        reply(
            agents::list(&self.state.db, &auth.organization_id)
                .await
                .map(|rows| {
                    let resources = rows.iter().flat_map(touched).collect();
                    let data = AgentListData {
                        agents: rows.into_iter().map(Agent::from).collect(),
                    };
                    (data, resources, None)
                }),
        )
    }

    /// Get an agent
    ///
    /// One agent, by its id or its `agentKey`.
    #[oai(path = "/api/agents/:id", method = "get", operation_id = "getAgent")]
    async fn get(
        &self,
        key: ApiKeyAuth,
        #[oai(validator(min_length = 1))] id: Path<String>,
    ) -> ActionResponse<AgentGetData> {
        let auth = caller!(self.state, key, AgentGetData);
        reply(
            agents::get(&self.state.db, &auth.organization_id, &id)
                .await
                .map(|a| (touched(&a), a))
                .map(|(r, a)| (AgentGetData { agent: a.into() }, r, None)),
        )
    }

    /// Update an agent
    ///
    /// Changes the sent fields: `displayName` (1 to 120 characters), `instructions` (1 to 10000),
    /// `actionKeys`, and (extension) `schedule: {enabled, cron, timezone}`, after which
    /// `schedule.nextRunAt` shows the next run. Needs the write scope.
    #[oai(
        path = "/api/agents/:id",
        method = "patch",
        operation_id = "updateAgent"
    )]
    async fn update(
        &self,
        key: ApiKeyAuth,
        #[oai(validator(min_length = 1))] id: Path<String>,
        body: JsonBody<AgentUpdate>,
    ) -> ActionResponse<AgentUpdateData> {
        let auth = caller!(self.state, key, AgentUpdateData);
        let ctx = action_ctx::<AgentUpdateData>(&auth);
        reply_change(
            agents::update(&self.state.db, &ctx, &id, body.0.into()).await,
            |v| AgentUpdateData { agent: v.into() },
        )
    }

    /// Disable an agent
    ///
    /// Stops the agent's schedule: `schedule.enabled` becomes false and `schedule.nextRunAt`
    /// null. Needs the write scope.
    #[oai(
        path = "/api/agents/:id/disable",
        method = "post",
        operation_id = "disableAgent"
    )]
    async fn disable(
        &self,
        key: ApiKeyAuth,
        #[oai(validator(min_length = 1))] id: Path<String>,
    ) -> ActionResponse<AgentDisableData> {
        let auth = caller!(self.state, key, AgentDisableData);
        let ctx = action_ctx::<AgentDisableData>(&auth);
        reply_change(agents::disable(&self.state.db, &ctx, &id).await, |v| {
            AgentDisableData { agent: v.into() }
        })
    }

    /// List an agent's runs (extension)
    ///
    /// The runs of one agent (by id or `agentKey`), newest first: by its schedule or for
    /// automation runs, with each model turn's tool calls, actions, token counts and final
    /// message. `status` filters (`RUNNING`, `SUCCEEDED`, `FAILED`, `SKIPPED`); `limit` 1 to 100
    /// (default 20); `cursor` is the previous page's `nextCursor`.
    #[oai(
        path = "/api/agents/:id/runs",
        method = "get",
        operation_id = "listAgentRuns"
    )]
    async fn runs(
        &self,
        key: ApiKeyAuth,
        #[oai(validator(min_length = 1))] id: Path<String>,
        /// Only runs with this status.
        status: Query<Option<String>>,
        /// Runs per page, 1 to 100 (default 20).
        limit: Query<Option<u32>>,
        /// The previous page's `nextCursor`.
        cursor: Query<Option<String>>,
    ) -> ActionResponse<AgentRunListData> {
        let auth = caller!(self.state, key, AgentRunListData);
        reply(
            run_records::list(
                &self.state.db,
                &auth.organization_id,
                &id,
                status.0.as_deref(),
                limit.0,
                cursor.0.as_deref(),
            )
            .await
            .map(|page| {
                let resources = page
                    .runs
                    .iter()
                    .map(|r| ResourceRef::new("agent_run", r.id.clone()))
                    .collect();
                let data = AgentRunListData {
                    runs: page.runs.into_iter().map(AgentRun::from).collect(),
                    next_cursor: page.next_cursor,
                };
                (data, resources, None)
            }),
        )
    }

    /// Get an agent run (extension)
    ///
    /// One run of the agent (by id or `agentKey`), with its tool calls, actions, token counts
    /// and final message.
    #[oai(
        path = "/api/agents/:id/runs/:run_id",
        method = "get",
        operation_id = "getAgentRun"
    )]
    async fn run(
        &self,
        key: ApiKeyAuth,
        #[oai(validator(min_length = 1))] id: Path<String>,
        #[oai(validator(min_length = 1))] run_id: Path<String>,
    ) -> ActionResponse<AgentRunGetData> {
        let auth = caller!(self.state, key, AgentRunGetData);
        reply(
            run_records::get(&self.state.db, &auth.organization_id, &id, &run_id)
                .await
                .map(|r| {
                    let resources = vec![ResourceRef::new("agent_run", r.id.clone())];
                    (AgentRunGetData { run: r.into() }, resources, None)
                }),
        )
    }
}
