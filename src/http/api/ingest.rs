//! `POST /api/i/v1/{publicKey}/events`: the Ingest API. Authenticated by the public key in the
//! path only; answers browsers per the organization's enabled tracking domains (CORS).

use std::borrow::Cow;

use chrono::Utc;
use poem::{
    http::{header, HeaderName, HeaderValue},
    IntoResponse, Request, RequestBody, Response,
};
use poem_openapi::{
    param::Path,
    payload::Json,
    registry::{MetaMediaType, MetaRequest, MetaResponses, MetaSchema, MetaSchemaRef, Registry},
    types::{ParseFromParameter, ParseResult, Type},
    ApiExtractor, ApiExtractorType, ApiResponse, ExtractParamOptions, Object, OpenApi,
};

use super::ApiTags;
use super::{errors::IngestFailure, ingest_batch::IngestRequest, ingest_body};
use crate::ingest::{self, Ingest, IngestError, RateInfo};

/// Every event was stored.
#[derive(Debug, Object)]
pub struct IngestResult {
    /// Always `true`.
    pub success: bool,
    /// Events stored (an event whose `messageId` was already stored counts: it is stored).
    pub processed: u32,
}

/// One refused event, or (with `index` -1) the reason the whole request was refused.
#[derive(Debug, Object)]
pub struct IngestEventError {
    /// Position of the event in `events`; -1 for the request as a whole.
    pub index: i32,
    pub message: String,
}

/// Some events were refused; the others were stored.
#[derive(Debug, Object)]
pub struct IngestPartialResult {
    /// Always `false`.
    pub success: bool,
    /// Events stored.
    pub processed: u32,
    /// The refused events, by position.
    pub errors: Vec<IngestEventError>,
}

/// The whole request was refused; nothing was stored.
#[derive(Debug, Object)]
pub struct IngestRequestError {
    /// Always `false`.
    pub success: bool,
    /// Always 0.
    pub processed: u32,
    /// One item with `index` -1 saying why.
    pub errors: Vec<IngestEventError>,
}

fn refused(message: impl Into<String>) -> Json<IngestRequestError> {
    Json(IngestRequestError {
        success: false,
        processed: 0,
        errors: vec![IngestEventError {
            index: -1,
            message: message.into(),
        }],
    })
}

/// A refused ingest request: its answer and the headers that go with it.
pub struct IngestRefusal {
    pub response: IngestResponse,
    pub headers: Vec<(poem::http::HeaderName, poem::http::HeaderValue)>,
}

impl From<IngestError> for IngestRefusal {
    fn from(err: IngestError) -> Self {
        let failure = IngestFailure::from(err);
        let headers = failure.headers();
        let response = match failure {
            IngestFailure::Forbidden(m) => IngestResponse::Forbidden(refused(m)),
            IngestFailure::BadRequest(m) => IngestResponse::BadRequest(refused(m)),
            IngestFailure::TooLarge(m) => IngestResponse::TooLarge(refused(m)),
            IngestFailure::RateLimited { message, .. } => {
                IngestResponse::TooManyRequests(refused(message))
            }
            IngestFailure::Unavailable(m) => IngestResponse::Unavailable(refused(m)),
            IngestFailure::Internal(m) => IngestResponse::Internal(refused(m)),
        };
        Self { response, headers }
    }
}

