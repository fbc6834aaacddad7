//! `POST /api/validate-api-key`.

use poem_openapi::{payload::Json, ApiResponse, Object, OpenApi};

use super::{errors::KeyRefusal, ApiTags, AppState};
use crate::{
    auth::{authenticate, AuthError},
    http::api::ApiKeyAuth,
    http::envelope::{issue_bodies, request_issues, ErrorBody},
    http::types::Nullable,
};

/// A valid key and the organization it belongs to.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct KeyValidation {
    /// Always `true` in a 200.
    pub valid: bool,
    pub organization_id: String,
    /// The workspace user who created the key, when known.
    pub created_by_id: Nullable<String>,
}

/// An invalid, unknown or disabled key.
#[derive(Debug, Object)]
pub struct KeyInvalid {
    /// Always `false`.
    pub valid: bool,
    pub error: String,
}

#[derive(ApiResponse)]
#[oai(bad_request_handler = "validate_bad_request")]
pub enum ValidateKeyResponse {
    /// The key is valid.
    #[oai(status = 200)]
    Valid(Json<KeyValidation>),
    /// Malformed request.
    #[oai(status = 400)]
    BadRequest(Json<ErrorBody>),
    /// Missing, invalid or disabled key.
    #[oai(status = 401)]
    Invalid(Json<KeyInvalid>),
    /// The key could not be checked.
    #[oai(status = 500)]
    Internal(Json<ErrorBody>),
    /// The key could not be checked: the database cannot be reached; retry after
    /// `Retry-After`.
    #[oai(
        status = 503,
        header(
            name = "Retry-After",
            ty = "u64",
            description = "Seconds to wait before retrying."
        )
    )]
    Unavailable(Json<ErrorBody>),
}

impl ValidateKeyResponse {
    /// 401 `{valid: false, error}`.
    pub fn invalid(error: impl Into<String>) -> Self {
        Self::Invalid(Json(KeyInvalid {
            valid: false,
            error: error.into(),
        }))
    }
}

/// A refused key, or a check that could not be made.
impl From<AuthError> for ValidateKeyResponse {
    fn from(err: AuthError) -> Self {
        match KeyRefusal::from(err) {
            KeyRefusal::Invalid(message) => Self::invalid(message),
            KeyRefusal::Unavailable(b) => Self::Unavailable(b),
            KeyRefusal::Internal(b) => Self::Internal(b),
        }
    }
}

fn validate_bad_request(err: poem::Error) -> ValidateKeyResponse {
    if err.is::<poem_openapi::error::AuthorizationError>() {
        return ValidateKeyResponse::invalid(crate::auth::MISSING_KEY);
    }
    let issues = request_issues(&err);
    ValidateKeyResponse::BadRequest(Json(ErrorBody {
        error: "malformed request".to_string(),
        details: Some(issue_bodies(issues)),
    }))
}

pub struct KeysApi {
    pub state: AppState,
}

#[OpenApi(tag = "ApiTags::Keys")]
impl KeysApi {
    /// Validate an API key
    ///
    /// Checks the key in the `Authorization` header and names its organization. No body.
    #[oai(
        path = "/api/validate-api-key",
        method = "post",
        operation_id = "validateApiKey"
    )]
    async fn validate(&self, key: ApiKeyAuth) -> ValidateKeyResponse {
        match authenticate(&self.state.db, &key.0.token).await {
            Ok(ctx) => ValidateKeyResponse::Valid(Json(KeyValidation {
                valid: true,
                organization_id: ctx.organization_id,
                created_by_id: ctx.created_by_id.into(),
            })),
            Err(e) => e.into(),
        }
    }
}
