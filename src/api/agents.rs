//! `/api/agents`: agent.list, agent.get, agent.update, agent.disable.

use poem_openapi::{param::Path, Object, OpenApi};

use super::{action_ctx, caller, reply, ApiTags, AppState};
use crate::{
    auth::ApiKeyAuth,
    command_data,
    envelope::{ActionResponse, ResourceRef},
    platform::agents::{self, AgentUpdate},
    request::JsonBody,
    types::{ts_opt, Nullable, Timestamp},
};
use entity::agent;

/// The agent's run schedule.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct AgentSchedule {
    pub enabled: bool,
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
    /// `actionKeys`. Needs the write scope.
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
        reply(
            agents::update(&self.state.db, &ctx, &id, body.0)
                .await
                .map(|c| {
                    (
                        AgentUpdateData {
                            agent: c.agent.into(),
                        },
                        c.resources,
                        Some(c.audit_id),
                    )
                }),
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
        reply(agents::disable(&self.state.db, &ctx, &id).await.map(|c| {
            (
                AgentDisableData {
                    agent: c.agent.into(),
                },
                c.resources,
                Some(c.audit_id),
            )
        }))
    }
}
