//! Browser connection sessions: created by connect without `config`, completed on the connect
//! page this service serves, expiring after [`SESSION_LIFETIME_MINUTES`].
//!
//! Every function takes "now" so expiry is testable without waiting.

use chrono::{DateTime, Duration, Utc};
use sea_orm::{
    sea_query::Expr, ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection,
    EntityTrait, IntoActiveModel, QueryFilter, Set,
};
use serde_json::{json, Map, Value};

use super::{
    connections::{self, Connected},
    providers::{self, Provider, SetupMode},
    IntegrationError, IntegrationResult,
};
use crate::{crypto::SecretBox, timestamp, validation::ValidationIssue};
use entity::connect_session::{self as session, SessionStatus};

pub const SESSION_LIFETIME_MINUTES: i64 = 30;

/// A session just created by connect.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub session_id: String,
    pub connect_url: String,
    pub already_connected: bool,
}

/// A session's state as the status route and the connect page see it.
#[derive(Debug, Clone)]
pub struct SessionView {
    pub session: session::Model,
    pub provider: &'static Provider,
}

/// Opens a browser session for `provider`. The plan's limit is checked now (so the user is not
/// sent to a page that must fail) and again when the page completes.
pub async fn create<C: ConnectionTrait>(
    db: &C,
    org: &str,
    provider: &'static Provider,
    public_url: &str,
    now: DateTime<Utc>,
) -> IntegrationResult<NewSession> {
    let already_connected = connections::find(db, org, provider.id).await?.is_some();
    if !already_connected {
        connections::check_limit(db, org).await?;
    }
    let id = uuid::Uuid::new_v4().to_string();
    session::ActiveModel {
        id: Set(id.clone()),
        organization_id: Set(org.to_string()),
        provider: Set(provider.id.to_string()),
        status: Set(SessionStatus::Pending),
        error: Set(None),
        expires_at: Set(now + Duration::minutes(SESSION_LIFETIME_MINUTES)),
        created_at: Set(now),
        completed_at: Set(None),
    }
    .insert(db)
    .await?;
    Ok(NewSession {
        connect_url: format!("{}/connect/{id}", public_url.trim_end_matches('/')),
        session_id: id,
        already_connected,
    })
}

/// Marks a pending session past its lifetime as expired and returns the current row.
async fn refresh<C: ConnectionTrait>(
    db: &C,
    row: session::Model,
    now: DateTime<Utc>,
) -> IntegrationResult<session::Model> {
    if row.status == SessionStatus::Pending && row.expires_at <= now {
        let mut active = row.into_active_model();
        active.status = Set(SessionStatus::Expired);
        active.error = Set(Some(format!(
            "the session expired after {SESSION_LIFETIME_MINUTES} minutes"
        )));
        return Ok(active.update(db).await?);
    }
    Ok(row)
}

fn view(row: session::Model) -> IntegrationResult<SessionView> {
    let provider = providers::by_id(&row.provider)
        .ok_or_else(|| IntegrationError::Internal(format!("unknown provider {}", row.provider)))?;
    Ok(SessionView {
        session: row,
        provider,
    })
}

fn not_found(id: &str) -> IntegrationError {
    IntegrationError::NotFound(format!("connect session `{id}` not found"))
}

/// A session of the organization, by id (the status route).
pub async fn status<C: ConnectionTrait>(
    db: &C,
    org: &str,
    session_id: &str,
    now: DateTime<Utc>,
) -> IntegrationResult<SessionView> {
    let row = session::Entity::find_by_id(session_id.trim().to_string())
        .filter(session::Column::OrganizationId.eq(org))
        .one(db)
        .await?
        .ok_or_else(|| not_found(session_id))?;
    view(refresh(db, row, now).await?)
}

/// A session by id alone: the connect page has no API key, the unguessable id is its proof.
pub async fn for_page<C: ConnectionTrait>(
    db: &C,
    session_id: &str,
    now: DateTime<Utc>,
) -> IntegrationResult<SessionView> {
    if uuid::Uuid::parse_str(session_id).is_err() {
        return Err(not_found(session_id));
    }
    let row = session::Entity::find_by_id(session_id.to_string())
        .one(db)
        .await?
        .ok_or_else(|| not_found(session_id))?;
    view(refresh(db, row, now).await?)
}

