//! One run of an agent: its instructions and the run's context go to the model with the offered
//! tools; the model's tool calls run (read tools through the gateway, actions only when
//! offered) until it answers with a final message, within the turn, time and token bounds.

use std::time::Instant as StdInstant;

use serde_json::{json, Value};
use tokio::time::Instant;

use super::{
    actions::{self, ActionScope},
    model_client::{ChatMessage, ModelClient, ModelError, ToolCall},
    run_records::{self, ActionRecord, ActionStatus, RunRecord, ToolCallRecord},
    tools_offered::{self, Offered, Toolbox},
    AgentRuntime, NO_MODEL,
};
use crate::tools::{self, ToolContext};
use entity::{agent, agent_run::AgentRunStatus};

/// What a tool result may put into the conversation; longer results are cut (the model is told).
const MAX_RESULT_CHARS: usize = 24_000;

/// What a run is about.
pub struct RunRequest {
    /// Becomes the user message: the automation run's subject and events, or the schedule's time.
    pub context: Value,
    /// The automation's destinations (for `notify_destination`); empty means the default.
    pub destination_ids: Vec<String>,
}

/// Makes and records one run of `agent` for `run` (already built with its trigger). Returns the
/// finished record; `None` when a scheduled run's tick was already taken by another instance.
pub async fn execute(
    runtime: &AgentRuntime,
    agent: &agent::Model,
    mut run: RunRecord,
    request: RunRequest,
) -> Result<Option<RunRecord>, sea_orm::DbErr> {
    let db = &runtime.state.db;
    let keys = tools_offered::action_keys(&agent.action_keys);
    let toolbox = Toolbox::for_agent(&keys);
    for key in &toolbox.unknown_action_keys {
        run.warnings.push(format!(
            "action key `{key}` is not an action the service knows; it was not offered"
        ));
    }
    if !run_records::start(db, &run).await? {
        return Ok(None);
    }
    match &runtime.config().llm {
        None => run.finish(AgentRunStatus::Skipped, Some(NO_MODEL.to_string())),
        Some(llm) => {
            let client = ModelClient::new(llm.clone());
            let deadline = Instant::now() + runtime.config().run_timeout;
            let outcome = tokio::time::timeout_at(
                deadline,
                converse(
                    runtime, agent, &client, &toolbox, &request, &mut run, deadline,
                ),
            )
            .await;
            match outcome {
                Ok(Ok(message)) => {
                    run.message = Some(message);
                    run.finish(AgentRunStatus::Succeeded, None);
                }
                Ok(Err(reason)) => run.finish(AgentRunStatus::Failed, Some(reason)),
                Err(_) => run.finish(
                    AgentRunStatus::Failed,
                    Some(time_limit(runtime.config().run_timeout)),
                ),
            }
        }
    }
    run_records::finish(db, &run).await?;
    tracing::info!(
        agent = %agent.id,
        run = %run.id,
        trigger = run.trigger.as_str(),
        status = run.status.as_str(),
        turns = run.turns,
        tool_calls = run.tool_calls.len(),
        total_tokens = run.total_tokens,
        reason = run.reason.as_deref().unwrap_or(""),
        "agent run finished"
    );
    Ok(Some(run))
}

fn time_limit(limit: std::time::Duration) -> String {
    format!("the run took longer than its {} s limit", limit.as_secs())
}

fn system_prompt(agent: &agent::Model, toolbox: &Toolbox) -> String {
    let actions: Vec<&str> = toolbox
        .definitions
        .iter()
        .map(|d| d.function.name.as_str())
        .filter(|n| actions::Action::from_key(n).is_some())
        .collect();
    format!(
        "You are \"{name}\", an agent of a customer-intelligence service. Read the organization's \
         customers, users, facts, sources and timelines with the `svc_` tools; they only ever \
         show this organization's data. {acting} Your last message, without tool calls, is the \
         run's result: write it for the people who receive it, concise and grounded in what the \
         tools returned.\n\nYour instructions:\n{instructions}",
        name = agent.display_name,
        acting = if actions.is_empty() {
            "You may not take actions: only read and report.".to_string()
        } else {
            format!(
                "You may act only through these tools: {}.",
                actions.join(", ")
            )
        },
        instructions = agent.instructions,
    )
}

