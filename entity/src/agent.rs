use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "agents")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub agent_key: String,
    pub display_name: String,
    pub template_version: String,
    #[sea_orm(column_type = "Text")]
    pub instructions: String,
    pub action_keys: Json,
    pub schedule_enabled: bool,
    pub schedule_cron: Option<String>,
    /// IANA time zone the cron expression is read in.
    pub schedule_timezone: String,
    pub next_run_at: Option<DateTimeUtc>,
    pub last_run_at: Option<DateTimeUtc>,
    pub last_successful_run_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