/// What the person did on the connect page.
#[derive(Debug, Clone)]
pub enum PageAnswer {
    /// Submitted the credential fields (direct providers).
    Credentials(Map<String, Value>),
    /// Approved the authorization step (browser-only providers).
    Authorize,
    /// Declined.
    Deny,
}

/// Outcome of a page submission.
#[derive(Debug)]
pub enum PageOutcome {
    /// The session is finished (connected, failed or expired); show its result.
    Finished(SessionView),
    /// The fields need fixing; the session stays pending.
    Invalid(SessionView, Vec<ValidationIssue>),
}

async fn finish<C: ConnectionTrait>(
    db: &C,
    row: session::Model,
    status: SessionStatus,
    error: Option<String>,
    now: DateTime<Utc>,
) -> IntegrationResult<SessionView> {
    let mut active = row.into_active_model();
    active.status = Set(status);
    active.error = Set(error);
    active.completed_at = Set(Some(now));
    view(active.update(db).await?)
}

/// Completes a pending session from the connect page.
pub async fn complete(
    db: &DatabaseConnection,
    secrets: &SecretBox,
    session_id: &str,
    answer: PageAnswer,
    now: DateTime<Utc>,
) -> IntegrationResult<PageOutcome> {
    let current = for_page(db, session_id, now).await?;
    if current.session.status != SessionStatus::Pending {
        return Ok(PageOutcome::Finished(current));
    }
    let SessionView { session, provider } = current;
    let org = session.organization_id.clone();
    let stored: IntegrationResult<Connected> = match (answer, provider.setup_mode) {
        (PageAnswer::Deny, _) => {
            let message = format!(
                "access to {} was declined on the connect page",
                provider.name
            );
            return Ok(PageOutcome::Finished(
                finish(db, session, SessionStatus::Failed, Some(message), now).await?,
            ));
        }
        (PageAnswer::Credentials(fields), SetupMode::DirectApiKey) => {
            match connections::validate_credentials(provider, &fields, "") {
                Ok(creds) => {
                    let sealed = secrets.encrypt(&Value::Object(creds).to_string());
                    connections::store(db, &org, provider, Some(sealed), json!({}), now).await
                }
                Err(issues) => {
                    return Ok(PageOutcome::Invalid(
                        SessionView { session, provider },
                        issues,
                    ))
                }
            }
        }
        (PageAnswer::Authorize, SetupMode::BrowserSession) => {
            // No request reaches the provider in this version: the connection records the
            // person's authorization, and the capability says the provider has no sync yet.
            let settings = json!({
                "authorizedVia": "connect_page",
                "authorizedAt": timestamp::format(&now),
                "sessionId": session.id,
            });
            connections::store(db, &org, provider, None, settings, now).await
        }
        (PageAnswer::Credentials(_), SetupMode::BrowserSession) => {
            return Ok(PageOutcome::Invalid(
                SessionView { session, provider },
                vec![ValidationIssue::root(format!(
                    "{} takes no credentials here: use the authorization step",
                    provider.name
                ))],
            ))
        }
        (PageAnswer::Authorize, SetupMode::DirectApiKey) => {
            return Ok(PageOutcome::Invalid(
                SessionView { session, provider },
                vec![ValidationIssue::root(format!(
                    "{} needs its credential fields",
                    provider.name
                ))],
            ))
        }
    };
    let view = match stored {
        Ok(_) => finish(db, session, SessionStatus::Connected, None, now).await?,
        Err(IntegrationError::ConnectionLimit {
            plan,
            current,
            limit,
        }) => {
            let message = format!(
                "the {plan} plan allows {limit} integration connection(s) and {current} are in use"
            );
            finish(db, session, SessionStatus::Failed, Some(message), now).await?
        }
        Err(other) => return Err(other),
    };
    Ok(PageOutcome::Finished(view))
}

/// Marks every pending session past its lifetime as expired (the scheduler's sweep).
pub async fn expire_due<C: ConnectionTrait>(db: &C, now: DateTime<Utc>) -> IntegrationResult<u64> {
    let result = session::Entity::update_many()
        .col_expr(session::Column::Status, Expr::value(SessionStatus::Expired))
        .col_expr(
            session::Column::Error,
            Expr::value(Some(format!(
                "the session expired after {SESSION_LIFETIME_MINUTES} minutes"
            ))),
        )
        .filter(session::Column::Status.eq(SessionStatus::Pending))
        .filter(session::Column::ExpiresAt.lte(now))
        .exec(db)
        .await?;
    Ok(result.rows_affected)
}
