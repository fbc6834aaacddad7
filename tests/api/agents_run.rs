//! Agents that run, against a scripted fake Chat Completions server: gateway tool calls, the
//! turn bound, retries then failure, actions outside `actionKeys`, organization isolation, run
//! records and their routes, schedules (also with two instances, and without a model).

use std::sync::Arc;

use chrono::{Datelike, Timelike, Utc};
use custintel::agents::{run_for_automation, AgentRuntime, AutomationRunInput};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::{
    fake_llm::{answer, tool_calls, tool_results, FakeLlm, Responder},
    helpers::{self, Backend, TestApp},
    snap,
};

const KEY: &str = "sk-test-secret-4242";

/// Runs `$body(app, fake)` on SQLite and, when configured, PostgreSQL, with the server's agents
/// pointed at a fake model answering with `$responder`.
macro_rules! llm_test {
    ($name:ident, $responder:expr, $body:expr) => {
        llm_test!($name, |c| c, $responder, $body);
    };
    ($name:ident, $configure:expr, $responder:expr, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn respond(n: usize, body: &Value) -> (u16, Value) {
                ($responder)(n, body)
            }
            async fn go(backend: Backend) {
                let fake = FakeLlm::start(Arc::new(respond) as Responder).await;
                let configure: fn(
                    custintel::agents::AgentsConfig,
                ) -> custintel::agents::AgentsConfig = $configure;
                let Some(app) =
                    helpers::spawn_with_agents(backend, configure(fake.config(Some(KEY)))).await
                else {
                    eprintln!("TEST_DATABASE_URL not set: PostgreSQL run skipped");
                    return;
                };
                ($body)(app, fake).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                go(Backend::Sqlite).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                go(Backend::Postgres).await;
            }
        }
    };
}

async fn agent(app: &TestApp, org: &str, key: &str) -> entity::agent::Model {
    entity::agent::Entity::find()
        .filter(entity::agent::Column::OrganizationId.eq(org))
        .filter(entity::agent::Column::AgentKey.eq(key))
        .one(&app.db)
        .await
        .unwrap()
        .expect("demo agent")
}

async fn a_customer(app: &TestApp, org: &str) -> entity::customer::Model {
    entity::customer::Entity::find()
        .filter(entity::customer::Column::OrganizationId.eq(org))
        .filter(entity::customer::Column::Domain.is_not_null())
        .order_by_asc(entity::customer::Column::Domain)
        .one(&app.db)
        .await
        .unwrap()
        .expect("demo customer")
}

async fn run_for(app: &TestApp, org: &str, agent_id: &str) -> custintel::agents::AgentOutcome {
    run_for_automation(
        &AgentRuntime::new(app.state.clone()),
        AutomationRunInput {
            organization_id: Uuid::parse_str(org).unwrap(),
            agent_id: Uuid::parse_str(agent_id).unwrap(),
            automation_run_id: Uuid::new_v4(),
            context: json!({"subject": {"grain": "customer", "key": "acme"}, "events": []}),
            destination_ids: vec![],
        },
    )
    .await
}

async fn get_run(app: &TestApp, key: &str, agent_id: &str, run_id: &str) -> Value {
    let r = app
        .get(
            "/api/agents/{id}/runs/{run_id}",
            &format!("/api/agents/{agent_id}/runs/{run_id}"),
            key,
        )
        .await;
    assert_eq!(r.status, 200, "{:#}", r.body);
    assert_eq!(r.body["commandId"], "agent.run.get");
    r.body
}

/// Durations and result sizes vary from run to run; snapshots show them as 0.
fn steady(mut body: Value) -> Value {
    if let Some(calls) = body
        .pointer_mut("/result/data/run/toolCalls")
        .and_then(Value::as_array_mut)
    {
        for c in calls {
            c["durationMs"] = json!(0);
            c["resultBytes"] = json!(0);
        }
    }
    body
}

