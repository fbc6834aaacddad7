//! JSON request bodies: checked against their schema in the description, then parsed with serde,
//! so that every failure names the offending field.
//!
//! poem-openapi's own `Json<T>` reports parse failures as a single sentence; users of this API get
//! `{path, message}` issues instead, the same shape the domain validators produce
//! ([`crate::validation`]).

use poem::{Request, RequestBody};
use poem_openapi::{
    payload::{ParsePayload, Payload},
    registry::{MetaSchemaRef, Registry},
    types::Type,
};
use serde::de::DeserializeOwned;

use crate::validation::{parse_json, parse_value, ValidationIssue};

/// Largest platform request body read, in bytes.
pub const MAX_BODY_BYTES: usize = 1_048_576;

/// A request body that failed to parse or validate; the response mapping turns it into the
/// route's 400 body.
#[derive(Debug, thiserror::Error)]
#[error("invalid request body")]
pub struct RequestValidationError(pub Vec<ValidationIssue>);

impl poem::error::ResponseError for RequestValidationError {
    fn status(&self) -> poem::http::StatusCode {
        poem::http::StatusCode::BAD_REQUEST
    }
}

/// A JSON request body typed by `T`: its schema is `T`'s, its errors are validation issues.
pub struct JsonBody<T>(pub T);

impl<T: Type> Payload for JsonBody<T> {
    const CONTENT_TYPE: &'static str = "application/json";

    fn check_content_type(content_type: &str) -> bool {
        matches!(content_type.parse::<mime::Mime>(), Ok(ct) if ct.type_() == "application"
            && (ct.subtype() == "json" || ct.suffix().is_some_and(|s| s == "json")))
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: Type + DeserializeOwned> ParsePayload for JsonBody<T> {
    const IS_REQUIRED: bool = true;

    async fn from_request(_request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        let body = body.take()?;
        let bytes = body.into_bytes_limit(MAX_BODY_BYTES).await.map_err(|_| {
            RequestValidationError(vec![ValidationIssue::root(format!(
                "request body is larger than {MAX_BODY_BYTES} bytes"
            ))])
        })?;
        let value = parse_json(&bytes).map_err(RequestValidationError)?;
        // The description's schema first (one source for the documented rules), then the shape
        // of `T`.
        if let MetaSchemaRef::Reference(name) = T::schema_ref() {
            super::body_contract::check(&name, &value).map_err(RequestValidationError)?;
        }
        parse_value(value)
            .map(JsonBody)
            .map_err(|issues| RequestValidationError(issues).into())
    }
}

poem_openapi::impl_apirequest_for_payload!(JsonBody<T>, T: Type + DeserializeOwned);
