use sea_orm_migration::prelude::*;

/// Drops `events`' `(organization_id, user_id, occurred_at)` index. No endpoint, tool or job
/// reads events by user (timelines are a customer's, and they keep their own index), and every
/// applied event paid for an entry in it: about a third of the applier's time per event went
/// into the two timeline indexes' inserts. A query over the `events` view that filters by
/// `user_id` reads the organization's events through the customer index's organization prefix.
#[derive(DeriveMigrationName)]
pub struct Migration;

const USER_TIMELINE: &str = "ix_events_organization_id_user_id_occurred_at";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name(USER_TIMELINE)
                    .table("events")
                    .if_exists()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name(USER_TIMELINE)
                    .table("events")
                    .col("organization_id")
                    .col("user_id")
                    .col("occurred_at")
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }
}
