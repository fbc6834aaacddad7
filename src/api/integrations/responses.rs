//! The responses of `/api/integrations` and how integration errors map onto them.

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
    /// A provider's API or the database could not be reached; retry.
    #[oai(status = 503)]
    Unavailable(Json<ErrorBody>),
}

/// Framework errors (bad JSON, content type, parameters, missing key) in the spec's shapes.
pub(super) fn integration_bad_request<T: ParseFromJSON + ToJSON + Send + Sync>(
    err: poem::Error,
) -> IntegrationResponse<T> {
    if err.is::<poem_openapi::error::AuthorizationError>() {
        return IntegrationResponse::Unauthorized(ErrorBody::new(crate::auth::MISSING_KEY));
    }
    bad_request(request_issues(&err))
}

pub(super) fn bad_request<T: ParseFromJSON + ToJSON + Send + Sync>(
    issues: Vec<ValidationIssue>,
) -> IntegrationResponse<T> {
    let error = match issues.first() {
        Some(first) if issues.len() == 1 => format!("invalid request: {}", first.message),
        _ => format!("invalid request: {} problems", issues.len()),
    };
    IntegrationResponse::BadRequest(Json(ErrorBody {
        error,
        details: Some(issues),
    }))
}

impl<T: ParseFromJSON + ToJSON + Send + Sync> From<IntegrationError> for IntegrationResponse<T> {
    fn from(err: IntegrationError) -> Self {
        match err {
            IntegrationError::BadRequest { message, issues } => Self::BadRequest(Json(ErrorBody {
                error: message,
                details: (!issues.is_empty()).then_some(issues),
            })),
            IntegrationError::Unauthorized(m) => Self::Unauthorized(ErrorBody::new(m)),
            IntegrationError::Forbidden(m) => {
                Self::Forbidden(Json(Forbidden::Scope(ErrorBody::new(m).0)))
            }
            IntegrationError::ConnectionLimit {
                plan,
                current,
                limit,
            } => Self::Forbidden(Json(Forbidden::Limit(PlanConnectionLimit {
                error: format!(
                    "the {plan} plan allows {limit} integration connection(s) and {current} are \
                     in use: disconnect one or upgrade the plan"
                ),
                code: "plan_connection_limit_exceeded".to_string(),
                feature: "integration_connections".to_string(),
                plan,
                current_connections: current,
                limit,
            }))),
            IntegrationError::NotConnected(m) | IntegrationError::NotFound(m) => {
                Self::NotFound(ErrorBody::new(m))
            }
            IntegrationError::Upstream(m) | IntegrationError::Unavailable(m) => {
                Self::Unavailable(ErrorBody::new(m))
            }
            IntegrationError::Internal(m) => {
                tracing::error!(message = %m, "integration request failed");
                Self::Internal(ErrorBody::new("internal error"))
            }
        }
    }
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
}

pub(super) fn disconnect_bad_request(err: poem::Error) -> DisconnectResponse {
    match integration_bad_request::<Disconnected>(err) {
        IntegrationResponse::Unauthorized(b) => DisconnectResponse::Unauthorized(b),
        IntegrationResponse::BadRequest(b) => DisconnectResponse::BadRequest(b),
        _ => DisconnectResponse::Internal(ErrorBody::new("internal error")),
    }
}

impl From<IntegrationError> for DisconnectResponse {
    fn from(err: IntegrationError) -> Self {
        match err {
            IntegrationError::NotConnected(message) => {
                DisconnectResponse::NotConnected(Json(NotConnected {
                    success: false,
                    message,
                }))
            }
            IntegrationError::Forbidden(m) => DisconnectResponse::Forbidden(ErrorBody::new(m)),
            other => match IntegrationResponse::<Disconnected>::from(other) {
                IntegrationResponse::BadRequest(b) => DisconnectResponse::BadRequest(b),
                IntegrationResponse::Unauthorized(b) => DisconnectResponse::Unauthorized(b),
                _ => DisconnectResponse::Internal(ErrorBody::new("internal error")),
            },
        }
    }
}
