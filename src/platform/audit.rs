//! The audit log: one row per write action, its id returned to the caller as `auditId`.

use sea_orm::{ActiveModelTrait, ConnectionTrait, Set};
use serde_json::{json, Value};

use super::{ActionContext, PlatformResult, ResourceRef};
use crate::correlation;

pub async fn record<C: ConnectionTrait>(
    conn: &C,
    ctx: &ActionContext<'_>,
    resources: &[ResourceRef],
    details: Value,
) -> PlatformResult<String> {
    let id = uuid::Uuid::new_v4().to_string();
    entity::audit_entry::ActiveModel {
        id: Set(id.clone()),
        organization_id: Set(ctx.org().to_string()),
        api_key_id: Set(Some(ctx.auth.key_id.clone())),
        command_id: Set(ctx.command_id.to_string()),
        correlation_id: Set(correlation::current()),
        resources: Set(json!(resources
            .iter()
            .map(|r| json!({"type": r.kind, "id": r.id}))
            .collect::<Vec<_>>())),
        details: Set(details),
        created_at: Set(chrono::Utc::now()),
    }
    .insert(conn)
    .await?;
    Ok(id)
}
