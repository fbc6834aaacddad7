use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "sync_runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub connection_id: String,
    pub model: String,
    pub status: String,
    pub error_message: Option<String>,
    pub started_at: DateTimeUtc,
    pub finished_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// A sync run's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncRunStatus {
    Pending,
    Running,
    Success,
    Failed,
}

impl SyncRunStatus {
    pub const ALL: [SyncRunStatus; 4] = [
        SyncRunStatus::Pending,
        SyncRunStatus::Running,
        SyncRunStatus::Success,
        SyncRunStatus::Failed,
    ];

    /// The stored form (strings unchanged since the column was created).
    pub const fn as_str(self) -> &'static str {
        match self {
            SyncRunStatus::Pending => "PENDING",
            SyncRunStatus::Running => "RUNNING",
            SyncRunStatus::Success => "SUCCESS",
            SyncRunStatus::Failed => "FAILED",
        }
    }

    /// The status a stored string names.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

pub const RUN_PENDING: &str = SyncRunStatus::Pending.as_str();
pub const RUN_RUNNING: &str = SyncRunStatus::Running.as_str();
pub const RUN_SUCCESS: &str = SyncRunStatus::Success.as_str();
pub const RUN_FAILED: &str = SyncRunStatus::Failed.as_str();
