//! `svc_get_source`: one exact source record (a call, email, meeting, ticket or opportunity).

use entity::source::{Column, Entity};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde::Deserialize;
use serde_json::Value;

use super::{common::normalize_source_type, records, ToolContext, ToolError, ToolResult};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// `CALL`, `EMAIL`, `CALENDAR_EVENT`, `SUPPORT_TICKET` or `OPPORTUNITY` (trimmed,
    /// case-insensitive; `CRM` and `CRM_OPPORTUNITY` mean `OPPORTUNITY`).
    #[schemars(length(min = 1))]
    pub source_type: String,
    /// The source's id in its system (a fact's `sourceId`, a search result's `sourceId`).
    #[schemars(length(min = 1))]
    pub source_id: String,
}

pub const DESCRIPTION: &str = "Get one exact source record, the evidence behind a fact or a \
search result, by `sourceType` and `sourceId`: its title, full `body`, time, `permalink` and \
participants. 404 when the pair does not match.";

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let source_type = normalize_source_type(&input.source_type).ok_or_else(|| {
        ToolError::invalid(
            "sourceType",
            format!(
                "unknown source type `{}`: use one of {}",
                input.source_type,
                super::common::SOURCE_TYPES.join(", ")
            ),
        )
    })?;
    let source_id = input.source_id.trim();
    let found = Entity::find()
        .filter(Column::OrganizationId.eq(&ctx.organization_id))
        .filter(Column::SourceType.eq(source_type))
        .filter(Column::SourceId.eq(source_id))
        .one(ctx.db().await?)
        .await?
        .ok_or_else(|| ToolError::NotFound(format!("no {source_type} source `{source_id}`")))?;
    Ok(records::source(&found))
}
