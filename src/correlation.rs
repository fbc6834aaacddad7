//! Correlation ids: the caller's `X-Correlation-Id` when sent, else a new UUID, visible to every
//! handler (and to the error mappers, which run without the request) and echoed on the response.

use poem::{http::HeaderValue, Endpoint, IntoResponse, Request, Response};

pub const HEADER: &str = "X-Correlation-Id";

tokio::task_local! {
    static CORRELATION_ID: String;
}

/// The current request's correlation id (a fresh UUID outside a request).
pub fn current() -> String {
    CORRELATION_ID
        .try_with(|id| id.clone())
        .unwrap_or_else(|_| uuid::Uuid::new_v4().to_string())
}

fn from_request(req: &Request) -> String {
    req.header(HEADER)
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 200)
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

/// Middleware: runs the endpoint inside the request's correlation scope and echoes the id.
pub async fn middleware<E: Endpoint>(ep: E, req: Request) -> poem::Result<Response> {
    let id = from_request(&req);
    let result = CORRELATION_ID.scope(id.clone(), ep.call(req)).await;
    let mut resp = match result {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    };
    if let Ok(value) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(HEADER, value);
    }
    Ok(resp)
}
