use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "notification_deliveries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub destination_id: String,
    pub payload: Json,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub http_status: Option<i32>,
    pub error: Option<String>,
    pub next_attempt_at: Option<DateTimeUtc>,
    pub lease_until: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// The automation run this delivery belongs to, when it does.
    pub automation_run_id: Option<String>,
    /// Every attempt: `[{at, httpStatus, error}]`.
    pub attempt_log: Option<Json>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

// Serialized as stored: the notify tool's result names each delivery's status.
status_enum! {
    /// A delivery's `status`: `retrying` until it is delivered or fails for good.
    #[derive(serde::Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum DeliveryStatus {
        Delivered = "delivered",
        Retrying = "retrying",
        Failed = "failed",
    }
}
