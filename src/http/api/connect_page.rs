//! `/connect/{sessionId}`: the page a person opens from a connect session's `connectUrl` to
//! complete the connection in a browser. It asks for the provider's credential fields, or (for
//! providers that connect only through a browser) for an explicit authorization, then shows the
//! result. The unguessable session id is the page's only credential; it works for 30 minutes.

use std::collections::HashMap;

use chrono::Utc;
use poem::{
    handler,
    http::StatusCode,
    web::{Data, Form, Html, Path},
    IntoResponse, Response,
};
use serde_json::{Map, Value};

use super::{errors::IntegrationFailure, AppState};
use crate::{
    integrations::{
        providers::SetupMode,
        sessions::{self, PageAnswer, PageOutcome, SessionView},
        IntegrationError,
    },
    validation::{PathSegment, ValidationIssue},
};
use entity::connect_session::SessionStatus;

/// Escapes text for HTML element and attribute content.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:34rem;margin:3rem auto;\
padding:0 1rem;color:#1d2330}h1{font-size:1.4rem}label{display:block;margin:.8rem 0 .2rem;\
font-weight:600}input[type=text],input[type=password]{width:100%;padding:.5rem;box-sizing:border-box}\
button{margin:1rem .5rem 0 0;padding:.55rem 1.1rem;font-size:1rem}.note{color:#555;font-size:.9rem}\
.error{color:#a11;border:1px solid #a11;padding:.6rem}.ok{color:#116611}";

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>",
        esc(title)
    );
    let mut resp = Html(html).with_status(status).into_response();
    let headers = resp.headers_mut();
    // The page shows secrets' inputs: no framing, no third-party resources, posts only to us.
    headers.insert(
        "content-security-policy",
        poem::http::HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        "x-frame-options",
        poem::http::HeaderValue::from_static("DENY"),
    );
    headers.insert(
        "cache-control",
        poem::http::HeaderValue::from_static("no-store"),
    );
    headers.insert(
        "referrer-policy",
        poem::http::HeaderValue::from_static("no-referrer"),
    );
    resp
}

fn result_page(view: &SessionView) -> Response {
    let name = esc(view.provider.name);
    let s = &view.session;
    let (title, body) = match s.status {
        SessionStatus::Connected => (
            format!("{} connected", view.provider.name),
            format!(
                "<h1 class=\"ok\" id=\"result\" data-status=\"connected\">{name} is connected</h1>\
                 <p>You can close this page and return to the command line.</p>"
            ),
        ),
        SessionStatus::Expired => (
            "Link expired".to_string(),
            format!(
                "<h1 id=\"result\" data-status=\"expired\">This link has expired</h1>\
                 <p>Connect links work for {} minutes. Run <code>custintel integrations connect \
                 {}</code> again for a new one.</p>",
                sessions::SESSION_LIFETIME_MINUTES,
                esc(view.provider.cli_name())
            ),
        ),
        // A pending session shows its form instead (`show`).
        SessionStatus::Failed | SessionStatus::Pending => (
            format!("{} not connected", view.provider.name),
            format!(
                "<h1 id=\"result\" data-status=\"failed\">{name} was not connected</h1>\
                 <p class=\"error\">{}</p>",
                esc(s.error.as_deref().unwrap_or("the connection failed"))
            ),
        ),
    };
    page(StatusCode::OK, &title, &body)
}