llm_test!(
    tool_calls_reach_the_gateway,
    |n, _body: &Value| match n {
        0 => (
            200,
            tool_calls(&[("svc_list_customers", json!({"limit": 2}))], (120, 30))
        ),
        _ => (
            200,
            answer("Two customers need a look this week.", (300, 40))
        ),
    },
    |app: TestApp, fake: FakeLlm| async move {
        let org = app.demo_org().await;
        let watch = agent(&app, &org.organization_id, "churn-watch").await;
        let outcome = run_for(&app, &org.organization_id, &watch.id).await;
        assert_eq!(
            outcome.message.as_deref(),
            Some("Two customers need a look this week.")
        );
        assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
        let run_id = outcome.agent_run_id.expect("a recorded run").to_string();

        // The model was called with the key, the read tools and the agent's actions only.
        let requests = fake.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(
            requests[0].authorization.as_deref(),
            Some(format!("Bearer {KEY}").as_str())
        );
        let offered: Vec<&str> = requests[0].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert!(offered.contains(&"svc_list_customers"));
        assert!(offered.contains(&"svc_query"));
        assert!(offered.contains(&"notify_destination"));
        assert!(offered.contains(&"tag_customer"));
        assert!(!offered.contains(&"create_fact"));
        assert!(!offered.contains(&"svc_send_notification"));
        let list_tool = requests[0].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["function"]["name"] == "svc_list_customers")
            .unwrap();
        assert_eq!(list_tool["type"], "function");
        assert_eq!(list_tool["function"]["parameters"]["type"], "object");
        assert!(requests[0].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("You watch for churn risk."));
        // The gateway's answer went back to the model.
        let results = tool_results(&requests[1].body);
        assert_eq!(results.len(), 1);
        let listed: Value = serde_json::from_str(&results[0]).unwrap();
        assert_eq!(listed["items"].as_array().unwrap().len(), 2);

        // The call counted toward the allowance, as through POST /api/tools/call.
        let usage = helpers::stored_usage(&app.db, &org.organization_id)
            .await
            .expect("usage row");
        assert_eq!(usage.calls, 1);

        let body = get_run(&app, &org.api_key, &watch.id, &run_id).await;
        let run = &body["result"]["data"]["run"];
        assert_eq!(run["status"], "SUCCEEDED");
        assert_eq!(run["trigger"], "automation");
        assert_eq!(run["turns"], 2);
        assert_eq!(run["toolCalls"][0]["name"], "svc_list_customers");
        assert_eq!(run["toolCalls"][0]["input"], json!({"limit": 2}));
        assert!(run["toolCalls"][0]["resultBytes"].as_u64().unwrap() > 0);
        assert_eq!(run["toolCalls"][0]["error"], Value::Null);
        assert_eq!(
            run["usage"],
            json!({"promptTokens": 420, "completionTokens": 70, "totalTokens": 490})
        );
        assert_eq!(run["message"], "Two customers need a look this week.");
        snap!("agent_run_get", steady(body));

        // The list shows it, newest first, also by the agent's key.
        let r = app
            .get(
                "/api/agents/{id}/runs",
                "/api/agents/churn-watch/runs",
                &org.api_key,
            )
            .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body["commandId"], "agent.run.list");
        assert_eq!(r.body["result"]["data"]["runs"][0]["id"], run_id.as_str());
        assert_eq!(r.body["result"]["data"]["nextCursor"], "");
    }
);

llm_test!(
    a_model_that_never_stops_is_cut_at_eight_turns,
    |_n, _body: &Value| (200, tool_calls(&[("svc_schema", json!({}))], (10, 5))),
    |app: TestApp, fake: FakeLlm| async move {
        let org = app.demo_org().await;
        let watch = agent(&app, &org.organization_id, "churn-watch").await;
        let outcome = run_for(&app, &org.organization_id, &watch.id).await;
        assert_eq!(
            outcome.message, None,
            "the engine falls back to its template"
        );
        assert!(outcome.warnings.iter().any(|w| w.contains("8 model turns")));
        assert_eq!(fake.requests().len(), 8);
        let run_id = outcome.agent_run_id.unwrap().to_string();
        let body = get_run(&app, &org.api_key, &watch.id, &run_id).await;
        let run = &body["result"]["data"]["run"];
        assert_eq!(run["status"], "FAILED");
        assert_eq!(run["turns"], 8);
        assert_eq!(run["toolCalls"].as_array().unwrap().len(), 8);
        assert_eq!(run["usage"]["totalTokens"], 120);
        assert_eq!(run["message"], Value::Null);
        assert_eq!(run["reason"], "no final answer within 8 model turns");
    }
);

