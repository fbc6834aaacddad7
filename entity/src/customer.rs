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
    pub billing_status: String,
    pub mrr_cents: i64,
    pub traits: Json,
    pub last_activity_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// A customer's billing status.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    EnumIter,
    DeriveActiveEnum,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[sea_orm(rs_type = "String", db_type = "Text")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BillingStatus {
    #[sea_orm(string_value = "PAYING")]
    Paying,
    #[sea_orm(string_value = "TRIALING")]
    Trialing,
    #[sea_orm(string_value = "CHURNED")]
    Churned,
    #[sea_orm(string_value = "NONE")]
    None,
}

impl BillingStatus {
    /// Every status, in the order lists and messages name them.
    pub const ALL: [BillingStatus; 4] = [
        BillingStatus::Paying,
        BillingStatus::Trialing,
        BillingStatus::Churned,
        BillingStatus::None,
    ];

    /// The stored and wire form (`customers.billing_status`).
    pub const fn as_str(self) -> &'static str {
        match self {
            BillingStatus::Paying => "PAYING",
            BillingStatus::Trialing => "TRIALING",
            BillingStatus::Churned => "CHURNED",
            BillingStatus::None => "NONE",
        }
    }

    /// The status a stored or sent string names (exact, upper case).
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}
