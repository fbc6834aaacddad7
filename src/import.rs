//! Data in: JSON Lines of customers, users, workspace users, sources and facts
//! (`custintel import`, and the demo seed through the same path).
//!
//! Each line is one record with a `kind`. Every line is checked and written on its own
//! savepoint, so a bad line is reported with its number and never costs the good ones.
//! Re-importing a line updates the record with the same key instead of duplicating it:
//! customers by `externalId` (then `domain`), users by `externalId` (then email), workspace
//! users by email, sources by `sourceType` + `sourceId`, facts by customer, source and text.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use entity::{change, customer, fact, source, user, workspace_user};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbErr, EntityTrait,
    NotSet, QueryFilter, Set, TransactionTrait,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tools::common::normalize_source_type;

/// One import line.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ImportRecord {
    Customer(CustomerRecord),
    User(UserRecord),
    WorkspaceUser(WorkspaceUserRecord),
    Source(SourceRecord),
    Fact(FactRecord),
}

/// A customer (account). Needs a `domain` or an `externalId`; fields left out keep their
/// stored value on re-import.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CustomerRecord {
    pub name: Option<String>,
    pub domain: Option<String>,
    pub external_id: Option<String>,
    pub billing_status: Option<String>,
    pub mrr_cents: Option<i64>,
    pub traits: Option<Map<String, Value>>,
    pub last_activity_at: Option<DateTime<Utc>>,
    pub created_at: Option<DateTime<Utc>>,
}

/// A user (a person at a customer). Needs an `email` or an `externalId`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UserRecord {
    /// The user's customer: its domain or externalId.
    pub customer: Option<String>,
    pub email: Option<String>,
    pub external_id: Option<String>,
    pub name: Option<String>,
    pub stage: Option<String>,
    pub traits: Option<Map<String, Value>>,
    pub last_activity_at: Option<DateTime<Utc>>,
    pub created_at: Option<DateTime<Utc>>,
}

/// A workspace user (one of the organization's own people), keyed by email.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkspaceUserRecord {
    pub name: String,
    pub email: String,
    pub role: String,
    pub created_at: Option<DateTime<Utc>>,
}

/// A source record (call, email, calendar event, support ticket, opportunity).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SourceRecord {
    pub source_type: String,
    pub source_id: String,
    /// The customer it is about: its domain or externalId.
    pub customer: Option<String>,
    pub title: String,
    #[serde(default)]
    pub body: String,
    pub occurred_at: DateTime<Utc>,
    #[serde(default)]
    pub permalink: Option<String>,
    #[serde(default)]
    pub participants: Vec<String>,
    pub created_at: Option<DateTime<Utc>>,
}

/// A fact about a customer, with its evidence in an already imported source.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FactRecord {
    /// The customer: its domain or externalId.
    pub customer: String,
    pub text: String,
    pub status: Option<String>,
    pub source_type: String,
    pub source_id: String,
    #[serde(default)]
    pub source_quote: String,
    /// Defaults to the source's permalink.
    pub permalink: Option<String>,
    pub created_at: Option<DateTime<Utc>>,
}

/// Records imported per kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ImportCounts {
    pub customer: u64,
    pub user: u64,
    pub workspace_user: u64,
    pub source: u64,
    pub fact: u64,
}

/// A line that was not imported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejected {
    /// 1-based line number.
    pub line: usize,
    pub error: String,
}

/// What an import did; printed by `custintel import`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    pub imported: ImportCounts,
    pub rejected: Vec<Rejected>,
}

const BILLING_STATUSES: [&str; 4] = ["PAYING", "TRIALING", "CHURNED", "NONE"];
const STAGES: [&str; 5] = [
    "discovered",
    "signed_up",
    "activated",
    "engaged",
    "inactive",
];
const ROLES: [&str; 4] = ["CSM", "MANAGER", "ACCOUNT_OWNER", "ADMIN"];
const FACT_STATUSES: [&str; 3] = ["ACTIVE", "SUPERSEDED", "RETRACTED"];