llm_test!(
    a_run_over_its_token_budget_fails,
    |mut c| {
        c.token_budget = 1_000;
        c
    },
    |_n, _body: &Value| (200, tool_calls(&[("svc_schema", json!({}))], (400, 200))),
    |app: TestApp, fake: FakeLlm| async move {
        let org = app.demo_org().await;
        let watch = agent(&app, &org.organization_id, "churn-watch").await;
        let outcome = run_for(&app, &org.organization_id, &watch.id).await;
        assert_eq!(outcome.message, None);
        // 600 tokens per turn: the second turn crosses 1,000 and the run stops there.
        assert_eq!(fake.requests().len(), 2);
        let run_id = outcome.agent_run_id.unwrap().to_string();
        let body = get_run(&app, &org.api_key, &watch.id, &run_id).await;
        let run = &body["result"]["data"]["run"];
        assert_eq!(run["status"], "FAILED");
        assert_eq!(run["turns"], 2);
        assert_eq!(run["usage"]["totalTokens"], 1_200);
        assert_eq!(
            run["reason"],
            "the run used 1200 tokens, over its budget of 1000"
        );
    }
);

llm_test!(
    a_run_over_its_time_limit_fails,
    |mut c| {
        c.run_timeout = std::time::Duration::from_secs(1);
        c
    },
    |_n, _body: &Value| {
        let mut slow = answer("too late", (1, 1));
        slow["__delayMs"] = json!(4_000);
        (200, slow)
    },
    |app: TestApp, _fake: FakeLlm| async move {
        let org = app.demo_org().await;
        let watch = agent(&app, &org.organization_id, "churn-watch").await;
        let started = std::time::Instant::now();
        let outcome = run_for(&app, &org.organization_id, &watch.id).await;
        assert!(started.elapsed() < std::time::Duration::from_secs(3));
        assert_eq!(outcome.message, None);
        let run_id = outcome.agent_run_id.unwrap().to_string();
        let body = get_run(&app, &org.api_key, &watch.id, &run_id).await;
        let run = &body["result"]["data"]["run"];
        assert_eq!(run["status"], "FAILED");
        assert_eq!(run["reason"], "the run took longer than its 1 s limit");
    }
);

llm_test!(
    a_model_answering_429_then_503_is_retried,
    |n, _body: &Value| match n {
        0 => (429, json!({"error": {"message": "rate limited"}})),
        1 => (503, json!({"error": {"message": "overloaded"}})),
        _ => (200, answer("Fine after retries.", (5, 5))),
    },
    |app: TestApp, fake: FakeLlm| async move {
        let org = app.demo_org().await;
        let watch = agent(&app, &org.organization_id, "churn-watch").await;
        let outcome = run_for(&app, &org.organization_id, &watch.id).await;
        assert_eq!(outcome.message.as_deref(), Some("Fine after retries."));
        assert_eq!(fake.requests().len(), 3);
    }
);

llm_test!(
    a_model_answering_500_is_retried_then_the_run_fails,
    |_n, _body: &Value| (
        500,
        json!({"error": {"message": format!("upstream broke while using key {KEY}")}})
    ),
    |app: TestApp, fake: FakeLlm| async move {
        let org = app.demo_org().await;
        let watch = agent(&app, &org.organization_id, "churn-watch").await;
        let outcome = run_for(&app, &org.organization_id, &watch.id).await;
        assert_eq!(outcome.message, None);
        // Four attempts with backoff, then FAILED.
        assert_eq!(fake.requests().len(), 4);
        let run_id = outcome.agent_run_id.unwrap().to_string();
        let body = get_run(&app, &org.api_key, &watch.id, &run_id).await;
        let run = &body["result"]["data"]["run"];
        assert_eq!(run["status"], "FAILED");
        assert_eq!(run["turns"], 0);
        let reason = run["reason"].as_str().unwrap();
        assert!(reason.contains("500"), "{reason}");
        assert!(reason.contains("4 attempt"), "{reason}");
        // The key never reaches a record or a warning.
        assert!(!body.to_string().contains(KEY), "{body}");
        assert!(!outcome.warnings.join(" ").contains(KEY));
    }
);

