//! Writes under concurrency: 32 clients over every write route and ingest at once. No caller
//! may see a 5xx because another request wrote at the same moment, and every acknowledged
//! write must be stored afterwards (on SQLite and PostgreSQL).

use std::collections::HashSet;

use custintel::ops::admin::{self, NewOrganization, Plan};
use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, Statement};
use serde_json::{json, Value};

use crate::{db_test, helpers::TestApp};

const CLIENTS: usize = 32;
const ROUNDS: usize = 3;

/// What one client was told was written.
#[derive(Default)]
struct Acknowledged {
    signals: Vec<String>,
    archived_signals: Vec<String>,
    destinations: Vec<String>,
    disabled_destinations: Vec<String>,
    automations: Vec<String>,
    message_ids: Vec<String>,
    /// Every answer as "METHOD path -> status", for the failure message.
    answers: Vec<(String, u16)>,
}

struct Client {
    base: String,
    http: reqwest::Client,
    key: String,
    public_key: String,
    agent_id: String,
    acked: Acknowledged,
}

impl Client {
    async fn send(&mut self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        self.acked
            .answers
            .push((format!("{method} {path}: {body}"), status.as_u16()));
        if status == StatusCode::OK {
            body
        } else {
            Value::Null
        }
    }

    async fn round(&mut self, client: usize, round: usize) {
        let tag = format!("c{client}r{round}");
        let signal = self
            .send(
                reqwest::Method::POST,
                "/api/signals",
                Some(json!({"kind": "EVENT_MATCH", "name": format!("Signal {tag}"), "definition": {
                    "grain": "user", "subjectResolver": "email", "eventNames": [format!("ev_{tag}")],
                    "propertyConditions": [], "conditionMode": "ALL"}})),
            )
            .await;
        let signal_id = signal["result"]["data"]["signal"]["id"]
            .as_str()
            .map(str::to_string);
        let dest = self
            .send(
                reqwest::Method::POST,
                "/api/destinations",
                Some(
                    json!({"type": "WEBHOOK_ENDPOINT", "name": format!("Hook {tag}"),
                    "url": "https://hooks.example.com/x"}),
                ),
            )
            .await;
        let dest_id = dest["result"]["data"]["destination"]["id"]
            .as_str()
            .map(str::to_string);
        if let Some(id) = &dest_id {
            self.acked.destinations.push(id.clone());
            self.send(
                reqwest::Method::PATCH,
                &format!("/api/destinations/{id}"),
                Some(json!({"type": "WEBHOOK_ENDPOINT", "description": format!("patched {tag}")})),
            )
            .await;
        }
        if let (Some(sid), Some(did)) = (&signal_id, &dest_id) {
            self.acked.signals.push(sid.clone());
            let automation = self
                .send(
                    reqwest::Method::POST,
                    "/api/automations",
                    Some(json!({"name": format!("Automation {tag}"), "triggerType": "SIGNAL_OCCURRENCE",
                        "triggerJson": {}, "matchMode": "ANY", "signalIds": [sid], "destinationIds": [did]})),
                )
                .await;
            if let Some(aid) = automation["result"]["data"]["automation"]["id"].as_str() {
                let aid = aid.to_string();
                self.acked.automations.push(aid.clone());
                self.send(
                    reqwest::Method::POST,
                    &format!("/api/automations/{aid}/enable"),
                    None,
                )
                .await;
                self.send(
                    reqwest::Method::POST,
                    &format!("/api/automations/{aid}/disable"),
                    None,
                )
                .await;
            }
            if round.is_multiple_of(2) {
                let r = self
                    .send(
                        reqwest::Method::POST,
                        &format!("/api/signals/{sid}/archive"),
                        None,
                    )
                    .await;
                if r["ok"] == true {
                    self.acked.archived_signals.push(sid.clone());
                }
                let r = self
                    .send(
                        reqwest::Method::POST,
                        &format!("/api/destinations/{did}/disable"),
                        None,
                    )
                    .await;
                if r["ok"] == true {
                    self.acked.disabled_destinations.push(did.clone());
                }
            }
        }
        let agent = self.agent_id.clone();
        self.send(
            reqwest::Method::PATCH,
            &format!("/api/agents/{agent}"),
            Some(json!({"instructions": format!("Watch renewals ({tag}).")})),
        )
        .await;
        if client == 0 && round == ROUNDS - 1 {
            self.send(
                reqwest::Method::POST,
                &format!("/api/agents/{agent}/disable"),
                None,
            )
            .await;
        }
        // Tool calls write the allowance counter.
        self.send(
            reqwest::Method::POST,
            "/api/tools/call",
            Some(json!({"tool": "svc_list_customers", "input": {"limit": 5}})),
        )
        .await;
        self.send(
            reqwest::Method::POST,
            "/api/tools/call",
            Some(json!({"tool": "svc_query", "input": {"sql": "SELECT count(*) FROM events"}})),
        )
        .await;
        // Integrations: connects and disconnects of one organization race each other.
        if client.is_multiple_of(8) {
            self.send(
                reqwest::Method::POST,
                "/api/integrations/connect",
                Some(json!({"provider": "fireflies", "config": {"apiKey": format!("ff_{tag}")}})),
            )
            .await;
            self.send(
                reqwest::Method::POST,
                "/api/integrations/disconnect",
                Some(json!({"provider": "fireflies"})),
            )
            .await;
        }
        // Ingest: a batch of identified events, each with its own messageId.
        let ids: Vec<String> = (0..10).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let events: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                json!({"type": "custom", "eventName": format!("ev_{tag}"), "url": "server://load",
                    "path": "/", "email": format!("user{}@load{client}.example.com", i % 3),
                    "customerId": format!("acct_{client}"), "messageId": id})
            })
            .collect();
        let resp = self
            .http
            .post(format!("{}/api/i/v1/{}/events", self.base, self.public_key))
            .json(&json!({"source": "server", "events": events}))
            .send()
            .await
            .expect("ingest request");
        let status = resp.status();
        self.acked
            .answers
            .push(("POST ingest".to_string(), status.as_u16()));
        if status == StatusCode::OK {
            self.acked.message_ids.extend(ids);
        }
    }
}