/// Why one line was not imported.
#[derive(Debug, thiserror::Error)]
enum LineError {
    #[error("{0}")]
    Invalid(String),
    #[error("could not be stored: {0}")]
    Db(#[from] DbErr),
}

fn invalid(message: impl Into<String>) -> LineError {
    LineError::Invalid(message.into())
}

/// Parses one JSON Lines line, naming the offending field.
pub fn parse_line(text: &str) -> Result<ImportRecord, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not a JSON object: {e}"))?;
    if !value.is_object() {
        return Err("not a JSON object".into());
    }
    match value.get("kind").and_then(Value::as_str) {
        Some("customer" | "user" | "workspace_user" | "source" | "fact") => {}
        Some(other) => {
            return Err(format!(
                "kind: unknown kind `{other}` (customer, user, workspace_user, source, fact)"
            ))
        }
        None => return Err("kind: required (customer, user, workspace_user, source, fact)".into()),
    }
    serde_path_to_error::deserialize::<_, ImportRecord>(value).map_err(|e| {
        let path = e.path().to_string();
        if path.is_empty() || path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}

/// Imports the lines of a JSON Lines text (blank lines are skipped).
pub async fn import_text<C: TransactionTrait<Transaction = DatabaseTransaction>>(
    db: &C,
    organization_id: &str,
    text: &str,
) -> Result<ImportReport, DbErr> {
    let lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, parse_line(l)));
    import_records(db, organization_id, lines).await
}

/// Imports numbered records (parsed, or the reason they could not be) in order, in one
/// transaction with a savepoint per record.
pub async fn import_records<C, I>(
    db: &C,
    organization_id: &str,
    records: I,
) -> Result<ImportReport, DbErr>
where
    C: TransactionTrait<Transaction = DatabaseTransaction>,
    I: IntoIterator<Item = (usize, Result<ImportRecord, String>)>,
{
    let txn = crate::db::begin_write(db).await?;
    let mut report = ImportReport::default();
    for (line, record) in records {
        let record = match record {
            Ok(r) => r,
            Err(error) => {
                report.rejected.push(Rejected { line, error });
                continue;
            }
        };
        let savepoint = txn.begin().await?;
        match apply(&savepoint, organization_id, &record).await {
            Ok(()) => {
                savepoint.commit().await?;
                let counts = &mut report.imported;
                match record {
                    ImportRecord::Customer(_) => counts.customer += 1,
                    ImportRecord::User(_) => counts.user += 1,
                    ImportRecord::WorkspaceUser(_) => counts.workspace_user += 1,
                    ImportRecord::Source(_) => counts.source += 1,
                    ImportRecord::Fact(_) => counts.fact += 1,
                }
            }
            Err(e) => {
                savepoint.rollback().await?;
                report.rejected.push(Rejected {
                    line,
                    error: e.to_string(),
                });
            }
        }
    }
    txn.commit().await?;
    Ok(report)
}

async fn apply(
    txn: &DatabaseTransaction,
    org: &str,
    record: &ImportRecord,
) -> Result<(), LineError> {
    match record {
        ImportRecord::Customer(r) => import_customer(txn, org, r).await,
        ImportRecord::User(r) => import_user(txn, org, r).await,
        ImportRecord::WorkspaceUser(r) => import_workspace_user(txn, org, r).await,
        ImportRecord::Source(r) => import_source(txn, org, r).await,
        ImportRecord::Fact(r) => import_fact(txn, org, r).await,
    }
}