llm_test!(
    actions_outside_action_keys_are_refused_and_recorded,
    |n, body: &Value| {
        let customer = body["messages"][1]["content"]
            .as_str()
            .and_then(|c| c.split("DOMAIN=").nth(1))
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("missing")
            .to_string();
        match n {
            0 => (
                200,
                tool_calls(
                    &[
                        (
                            "tag_customer",
                            json!({"customer": customer, "tag": "at-risk"}),
                        ),
                        (
                            "create_fact",
                            json!({"customer": customer, "text": "Wants to cancel"}),
                        ),
                        ("delete_everything", json!({})),
                    ],
                    (50, 10),
                ),
            ),
            _ => (200, answer("Tagged the account.", (60, 5))),
        }
    },
    |app: TestApp, _fake: FakeLlm| async move {
        let org = app.demo_org().await;
        let customer = a_customer(&app, &org.organization_id).await;
        let domain = customer.domain.clone().unwrap();
        // churn-watch may tag customers but not create facts.
        let watch = agent(&app, &org.organization_id, "churn-watch").await;
        let outcome = run_for_automation(
            &AgentRuntime::new(app.state.clone()),
            AutomationRunInput {
                organization_id: Uuid::parse_str(&org.organization_id).unwrap(),
                agent_id: Uuid::parse_str(&watch.id).unwrap(),
                automation_run_id: Uuid::new_v4(),
                context: json!({"customer": format!("DOMAIN={domain}")}),
                destination_ids: vec![],
            },
        )
        .await;
        assert_eq!(outcome.message.as_deref(), Some("Tagged the account."));
        let run_id = outcome.agent_run_id.unwrap().to_string();
        let body = get_run(&app, &org.api_key, &watch.id, &run_id).await;
        let actions = body["result"]["data"]["run"]["actions"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(actions.len(), 3, "{actions:#?}");
        assert_eq!(actions[0]["key"], "tag_customer");
        assert_eq!(actions[0]["status"], "done");
        assert_eq!(actions[1]["key"], "create_fact");
        assert_eq!(actions[1]["status"], "refused");
        assert!(actions[1]["error"].as_str().unwrap().contains("actionKeys"));
        assert_eq!(actions[2]["key"], "delete_everything");
        assert_eq!(actions[2]["status"], "refused");
        snap!("agent_run_actions", steady(body));

        // The allowed action ran; the refused one never did.
        let after = entity::customer::Entity::find_by_id(customer.id.clone())
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        assert!(after.traits["tags"]
            .as_array()
            .unwrap()
            .contains(&json!("at-risk")));
        let facts = entity::fact::Entity::find()
            .filter(entity::fact::Column::SourceType.eq("AGENT_RUN"))
            .all(&app.db)
            .await
            .unwrap();
        assert!(facts.is_empty());

        // An unknown action key is reported, not offered.
        let scout = agent(&app, &org.organization_id, "expansion-scout").await;
        let outcome = run_for(&app, &org.organization_id, &scout.id).await;
        assert!(
            outcome
                .warnings
                .iter()
                .any(|w| w.contains("create_crm_task")),
            "{:?}",
            outcome.warnings
        );
    }
);

llm_test!(
    create_fact_records_the_run_as_provenance,
    |n, body: &Value| {
        let customer = body["messages"][1]["content"]
            .as_str()
            .and_then(|c| c.split("DOMAIN=").nth(1))
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("missing")
            .to_string();
        match n {
            0 => (
                200,
                tool_calls(
                    &[(
                        "create_fact",
                        json!({"customer": customer, "text": "Plans to add 40 seats", "sourceQuote": "forty more seats"}),
                    )],
                    (50, 10),
                ),
            ),
            _ => (200, answer("Recorded.", (60, 5))),
        }
    },
    |app: TestApp, _fake: FakeLlm| async move {
        let org = app.demo_org().await;
        let customer = a_customer(&app, &org.organization_id).await;
        let domain = customer.domain.clone().unwrap();
        let scout = agent(&app, &org.organization_id, "expansion-scout").await;
        let r = app
            .patch(
                "/api/agents/{id}",
                &format!("/api/agents/{}", scout.id),
                &org.api_key,
                json!({"actionKeys": ["create_fact"]}),
            )
            .await;
        assert_eq!(r.status, 200);
        let outcome = run_for_automation(
            &AgentRuntime::new(app.state.clone()),
            AutomationRunInput {
                organization_id: Uuid::parse_str(&org.organization_id).unwrap(),
                agent_id: Uuid::parse_str(&scout.id).unwrap(),
                automation_run_id: Uuid::new_v4(),
                context: json!({"customer": format!("DOMAIN={domain}")}),
                destination_ids: vec![],
            },
        )
        .await;
        let run_id = outcome.agent_run_id.unwrap().to_string();
        // The fact is readable through the gateway, its provenance the run.
        let r = app
            .post(
                "/api/tools/call",
                "/api/tools/call",
                &org.api_key,
                Some(json!({"tool": "svc_list_facts", "input": {"customer": domain}})),
            )
            .await;
        assert_eq!(r.status, 200, "{:#}", r.body);
        let fact = r.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["sourceType"] == "AGENT_RUN")
            .cloned()
            .expect("the agent's fact");
        assert_eq!(fact["text"], "Plans to add 40 seats");
        assert_eq!(fact["sourceId"], run_id.as_str());
        assert_eq!(fact["sourceQuote"], "forty more seats");
        assert!(fact["permalink"].as_str().unwrap().ends_with(&run_id));
    }
);

