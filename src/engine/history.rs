//! What the run routes show: an automation's runs (newest first) with their deliveries and
//! every attempt, one run, and the dry run (`POST /api/automations/{id}/test`) that builds the
//! run an event or a subject would make and the body it would send, storing and sending nothing.

use chrono::Utc;
use entity::{
    automation_run::{self, AutomationRunStatus},
    event, notification_delivery, user,
};
use sea_orm::{
    ColumnTrait, Condition, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::Value;

use super::{
    config::{self, Grain, Pattern},
    evaluate::{resolve_subject, AppliedEvent, Identities, LoadedSignal},
    processor,
    runs::Subject,
};
use crate::{
    engine::automations,
    platform::{paging, PlatformError, PlatformResult},
    state::AppState,
    tools::{common::resolve_customer, ToolContext, ToolError},
};

/// A run with its deliveries.
pub struct RunView {
    pub run: automation_run::Model,
    pub deliveries: Vec<notification_delivery::Model>,
}

pub struct RunPage {
    pub runs: Vec<RunView>,
    /// `""` on the last page.
    pub next_cursor: String,
}

async fn with_deliveries(
    db: &DatabaseConnection,
    runs: Vec<automation_run::Model>,
) -> PlatformResult<Vec<RunView>> {
    let ids: Vec<String> = runs.iter().map(|r| r.id.clone()).collect();
    let deliveries = notification_delivery::Entity::find()
        .filter(notification_delivery::Column::AutomationRunId.is_in(ids))
        .order_by_asc(notification_delivery::Column::CreatedAt)
        .all(db)
        .await?;
    Ok(runs
        .into_iter()
        .map(|run| RunView {
            deliveries: deliveries
                .iter()
                .filter(|d| d.automation_run_id.as_deref() == Some(run.id.as_str()))
                .cloned()
                .collect(),
            run,
        })
        .collect())
}

/// The automation's runs, filtered by `status`, newest first.
pub async fn list(
    db: &DatabaseConnection,
    org: &str,
    automation_id: &str,
    status_filter: Option<&str>,
    limit: Option<u32>,
    cursor: Option<&str>,
) -> PlatformResult<RunPage> {
    let page = paging::page_request::<AutomationRunStatus>(status_filter, limit, cursor)?;
    // Only whether it is the organization's (its links are not needed): one statement.
    let automation = automations::find(db, org, automation_id).await?;
    let mut query = automation_run::Entity::find()
        .filter(automation_run::Column::OrganizationId.eq(org))
        .filter(automation_run::Column::AutomationId.eq(&automation.id));
    if let Some(s) = page.status {
        query = query.filter(automation_run::Column::Status.eq(s));
    }
    if let Some((at, id)) = page.after {
        query = query.filter(
            Condition::any()
                .add(automation_run::Column::TriggeredAt.lt(at))
                .add(
                    Condition::all()
                        .add(automation_run::Column::TriggeredAt.eq(at))
                        .add(automation_run::Column::Id.lt(id)),
                ),
        );
    }
    let mut rows = query
        .order_by_desc(automation_run::Column::TriggeredAt)
        .order_by_desc(automation_run::Column::Id)
        .limit(u64::from(page.limit) + 1)
        .all(db)
        .await?;
    let next_cursor = if rows.len() > page.limit as usize {
        rows.truncate(page.limit as usize);
        rows.last()
            .map(|r| paging::encode_cursor(&r.triggered_at, &r.id))
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok(RunPage {
        runs: with_deliveries(db, rows).await?,
        next_cursor,
    })
}

/// One run of the automation.
pub async fn get(
    db: &DatabaseConnection,
    org: &str,
    automation_id: &str,
    run_id: &str,
) -> PlatformResult<RunView> {
    // Only whether it is the organization's (its links are not needed): one statement.
    let automation = automations::find(db, org, automation_id).await?;
    let not_found = || PlatformError::NotFound(format!("run `{}` not found", run_id.trim()));
    let run_id = uuid::Uuid::parse_str(run_id.trim()).map_err(|_| not_found())?;
    let run = automation_run::Entity::find_by_id(run_id.to_string())
        .filter(automation_run::Column::OrganizationId.eq(org))
        .filter(automation_run::Column::AutomationId.eq(&automation.id))
        .one(db)
        .await?
        .ok_or_else(not_found)?;
    with_deliveries(db, vec![run])
        .await?
        .pop()
        .ok_or_else(not_found)
}

/// What a dry run starts from.
pub enum TestInput {
    Event(String),
    Subject { grain: String, key: String },
}

/// The run a dry run would make and the body it would send.
pub struct TestOutcome {
    pub run: RunView,
    pub payload: Value,
}

/// Builds, without storing or sending anything, the run `input` would start and its payload.
pub async fn test(
    state: &AppState,
    org: &str,
    automation_id: &str,
    input: TestInput,
) -> PlatformResult<TestOutcome> {
    let db = &state.db;
    let view = automations::get(db, org, automation_id).await?;
    let automation = &view.automation;
    let now = Utc::now();
    let signals: Vec<LoadedSignal> = view
        .signals
        .iter()
        .filter(|s| s.archived_at.is_none())
        .filter_map(|s| {
            let rule = config::compile_signal(s.kind, &s.definition).ok()?;
            Some(LoadedSignal {
                model: s.clone(),
                rule: std::sync::Arc::new(rule),
            })
        })
        .collect();
    let mut skip: Option<String> = None;
    let (subject, events, occurred) = match input {
        TestInput::Event(event_id) => {
            let applied = find_event(db, org, &event_id).await?;
            let ids = Identities::load(db, std::slice::from_ref(&applied)).await?;
            let view_json = applied.match_view();
            let mut subject: Option<Subject> = None;
            let mut occurred = Vec::new();
            for s in &signals {
                // Patterns are judged on their last (or only) step: the event that would fire them.
                let matcher = match &s.rule.pattern {
                    Pattern::Match(m) | Pattern::Count { matcher: m, .. } => m,
                    Pattern::Sequence { steps, .. } => match steps.last() {
                        Some(m) => m,
                        None => continue,
                    },
                };
                if !matcher.matches(&view_json) {
                    continue;
                }
                if let Some(found) = resolve_subject(&s.rule, &applied, &ids) {
                    subject.get_or_insert(found);
                    occurred.push(s.reference());
                }
            }
            if occurred.is_empty() {
                skip = Some(
                    "the event matches none of the automation's active signals for a known subject"
                        .to_string(),
                );
            }
            (subject, vec![applied.record()], occurred)
        }
        TestInput::Subject { grain, key } => {
            let subject = find_subject(state, org, &grain, &key).await?;
            let occurred = signals.iter().map(LoadedSignal::reference).collect();
            (Some(subject), Vec::new(), occurred)
        }
    };
    let mut run = automation_run::Model {
        id: uuid::Uuid::new_v4().to_string(),
        organization_id: org.to_string(),
        automation_id: automation.id.clone(),
        dedupe_key: "test".into(),
        status: AutomationRunStatus::Pending,
        triggered_at: now,
        started_at: None,
        finished_at: None,
        config_hash: automation.config_hash.clone(),
        subject: subject.as_ref().map(Subject::to_json),
        digest_since: None,
        skip_reason: None,
        title: None,
        message: None,
        warnings: serde_json::json!([]),
        events: Value::Array(events),
        signals: Value::Array(occurred),
        processor_attempts: 0,
        lease_until: None,
        updated_at: now,
    };
    let mut customer_id = None;
    if skip.is_none() {
        if let Some(subject_json) = &run.subject {
            let records = processor::subject_records(db, org, subject_json).await?;
            customer_id = records.customer.as_ref().map(|c| c.id.clone());
            match config::parse_audience(&automation.audience_filter_json) {
                Ok(audience) => {
                    if let Err(reason) =
                        audience.admits(records.customer.as_ref(), records.user.as_ref(), now)
                    {
                        skip = Some(format!("the subject is outside the audience: {reason}"));
                    }
                }
                Err(_) => skip = Some("the automation's audienceFilterJson does not fit".into()),
            }
        }
    }
    if skip.is_none() && view.active_destinations() == 0 {
        skip = Some("the automation has no enabled destination".into());
    }
    let customer = processor::customer_context(state, org, customer_id.as_deref()).await;
    if let Some(reason) = skip {
        run.status = AutomationRunStatus::Skipped;
        run.skip_reason = Some(reason);
        run.finished_at = Some(now);
    }
    let (title, message, payload) = processor::sample_payload(automation, &run, customer);
    if automation.agent_id.is_some() {
        run.warnings = serde_json::json!([
            "a dry run does not call the agent; the payload carries the template message"
        ]);
    }
    run.title = Some(title);
    run.message = Some(message);
    Ok(TestOutcome {
        run: RunView {
            run,
            deliveries: Vec::new(),
        },
        payload,
    })
}

/// The event as evaluation sees it: stored, or still in the ingest journal (acknowledged, its
/// effects not applied yet: attributed to the users and accounts already stored).
async fn find_event(db: &DatabaseConnection, org: &str, id: &str) -> PlatformResult<AppliedEvent> {
    let id = id.trim();
    let stored = || async {
        event::Entity::find_by_id(id.to_string())
            .filter(event::Column::OrganizationId.eq(org))
            .one(db)
            .await
    };
    if let Some(row) = stored().await? {
        return Ok(row.into());
    }
    let journal = crate::ingest::journal::Journal::of(db).await?;
    if let Some((batch, at)) = journal.find_event(org, id).await? {
        if let Some(pending) = crate::ingest::effects::pending::as_stored(db, &batch, at).await? {
            return Ok(pending);
        }
    }
    // Applied between the two reads: the applier removes a batch from the journal only after
    // its events are stored.
    match stored().await? {
        Some(row) => Ok(row.into()),
        None => Err(PlatformError::NotFound(format!("event `{id}` not found"))),
    }
}

/// A subject by grain and key: a customer by id, domain or externalId; a user by email,
/// externalId or id.
async fn find_subject(
    state: &AppState,
    org: &str,
    grain: &str,
    key: &str,
) -> PlatformResult<Subject> {
    let key = key.trim();
    let not_found = || PlatformError::NotFound(format!("no {grain} with key `{key}`"));
    match Grain::parse(grain) {
        Some(Grain::Customer) => {
            // The tools' lookup: id, then domain, then externalId.
            let ctx = ToolContext::new(state.clone(), org.to_string());
            let c = resolve_customer(&ctx, key).await.map_err(|e| match e {
                ToolError::Unavailable(m) => PlatformError::Unavailable(m),
                ToolError::Internal(m) => PlatformError::Internal(m),
                _ => not_found(),
            })?;
            Ok(Subject {
                grain: Grain::Customer,
                id: c.id.clone(),
                key: key.to_string(),
                name: Some(c.name),
                customer_id: Some(c.id),
            })
        }
        Some(Grain::User) => {
            let db = &state.db;
            let u = user::Entity::find()
                .filter(user::Column::OrganizationId.eq(org))
                .filter(
                    Condition::any()
                        .add(user::Column::Email.eq(key.to_lowercase()))
                        .add(user::Column::ExternalId.eq(key))
                        .add(user::Column::Id.eq(key)),
                )
                .one(db)
                .await?
                .ok_or_else(not_found)?;
            Ok(Subject {
                grain: Grain::User,
                id: u.id.clone(),
                key: key.to_string(),
                name: u.name.clone().or(u.email.clone()),
                customer_id: u.customer_id,
            })
        }
        None => Err(PlatformError::Validation(vec![
            crate::validation::ValidationIssue::new(
                vec!["subject".into(), "grain".into()],
                "must be one of user, customer",
            ),
        ])),
    }
}