#[derive(ApiResponse)]
#[oai(
    bad_request_handler = "ingest_bad_request",
    header(
        name = "X-RateLimit-Limit",
        ty = "u32",
        description = "Requests per second allowed for this public key."
    ),
    header(
        name = "X-RateLimit-Remaining",
        ty = "u32",
        description = "Requests left in the current second."
    ),
    header(
        name = "X-RateLimit-Reset",
        ty = "u64",
        description = "Seconds until the allowance is full again."
    ),
    header(
        name = "Access-Control-Allow-Origin",
        ty = "Option<String>",
        description = "The request's `Origin`, when it is an enabled tracking domain."
    )
)]
pub enum IngestResponse {
    /// Every event was stored (committed before this answer).
    #[oai(status = 200)]
    Ok(Json<IngestResult>),
    /// Some events were refused (`errors` says which and why); the others were stored.
    #[oai(status = 207)]
    Partial(Json<IngestPartialResult>),
    /// Malformed JSON, a body that is not a batch, more than 100 events, a `client` batch
    /// without a UUID `visitorId`, or an unsupported content type or encoding.
    #[oai(status = 400)]
    BadRequest(Json<IngestRequestError>),
    /// Unknown or inactive public key, or a browser origin that is not an enabled tracking
    /// domain of the organization.
    #[oai(status = 403)]
    Forbidden(Json<IngestRequestError>),
    /// The body is larger than 1,048,576 bytes (after gzip decompression).
    #[oai(status = 413)]
    TooLarge(Json<IngestRequestError>),
    /// More requests per second than the public key allows; retry after `Retry-After`.
    #[oai(
        status = 429,
        header(
            name = "Retry-After",
            ty = "u64",
            description = "Seconds to wait before retrying."
        )
    )]
    TooManyRequests(Json<IngestRequestError>),
    /// The events could not be stored; nothing was acknowledged, retry later.
    #[oai(status = 500)]
    Internal(Json<IngestRequestError>),
    /// The events were not acknowledged: the database cannot be reached, or the instance is
    /// receiving events faster than it can store them and refused this batch at once. Retry
    /// the batch unchanged after `Retry-After`; with `messageId`s, events that were stored all
    /// the same are not stored twice.
    #[oai(
        status = 503,
        header(
            name = "Retry-After",
            ty = "u64",
            description = "Seconds to wait before retrying."
        )
    )]
    Unavailable(Json<IngestRequestError>),
}

fn ingest_bad_request(err: poem::Error) -> IngestResponse {
    IngestResponse::BadRequest(refused(err.to_string()))
}

/// The answer to a CORS preflight.
#[derive(ApiResponse)]
#[oai(bad_request_handler = "preflight_bad_request")]
pub enum PreflightResponse {
    /// The origin may send events.
    #[oai(status = 204)]
    Allowed,
    /// Unknown public key, or an origin that is not an enabled tracking domain.
    #[oai(status = 403)]
    Forbidden(Json<IngestRequestError>),
    /// The key's tracking domains could not be read: the database cannot be reached.
    #[oai(status = 503)]
    Unavailable(Json<IngestRequestError>),
}

/// A CORS preflight answers every refusal with 403 (a browser only needs to know it may not
/// send), and 503 while the key's domains cannot be read.
impl From<IngestError> for PreflightResponse {
    fn from(err: IngestError) -> Self {
        match IngestFailure::from(err) {
            IngestFailure::Unavailable(m) => Self::Unavailable(refused(m)),
            IngestFailure::Forbidden(m)
            | IngestFailure::BadRequest(m)
            | IngestFailure::TooLarge(m)
            | IngestFailure::RateLimited { message: m, .. }
            | IngestFailure::Internal(m) => Self::Forbidden(refused(m)),
        }
    }
}

fn preflight_bad_request(err: poem::Error) -> PreflightResponse {
    PreflightResponse::Forbidden(refused(err.to_string()))
}

/// A response plus headers decided by the handler (rate limit, CORS).
pub struct WithHeaders<T> {
    response: T,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl<T: IntoResponse> IntoResponse for WithHeaders<T> {
    fn into_response(self) -> Response {
        let mut resp = self.response.into_response();
        for (name, value) in self.headers {
            resp.headers_mut().insert(name, value);
        }
        resp
    }
}

impl<T: ApiResponse> ApiResponse for WithHeaders<T> {
    const BAD_REQUEST_HANDLER: bool = T::BAD_REQUEST_HANDLER;