/// Trimmed, `None` when empty.
fn clean(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

fn one_of(field: &str, value: &str, allowed: &[&str]) -> Result<String, LineError> {
    if allowed.contains(&value) {
        Ok(value.to_string())
    } else {
        Err(invalid(format!(
            "{field}: `{value}` is not one of {}",
            allowed.join(", ")
        )))
    }
}

/// Appends a `change_log` row and returns its sequence number for the source or fact's
/// `change_seq`, so the search index following the change feed sees every write.
pub async fn record_change(
    txn: &DatabaseTransaction,
    org: &str,
    artifact_type: &str,
    artifact_id: &str,
    at: DateTime<Utc>,
) -> Result<i64, DbErr> {
    let row = change::ActiveModel {
        seq: NotSet,
        organization_id: Set(org.to_string()),
        artifact_type: Set(artifact_type.to_string()),
        artifact_id: Set(artifact_id.to_string()),
        created_at: Set(at),
    }
    .insert(txn)
    .await?;
    Ok(row.seq)
}

/// The customer a line refers to: by domain, then externalId (then id).
async fn referenced_customer(
    txn: &DatabaseTransaction,
    org: &str,
    field: &str,
    reference: &str,
) -> Result<customer::Model, LineError> {
    let wanted = reference.trim();
    let scoped = || customer::Entity::find().filter(customer::Column::OrganizationId.eq(org));
    if let Some(c) = scoped()
        .filter(customer::Column::Domain.eq(wanted.to_lowercase()))
        .one(txn)
        .await?
    {
        return Ok(c);
    }
    if let Some(c) = scoped()
        .filter(customer::Column::ExternalId.eq(wanted))
        .one(txn)
        .await?
    {
        return Ok(c);
    }
    if let Some(c) = scoped()
        .filter(customer::Column::Id.eq(wanted))
        .one(txn)
        .await?
    {
        return Ok(c);
    }
    Err(invalid(format!(
        "{field}: no customer with domain or externalId `{wanted}` (import it first)"
    )))
}

async fn import_customer(
    txn: &DatabaseTransaction,
    org: &str,
    r: &CustomerRecord,
) -> Result<(), LineError> {
    let domain = clean(&r.domain).map(|d| d.to_lowercase());
    let external_id = clean(&r.external_id);
    if domain.is_none() && external_id.is_none() {
        return Err(invalid("a customer needs a `domain` or an `externalId`"));
    }
    let status = match &r.billing_status {
        Some(s) => Some(one_of("billingStatus", s.trim(), &BILLING_STATUSES)?),
        None => None,
    };
    if r.mrr_cents.is_some_and(|m| m < 0) {
        return Err(invalid("mrrCents: must not be negative"));
    }
    if r.name.as_ref().is_some_and(|n| n.trim().is_empty()) {
        return Err(invalid("name: must not be empty"));
    }
    let scoped = || customer::Entity::find().filter(customer::Column::OrganizationId.eq(org));
    let mut existing = None;
    if let Some(ext) = &external_id {
        existing = scoped()
            .filter(customer::Column::ExternalId.eq(ext))
            .one(txn)
            .await?;
    }
    if existing.is_none() {
        if let Some(d) = &domain {
            existing = scoped()
                .filter(customer::Column::Domain.eq(d))
                .one(txn)
                .await?;
        }
    }
    let now = Utc::now();
    match existing {
        Some(found) => {
            let mut row: customer::ActiveModel = found.into();
            if let Some(n) = &r.name {
                row.name = Set(n.trim().to_string());
            }
            if domain.is_some() {
                row.domain = Set(domain);
            }
            if external_id.is_some() {
                row.external_id = Set(external_id);
            }
            if let Some(s) = status {
                row.billing_status = Set(s);
            }
            if let Some(m) = r.mrr_cents {
                row.mrr_cents = Set(m);
            }
            if let Some(t) = &r.traits {
                row.traits = Set(Value::Object(t.clone()));
            }
            if r.last_activity_at.is_some() {
                row.last_activity_at = Set(r.last_activity_at);
            }
            if let Some(c) = r.created_at {
                row.created_at = Set(c);
            }
            row.updated_at = Set(now);
            row.update(txn).await?;
        }
        None => {
            // A customer without a name is named after its externalId (else its domain).
            let name = clean(&r.name)
                .or_else(|| external_id.clone())
                .or_else(|| domain.clone())
                .unwrap_or_default();
            let created_at = r.created_at.unwrap_or(now);
            customer::ActiveModel {
                id: Set(uuid::Uuid::new_v4().to_string()),
                organization_id: Set(org.to_string()),
                name: Set(name),
                domain: Set(domain),
                external_id: Set(external_id),
                billing_status: Set(status.unwrap_or_else(|| "NONE".into())),
                mrr_cents: Set(r.mrr_cents.unwrap_or(0)),
                traits: Set(Value::Object(r.traits.clone().unwrap_or_default())),
                last_activity_at: Set(r.last_activity_at),
                created_at: Set(created_at),
                updated_at: Set(created_at.max(now)),
            }
            .insert(txn)
            .await?;
        }
    }
    Ok(())
}

async fn import_user(
    txn: &DatabaseTransaction,
    org: &str,
    r: &UserRecord,
) -> Result<(), LineError> {
    let email = clean(&r.email);
    let external_id = clean(&r.external_id);
    if email.is_none() && external_id.is_none() {
        return Err(invalid("a user needs an `email` or an `externalId`"));
    }
    if let Some(e) = &email {
        if !e.contains('@') {
            return Err(invalid(format!("email: `{e}` is not an email address")));
        }
    }
    let stage = match &r.stage {
        Some(s) => Some(one_of("stage", s.trim(), &STAGES)?),
        None => None,
    };
    let customer_id = match clean(&r.customer) {
        Some(reference) => Some(
            referenced_customer(txn, org, "customer", &reference)
                .await?
                .id,
        ),
        None => None,
    };
    let scoped = || user::Entity::find().filter(user::Column::OrganizationId.eq(org));
    let mut existing = None;
    if let Some(ext) = &external_id {
        existing = scoped()
            .filter(user::Column::ExternalId.eq(ext))
            .one(txn)
            .await?;
    }
    if existing.is_none() {
        if let Some(e) = &email {
            existing = scoped()
                .filter(crate::tools::common::equals_ci(user::Column::Email, e))
                .one(txn)
                .await?;
        }
    }
    let now = Utc::now();
    match existing {
        Some(found) => {
            let mut row: user::ActiveModel = found.into();
            if customer_id.is_some() {
                row.customer_id = Set(customer_id);
            }
            if email.is_some() {
                row.email = Set(email);
            }
            if external_id.is_some() {
                row.external_id = Set(external_id);
            }
            if let Some(n) = clean(&r.name) {
                row.name = Set(Some(n));
            }
            if let Some(s) = stage {
                row.stage = Set(s);
            }
            if let Some(t) = &r.traits {
                row.traits = Set(Value::Object(t.clone()));
            }
            if r.last_activity_at.is_some() {
                row.last_activity_at = Set(r.last_activity_at);
            }
            if let Some(c) = r.created_at {
                row.created_at = Set(c);
            }
            row.updated_at = Set(now);
            row.update(txn).await?;
        }
        None => {
            let created_at = r.created_at.unwrap_or(now);
            user::ActiveModel {
                id: Set(uuid::Uuid::new_v4().to_string()),
                organization_id: Set(org.to_string()),
                customer_id: Set(customer_id),
                email: Set(email),
                external_id: Set(external_id),
                name: Set(clean(&r.name)),
                stage: Set(stage.unwrap_or_else(|| "discovered".into())),
                traits: Set(Value::Object(r.traits.clone().unwrap_or_default())),
                last_activity_at: Set(r.last_activity_at),
                created_at: Set(created_at),
                updated_at: Set(r.last_activity_at.unwrap_or(created_at)),
            }
            .insert(txn)
            .await?;
        }
    }
    Ok(())
}

async fn import_workspace_user(
    txn: &DatabaseTransaction,
    org: &str,
    r: &WorkspaceUserRecord,
) -> Result<(), LineError> {
    let name = r.name.trim();
    if name.is_empty() {
        return Err(invalid("name: must not be empty"));
    }
    let email = r.email.trim().to_lowercase();
    if !email.contains('@') {
        return Err(invalid(format!(
            "email: `{}` is not an email address",
            r.email
        )));
    }
    let role = one_of("role", r.role.trim(), &ROLES)?;
    let existing = workspace_user::Entity::find()
        .filter(workspace_user::Column::OrganizationId.eq(org))
        .filter(workspace_user::Column::Email.eq(&email))
        .one(txn)
        .await?;
    match existing {
        Some(found) => {
            let mut row: workspace_user::ActiveModel = found.into();
            row.name = Set(name.to_string());
            row.role = Set(role);
            if let Some(c) = r.created_at {
                row.created_at = Set(c);
            }
            row.update(txn).await?;
        }
        None => {
            workspace_user::ActiveModel {
                id: Set(uuid::Uuid::new_v4().to_string()),
                organization_id: Set(org.to_string()),
                name: Set(name.to_string()),
                email: Set(email),
                role: Set(role),
                created_at: Set(r.created_at.unwrap_or_else(Utc::now)),
            }
            .insert(txn)
            .await?;
        }
    }
    Ok(())
}

fn source_type(field: &str, raw: &str) -> Result<&'static str, LineError> {
    normalize_source_type(raw).ok_or_else(|| {
        invalid(format!(
            "{field}: `{raw}` is not one of CALL, EMAIL, CALENDAR_EVENT, SUPPORT_TICKET, OPPORTUNITY"
        ))
    })
}