/// The conversation; returns the final message, or why the run failed.
async fn converse(
    runtime: &AgentRuntime,
    agent: &agent::Model,
    client: &ModelClient,
    toolbox: &Toolbox,
    request: &RunRequest,
    run: &mut RunRecord,
    deadline: Instant,
) -> Result<String, String> {
    let config = runtime.config();
    let ctx = ToolContext::new(runtime.state.clone(), agent.organization_id.clone());
    let context = serde_json::to_string_pretty(&request.context).unwrap_or_default();
    let mut messages = vec![
        ChatMessage::system(system_prompt(agent, toolbox)),
        ChatMessage::user(format!("Context of this run (JSON):\n{context}")),
    ];
    while run.turns < config.max_turns {
        let completion = client
            .complete(&messages, &toolbox.definitions, deadline)
            .await
            .map_err(|e| match e {
                ModelError::Deadline => time_limit(config.run_timeout),
                e => format!("model call failed: {e}"),
            })?;
        run.turns += 1;
        run.prompt_tokens += completion.usage.prompt_tokens;
        run.completion_tokens += completion.usage.completion_tokens;
        run.total_tokens += if completion.usage.total_tokens > 0 {
            completion.usage.total_tokens
        } else {
            completion.usage.prompt_tokens + completion.usage.completion_tokens
        };
        if run.total_tokens > config.token_budget {
            return Err(format!(
                "the run used {} tokens, over its budget of {}",
                run.total_tokens, config.token_budget
            ));
        }
        let reply = completion.message;
        if reply.tool_calls.is_empty() {
            let text = reply.content.unwrap_or_default().trim().to_string();
            if text.is_empty() {
                return Err("the model answered with neither a message nor a tool call".into());
            }
            return Ok(text);
        }
        let calls = reply.tool_calls.clone();
        messages.push(ChatMessage {
            role: "assistant".into(),
            ..reply
        });
        for call in &calls {
            let answer = handle_call(agent, toolbox, request, run, &ctx, call).await;
            messages.push(ChatMessage::tool_result(&call.id, answer));
        }
    }
    Err(format!(
        "no final answer within {} model turns",
        config.max_turns
    ))
}

/// Runs one tool call and returns what the model reads back.
async fn handle_call(
    agent: &agent::Model,
    toolbox: &Toolbox,
    request: &RunRequest,
    run: &mut RunRecord,
    ctx: &ToolContext,
    call: &ToolCall,
) -> String {
    let name = call.function.name.trim();
    let parsed: Result<Value, String> = if call.function.arguments.trim().is_empty() {
        Ok(json!({}))
    } else {
        serde_json::from_str(&call.function.arguments)
            .map_err(|e| format!("the arguments are not valid JSON: {e}"))
    };
    match toolbox.lookup(name) {
        Some(Offered::ReadTool) => {
            let started = StdInstant::now();
            let (input, result) = match parsed {
                Ok(input) => {
                    let result = tools::call(ctx.clone(), name, Some(input.clone()))
                        .await
                        .map_err(|e| e.to_json());
                    (input, result)
                }
                Err(e) => (
                    Value::String(call.function.arguments.clone()),
                    Err(json!({ "error": e })),
                ),
            };
            let (text, error) = match &result {
                Ok(value) => (value.to_string(), None),
                Err(body) => (
                    body.to_string(),
                    Some(
                        body.get("error")
                            .and_then(Value::as_str)
                            .unwrap_or("the tool call failed")
                            .to_string(),
                    ),
                ),
            };
            run.tool_calls.push(ToolCallRecord {
                name: name.to_string(),
                input,
                result_bytes: text.len() as u64,
                duration_ms: started.elapsed().as_millis() as u64,
                error,
            });
            cut(text)
        }
        Some(Offered::Action(action)) => {
            let input = match parsed {
                Ok(input) => input,
                Err(e) => {
                    run.actions.push(ActionRecord {
                        key: action.key().to_string(),
                        input: Value::String(call.function.arguments.clone()),
                        status: ActionStatus::Failed,
                        error: Some(e.clone()),
                    });
                    return json!({ "error": e }).to_string();
                }
            };
            // A context of its own: reads it makes hold a connection for this action only.
            let action_ctx = ctx.clone();
            let scope = ActionScope {
                ctx: &action_ctx,
                run_id: &run.id,
                agent_id: &agent.id,
                agent_name: &agent.display_name,
                destination_ids: &request.destination_ids,
            };
            match actions::run(action, &scope, input.clone()).await {
                Ok(result) => {
                    run.actions.push(ActionRecord {
                        key: action.key().to_string(),
                        input,
                        status: ActionStatus::Done,
                        error: None,
                    });
                    cut(result.to_string())
                }
                Err(e) => {
                    let body = e.to_json();
                    let message = body
                        .get("error")
                        .and_then(Value::as_str)
                        .unwrap_or("the action failed")
                        .to_string();
                    run.actions.push(ActionRecord {
                        key: action.key().to_string(),
                        input,
                        status: ActionStatus::Failed,
                        error: Some(message),
                    });
                    cut(body.to_string())
                }
            }
        }
        None => {
            // Anything not offered (an action outside actionKeys, an unknown name) is refused
            // and recorded, never run.
            let error = if actions::Action::from_key(name).is_some() {
                format!("`{name}` is not among this agent's actionKeys")
            } else {
                format!("`{name}` is not a tool offered to this agent")
            };
            run.actions.push(ActionRecord {
                key: name.to_string(),
                input: parsed.unwrap_or_else(|_| Value::String(call.function.arguments.clone())),
                status: ActionStatus::Refused,
                error: Some(error.clone()),
            });
            json!({ "error": format!("refused: {error}") }).to_string()
        }
    }
}

fn cut(text: String) -> String {
    if text.len() <= MAX_RESULT_CHARS {
        return text;
    }
    let mut end = MAX_RESULT_CHARS;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[cut: the result has {} bytes; ask for fewer items or `fields`]",
        &text[..end],
        text.len()
    )
}
