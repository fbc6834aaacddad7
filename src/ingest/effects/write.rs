//! The group's writes once every batch is applied: visitors, sessions and last activity.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use entity::{customer, engagement_session, user, visitor};
use sea_orm::{
    sea_query::{CaseStatement, Expr, ExprTrait, OnConflict, Query, SimpleExpr},
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter,
};

use super::Group;
use crate::db::customer_event_hours::AddedEvents;

/// Writes what the group accumulated: visitors and sessions with one multi-row upsert per
/// table, last activity with one conditional UPDATE per table (per chunk).
pub(super) async fn flush<C: ConnectionTrait>(conn: &C, group: Group) -> Result<(), DbErr> {
    let visitors: Vec<visitor::ActiveModel> = group
        .visitors
        .into_values()
        .filter(|s| s.dirty)
        .map(|s| s.row.into_active_model().reset_all())
        .collect();
    {
        use visitor::Column as V;
        upsert::<visitor::Entity, _, _>(
            conn,
            visitors,
            V::Id,
            [V::UserId, V::CustomerId, V::FirstSeenAt, V::LastSeenAt],
        )
        .await?;
    }
    let sessions: Vec<engagement_session::ActiveModel> = group
        .sessions
        .into_values()
        .chain(group.closed_sessions)
        .filter(|s| s.dirty)
        .map(|s| s.row.into_active_model().reset_all())
        .collect();
    {
        use engagement_session::Column as S;
        upsert::<engagement_session::Entity, _, _>(
            conn,
            sessions,
            S::Id,
            [
                S::VisitorId,
                S::ActiveTimeMs,
                S::TotalTimeMs,
                S::StartedAt,
                S::LastSeenAt,
            ],
        )
        .await?;
    }
    advance_activity::<user::Entity, _>(
        conn,
        user::Column::Id,
        user::Column::LastActivityAt,
        group.user_activity,
    )
    .await?;
    advance_customers(conn, group.customer_activity, group.added_events).await
}

/// Inserts `rows`, or updates `update` of those whose `id` is stored, one multi-row statement
/// per chunk.
async fn upsert<E, A, C>(
    conn: &C,
    rows: Vec<A>,
    id: E::Column,
    update: impl IntoIterator<Item = E::Column> + Clone,
) -> Result<(), DbErr>
where
    E: EntityTrait,
    A: ActiveModelTrait<Entity = E> + Clone,
    C: ConnectionTrait,
{
    for chunk in rows.chunks(UPSERT_CHUNK) {
        E::insert_many(chunk.to_vec())
            .on_conflict(
                OnConflict::column(id)
                    .update_columns(update.clone())
                    .to_owned(),
            )
            .exec_without_returning(conn)
            .await?;
    }
    Ok(())
}

/// Moves each row's last activity forward to its new time (never back), one CASE UPDATE per
/// chunk of rows.
async fn advance_activity<E: EntityTrait, C: ConnectionTrait>(
    conn: &C,
    id: E::Column,
    last: E::Column,
    times: HashMap<String, DateTime<Utc>>,
) -> Result<(), DbErr> {
    let times: Vec<(String, DateTime<Utc>)> = times.into_iter().collect();
    for chunk in times.chunks(UPSERT_CHUNK) {
        E::update_many()
            .col_expr(last, latest_activity(id, last, chunk))
            .filter(id.is_in(chunk.iter().map(|(row_id, _)| row_id.clone())))
            .exec(conn)
            .await?;
    }
    Ok(())
}

/// Moves each account's last activity forward as [`advance_activity`] does and adds its
/// tracked events to its counter in the same statement, which returns the counters: from them
/// the hours of the accounts with many events are kept ([`AddedEvents::keep_hours`]).
async fn advance_customers<C: ConnectionTrait>(
    conn: &C,
    times: HashMap<String, DateTime<Utc>>,
    added: AddedEvents,
) -> Result<(), DbErr> {
    use customer::Column as Cu;
    let times: Vec<(String, DateTime<Utc>)> = times.into_iter().collect();
    let mut counted = Vec::new();
    for chunk in times.chunks(UPSERT_CHUNK) {
        let mut update = Query::update();
        update
            .table(customer::Entity)
            .value(
                Cu::LastActivityAt,
                latest_activity(Cu::Id, Cu::LastActivityAt, chunk),
            )
            .and_where(Cu::Id.is_in(chunk.iter().map(|(id, _)| id.clone())));
        let mut events = CaseStatement::new();
        let mut with_events = false;
        for (id, _) in chunk {
            let n = added.of(id);
            if n > 0 {
                events = events.case(Cu::Id.eq(id.as_str()), Expr::col(Cu::EventsCounted).add(n));
                with_events = true;
            }
        }
        if !with_events {
            conn.execute(&update).await?;
            continue;
        }
        update
            .value(
                Cu::EventsCounted,
                events.finally(Expr::col(Cu::EventsCounted)),
            )
            .returning(Query::returning().columns([Cu::Id, Cu::EventsCounted]));
        for row in conn.query_all(&update).await? {
            counted.push((
                row.try_get::<String>("", "id")?,
                row.try_get::<i64>("", "events_counted")?,
            ));
        }
    }
    added.keep_hours(conn, counted).await
}

/// Rows per multi-row upsert or CASE update: 8 columns x 200 rows stays far below the
/// backends' bound-parameter limits.
const UPSERT_CHUNK: usize = 200;

/// `CASE WHEN id = ? AND (last IS NULL OR last < ?) THEN ? ... ELSE last END`: each row's last
/// activity moves forward to its new time, never back.
fn latest_activity<I: ColumnTrait, L: ColumnTrait>(
    id: I,
    last: L,
    times: &[(String, DateTime<Utc>)],
) -> SimpleExpr {
    let mut case = CaseStatement::new();
    for (row_id, at) in times {
        case = case.case(
            Condition::all()
                .add(id.eq(row_id.as_str()))
                .add(Condition::any().add(last.is_null()).add(last.lt(*at))),
            Expr::value(*at),
        );
    }
    case.finally(Expr::col(last)).into()
}
