//! A scripted fake of an OpenAI-compatible Chat Completions server on 127.0.0.1:0. Each test
//! gives a responder: from the call's number (0-based) and the request body, the status and JSON
//! body to answer (`__delayMs` in it delays the answer). Every request (headers and body) is kept for the test to inspect.

use std::sync::{Arc, Mutex};

use poem::{
    handler,
    http::StatusCode,
    listener::{Acceptor, Listener, TcpListener},
    post,
    web::{Data, Json},
    EndpointExt, IntoResponse, Request, Response, Route, Server,
};
use serde_json::{json, Value};

pub type Responder = Arc<dyn Fn(usize, &Value) -> (u16, Value) + Send + Sync>;

#[derive(Clone)]
pub struct FakeLlm {
    /// The base URL as an OpenAI client takes it (with `/v1`).
    pub base_url: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    responder: Responder,
}

#[derive(Clone, Debug)]
pub struct Recorded {
    pub authorization: Option<String>,
    pub body: Value,
}

#[handler]
async fn completions(req: &Request, fake: Data<&FakeLlm>, Json(body): Json<Value>) -> Response {
    let n = {
        let mut requests = fake.requests.lock().unwrap();
        requests.push(Recorded {
            authorization: req.header("authorization").map(str::to_string),
            body: body.clone(),
        });
        requests.len() - 1
    };
    let (status, mut answer) = (fake.responder)(n, &body);
    // A responder may ask for a slow answer with `__delayMs`.
    if let Some(ms) = answer
        .as_object_mut()
        .and_then(|o| o.remove("__delayMs"))
        .and_then(|v| v.as_u64())
    {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    Json(answer)
        .with_status(StatusCode::from_u16(status).unwrap())
        .into_response()
}

impl FakeLlm {
    pub async fn start(responder: Responder) -> FakeLlm {
        let acceptor = TcpListener::bind("127.0.0.1:0")
            .into_acceptor()
            .await
            .expect("bind fake llm");
        let addr = acceptor.local_addr()[0]
            .as_socket_addr()
            .copied()
            .expect("fake llm address");
        let fake = FakeLlm {
            base_url: format!("http://{addr}/v1"),
            requests: Arc::new(Mutex::new(Vec::new())),
            responder,
        };
        let app = Route::new()
            .at("/v1/chat/completions", post(completions))
            .data(fake.clone());
        tokio::spawn(async move {
            let _ = Server::new_with_acceptor(acceptor).run(app).await;
        });
        fake
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// Agent settings that use this server, with fast retries.
    pub fn config(&self, api_key: Option<&str>) -> custintel::agents::AgentsConfig {
        let mut llm = custintel::agents::LlmConfig::new(
            &self.base_url,
            api_key.map(str::to_string),
            "fake-model",
        );
        llm.first_backoff = std::time::Duration::from_millis(20);
        llm.request_timeout = std::time::Duration::from_secs(10);
        custintel::agents::AgentsConfig {
            llm: Some(llm),
            schedule_tick: std::time::Duration::from_millis(200),
            ..Default::default()
        }
    }
}

/// A completion that calls tools: `calls` are (name, arguments).
pub fn tool_calls(calls: &[(&str, Value)], usage: (i64, i64)) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({
                "id": format!("call_{i}_{name}"),
                "type": "function",
                "function": {"name": name, "arguments": args.to_string()}
            })
        })
        .collect();
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake-model",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": null, "tool_calls": calls},
            "finish_reason": "tool_calls"
        }],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
    })
}

/// A final answer.
pub fn answer(text: &str, usage: (i64, i64)) -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake-model",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
    })
}

/// The tool messages (results) of a recorded request, in order.
pub fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == "tool")
                .filter_map(|m| m["content"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
