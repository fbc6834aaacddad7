use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "facts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub customer_id: String,
    #[sea_orm(column_type = "Text")]
    pub text: String,
    pub status: FactStatus,
    pub source_type: String,
    pub source_id: String,
    pub source_occurred_at: DateTimeUtc,
    #[sea_orm(column_type = "Text")]
    pub source_quote: String,
    pub permalink: Option<String>,
    pub change_seq: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

// Also the wire form of tool inputs, hence serde and a JSON schema (whose description is the
// doc comment).
status_enum! {
    /// A fact's status.
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
    pub enum FactStatus {
        Active = "ACTIVE",
        Superseded = "SUPERSEDED",
        Retracted = "RETRACTED",
    }
}
