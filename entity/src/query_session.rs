use sea_orm::entity::prelude::*;

/// Which organization a PostgreSQL backend running `svc_query` SQL may read (see the
/// `query_sessions` migration).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "query_sessions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub backend_pid: i32,
    pub organization_id: String,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
