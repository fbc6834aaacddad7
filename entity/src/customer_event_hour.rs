use sea_orm::entity::prelude::*;

/// A customer's tracked events (billing events left out) in one hour, kept for the customers
/// with many events: see `customers.events_counted`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "customer_event_hours")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub organization_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub customer_id: String,
    /// Whole hours since 1970-01-01T00:00Z.
    #[sea_orm(primary_key, auto_increment = false)]
    pub hour: i64,
    pub n: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
