//! The responses of `/api/integrations`; integration errors reach them as the
//! [`IntegrationFailure`] that `errors.rs` maps them to.

use super::*;

/// Every integration route answers with one of these.
#[derive(ApiResponse)]
#[oai(bad_request_handler = "integration_bad_request")]
pub enum IntegrationResponse<T: ParseFromJSON + ToJSON + Send + Sync> {
    #[oai(status = 200)]
    Ok(Json<T>),
    /// Invalid provider, malformed JSON, or a missing or invalid field (named in `details`).
    #[oai(status = 400)]
    BadRequest(Json<ErrorBody>),
    /// Missing, unknown or disabled API key.
    #[oai(status = 401)]
    Unauthorized(Json<ErrorBody>),
    /// The plan's connection limit is reached (connect), or the key is read-only (changes need
    /// the write scope).
    #[oai(status = 403)]
    Forbidden(Json<Forbidden>),
    /// No such session, or (setup-step) the provider is not connected.
    #[oai(status = 404)]
    NotFound(Json<ErrorBody>),
    /// Internal error.
    #[oai(status = 500)]
    Internal(Json<ErrorBody>),
    /// A provider's API or the database cannot be reached; retry after `Retry-After`.
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

impl<T: ParseFromJSON + ToJSON + Send + Sync> From<IntegrationError> for IntegrationResponse<T> {
    fn from(err: IntegrationError) -> Self {
        match IntegrationFailure::from(err) {
            IntegrationFailure::BadRequest(b) => Self::BadRequest(b),
            IntegrationFailure::Unauthorized(b) => Self::Unauthorized(b),
            IntegrationFailure::Forbidden(Json(b)) => Self::Forbidden(Json(Forbidden::Scope(b))),
            IntegrationFailure::ConnectionLimit(Json(b)) => {
                Self::Forbidden(Json(Forbidden::Limit(b)))
            }
            IntegrationFailure::NotConnected(m) => Self::NotFound(ErrorBody::new(m)),
            IntegrationFailure::NotFound(b) => Self::NotFound(b),
            IntegrationFailure::NotSetUp(b) => Self::BadRequest(b),
            IntegrationFailure::Unavailable(b) => Self::Unavailable(b),
            IntegrationFailure::Internal(b) => Self::Internal(b),
        }
    }
}

/// Framework errors (bad JSON, content type, parameters, missing key) in the spec's shapes.
pub(super) fn integration_bad_request<T: ParseFromJSON + ToJSON + Send + Sync>(
    err: poem::Error,
) -> IntegrationResponse<T> {
    if err.is::<poem_openapi::error::AuthorizationError>() {
        return IntegrationResponse::Unauthorized(ErrorBody::new(crate::auth::MISSING_KEY));
    }
    let issues = request_issues(&err);
    IntegrationError::BadRequest {
        message: crate::http::envelope::invalid_request_message(&issues),
        issues,
    }
    .into()
}

pub(super) fn answer<T: ParseFromJSON + ToJSON + Send + Sync>(
    result: IntegrationResult<T>,
) -> IntegrationResponse<T> {
    match result {
        Ok(v) => IntegrationResponse::Ok(Json(v)),
        Err(e) => e.into(),
    }
}

/// Disconnect answers.
#[derive(ApiResponse)]
#[oai(bad_request_handler = "disconnect_bad_request")]
pub enum DisconnectResponse {
    /// The connection, its credentials and its sync history are removed.
    #[oai(status = 200)]
    Ok(Json<Disconnected>),
    /// Invalid provider or malformed JSON.
    #[oai(status = 400)]
    BadRequest(Json<ErrorBody>),
    /// Missing, unknown or disabled API key.
    #[oai(status = 401)]
    Unauthorized(Json<ErrorBody>),
    /// The key is read-only: changes need the write scope.
    #[oai(status = 403)]
    Forbidden(Json<ErrorBody>),
    /// The provider is valid but not connected.
    #[oai(status = 404)]
    NotConnected(Json<NotConnected>),
    /// Internal error.
    #[oai(status = 500)]
    Internal(Json<ErrorBody>),
    /// The database cannot be reached; retry after `Retry-After`.
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

/// 404 `{success: false, message}` when the provider is not connected; the rest as the other
/// integration routes, within the statuses disconnect documents.
impl From<IntegrationError> for DisconnectResponse {
    fn from(err: IntegrationError) -> Self {
        match IntegrationFailure::from(err) {
            IntegrationFailure::NotConnected(message) => Self::NotConnected(Json(NotConnected {
                success: false,
                message,
            })),
            IntegrationFailure::Forbidden(b) => Self::Forbidden(b),
            IntegrationFailure::BadRequest(b) => Self::BadRequest(b),
            IntegrationFailure::NotSetUp(b) => Self::BadRequest(b),
            IntegrationFailure::Unauthorized(b) => Self::Unauthorized(b),
            IntegrationFailure::Unavailable(b) => Self::Unavailable(b),
            _ => Self::Internal(ErrorBody::new("internal error")),
        }
    }
}

pub(super) fn disconnect_bad_request(err: poem::Error) -> DisconnectResponse {
    match integration_bad_request::<Disconnected>(err) {
        IntegrationResponse::Unauthorized(b) => DisconnectResponse::Unauthorized(b),
        IntegrationResponse::BadRequest(b) => DisconnectResponse::BadRequest(b),
        _ => DisconnectResponse::Internal(ErrorBody::new("internal error")),
    }
}