async fn count(app: &TestApp, sql: &str, ids: &[String]) -> usize {
    let backend = app.db.get_database_backend();
    let mut found = 0;
    for chunk in ids.chunks(200) {
        let placeholders: Vec<String> = (1..=chunk.len())
            .map(|i| match backend {
                sea_orm::DbBackend::Postgres => format!("${i}"),
                _ => "?".to_string(),
            })
            .collect();
        let stmt = Statement::from_sql_and_values(
            backend,
            sql.replace("{ids}", &placeholders.join(",")),
            chunk.iter().map(|s| s.clone().into()),
        );
        let row = app
            .db
            .query_one_raw(stmt)
            .await
            .expect("count query")
            .expect("a row");
        let n: i64 = row.try_get_by_index(0).expect("count");
        found += usize::try_from(n).unwrap_or(0);
    }
    found
}

db_test!(
    thirty_two_clients_every_write_route,
    |app: TestApp| async move {
        let org = admin::create_org(
            &app.db,
            NewOrganization {
                name: "Load Co".into(),
                plan: Plan::Pro,
                api_call_limit: None,
                connection_limit: None,
                // The test is about storage, not the per-key request rate.
                ingest_rate_limit: Some(100_000),
                tracking_domains: vec!["localhost".into()],
            },
        )
        .await
        .expect("create org");
        custintel::ops::demo::seed(&app.db, &app.state.secrets, &org.organization_id)
            .await
            .expect("seed demo");
        let agents = app.get("/api/agents", "/api/agents", &org.api_key).await;
        let agent_id = agents.body["result"]["data"]["agents"][0]["id"]
            .as_str()
            .expect("a demo agent")
            .to_string();

        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let mut client = Client {
                base: app.base.clone(),
                http: reqwest::Client::new(),
                key: org.api_key.clone(),
                public_key: org.public_key.clone(),
                agent_id: agent_id.clone(),
                acked: Acknowledged::default(),
            };
            tasks.push(tokio::spawn(async move {
                for r in 0..ROUNDS {
                    client.round(c, r).await;
                }
                client.acked
            }));
        }
        let mut all = Acknowledged::default();
        for t in tasks {
            let a = t.await.expect("client task");
            all.signals.extend(a.signals);
            all.archived_signals.extend(a.archived_signals);
            all.destinations.extend(a.destinations);
            all.disabled_destinations.extend(a.disabled_destinations);
            all.automations.extend(a.automations);
            all.message_ids.extend(a.message_ids);
            all.answers.extend(a.answers);
        }

        let server_errors: Vec<&(String, u16)> =
            all.answers.iter().filter(|(_, s)| *s >= 500).collect();
        assert!(
            server_errors.is_empty(),
            "{} of {} answers were 5xx: {:#?}",
            server_errors.len(),
            all.answers.len(),
            server_errors.iter().take(10).collect::<Vec<_>>()
        );
        // Every round's writes were acknowledged (nothing refused for a storage reason either).
        assert_eq!(all.signals.len(), CLIENTS * ROUNDS);
        assert_eq!(all.automations.len(), CLIENTS * ROUNDS);
        assert_eq!(all.message_ids.len(), CLIENTS * ROUNDS * 10);

        assert_eq!(
            count(
                &app,
                "SELECT count(*) FROM signals WHERE id IN ({ids})",
                &all.signals
            )
            .await,
            all.signals.len()
        );
        assert_eq!(
            count(
                &app,
                "SELECT count(*) FROM signals WHERE archived_at IS NOT NULL AND id IN ({ids})",
                &all.archived_signals
            )
            .await,
            all.archived_signals.len()
        );
        assert_eq!(
            count(
                &app,
                "SELECT count(*) FROM destinations WHERE id IN ({ids})",
                &all.destinations
            )
            .await,
            all.destinations.len()
        );
        assert_eq!(
            count(
                &app,
                "SELECT count(*) FROM destinations WHERE enabled = false AND id IN ({ids})",
                &all.disabled_destinations
            )
            .await,
            all.disabled_destinations.len()
        );
        assert_eq!(
            count(
                &app,
                "SELECT count(*) FROM automations WHERE enabled = false AND id IN ({ids})",
                &all.automations
            )
            .await,
            all.automations.len()
        );
        // Acknowledged events are stored by the applier behind the answer.
        app.settle().await;
        let unique: HashSet<&String> = all.message_ids.iter().collect();
        assert_eq!(unique.len(), all.message_ids.len());
        assert_eq!(
            count(
                &app,
                "SELECT count(*) FROM events WHERE message_id IN ({ids})",
                &all.message_ids
            )
            .await,
            all.message_ids.len(),
            "every acknowledged event is stored once"
        );
    }
);
