//! The `X-Correlation-Id` header: the caller's id when sent, else a new UUID, made the current
//! [`crate::correlation`] id for the handler (and the error mappers, which run without the
//! request) and echoed on the response.

use poem::{http::HeaderValue, Endpoint, IntoResponse, Request, Response};

use crate::correlation;

pub const HEADER: &str = "X-Correlation-Id";

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
    let result = correlation::scope(id.clone(), ep.call(req)).await;
    let mut resp = match result {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    };
    if let Ok(value) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(HEADER, value);
    }
    Ok(resp)
}
