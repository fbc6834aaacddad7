use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "users")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub customer_id: Option<String>,
    pub email: Option<String>,
    pub external_id: Option<String>,
    pub name: Option<String>,
    pub stage: String,
    pub traits: Json,
    pub last_activity_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// Journey stages a user can be in, in the order identity and product use raise them.
pub const STAGES: [&str; 5] = [
    "discovered",
    "signed_up",
    "activated",
    "engaged",
    "inactive",
];