llm_test!(
    another_organizations_data_is_never_reachable,
    |n, body: &Value| {
        let target = body["messages"][1]["content"]
            .as_str()
            .and_then(|c| c.split("TARGET=").nth(1))
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("missing")
            .to_string();
        match n {
            0 => (
                200,
                tool_calls(
                    &[
                        ("svc_get_customer", json!({"customer": target})),
                        ("tag_customer", json!({"customer": target, "tag": "stolen"})),
                        (
                            "svc_query",
                            json!({"sql": "SELECT count(*) AS n FROM customers"}),
                        ),
                    ],
                    (10, 10),
                ),
            ),
            _ => (200, answer("done", (10, 10))),
        }
    },
    |app: TestApp, fake: FakeLlm| async move {
        let ours = app.demo_org().await;
        let theirs = app.demo_org().await;
        let their_customer = a_customer(&app, &theirs.organization_id).await;
        let watch = agent(&app, &ours.organization_id, "churn-watch").await;
        let outcome = run_for_automation(
            &AgentRuntime::new(app.state.clone()),
            AutomationRunInput {
                organization_id: Uuid::parse_str(&ours.organization_id).unwrap(),
                agent_id: Uuid::parse_str(&watch.id).unwrap(),
                automation_run_id: Uuid::new_v4(),
                context: json!({"note": format!("TARGET={}", their_customer.id)}),
                destination_ids: vec![],
            },
        )
        .await;
        let run_id = outcome.agent_run_id.unwrap().to_string();
        let body = get_run(&app, &ours.api_key, &watch.id, &run_id).await;
        let run = &body["result"]["data"]["run"];
        assert!(
            run["toolCalls"][0]["error"]
                .as_str()
                .is_some_and(|e| e.contains("no customer")),
            "{run:#}"
        );
        assert_eq!(run["actions"][0]["status"], "failed");
        // The model saw nothing of the other organization.
        let results = tool_results(&fake.requests()[1].body);
        assert!(
            !results.iter().any(|r| r.contains(&their_customer.name)),
            "{results:?}"
        );
        let count: Value = serde_json::from_str(&results[2]).unwrap();
        let ours_count = entity::customer::Entity::find()
            .filter(entity::customer::Column::OrganizationId.eq(&ours.organization_id))
            .all(&app.db)
            .await
            .unwrap()
            .len();
        assert_eq!(count["rows"][0][0], json!(ours_count));
        let theirs_after = entity::customer::Entity::find_by_id(their_customer.id.clone())
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(theirs_after.traits, their_customer.traits);
        // Their key sees neither our agent's runs nor the run.
        let r = app
            .get(
                "/api/agents/{id}/runs",
                &format!("/api/agents/{}/runs", watch.id),
                &theirs.api_key,
            )
            .await;
        assert_eq!(r.status, 404);
        let r = app
            .get(
                "/api/agents/{id}/runs/{run_id}",
                &format!("/api/agents/churn-watch/runs/{run_id}"),
                &theirs.api_key,
            )
            .await;
        assert_eq!(r.status, 404);
    }
);