async fn import_source(
    txn: &DatabaseTransaction,
    org: &str,
    r: &SourceRecord,
) -> Result<(), LineError> {
    let source_type = source_type("sourceType", &r.source_type)?;
    let source_id = r.source_id.trim();
    if source_id.is_empty() {
        return Err(invalid("sourceId: must not be empty"));
    }
    if r.title.trim().is_empty() {
        return Err(invalid("title: must not be empty"));
    }
    let customer_id = match clean(&r.customer) {
        Some(reference) => Some(
            referenced_customer(txn, org, "customer", &reference)
                .await?
                .id,
        ),
        None => None,
    };
    let participants = Value::Array(
        r.participants
            .iter()
            .map(|p| Value::String(p.trim().to_string()))
            .collect(),
    );
    let existing = source::Entity::find()
        .filter(source::Column::OrganizationId.eq(org))
        .filter(source::Column::SourceType.eq(source_type))
        .filter(source::Column::SourceId.eq(source_id))
        .one(txn)
        .await?;
    let now = Utc::now();
    let created_at = r.created_at.unwrap_or(now);
    match existing {
        Some(found) => {
            let seq = record_change(txn, org, "source", &found.id, now.max(created_at)).await?;
            let mut row: source::ActiveModel = found.into();
            row.customer_id = Set(customer_id);
            row.title = Set(r.title.trim().to_string());
            row.body = Set(r.body.clone());
            row.occurred_at = Set(r.occurred_at);
            row.permalink = Set(clean(&r.permalink));
            row.participants = Set(participants);
            row.change_seq = Set(seq);
            row.updated_at = Set(now.max(created_at));
            row.update(txn).await?;
        }
        None => {
            let id = uuid::Uuid::new_v4().to_string();
            let seq = record_change(txn, org, "source", &id, created_at).await?;
            source::ActiveModel {
                id: Set(id),
                organization_id: Set(org.to_string()),
                source_type: Set(source_type.to_string()),
                source_id: Set(source_id.to_string()),
                customer_id: Set(customer_id),
                title: Set(r.title.trim().to_string()),
                body: Set(r.body.clone()),
                occurred_at: Set(r.occurred_at),
                permalink: Set(clean(&r.permalink)),
                participants: Set(participants),
                change_seq: Set(seq),
                created_at: Set(created_at),
                updated_at: Set(created_at),
            }
            .insert(txn)
            .await?;
        }
    }
    Ok(())
}

