use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "integration_connections")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub provider: String,
    pub status: ConnectionStatus,
    pub credentials_ciphertext: Option<String>,
    pub settings: Json,
    pub last_data_received_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

status_enum! {
    /// A connection's `status`. Disconnecting deletes the row, so `connected` is the one state.
    pub enum ConnectionStatus {
        Connected = "connected",
    }
}
