use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "jobs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: Option<String>,
    pub kind: JobKind,
    pub payload: Json,
    pub status: JobStatus,
    pub run_at: DateTimeUtc,
    pub lease_until: Option<DateTimeUtc>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

status_enum! {
    /// What a job does.
    pub enum JobKind {
        /// Import a Stripe connection's customers and subscriptions.
        StripeSync = "stripe_sync",
    }
}

status_enum! {
    /// A job's `status`: `running` while claimed (with a lease), `pending` otherwise.
    pub enum JobStatus {
        Pending = "pending",
        Running = "running",
    }
}
