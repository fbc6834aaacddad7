//! A connection's stored credentials, decrypted for the code that calls the provider.

use serde_json::{Map, Value};

use super::{IntegrationError, IntegrationResult};
use crate::crypto::SecretBox;
use entity::integration_connection as conn;

/// Decrypts a connection's stored credentials.
pub fn credentials(
    secrets: &SecretBox,
    row: &conn::Model,
) -> IntegrationResult<Map<String, Value>> {
    let sealed = row
        .credentials_ciphertext
        .as_deref()
        .ok_or_else(|| IntegrationError::Internal("the connection has no credentials".into()))?;
    let text = secrets
        .decrypt(sealed)
        .map_err(|e| IntegrationError::Internal(e.to_string()))?;
    match serde_json::from_str(&text) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(IntegrationError::Internal(
            "stored credentials are not an object".into(),
        )),
    }
}
