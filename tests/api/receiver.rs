//! A webhook receiver on 127.0.0.1 for delivery tests, and the Standard Webhooks check of what
//! it received.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use hmac::{Hmac, Mac};
use poem::{
    handler, http::StatusCode as PoemStatus, listener::TcpListener, web::Data, EndpointExt,
    Request, Route, Server,
};
use sha2::Sha256;

/// A webhook receiver: answers with the queued statuses (then 200) and records each request.
#[derive(Clone, Default)]
pub struct Receiver {
    pub statuses: Arc<Mutex<VecDeque<u16>>>,
    pub seen: Arc<Mutex<Vec<(poem::http::HeaderMap, String)>>>,
}

#[handler]
async fn receive(req: &Request, body: String, rx: Data<&Receiver>) -> PoemStatus {
    rx.seen.lock().unwrap().push((req.headers().clone(), body));
    let code = rx.statuses.lock().unwrap().pop_front().unwrap_or(200);
    PoemStatus::from_u16(code).unwrap_or(PoemStatus::OK)
}

pub async fn start_receiver(statuses: &[u16]) -> (String, Receiver) {
    let rx = Receiver::default();
    rx.statuses.lock().unwrap().extend(statuses.iter().copied());
    let acceptor = poem::listener::Listener::into_acceptor(TcpListener::bind("127.0.0.1:0"))
        .await
        .unwrap();
    let addr = poem::listener::Acceptor::local_addr(&acceptor)[0]
        .as_socket_addr()
        .copied()
        .unwrap();
    let app = Route::new()
        .at("/*path", poem::post(receive))
        .data(rx.clone());
    tokio::spawn(Server::new_with_acceptor(acceptor).run(app));
    (format!("http://127.0.0.1:{}", addr.port()), rx)
}

pub fn verify(secret: &str, headers: &poem::http::HeaderMap, body: &str) {
    let id = headers["webhook-id"].to_str().unwrap();
    let ts = headers["webhook-timestamp"].to_str().unwrap();
    let key = B64.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.{body}").as_bytes());
    let expected = format!("v1,{}", B64.encode(mac.finalize().into_bytes()));
    assert_eq!(headers["webhook-signature"].to_str().unwrap(), expected);
    let age = chrono::Utc::now().timestamp() - ts.parse::<i64>().unwrap();
    assert!((0..60).contains(&age));
}

impl Receiver {
    /// Bodies received so far, parsed.
    pub fn bodies(&self) -> Vec<serde_json::Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| serde_json::from_str(b).unwrap_or_default())
            .collect()
    }
}