    fn meta() -> MetaResponses {
        T::meta()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn from_parse_request_error(err: poem::Error) -> Self {
        Self {
            response: T::from_parse_request_error(err),
            headers: vec![],
        }
    }
}

/// The `publicKey` path segment: documented as `pk_...`, but read as any string so that a
/// malformed key gets the same 403 as an unknown one.
pub struct PublicKey(pub String);

impl Type for PublicKey {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        "string_public_key".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        let mut schema = MetaSchema::new("string");
        schema.pattern = Some("^pk_".into());
        MetaSchemaRef::Inline(Box::new(schema))
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        Some(self)
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        Box::new(std::iter::once(self))
    }
}

impl ParseFromParameter for PublicKey {
    fn parse_from_parameter(value: &str) -> ParseResult<Self> {
        Ok(Self(value.to_string()))
    }
}

/// The request body, taken unread: the handler checks the key, origin and rate first, then
/// reads it with a bound. Documented as the batch schema for both accepted content types.
pub struct IngestBody(pub poem::Body);

impl<'a> ApiExtractor<'a> for IngestBody {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        IngestRequest::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        Some(MetaRequest {
            description: None,
            // `text/plain` (sendBeacon) is accepted too, with the same JSON; it is said in the
            // schema's description rather than listed, which SDK generators cannot handle.
            content: vec![MetaMediaType {
                content_type: "application/json",
                schema: IngestRequest::schema_ref(),
            }],
            required: true,
        })
    }

    async fn from_request(
        _request: &'a Request,
        body: &mut RequestBody,
        _param_opts: ExtractParamOptions<Self::ParamType>,
    ) -> poem::Result<Self> {
        Ok(Self(body.take().unwrap_or_default()))
    }
}

pub struct IngestApi {
    pub ingest: Ingest,
}

const ALLOW_METHODS: &str = "POST, OPTIONS";
const ALLOW_HEADERS: &str = "Content-Type";
const EXPOSE_HEADERS: &str =
    "X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Retry-After";

