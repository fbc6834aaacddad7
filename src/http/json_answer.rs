//! [`JsonAnswer`]: a JSON response body written straight from the tree the handler built.
//!
//! poem-openapi's `Json<Value>` copies the whole tree before writing it (its `ToJSON` for a
//! `Value` clones), which for a list tool's page of records was an allocation per field for
//! nothing. This payload describes itself exactly as `Json<Value>` does, so the OpenAPI
//! description does not change.

use poem::{http::header, IntoResponse, Response};
use poem_openapi::{
    payload::Payload,
    registry::{MetaSchemaRef, Registry},
    types::Type,
};
use serde_json::Value;

/// A JSON response body of any shape (`application/json`), serialized once, uncopied.
pub struct JsonAnswer(pub Value);

impl Payload for JsonAnswer {
    const CONTENT_TYPE: &'static str = "application/json; charset=utf-8";

    fn check_content_type(content_type: &str) -> bool {
        <poem_openapi::payload::Json<Value> as Payload>::check_content_type(content_type)
    }

    fn schema_ref() -> MetaSchemaRef {
        Value::schema_ref()
    }

    fn register(registry: &mut Registry) {
        Value::register(registry);
    }
}

impl IntoResponse for JsonAnswer {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.0) {
            Ok(body) => Response::builder()
                .header(header::CONTENT_TYPE, Self::CONTENT_TYPE)
                .body(body),
            // A `Value` always serializes (its map keys are strings); kept total all the same.
            Err(e) => Response::builder()
                .status(poem::http::StatusCode::INTERNAL_SERVER_ERROR)
                .body(e.to_string()),
        }
    }
}
