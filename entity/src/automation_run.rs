use sea_orm::entity::prelude::*;

/// One run of an automation: for a subject (signal occurrences) or a digest (a schedule tick).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "automation_runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub automation_id: String,
    /// Unique per automation: `{grain}:{subjectId}:{bucket}` or `schedule:{tick}`.
    pub dedupe_key: String,
    /// One of the spec's eight run statuses.
    pub status: String,
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

/// Run statuses as stored and shown (the spec's `lastRunStatus` values).
pub mod status {
    pub const PENDING: &str = "PENDING";
    pub const SKIPPED: &str = "SKIPPED";
    pub const RUNNING_PROCESSOR: &str = "RUNNING_PROCESSOR";
    pub const READY_FOR_DELIVERY: &str = "READY_FOR_DELIVERY";
    pub const PENDING_DELIVERY: &str = "PENDING_DELIVERY";
    pub const DELIVERED: &str = "DELIVERED";
    pub const PARTIAL_FAILURE: &str = "PARTIAL_FAILURE";
    pub const FAILED: &str = "FAILED";

    pub const ALL: [&str; 8] = [
        PENDING,
        SKIPPED,
        RUNNING_PROCESSOR,
        READY_FOR_DELIVERY,
        PENDING_DELIVERY,
        DELIVERED,
        PARTIAL_FAILURE,
        FAILED,
    ];
}
