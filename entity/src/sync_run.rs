use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "sync_runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub connection_id: String,
    pub model: String,
    pub status: SyncRunStatus,
    pub error_message: Option<String>,
    pub started_at: DateTimeUtc,
    pub finished_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

status_enum! {
    /// A sync run's `status`.
    pub enum SyncRunStatus {
        Pending = "PENDING",
        Running = "RUNNING",
        Success = "SUCCESS",
        Failed = "FAILED",
    }
}
