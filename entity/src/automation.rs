use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "automations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub key: String,
    pub managed_by: String,
    pub name: String,
    pub description: Option<String>,
    pub enabled: bool,
    pub trigger_type: String,
    pub trigger_json: Json,
    pub audience_filter_json: Json,
    pub agent_id: Option<String>,
    pub match_mode: String,
    pub schema_version: String,
    pub config_hash: Option<String>,
    pub archived_at: Option<DateTimeUtc>,
    pub last_run_at: Option<DateTimeUtc>,
    pub last_run_status: Option<super::automation_run::AutomationRunStatus>,
    pub next_run_at: Option<DateTimeUtc>,
    /// When it was last enabled: only events received since then start its runs.
    pub enabled_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
