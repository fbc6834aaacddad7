use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "agent_runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub agent_id: String,
    /// `schedule` or `automation`.
    pub trigger: String,
    pub automation_run_id: Option<String>,
    /// The schedule tick a scheduled run is for (unique per agent).
    pub scheduled_for: Option<DateTimeUtc>,
    pub status: AgentRunStatus,
    #[sea_orm(column_type = "Text", nullable)]
    pub reason: Option<String>,
    pub warnings: Json,
    pub started_at: DateTimeUtc,
    pub finished_at: Option<DateTimeUtc>,
    pub lease_until: Option<DateTimeUtc>,
    pub turns: i32,
    pub tool_calls: Json,
    pub actions: Json,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub total_tokens: i64,
    #[sea_orm(column_type = "Text", nullable)]
    pub message: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

status_enum! {
    /// An agent run's `status`: started `RUNNING`, finished once as one of the others.
    pub enum AgentRunStatus {
        Running = "RUNNING",
        Succeeded = "SUCCEEDED",
        Failed = "FAILED",
        Skipped = "SKIPPED",
    }
}