fn form_page(
    view: &SessionView,
    issues: &[ValidationIssue],
    values: &Map<String, Value>,
) -> Response {
    let p = view.provider;
    let name = esc(p.name);
    let mut body = format!(
        "<h1>Connect {name}</h1>\
         <p>Your organization asked to connect <strong>{name}</strong> ({}) to custintel.</p>\
         <p>custintel will be able to read: <strong>{}</strong>.</p>",
        esc(p.category),
        esc(p.shares)
    );
    if !issues.is_empty() {
        body.push_str("<div class=\"error\" role=\"alert\"><ul>");
        for issue in issues {
            body.push_str(&format!("<li>{}</li>", esc(&issue.message)));
        }
        body.push_str("</ul></div>");
    }
    body.push_str(&format!(
        "<form method=\"post\" action=\"/connect/{}\">",
        esc(&view.session.id)
    ));
    match p.setup_mode {
        SetupMode::DirectApiKey => {
            for f in p.fields {
                let value = if f.secret {
                    String::new()
                } else {
                    values
                        .get(f.key)
                        .and_then(Value::as_str)
                        .map(esc)
                        .unwrap_or_default()
                };
                let invalid = issues
                    .iter()
                    .any(|i| i.path.last() == Some(&PathSegment::Key(f.key.to_string())));
                body.push_str(&format!(
                    "<label for=\"{key}\">{label}</label>\
                     <input id=\"{key}\" name=\"{key}\" type=\"{ty}\" value=\"{value}\" \
                     autocomplete=\"off\" required{aria}>",
                    key = esc(f.key),
                    label = esc(f.label),
                    ty = if f.secret { "password" } else { "text" },
                    aria = if invalid {
                        " aria-invalid=\"true\""
                    } else {
                        ""
                    },
                ));
            }
            body.push_str(&format!(
                "<p class=\"note\">Credentials are stored encrypted and never shown again.</p>\
                 <button type=\"submit\" name=\"action\" value=\"connect\">Connect {name}</button>\
                 <button type=\"submit\" name=\"action\" value=\"deny\" formnovalidate>Cancel</button>"
            ));
        }
        SetupMode::BrowserSession => {
            body.push_str(&format!(
                "<h2>Authorize</h2>\
                 <p>Authorize custintel to read the data above from your {name} account.</p>\
                 <p class=\"note\">In this version of custintel the authorization is recorded \
                 here; no sign-in to {name} takes place and no {name} data is synced yet. The \
                 provider's capability lists what works today.</p>\
                 <button type=\"submit\" name=\"action\" value=\"authorize\">Authorize {name}</button>\
                 <button type=\"submit\" name=\"action\" value=\"deny\">Deny</button>"
            ));
        }
    }
    body.push_str("</form>");
    let status = if issues.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    };
    page(status, &format!("Connect {}", p.name), &body)
}

/// The page that answers a failed look-up.
pub struct ErrorPage(pub Response);

/// The page's answer to a failed lookup: 404 for an unknown link, 503 while the database cannot
/// be reached, else 500.
impl From<IntegrationError> for ErrorPage {
    fn from(err: IntegrationError) -> Self {
        Self(match IntegrationFailure::from(err) {
            IntegrationFailure::NotFound(_) => page(
                StatusCode::NOT_FOUND,
                "Connect link not found",
                "<h1>This connect link is not valid</h1>\
             <p>Run <code>custintel integrations connect PROVIDER</code> for a new one.</p>",
            ),
            IntegrationFailure::Unavailable(_) => page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again in a moment",
                "<h1>The service is briefly unavailable</h1><p>Reload this page in a moment.</p>",
            ),
            other => {
                if !matches!(other, IntegrationFailure::Internal(_)) {
                    tracing::error!("connect page failed: an unexpected refusal");
                }
                page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    "<h1>Something went wrong</h1><p>Try the link again in a moment.</p>",
                )
            }
        })
    }
}

/// `GET /connect/{sessionId}`.
#[handler]
pub async fn show(Path(session_id): Path<String>, state: Data<&AppState>) -> Response {
    match sessions::for_page(&state.db, &session_id, Utc::now()).await {
        Ok(view) if view.session.status == SessionStatus::Pending => {
            form_page(&view, &[], &Map::new())
        }
        Ok(view) => result_page(&view),
        Err(e) => ErrorPage::from(e).0,
    }
}

/// `POST /connect/{sessionId}`: the page's form.
#[handler]
pub async fn submit(
    Path(session_id): Path<String>,
    state: Data<&AppState>,
    form: poem::Result<Form<HashMap<String, String>>>,
) -> Response {
    let Ok(Form(mut fields)) = form else {
        return page(
            StatusCode::BAD_REQUEST,
            "Invalid form",
            "<h1>The form could not be read</h1><p>Reload the page and try again.</p>",
        );
    };
    let action = fields.remove("action").unwrap_or_default();
    let values: Map<String, Value> = fields
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let answer = match action.as_str() {
        "deny" => PageAnswer::Deny,
        "authorize" => PageAnswer::Authorize,
        _ => PageAnswer::Credentials(values.clone()),
    };
    match sessions::complete(&state.db, &state.secrets, &session_id, answer, Utc::now()).await {
        Ok(PageOutcome::Finished(view)) => result_page(&view),
        Ok(PageOutcome::Invalid(view, issues)) => form_page(&view, &issues, &values),
        Err(e) => ErrorPage::from(e).0,
    }
}
