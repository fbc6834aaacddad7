//! `svc_get_fact`: one exact fact.

use entity::fact::{Column, Entity};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde::Deserialize;
use serde_json::Value;

use super::{records, ToolContext, ToolError, ToolResult};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// The fact's `id`.
    #[schemars(length(min = 1))]
    pub fact_id: String,
}

pub const DESCRIPTION: &str = "Get one exact customer fact by its `factId`, with its status and \
provenance (`sourceType`, `sourceId`, `sourceOccurredAt`, `sourceQuote`, `permalink`). 404 when \
the organization has no such fact.";

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let found = Entity::find()
        .filter(Column::OrganizationId.eq(&ctx.organization_id))
        .filter(Column::Id.eq(input.fact_id.trim()))
        .one(ctx.db().await?)
        .await?
        .ok_or_else(|| ToolError::NotFound(format!("no fact `{}`", input.fact_id.trim())))?;
    Ok(records::fact(&found))
}
