use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "signals")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub key: String,
    pub managed_by: String,
    pub name: String,
    pub description: Option<String>,
    pub kind: SignalKind,
    pub definition: Json,
    pub schema_version: String,
    pub config_hash: Option<String>,
    pub archived_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

status_enum! {
    /// How a signal matches: every matching event (`EVENT_MATCH`), or a count or sequence of
    /// them within a window (`EVENT_PATTERN`, declared with `custintel apply`).
    pub enum SignalKind {
        EventMatch = "EVENT_MATCH",
        EventPattern = "EVENT_PATTERN",
    }
}
