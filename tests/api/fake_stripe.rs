//! A fake Stripe API on 127.0.0.1:0: customers and subscriptions of one account, paginated
//! with `starting_after`/`has_more` (two per page, to exercise pagination), behind one API key.

use std::sync::{Arc, Mutex};

use poem::{
    get, handler,
    http::StatusCode,
    listener::{Acceptor, Listener, TcpListener},
    web::{Data, Json, Path, Query},
    EndpointExt, IntoResponse, Request, Response, Route, Server,
};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Default)]
pub struct Account {
    pub customers: Vec<Value>,
    pub subscriptions: Vec<Value>,
    /// Every request's path and query, in order.
    pub requests: Vec<String>,
}

#[derive(Clone)]
pub struct FakeStripe {
    pub base: String,
    pub api_key: String,
    pub account: Arc<Mutex<Account>>,
}

const PAGE: usize = 2;

#[derive(Deserialize)]
struct ListQuery {
    starting_after: Option<String>,
    customer: Option<String>,
    status: Option<String>,
}

fn authorized(req: &Request, fake: &FakeStripe) -> bool {
    req.header("authorization") == Some(&format!("Bearer {}", fake.api_key))
}

fn unauthorized() -> Response {
    Json(json!({"error": {"type": "invalid_request_error", "message": "Invalid API Key provided"}}))
        .with_status(StatusCode::UNAUTHORIZED)
        .into_response()
}

fn page(items: Vec<Value>, after: Option<String>) -> Response {
    let start = match after {
        Some(a) => items
            .iter()
            .position(|i| i["id"] == a.as_str())
            .map(|p| p + 1)
            .unwrap_or(items.len()),
        None => 0,
    };
    let data: Vec<Value> = items.iter().skip(start).take(PAGE).cloned().collect();
    let has_more = start + data.len() < items.len();
    Json(json!({"object": "list", "data": data, "has_more": has_more})).into_response()
}

fn record(req: &Request, fake: &FakeStripe) {
    let line = format!(
        "{}?{}",
        req.uri().path(),
        req.uri().query().unwrap_or_default()
    );
    if let Ok(mut a) = fake.account.lock() {
        a.requests.push(line);
    }
}

#[handler]
fn list_customers(req: &Request, fake: Data<&FakeStripe>, Query(q): Query<ListQuery>) -> Response {
    record(req, &fake);
    if !authorized(req, &fake) {
        return unauthorized();
    }
    let items = fake.account.lock().unwrap().customers.clone();
    page(items, q.starting_after)
}

#[handler]
fn get_customer(req: &Request, fake: Data<&FakeStripe>, Path(id): Path<String>) -> Response {
    record(req, &fake);
    if !authorized(req, &fake) {
        return unauthorized();
    }
    let found = fake
        .account
        .lock()
        .unwrap()
        .customers
        .iter()
        .find(|c| c["id"] == id.as_str())
        .cloned();
    match found {
        Some(c) => Json(c).into_response(),
        None => Json(json!({"error": {"message": format!("No such customer: '{id}'")}}))
            .with_status(StatusCode::NOT_FOUND)
            .into_response(),
    }
}

#[handler]
fn list_subscriptions(
    req: &Request,
    fake: Data<&FakeStripe>,
    Query(q): Query<ListQuery>,
) -> Response {
    record(req, &fake);
    if !authorized(req, &fake) {
        return unauthorized();
    }
    // Stripe omits canceled subscriptions unless `status=all`; the service must ask for them.
    let all = q.status.as_deref() == Some("all");
    let items: Vec<Value> = fake
        .account
        .lock()
        .unwrap()
        .subscriptions
        .iter()
        .filter(|s| all || s["status"] != "canceled")
        .filter(|s| q.customer.as_deref().is_none_or(|c| s["customer"] == c))
        .cloned()
        .collect();
    page(items, q.starting_after)
}

impl FakeStripe {
    pub async fn start(api_key: &str, account: Account) -> FakeStripe {
        let acceptor = TcpListener::bind("127.0.0.1:0")
            .into_acceptor()
            .await
            .expect("bind fake stripe");
        let addr = acceptor.local_addr()[0]
            .as_socket_addr()
            .copied()
            .expect("fake stripe address");
        let fake = FakeStripe {
            base: format!("http://{addr}"),
            api_key: api_key.to_string(),
            account: Arc::new(Mutex::new(account)),
        };
        let app = Route::new()
            .at("/v1/customers", get(list_customers))
            .at("/v1/customers/:id", get(get_customer))
            .at("/v1/subscriptions", get(list_subscriptions))
            .data(fake.clone());
        tokio::spawn(async move {
            let _ = Server::new_with_acceptor(acceptor).run(app).await;
        });
        fake
    }

    pub fn set_subscription_status(&self, id: &str, status: &str) {
        let mut a = self.account.lock().unwrap();
        for s in a.subscriptions.iter_mut() {
            if s["id"] == id {
                s["status"] = json!(status);
            }
        }
    }

    pub fn requests(&self) -> Vec<String> {
        self.account.lock().unwrap().requests.clone()
    }
}

pub fn customer_json(
    id: &str,
    name: Option<&str>,
    email: Option<&str>,
    external: Option<&str>,
) -> Value {
    let mut metadata = json!({});
    if let Some(e) = external {
        metadata["customerId"] = json!(e);
    }
    json!({"id": id, "object": "customer", "name": name, "email": email, "metadata": metadata})
}

pub fn subscription_json(
    id: &str,
    customer: &str,
    status: &str,
    items: &[(i64, i64, &str)],
) -> Value {
    let data: Vec<Value> = items
        .iter()
        .map(|(amount, qty, interval)| {
            json!({"object": "subscription_item", "quantity": qty,
                   "price": {"unit_amount": amount, "currency": "usd",
                             "recurring": {"interval": interval, "interval_count": 1}}})
        })
        .collect();
    json!({"id": id, "object": "subscription", "customer": customer, "status": status,
           "items": {"object": "list", "data": data}})
}
