//! `POST /api/webhooks/stripe/{connectionId}`: inbound Stripe webhooks, verified by signature.

use chrono::Utc;
use poem::{Request, RequestBody};
use poem_openapi::{
    param::{Header, Path},
    payload::{Json, ParsePayload, Payload},
    registry::{MetaSchema, MetaSchemaRef, Registry},
    ApiResponse, Object, OpenApi,
};

use super::{errors::IntegrationFailure, ApiTags, AppState};
use crate::{
    http::envelope::{issue_bodies, request_issues, ErrorBody},
    http::request::{RequestValidationError, MAX_BODY_BYTES},
    integrations::{webhook, IntegrationError},
    validation::ValidationIssue,
};

/// A Stripe event exactly as sent: the signature covers these bytes, so they are kept raw.
pub struct StripeEventBody(pub Vec<u8>);

impl Payload for StripeEventBody {
    const CONTENT_TYPE: &'static str = "application/json";

    fn check_content_type(content_type: &str) -> bool {
        matches!(content_type.parse::<mime::Mime>(), Ok(ct) if ct.type_() == "application"
            && ct.subtype() == "json")
    }

    fn schema_ref() -> MetaSchemaRef {
        // A Stripe event object (`id`, `type`, `data.object`, ...), defined by Stripe.
        MetaSchemaRef::Inline(Box::new(MetaSchema::new("object")))
    }

    fn register(_registry: &mut Registry) {}
}

impl ParsePayload for StripeEventBody {
    const IS_REQUIRED: bool = true;

    async fn from_request(_request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        let body = body.take()?;
        let bytes = body.into_bytes_limit(MAX_BODY_BYTES).await.map_err(|_| {
            RequestValidationError(vec![ValidationIssue::root(format!(
                "request body is larger than {MAX_BODY_BYTES} bytes"
            ))])
        })?;
        Ok(Self(bytes.to_vec()))
    }
}

poem_openapi::impl_apirequest_for_payload!(StripeEventBody,);

/// The delivery was verified and processed.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct WebhookReceipt {
    /// Always `true`.
    pub received: bool,
    /// The event's `type`.
    pub event_type: String,
    /// False for event types this service does not act on (they are acknowledged anyway).
    pub handled: bool,
}

#[derive(ApiResponse)]
#[oai(bad_request_handler = "webhook_bad_request")]
pub enum WebhookResponse {
    /// Verified and processed.
    #[oai(status = 200)]
    Ok(Json<WebhookReceipt>),
    /// Missing or invalid `Stripe-Signature` (nothing was changed), or an event that cannot be
    /// read.
    #[oai(status = 400)]
    BadRequest(Json<ErrorBody>),
    /// No Stripe connection with this id.
    #[oai(status = 404)]
    NotFound(Json<ErrorBody>),
    /// The connection's `webhooks` setup step has not stored a signing secret yet.
    #[oai(status = 409)]
    NotSetUp(Json<ErrorBody>),
    /// Internal error.
    #[oai(status = 500)]
    Internal(Json<ErrorBody>),
    /// Stripe could not be asked for the customer's subscriptions, or the database cannot be
    /// reached; Stripe retries the delivery.
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

/// 400 for a bad signature or event, 404 for an unknown connection, 409 before its signing
/// secret is stored, 503 when Stripe or the database could not be reached (Stripe retries).
impl From<IntegrationError> for WebhookResponse {
    fn from(err: IntegrationError) -> Self {
        match IntegrationFailure::from(err) {
            IntegrationFailure::BadRequest(b) => Self::BadRequest(b),
            IntegrationFailure::NotFound(b) => Self::NotFound(b),
            IntegrationFailure::NotConnected(m) => Self::NotFound(ErrorBody::new(m)),
            IntegrationFailure::NotSetUp(b) => Self::NotSetUp(b),
            IntegrationFailure::Unavailable(b) => Self::Unavailable(b),
            IntegrationFailure::Internal(b) => Self::Internal(b),
            // A webhook carries no API key: a key's refusal here is a fault of the service.
            IntegrationFailure::Unauthorized(Json(b)) | IntegrationFailure::Forbidden(Json(b)) => {
                tracing::error!(error = %b.error, "Stripe webhook failed");
                Self::Internal(ErrorBody::new("internal error"))
            }
            IntegrationFailure::ConnectionLimit(Json(b)) => {
                tracing::error!(error = %b.error, "Stripe webhook failed");
                Self::Internal(ErrorBody::new("internal error"))
            }
        }
    }
}

fn webhook_bad_request(err: poem::Error) -> WebhookResponse {
    if let Some(e) = err.downcast_ref::<poem_openapi::error::ParseParamError>() {
        if e.name == "Stripe-Signature" {
            let message = "the `Stripe-Signature` header is required: Stripe signs every delivery";
            return WebhookResponse::BadRequest(Json(ErrorBody {
                error: message.to_string(),
                details: Some(issue_bodies(vec![ValidationIssue::at(
                    "Stripe-Signature",
                    message,
                )])),
            }));
        }
    }
    let issues = request_issues(&err);
    let error = issues
        .first()
        .map(|i| {
            if i.path.is_empty() {
                i.message.clone()
            } else {
                format!("invalid request: {}", i.message)
            }
        })
        .unwrap_or_else(|| "invalid request".to_string());
    WebhookResponse::BadRequest(Json(ErrorBody {
        error,
        details: Some(issue_bodies(issues)),
    }))
}

pub struct WebhooksApi {
    pub state: AppState,
}

#[OpenApi(tag = "ApiTags::Integrations")]
impl WebhooksApi {
    /// Receive a Stripe webhook
    ///
    /// The URL the Stripe `webhooks` setup step hands out. No API key: each delivery must carry
    /// a valid `Stripe-Signature` for the endpoint's signing secret, at most 5 minutes old,
    /// before anything changes. Customer events update the matching customer; subscription
    /// events recompute its billing status and MRR from Stripe.
    #[oai(
        path = "/api/webhooks/stripe/:connectionId",
        method = "post",
        operation_id = "receiveStripeWebhook"
    )]
    async fn stripe(
        &self,
        /// The connection id from the setup step's URL.
        #[oai(name = "connectionId")]
        connection_id: Path<String>,
        /// `t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.payload">`, set by Stripe.
        #[oai(name = "Stripe-Signature")]
        signature: Header<String>,
        body: StripeEventBody,
    ) -> WebhookResponse {
        match webhook::receive(
            &self.state.db,
            &self.state.secrets,
            &self.state.integrations,
            &connection_id.0,
            &signature.0,
            &body.0,
            Utc::now(),
        )
        .await
        {
            Ok(d) => WebhookResponse::Ok(Json(WebhookReceipt {
                received: true,
                event_type: d.event_type,
                handled: d.handled,
            })),
            Err(e) => e.into(),
        }
    }
}
