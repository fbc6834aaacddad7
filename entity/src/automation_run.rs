use sea_orm::entity::prelude::*;

/// One run of an automation: for a subject (signal occurrences) or a digest (a schedule tick).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "automation_runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub automation_id: String,
    /// Unique per automation: `{bucket}:{grain}:{subjectId}` or `schedule:{tick}`.
    pub dedupe_key: String,
    pub status: AutomationRunStatus,
    pub triggered_at: DateTimeUtc,
    pub started_at: Option<DateTimeUtc>,
    pub finished_at: Option<DateTimeUtc>,
    pub config_hash: Option<String>,
    /// `{grain, id, key, name, customerId}`; null for a digest.
    pub subject: Option<Json>,
    /// A digest's start: signals that occurred since then count.
    pub digest_since: Option<DateTimeUtc>,
    #[sea_orm(column_type = "Text", nullable)]
    pub skip_reason: Option<String>,
    #[sea_orm(column_type = "Text", nullable)]
    pub title: Option<String>,
    #[sea_orm(column_type = "Text", nullable)]
    pub message: Option<String>,
    pub warnings: Json,
    /// The matching events (at most 20), as the `events` view shows them.
    pub events: Json,
    /// `[{id, key, name}]` of the signals that occurred.
    pub signals: Json,
    pub processor_attempts: i32,
    pub lease_until: Option<DateTimeUtc>,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

status_enum! {
    /// A run's status, as stored and shown (the spec's eight `lastRunStatus` values).
    pub enum AutomationRunStatus {
        Pending = "PENDING",
        Skipped = "SKIPPED",
        RunningProcessor = "RUNNING_PROCESSOR",
        ReadyForDelivery = "READY_FOR_DELIVERY",
        PendingDelivery = "PENDING_DELIVERY",
        Delivered = "DELIVERED",
        PartialFailure = "PARTIAL_FAILURE",
        Failed = "FAILED",
    }
}