async fn import_fact(
    txn: &DatabaseTransaction,
    org: &str,
    r: &FactRecord,
) -> Result<(), LineError> {
    let text = r.text.trim();
    if text.is_empty() {
        return Err(invalid("text: must not be empty"));
    }
    let status = one_of(
        "status",
        r.status.as_deref().map(str::trim).unwrap_or("ACTIVE"),
        &FACT_STATUSES,
    )?;
    let source_type = source_type("sourceType", &r.source_type)?;
    let customer = referenced_customer(txn, org, "customer", &r.customer).await?;
    let evidence = source::Entity::find()
        .filter(source::Column::OrganizationId.eq(org))
        .filter(source::Column::SourceType.eq(source_type))
        .filter(source::Column::SourceId.eq(r.source_id.trim()))
        .one(txn)
        .await?
        .ok_or_else(|| {
            invalid(format!(
                "sourceId: no {source_type} source `{}` (import the source first)",
                r.source_id.trim()
            ))
        })?;
    let permalink = clean(&r.permalink).or(evidence.permalink.clone());
    let existing = fact::Entity::find()
        .filter(fact::Column::OrganizationId.eq(org))
        .filter(fact::Column::CustomerId.eq(&customer.id))
        .filter(fact::Column::SourceType.eq(source_type))
        .filter(fact::Column::SourceId.eq(&evidence.source_id))
        .filter(fact::Column::Text.eq(text))
        .one(txn)
        .await?;
    let now = Utc::now();
    let created_at = r.created_at.unwrap_or(now);
    match existing {
        Some(found) => {
            let seq = record_change(txn, org, "fact", &found.id, now.max(created_at)).await?;
            let mut row: fact::ActiveModel = found.into();
            row.status = Set(status);
            row.source_occurred_at = Set(evidence.occurred_at);
            row.source_quote = Set(r.source_quote.clone());
            row.permalink = Set(permalink);
            row.change_seq = Set(seq);
            row.updated_at = Set(now.max(created_at));
            row.update(txn).await?;
        }
        None => {
            let id = uuid::Uuid::new_v4().to_string();
            let seq = record_change(txn, org, "fact", &id, created_at).await?;
            fact::ActiveModel {
                id: Set(id),
                organization_id: Set(org.to_string()),
                customer_id: Set(customer.id),
                text: Set(text.to_string()),
                status: Set(status),
                source_type: Set(source_type.to_string()),
                source_id: Set(evidence.source_id),
                source_occurred_at: Set(evidence.occurred_at),
                source_quote: Set(r.source_quote.clone()),
                permalink: Set(permalink),
                change_seq: Set(seq),
                created_at: Set(created_at),
                updated_at: Set(created_at),
            }
            .insert(txn)
            .await?;
        }
    }
    Ok(())
}

