use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "connect_sessions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub provider: String,
    pub status: SessionStatus,
    pub error: Option<String>,
    pub expires_at: DateTimeUtc,
    pub created_at: DateTimeUtc,
    pub completed_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

status_enum! {
    /// A connect session's `status` (lower case, as since the column was created).
    pub enum SessionStatus {
        Pending = "pending",
        Connected = "connected",
        Failed = "failed",
        Expired = "expired",
    }
}