fn value(v: impl ToString) -> HeaderValue {
    HeaderValue::from_str(&v.to_string()).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn rate_headers(rate: &RateInfo) -> Vec<(HeaderName, HeaderValue)> {
    vec![
        (
            HeaderName::from_static("x-ratelimit-limit"),
            value(rate.limit),
        ),
        (
            HeaderName::from_static("x-ratelimit-remaining"),
            value(rate.remaining),
        ),
        (
            HeaderName::from_static("x-ratelimit-reset"),
            value(rate.reset_secs),
        ),
    ]
}

fn cors_headers(origin: &str) -> Vec<(HeaderName, HeaderValue)> {
    vec![
        (header::ACCESS_CONTROL_ALLOW_ORIGIN, value(origin)),
        (header::ACCESS_CONTROL_ALLOW_METHODS, value(ALLOW_METHODS)),
        (header::ACCESS_CONTROL_ALLOW_HEADERS, value(ALLOW_HEADERS)),
        (header::ACCESS_CONTROL_EXPOSE_HEADERS, value(EXPOSE_HEADERS)),
        (header::ACCESS_CONTROL_MAX_AGE, value(600)),
    ]
}

fn header_str(req: &Request, name: HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

fn unknown_key() -> IngestError {
    IngestError::Forbidden("unknown or inactive public key".into())
}

fn origin_refused(origin: &str) -> IngestError {
    IngestError::Forbidden(format!(
        "origin `{origin}` is not an enabled tracking domain of this organization"
    ))
}

impl IngestApi {
    async fn handle(
        &self,
        req: &Request,
        public_key: &str,
        body: poem::Body,
        headers: &mut Vec<(HeaderName, HeaderValue)>,
    ) -> Result<ingest::IngestOutcome, IngestError> {
        let received_at = Utc::now();
        let tracking = self.ingest.lookup(public_key).await?;
        // No `Origin`: a server-side caller, allowed. A browser origin must be enabled; an
        // enabled one may read every answer, a 429 and its `Retry-After` included.
        let origin = header_str(req, header::ORIGIN);
        let origin_ok = match (origin, tracking.as_deref()) {
            (Some(origin), Some(t)) => ingest::origin_allowed(t, origin),
            _ => true,
        };
        if let (Some(origin), true, Some(_)) = (origin, origin_ok, tracking.as_deref()) {
            headers.extend(cors_headers(origin));
            headers.push((header::VARY, value("Origin")));
        }
        let rate = self.ingest.check_rate(tracking.as_deref())?;
        headers.extend(rate_headers(&rate));
        let tracking = tracking.ok_or_else(unknown_key)?;
        if let (Some(origin), false) = (origin, origin_ok) {
            return Err(origin_refused(origin));
        }
        ingest_body::check_content_type(header_str(req, header::CONTENT_TYPE))?;
        let encoding = ingest_body::encoding(header_str(req, header::CONTENT_ENCODING))?;
        let bytes = ingest_body::read(body, encoding).await?;
        self.ingest.accept(&tracking, &bytes, received_at).await
    }
}

#[OpenApi(tag = "ApiTags::Ingest")]
impl IngestApi {
    /// Send tracking events
    ///
    /// Accepts a batch of up to 100 tracking events. Authenticated by the organization's
    /// public key (`pk_...`) in the path only: it is not secret and may appear in web pages.
    /// Browsers may call it from the organization's enabled tracking domains (CORS); calls
    /// without an `Origin` header are server-side and always allowed.
    ///
    /// Each event is validated on its own: a 207 lists the refused events by index and the
    /// others are stored. A 200 or 207 is sent only once the stored events are committed, so a
    /// client that times out may retry; give each event a `messageId` and repeats are not
    /// stored twice. At most 100 requests per second per public key by default.
    #[oai(
        path = "/api/i/v1/:publicKey/events",
        method = "post",
        operation_id = "ingestEvents"
    )]
    async fn ingest(
        &self,
        req: &Request,
        /// The organization's public tracking key; starts with `pk_`.
        #[oai(name = "publicKey")]
        public_key: Path<PublicKey>,
        body: IngestBody,
    ) -> WithHeaders<IngestResponse> {
        let mut headers = Vec::new();
        let response = match self
            .handle(req, &public_key.0 .0, body.0, &mut headers)
            .await
        {
            Ok(outcome) if outcome.errors.is_empty() => IngestResponse::Ok(Json(IngestResult {
                success: true,
                processed: outcome.processed as u32,
            })),
            Ok(outcome) => IngestResponse::Partial(Json(IngestPartialResult {
                success: false,
                processed: outcome.processed as u32,
                errors: outcome
                    .errors
                    .into_iter()
                    .map(|e| IngestEventError {
                        index: e.index as i32,
                        message: e.message,
                    })
                    .collect(),
            })),
            Err(err) => {
                let refusal = IngestRefusal::from(err);
                headers.extend(refusal.headers);
                refusal.response
            }
        };
        WithHeaders { response, headers }
    }

    /// CORS preflight for sending tracking events from a browser.
    #[oai(path = "/api/i/v1/:publicKey/events", method = "options", hidden)]
    async fn preflight(
        &self,
        req: &Request,
        #[oai(name = "publicKey")] public_key: Path<PublicKey>,
    ) -> WithHeaders<PreflightResponse> {
        let tracking = match self.ingest.lookup(&public_key.0 .0).await {
            Ok(Some(t)) => t,
            Ok(None) => {
                return WithHeaders {
                    response: unknown_key().into(),
                    headers: vec![],
                }
            }
            Err(e) => {
                return WithHeaders {
                    response: e.into(),
                    headers: vec![],
                }
            }
        };
        let origin = header_str(req, header::ORIGIN).unwrap_or_default();
        if !ingest::origin_allowed(&tracking, origin) {
            return WithHeaders {
                response: origin_refused(origin).into(),
                headers: vec![],
            };
        }
        let mut headers = cors_headers(origin);
        headers.push((header::VARY, value("Origin")));
        WithHeaders {
            response: PreflightResponse::Allowed,
            headers,
        }
    }
}
