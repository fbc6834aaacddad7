use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "sources")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub source_type: String,
    pub source_id: String,
    pub customer_id: Option<String>,
    pub title: String,
    #[sea_orm(column_type = "Text")]
    pub body: String,
    pub occurred_at: DateTimeUtc,
    pub permalink: Option<String>,
    pub participants: Json,
    pub change_seq: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
