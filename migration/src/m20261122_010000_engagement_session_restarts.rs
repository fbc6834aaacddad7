use sea_orm_migration::prelude::*;

/// An engagement `sessionId` starts a new session row after 30 minutes of inactivity, so one
/// `sessionId` may own several rows: the unique index becomes a plain lookup index that also
/// finds the latest row of a session quickly.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("ux_engagement_sessions_organization_id_session_id")
                    .table("engagement_sessions")
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_engagement_sessions_organization_id_session_id_last_seen_at")
                    .table("engagement_sessions")
                    .col("organization_id")
                    .col("session_id")
                    .col("last_seen_at")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("ix_engagement_sessions_organization_id_session_id_last_seen_at")
                    .table("engagement_sessions")
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_engagement_sessions_organization_id_session_id")
                    .table("engagement_sessions")
                    .col("organization_id")
                    .col("session_id")
                    .unique()
                    .to_owned(),
            )
            .await
    }
}