llm_test!(
    concurrent_runs_tag_one_customer_without_losing_tags,
    |n, body: &Value| {
        let content = body["messages"][1]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let pick = |key: &str| {
            content
                .split(&format!("{key}="))
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("missing")
                .to_string()
        };
        let _ = n;
        if body["messages"].as_array().map_or(0, Vec::len) <= 2 {
            (
                200,
                tool_calls(
                    &[(
                        "tag_customer",
                        json!({"customer": pick("DOMAIN"), "tag": pick("TAG")}),
                    )],
                    (5, 5),
                ),
            )
        } else {
            (200, answer("ok", (5, 5)))
        }
    },
    |app: TestApp, _fake: FakeLlm| async move {
        let org = app.demo_org().await;
        let customer = a_customer(&app, &org.organization_id).await;
        let domain = customer.domain.clone().unwrap();
        let watch = agent(&app, &org.organization_id, "churn-watch").await;
        let runtime = AgentRuntime::new(app.state.clone());
        let runs = (0..6).map(|i| {
            let runtime = runtime.clone();
            let input = AutomationRunInput {
                organization_id: Uuid::parse_str(&org.organization_id).unwrap(),
                agent_id: Uuid::parse_str(&watch.id).unwrap(),
                automation_run_id: Uuid::new_v4(),
                context: json!({"customer": format!("DOMAIN={domain}"), "tag": format!("TAG=t{i}")}),
                destination_ids: vec![],
            };
            tokio::spawn(async move { run_for_automation(&runtime, input).await })
        });
        for outcome in futures::future::join_all(runs).await {
            assert_eq!(outcome.unwrap().message.as_deref(), Some("ok"));
        }
        let after = entity::customer::Entity::find_by_id(customer.id.clone())
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        let tags = after.traits["tags"].as_array().unwrap();
        for i in 0..6 {
            assert!(tags.contains(&json!(format!("t{i}"))), "{tags:?}");
        }
        // Pages of the list, newest first.
        let r = app
            .get(
                "/api/agents/{id}/runs",
                &format!("/api/agents/{}/runs?limit=4", watch.id),
                &org.api_key,
            )
            .await;
        assert_eq!(r.status, 200);
        let first: Vec<Value> = r.body["result"]["data"]["runs"].as_array().unwrap().clone();
        assert_eq!(first.len(), 4);
        let cursor = r.body["result"]["data"]["nextCursor"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(!cursor.is_empty());
        let r = app
            .get(
                "/api/agents/{id}/runs",
                &format!(
                    "/api/agents/{}/runs?limit=4&cursor={cursor}&status=SUCCEEDED",
                    watch.id
                ),
                &org.api_key,
            )
            .await;
        let second = r.body["result"]["data"]["runs"].as_array().unwrap().clone();
        assert_eq!(second.len(), 2);
        assert_eq!(r.body["result"]["data"]["nextCursor"], "");
        let all: Vec<&Value> = first.iter().chain(second.iter()).collect();
        for pair in all.windows(2) {
            assert!(pair[0]["startedAt"].as_str() >= pair[1]["startedAt"].as_str());
            assert_ne!(pair[0]["id"], pair[1]["id"]);
        }
        // Bad filters are 400s in the envelope.
        let r = app
            .get(
                "/api/agents/{id}/runs",
                &format!("/api/agents/{}/runs?status=DONE&cursor=zzz", watch.id),
                &org.api_key,
            )
            .await;
        assert_eq!(r.status, 400);
        snap!("agent_run_list_invalid", r.body);
    }
);

/// Makes the agent's schedule due now, as if its tick had come.
async fn make_due(app: &TestApp, agent_id: &str) {
    use sea_orm::{sea_query::Expr, EntityTrait};
    entity::agent::Entity::update_many()
        .col_expr(
            entity::agent::Column::NextRunAt,
            Expr::value(Some(Utc::now() - chrono::Duration::minutes(5))),
        )
        .filter(entity::agent::Column::Id.eq(agent_id))
        .exec(&app.db)
        .await
        .unwrap();
}

async fn wait_for_runs(app: &TestApp, key: &str, agent_id: &str, n: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let r = app
            .get(
                "/api/agents/{id}/runs",
                &format!("/api/agents/{agent_id}/runs"),
                key,
            )
            .await;
        let runs = r.body["result"]["data"]["runs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let finished = runs.iter().filter(|r| r["status"] != "RUNNING").count();
        if finished >= n {
            return runs;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no scheduled run: {runs:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

llm_test!(
    schedules_run_once_per_tick_across_instances,
    |n, _body: &Value| match n {
        0 => (
            200,
            tool_calls(&[("svc_list_customers", json!({"limit": 1}))], (10, 10))
        ),
        _ => (200, answer("Morning digest.", (10, 10))),
    },
    |app: TestApp, fake: FakeLlm| async move {
        let org = app.demo_org().await;
        let digest = agent(&app, &org.organization_id, "weekly-digest").await;
        let path = format!("/api/agents/{}", digest.id);
        // Bad schedules name the field.
        for (body, field) in [
            (
                json!({"schedule": {"enabled": true, "cron": "0 9 * *"}}),
                "cron",
            ),
            (
                json!({"schedule": {"enabled": true, "cron": "0 9 * * 1", "timezone": "Mars/Base"}}),
                "timezone",
            ),
            (
                json!({"schedule": {"enabled": true, "cron": "61 9 * * 1"}}),
                "cron",
            ),
        ] {
            let r = app
                .patch("/api/agents/{id}", &path, &org.api_key, body)
                .await;
            assert_eq!(r.status, 400, "{:#}", r.body);
            assert_eq!(r.body["error"]["code"], "validation_failed", "{:#}", r.body);
            assert_eq!(
                r.body["error"]["details"]["issues"][0]["path"],
                json!(["schedule", field])
            );
        }
        // Mondays 09:00 in Berlin.
        let r = app
            .patch(
                "/api/agents/{id}",
                &path,
                &org.api_key,
                json!({"schedule": {"enabled": true, "cron": "0 9 * * 1", "timezone": "Europe/Berlin"}}),
            )
            .await;
        assert_eq!(r.status, 200, "{:#}", r.body);
        let schedule = &r.body["result"]["data"]["agent"]["schedule"];
        assert_eq!(schedule["enabled"], true);
        assert_eq!(schedule["cron"], "0 9 * * 1");
        assert_eq!(schedule["timezone"], "Europe/Berlin");
        let next = chrono::DateTime::parse_from_rfc3339(schedule["nextRunAt"].as_str().unwrap())
            .unwrap()
            .with_timezone(&chrono_tz::Europe::Berlin);
        assert_eq!(next.weekday(), chrono::Weekday::Mon);
        assert_eq!((next.hour(), next.minute()), (9, 0));
        assert!(next > Utc::now());
        snap!("agent_update_schedule", r.body);

        // A second instance races the first for the same tick.
        let _second = app.another_instance().await;
        make_due(&app, &digest.id).await;
        let runs = wait_for_runs(&app, &org.api_key, &digest.id, 1).await;
        // Let both instances tick a few more times: still one run.
        tokio::time::sleep(std::time::Duration::from_millis(800)).await;
        let runs_after = wait_for_runs(&app, &org.api_key, &digest.id, 1).await;
        assert_eq!(runs_after.len(), 1, "{runs_after:#?}");
        let run = &runs[0];
        assert_eq!(run["trigger"], "schedule");
        assert_eq!(run["status"], "SUCCEEDED");
        assert_eq!(run["automationRunId"], Value::Null);
        assert_eq!(run["message"], "Morning digest.");
        assert_eq!(run["toolCalls"][0]["name"], "svc_list_customers");
        assert_eq!(fake.requests().len(), 2);
        let r = app.get("/api/agents/{id}", &path, &org.api_key).await;
        let schedule = &r.body["result"]["data"]["agent"]["schedule"];
        assert!(schedule["lastRunAt"].is_string());
        assert!(schedule["lastSuccessfulRunAt"].is_string());
        let next =
            chrono::DateTime::parse_from_rfc3339(schedule["nextRunAt"].as_str().unwrap()).unwrap();
        assert!(next > Utc::now(), "the next tick is in the future");

        // Concurrent schedule changes all answer 200; the last one stands.
        let calls = (0..5).map(|i| {
            app.patch(
                "/api/agents/{id}",
                &path,
                &org.api_key,
                json!({"schedule": {"enabled": true, "cron": format!("{i} 8 * * *"), "timezone": "UTC"}}),
            )
        });
        for r in futures::future::join_all(calls).await {
            assert_eq!(r.status, 200, "{:#}", r.body);
        }
        // Disabling stops it.
        let r = app
            .post(
                "/api/agents/{id}/disable",
                &format!("{path}/disable"),
                &org.api_key,
                None,
            )
            .await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.body["result"]["data"]["agent"]["schedule"]["nextRunAt"],
            Value::Null
        );
    }
);

crate::db_test!(
    scheduled_runs_without_a_model_are_skipped,
    |app: TestApp| async move {
        let org = app.demo_org().await;
        let digest = agent(&app, &org.organization_id, "weekly-digest").await;
        let path = format!("/api/agents/{}", digest.id);
        let r = app
            .patch(
                "/api/agents/{id}",
                &path,
                &org.api_key,
                json!({"schedule": {"enabled": true, "cron": "*/5 * * * *"}}),
            )
            .await;
        assert_eq!(r.status, 200, "{:#}", r.body);
        make_due(&app, &digest.id).await;
        // The default tick is 15 s; run one pass here as an instance would.
        // (The server's own loop may take the tick first; either way there is one run.)
        custintel::agents::schedules::tick(&AgentRuntime::new(app.state.clone()))
            .await
            .unwrap();
        let runs = wait_for_runs(&app, &org.api_key, &digest.id, 1).await;
        assert_eq!(runs[0]["status"], "SKIPPED");
        assert_eq!(
            runs[0]["reason"],
            "no language model configured (CUSTINTEL_LLM_BASE_URL)"
        );
        assert_eq!(runs[0]["turns"], 0);
        // For automations: no message (the engine's template), a warning, a recorded run.
        let outcome = run_for(&app, &org.organization_id, &digest.id).await;
        assert_eq!(outcome.message, None);
        assert!(outcome
            .warnings
            .contains(&"no language model configured (CUSTINTEL_LLM_BASE_URL)".to_string()));
        assert!(outcome.agent_run_id.is_some());
        let r = app
            .get(
                "/api/agents/{id}/runs",
                &format!("{path}/runs"),
                &org.api_key,
            )
            .await;
        snap!("agent_run_list", r.body);
    }
);

crate::db_test!(
    runs_of_a_stopped_instance_are_closed,
    |app: TestApp| async move {
        use sea_orm::{ActiveModelTrait, Set};
        let org = app.demo_org().await;
        let watch = agent(&app, &org.organization_id, "churn-watch").await;
        let started = Utc::now() - chrono::Duration::minutes(10);
        let id = Uuid::new_v4().to_string();
        // A run left RUNNING by an instance that was killed: its lease ended long ago.
        entity::agent_run::ActiveModel {
            id: Set(id.clone()),
            organization_id: Set(org.organization_id.clone()),
            agent_id: Set(watch.id.clone()),
            trigger: Set("automation".into()),
            automation_run_id: Set(Some(Uuid::new_v4().to_string())),
            scheduled_for: Set(None),
            status: Set(entity::agent_run::AgentRunStatus::Running),
            reason: Set(None),
            warnings: Set(json!([])),
            started_at: Set(started),
            finished_at: Set(None),
            lease_until: Set(Some(started + chrono::Duration::minutes(3))),
            turns: Set(1),
            tool_calls: Set(json!([])),
            actions: Set(json!([])),
            prompt_tokens: Set(10),
            completion_tokens: Set(0),
            total_tokens: Set(10),
            message: Set(None),
        }
        .insert(&app.db)
        .await
        .unwrap();
        custintel::agents::schedules::tick(&AgentRuntime::new(app.state.clone()))
            .await
            .unwrap();
        let body = get_run(&app, &org.api_key, &watch.id, &id).await;
        let run = &body["result"]["data"]["run"];
        assert_eq!(run["status"], "FAILED");
        assert_eq!(
            run["reason"],
            "the instance running it stopped before the run finished"
        );
        assert!(run["finishedAt"].is_string());
    }
);

llm_test!(
    demo_automation_run_uses_the_agents_message,
    |n: usize, body: &Value| {
        // First a gateway read tool, then the final message destinations receive.
        let first = body["messages"][1]["content"].as_str().unwrap_or("");
        assert!(first.contains("automation.run"), "{first}");
        if n == 0 {
            (
                200,
                tool_calls(&[("svc_list_customers", json!({"limit": 2}))], (120, 30)),
            )
        } else {
            (
                200,
                answer(
                    "Export failures at a paying account: call them today.",
                    (200, 40),
                ),
            )
        }
    },
    |app: TestApp, fake: FakeLlm| async move {
        let alert = crate::engine::arm_demo_churn_alert(&app).await;
        crate::engine::custom(
            &app,
            &alert.org,
            &alert.email,
            "export_failed",
            json!({"errorCode": "E_QUOTA"}),
        )
        .await;
        let runs = crate::engine::settled_runs(&app, &alert.org, &alert.automation, 1).await;
        assert_eq!(runs[0]["status"], "DELIVERED", "{:#}", runs[0]);
        let message = "Export failures at a paying account: call them today.";
        assert_eq!(runs[0]["message"], message);
        let bodies = alert.receiver.bodies();
        assert_eq!(bodies[0]["message"], message);
        // The model saw a gateway tool's result.
        let requests = fake.requests();
        assert!(requests.len() >= 2);
        assert!(!tool_results(&requests[1].body).is_empty());
        // The agent's runs list shows the run, with its token counts.
        let agent = agent(&app, &alert.org.id, "churn-watch").await;
        let r = app
            .get(
                "/api/agents/{id}/runs",
                &format!("/api/agents/{}/runs", agent.id),
                &alert.org.key,
            )
            .await;
        let listed = &r.body["result"]["data"]["runs"][0];
        assert_eq!(listed["trigger"], "automation");
        assert_eq!(listed["automationRunId"], runs[0]["id"]);
        assert_eq!(listed["toolCalls"][0]["name"], "svc_list_customers");
        assert_eq!(listed["usage"]["totalTokens"], 390);
    }
);
