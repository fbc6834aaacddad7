//! `GET /sdk/v1/custintel.js`: the browser tracker (`sdk/js/custintel.js`), embedded in the
//! binary so a running instance serves the script its own Ingest API expects. No key: the
//! script is public. Cached for an hour, revalidated by `ETag`.

use std::sync::LazyLock;

use poem::{
    handler,
    http::{header, StatusCode},
    IntoResponse, Request, Response,
};
use sha2::{Digest, Sha256};

/// The script, as committed.
pub const SCRIPT: &str = include_str!("../../sdk/js/custintel.js");

/// A strong validator of the script's bytes.
static ETAG: LazyLock<String> = LazyLock::new(|| {
    format!(
        "\"{}\"",
        &hex::encode(Sha256::digest(SCRIPT.as_bytes()))[..32]
    )
});

const CACHE_CONTROL: &str = "public, max-age=3600";

#[handler]
pub fn script(req: &Request) -> Response {
    let unchanged = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| {
            tags.split(',')
                .any(|t| t.trim() == *ETAG || t.trim() == "*")
        });
    let response = if unchanged {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        SCRIPT
            .with_content_type("application/javascript; charset=utf-8")
            .into_response()
    };
    response
        .with_header(header::ETAG, ETAG.as_str())
        .with_header(header::CACHE_CONTROL, CACHE_CONTROL)
        .into_response()
}
