use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "destinations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: String,
    pub key: String,
    /// `UI` or `CODE` (`custintel apply`).
    pub managed_by: String,
    pub name: String,
    pub description: Option<String>,
    pub provider: String,
    pub kind: DestinationKind,
    pub enabled: bool,
    pub config: Json,
    pub secret_ciphertext: Option<String>,
    pub sync_status: DestinationSyncStatus,
    pub last_synced_at: Option<DateTimeUtc>,
    pub provider_error_code: Option<String>,
    pub provider_error_message: Option<String>,
    pub is_default: bool,
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
    /// What a destination is: a signed webhook endpoint or a Slack channel's incoming webhook.
    pub enum DestinationKind {
        WebhookEndpoint = "WEBHOOK_ENDPOINT",
        SlackChannel = "SLACK_CHANNEL",
    }
}

status_enum! {
    /// Where a destination stands with its provider.
    pub enum DestinationSyncStatus {
        PendingProviderSync = "PENDING_PROVIDER_SYNC",
        Synced = "SYNCED",
        ProviderError = "PROVIDER_ERROR",
        DisabledByProvider = "DISABLED_BY_PROVIDER",
    }
}
