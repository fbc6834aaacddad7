//! Writes event rows: multi-row INSERTs, chunked below the databases' bound-parameter limits,
//! skipping a `messageId` the organization already has.

use chrono::{DateTime, Utc};
use entity::event;
use sea_orm::{
    sea_query::{OnConflict, Query},
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect,
};
use serde_json::Value;

/// Columns per event row.
const COLUMNS: usize = 13;
/// Rows per INSERT: 13 x 1,000 parameters stays under SQLite's 32,766 and PostgreSQL's 65,535.
pub const ROWS_PER_INSERT: usize = 1_000;

/// One `events` row.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub id: String,
    pub organization_id: String,
    pub message_id: Option<String>,
    pub event_type: String,
    pub event_name: Option<String>,
    pub visitor_id: Option<String>,
    pub user_id: Option<String>,
    pub customer_id: Option<String>,
    pub url: String,
    pub path: String,
    pub occurred_at: DateTime<Utc>,
    pub received_at: DateTime<Utc>,
    pub data: Value,
}

/// Inserts rows; a row whose (organization, messageId) is already stored is skipped.
pub async fn insert_events<C: ConnectionTrait>(conn: &C, rows: &[EventRow]) -> Result<(), DbErr> {
    use event::Column as C;
    let backend = conn.get_database_backend();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let mut insert = Query::insert();
        insert.into_table(event::Entity).columns([
            C::Id,
            C::OrganizationId,
            C::MessageId,
            C::EventType,
            C::EventName,
            C::VisitorId,
            C::UserId,
            C::CustomerId,
            C::Url,
            C::Path,
            C::OccurredAt,
            C::ReceivedAt,
            C::Data,
        ]);
        for r in chunk {
            let values: [sea_orm::sea_query::SimpleExpr; COLUMNS] = [
                r.id.clone().into(),
                r.organization_id.clone().into(),
                r.message_id.clone().into(),
                r.event_type.clone().into(),
                r.event_name.clone().into(),
                r.visitor_id.clone().into(),
                r.user_id.clone().into(),
                r.customer_id.clone().into(),
                r.url.clone().into(),
                r.path.clone().into(),
                r.occurred_at.into(),
                r.received_at.into(),
                r.data.clone().into(),
            ];
            insert
                .values(values)
                .map_err(|e| DbErr::Custom(e.to_string()))?;
        }
        insert.on_conflict(
            OnConflict::columns([C::OrganizationId, C::MessageId])
                .do_nothing()
                .to_owned(),
        );
        conn.execute_raw(backend.build(&insert)).await?;
    }
    Ok(())
}

/// Which of these message ids the organization has already stored.
pub async fn existing_message_ids<C: ConnectionTrait>(
    conn: &C,
    organization_id: &str,
    message_ids: &[String],
) -> Result<Vec<String>, DbErr> {
    let mut found = Vec::new();
    for chunk in message_ids.chunks(500) {
        let ids: Vec<Option<String>> = event::Entity::find()
            .select_only()
            .column(event::Column::MessageId)
            .filter(event::Column::OrganizationId.eq(organization_id))
            .filter(event::Column::MessageId.is_in(chunk.iter().cloned()))
            .into_tuple()
            .all(conn)
            .await?;
        found.extend(ids.into_iter().flatten());
    }
    Ok(found)
}
