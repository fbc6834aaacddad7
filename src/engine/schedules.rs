//! `SCHEDULE` automations: every instance looks for due automations each tick; a tick is claimed
//! by moving the automation's `next_run_at` forward with a conditional UPDATE, and its digest run
//! is unique per (automation, scheduled time), so two instances never both run it. Times missed
//! while no instance ran make one run.

use std::time::Duration;

use chrono::{DateTime, Utc};
use entity::{automation, automation_run, automation_signal, signal};
use sea_orm::{
    sea_query::Expr, ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde_json::{json, Value};

use super::{config, runs};
use crate::timestamp;

/// How often each instance looks for due schedules.
pub const TICK: Duration = Duration::from_secs(1);

/// The first scheduled time after `after` of an automation, when it is a readable schedule.
pub fn next_run(automation: &automation::Model, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if automation.trigger_type != "SCHEDULE" {
        return None;
    }
    let config::Trigger::Schedule(schedule) = config::parse_trigger(
        &automation.trigger_type,
        &automation.match_mode,
        &automation.trigger_json,
        0,
    )
    .ok()?
    else {
        return None;
    };
    let anchor = automation.enabled_at.unwrap_or(after);
    schedule.next_after(after, anchor)
}

/// Starts the due schedules' runs; returns how many were started.
pub async fn tick(db: &DatabaseConnection) -> Result<usize, DbErr> {
    let now = Utc::now();
    let due = automation::Entity::find()
        .filter(automation::Column::Enabled.eq(true))
        .filter(automation::Column::ArchivedAt.is_null())
        .filter(automation::Column::TriggerType.eq("SCHEDULE"))
        .filter(automation::Column::NextRunAt.lte(now))
        .order_by_asc(automation::Column::NextRunAt)
        .limit(100)
        .all(db)
        .await?;
    let mut started = 0;
    for a in due {
        let Some(scheduled) = a.next_run_at else {
            continue;
        };
        let next = next_run(&a, now);
        let txn = crate::db::begin_write(db).await?;
        let claimed = automation::Entity::update_many()
            .col_expr(automation::Column::NextRunAt, Expr::value(next))
            .filter(automation::Column::Id.eq(&a.id))
            .filter(automation::Column::NextRunAt.eq(scheduled))
            .filter(automation::Column::Enabled.eq(true))
            .exec(&txn)
            .await?;
        if claimed.rows_affected != 1 {
            txn.rollback().await?;
            continue;
        }
        // The digest covers what happened since the previous scheduled run.
        let previous: Option<DateTime<Utc>> = automation_run::Entity::find()
            .select_only()
            .column(automation_run::Column::TriggeredAt)
            .filter(automation_run::Column::AutomationId.eq(&a.id))
            .filter(automation_run::Column::Subject.is_null())
            .order_by_desc(automation_run::Column::TriggeredAt)
            .into_tuple()
            .one(&txn)
            .await?;
        let mut run = runs::new_run(
            &a,
            format!("schedule:{}", timestamp::format(&scheduled)),
            None,
            Vec::new(),
            linked_signals(&txn, &a.id).await?,
            now,
        );
        run.digest_since = Set(previous.or(a.enabled_at));
        started += runs::insert_new(&txn, vec![run]).await?;
        txn.commit().await?;
    }
    if started > 0 {
        runs::wake();
    }
    Ok(started)
}

async fn linked_signals<C: sea_orm::ConnectionTrait>(
    conn: &C,
    automation_id: &str,
) -> Result<Vec<Value>, DbErr> {
    let ids: Vec<String> = automation_signal::Entity::find()
        .select_only()
        .column(automation_signal::Column::SignalId)
        .filter(automation_signal::Column::AutomationId.eq(automation_id))
        .into_tuple()
        .all(conn)
        .await?;
    Ok(signal::Entity::find()
        .filter(signal::Column::Id.is_in(ids))
        .filter(signal::Column::ArchivedAt.is_null())
        .order_by_asc(signal::Column::Key)
        .all(conn)
        .await?
        .into_iter()
        .map(|s| json!({ "id": s.id, "key": s.key, "name": s.name }))
        .collect())
}

/// Ticks until the task is aborted.
pub fn spawn(db: DatabaseConnection, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(e) = tick(&db).await {
                tracing::warn!(error = %e, "automation schedule tick failed");
            }
            tokio::time::sleep(every).await;
        }
    })
}
