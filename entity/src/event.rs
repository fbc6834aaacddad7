use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub message_id: Option<String>,
    pub event_type: String,
    pub event_name: Option<String>,
    pub visitor_id: Option<String>,
    pub user_id: Option<String>,
    pub customer_id: Option<String>,
    pub url: String,
    pub path: String,
    pub occurred_at: DateTimeUtc,
    pub received_at: DateTimeUtc,
    pub data: Json,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