/// Ids of the organization's customers by externalId, for callers that imported customers
/// and go on to write rows that point at them (the demo's events and billing history).
pub async fn customer_ids_by_external_id<C: ConnectionTrait>(
    db: &C,
    org: &str,
) -> Result<BTreeMap<String, String>, DbErr> {
    Ok(customer::Entity::find()
        .filter(customer::Column::OrganizationId.eq(org))
        .all(db)
        .await?
        .into_iter()
        .filter_map(|c| c.external_id.map(|e| (e, c.id)))
        .collect())
}

/// Ids of the organization's users by externalId.
pub async fn user_ids_by_external_id<C: ConnectionTrait>(
    db: &C,
    org: &str,
) -> Result<BTreeMap<String, String>, DbErr> {
    Ok(user::Entity::find()
        .filter(user::Column::OrganizationId.eq(org))
        .all(db)
        .await?
        .into_iter()
        .filter_map(|u| u.external_id.map(|e| (e, u.id)))
        .collect())
}

/// `custintel import`: checks that the organization exists, then imports `text`.
pub async fn import_file(
    db: &sea_orm::DatabaseConnection,
    organization_id: &str,
    text: &str,
) -> anyhow::Result<ImportReport> {
    let exists = entity::organization::Entity::find_by_id(organization_id.to_string())
        .one(db)
        .await?
        .is_some();
    anyhow::ensure!(exists, "no organization `{organization_id}`");
    Ok(import_text(db, organization_id, text).await?)
}
