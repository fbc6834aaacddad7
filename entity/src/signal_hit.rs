use sea_orm::entity::prelude::*;

/// A signal occurrence (`step` -1) or a matched step of an `EVENT_PATTERN` signal, per subject.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "signal_hits")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub signal_id: String,
    /// The subject's id: a user's or customer's id, or `visitor:{visitorId}`.
    pub subject_id: String,
    pub step: i32,
    pub at: DateTimeUtc,
    pub event_id: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// The `step` of an occurrence.
pub const OCCURRENCE: i32 = -1;
