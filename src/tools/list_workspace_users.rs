//! `svc_list_workspace_users`: the organization's own people (CSMs, managers, owners, admins).

use entity::workspace_user::{Column, Entity};
use sea_orm::{ColumnTrait, Condition, EntityTrait, Order, QueryFilter, QueryOrder, QuerySelect};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    common::{check_fields, contains_ci, rows_and_total, ListRequest, PageTotal},
    records::{self, WORKSPACE_USER_FIELDS, WORKSPACE_USER_IDS},
    ToolContext, ToolResult,
};

/// A workspace user's role.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Role {
    Csm,
    Manager,
    AccountOwner,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Csm => "CSM",
            Role::Manager => "MANAGER",
            Role::AccountOwner => "ACCOUNT_OWNER",
            Role::Admin => "ADMIN",
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Input {
    /// Only workspace users with this role.
    pub role: Option<Role>,
    /// Only workspace users whose name contains this text (case-insensitive).
    #[schemars(length(min = 1, max = 200))]
    pub name: Option<String>,
    /// Only the workspace user with this email (exact, case-insensitive).
    #[schemars(length(min = 1))]
    pub email: Option<String>,
    /// Items per page, 1 to 1000 (default 50).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// The previous page's `pagination.nextCursor`.
    pub cursor: Option<String>,
    /// Only these record fields in each item (plus `id`).
    pub fields: Option<Vec<String>>,
}

pub const DESCRIPTION: &str = "Browse your organization's own workspace users (CSMs, managers, \
account owners, admins), filtered by `role`, a `name` substring or exact `email`. Returns \
`{items: [{id, name, email, role}], pagination}`, sorted by name.";

pub async fn run(ctx: &ToolContext, input: Input) -> ToolResult<Value> {
    let req = ListRequest::new(input.limit, &input.cursor)?;
    check_fields(&input.fields, WORKSPACE_USER_FIELDS)?;
    let mut filter = Condition::all().add(Column::OrganizationId.eq(&ctx.organization_id));
    if let Some(role) = input.role {
        filter = filter.add(Column::Role.eq(role.as_str()));
    }
    if let Some(name) = &input.name {
        filter = filter.add(contains_ci(Column::Name, name));
    }
    if let Some(email) = &input.email {
        // Stored emails are in one normal form: an equality the (organization, email) index serves.
        filter = filter.add(Column::Email.eq(super::common::normalize_email(email)));
    }
    let db = ctx.db().await?;
    let matching = Entity::find().filter(filter);
    let mut query = matching.clone();
    if let Some(c) = &req.cursor {
        let (name, id) = (c.text(0)?, c.text(1)?);
        query = query.filter(
            Condition::any().add(Column::Name.gt(name.clone())).add(
                Condition::all()
                    .add(Column::Name.eq(name))
                    .add(Column::Id.gt(id)),
            ),
        );
    }
    let page = query
        .order_by(Column::Name, Order::Asc)
        .order_by(Column::Id, Order::Asc)
        .limit(req.limit + 1);
    let (rows, total) = rows_and_total(db, &req, page, PageTotal::Counted(matching)).await?;
    Ok(super::common::page(
        rows,
        &req,
        total,
        |w| vec![json!(w.name), json!(w.id)],
        records::workspace_user,
        input.fields.as_deref().map(|f| (f, WORKSPACE_USER_IDS)),
    ))
}
