use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "customers")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub name: String,
    pub domain: Option<String>,
    pub external_id: Option<String>,
    pub billing_status: BillingStatus,
    pub mrr_cents: i64,
    pub traits: Json,
    pub last_activity_at: Option<DateTimeUtc>,
    /// Tracked events ingest counted for the customer: its events are counted per hour in
    /// `customer_event_hours` from a threshold on (`custintel::db::customer_event_hours`).
    pub events_counted: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

// Stored in `customers.billing_status` and `billing_history.billing_status`; also the wire form
// of tool inputs, hence serde and a JSON schema (whose description is the doc comment).
status_enum! {
    /// A customer's billing status.
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
    pub enum BillingStatus {
        Paying = "PAYING",
        Trialing = "TRIALING",
        Churned = "CHURNED",
        None = "NONE",
    }
}
