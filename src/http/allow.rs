//! `405 Method Not Allowed` answers carry the `Allow` header RFC 9110 requires, listing the
//! route's methods as the description (and the few routes outside it) declares them.

use poem::{http::HeaderValue, Endpoint, IntoResponse, Request, Response, Result};
use serde_json::Value;

/// Path templates (`/api/agents/{id}`) and their methods.
#[derive(Clone, Default)]
pub struct AllowedMethods(Vec<(Vec<String>, Vec<String>)>);

impl AllowedMethods {
    /// The operations of a description, plus routes it does not describe.
    pub fn of(doc: &Value, extra: &[(&str, &[&str])]) -> Self {
        let mut routes: Vec<(Vec<String>, Vec<String>)> = Vec::new();
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            let methods = item
                .as_object()
                .into_iter()
                .flat_map(|o| o.keys())
                .map(|m| m.to_uppercase())
                .collect();
            routes.push((segments(path), methods));
        }
        for (path, methods) in extra {
            routes.push((
                segments(path),
                methods.iter().map(|m| m.to_string()).collect(),
            ));
        }
        Self(routes)
    }

    /// The methods of the route `path` matches; `HEAD` comes with `GET`.
    fn for_path(&self, path: &str) -> Option<String> {
        let wanted: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        let (_, methods) = self.0.iter().find(|(template, _)| {
            template.len() == wanted.len()
                && template
                    .iter()
                    .zip(&wanted)
                    .all(|(t, w)| t.starts_with('{') || t == w)
        })?;
        let mut listed = methods.clone();
        if listed.iter().any(|m| m == "GET") && !listed.iter().any(|m| m == "HEAD") {
            listed.push("HEAD".into());
        }
        Some(listed.join(", "))
    }
}

fn segments(path: &str) -> Vec<String> {
    path.trim_end_matches('/')
        .split('/')
        .map(|s| {
            if s.starts_with(':') {
                "{param}".to_string()
            } else {
                s.to_string()
            }
        })
        .collect()
}

/// Adds `Allow` to every 405 answer.
pub async fn middleware<E: Endpoint>(
    next: E,
    req: Request,
    allowed: AllowedMethods,
) -> Result<Response> {
    let path = req.uri().path().to_string();
    let mut resp = next.call(req).await?.into_response();
    if resp.status() == poem::http::StatusCode::METHOD_NOT_ALLOWED {
        if let Some(value) = allowed
            .for_path(&path)
            .and_then(|m| HeaderValue::from_str(&m).ok())
        {
            resp.headers_mut().insert("allow", value);
        }
    }
    Ok(resp)
}
