use sea_orm_migration::{prelude::*, schema::*};

/// The automation engine's state.
///
/// - `automation_runs`: one row per run, unique per (automation, `dedupe_key`) so a subject's
///   run for a dedupe bucket (or a schedule's tick) exists once however many instances evaluate.
///   `lease_until` bounds how long an instance may hold a run it is processing.
/// - `signal_hits`: what signal evaluation remembers per subject: occurrences of a signal
///   (`step` -1), which `ALL`/`AT_LEAST` triggers and schedule digests look back on, and the
///   matched steps of `EVENT_PATTERN` signals (`step` 0..n).
/// - `automations.enabled_at`: only events received after an automation was enabled start runs.
/// - `notification_deliveries.automation_run_id` and `attempt_log`: an automation run's
///   deliveries, each with every attempt made.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("automation_runs")
                    .col(string("id").primary_key())
                    .col(string("organization_id"))
                    .col(string("automation_id"))
                    .col(string("dedupe_key"))
                    .col(string("status"))
                    .col(timestamp_with_time_zone("triggered_at"))
                    .col(timestamp_with_time_zone_null("started_at"))
                    .col(timestamp_with_time_zone_null("finished_at"))
                    .col(string_null("config_hash"))
                    .col(json_binary_null("subject"))
                    .col(timestamp_with_time_zone_null("digest_since"))
                    .col(text_null("skip_reason"))
                    .col(text_null("title"))
                    .col(text_null("message"))
                    .col(json_binary("warnings"))
                    .col(json_binary("events"))
                    .col(json_binary("signals"))
                    .col(integer("processor_attempts"))
                    .col(timestamp_with_time_zone_null("lease_until"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_automation_runs_dedupe")
                    .table("automation_runs")
                    .col("automation_id")
                    .col("dedupe_key")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_automation_runs_org_automation_triggered")
                    .table("automation_runs")
                    .col("organization_id")
                    .col("automation_id")
                    .col("triggered_at")
                    .col("id")
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_automation_runs_status_lease")
                    .table("automation_runs")
                    .col("status")
                    .col("lease_until")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("signal_hits")
                    .col(string("id").primary_key())
                    .col(string("organization_id"))
                    .col(string("signal_id"))
                    .col(string("subject_id"))
                    .col(integer("step"))
                    .col(timestamp_with_time_zone("at"))
                    .col(string("event_id"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_signal_hits_subject")
                    .table("signal_hits")
                    .col("signal_id")
                    .col("subject_id")
                    .col("step")
                    .col("at")
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_signal_hits_signal_at")
                    .table("signal_hits")
                    .col("signal_id")
                    .col("step")
                    .col("at")
                    .to_owned(),
            )
            .await?;
        // SQLite alters one column per statement.
        manager
            .alter_table(
                Table::alter()
                    .table("automations")
                    .add_column(timestamp_with_time_zone_null("enabled_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("notification_deliveries")
                    .add_column(string_null("automation_run_id"))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("notification_deliveries")
                    .add_column(json_binary_null("attempt_log"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_notification_deliveries_run")
                    .table("notification_deliveries")
                    .col("automation_run_id")
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("automation_runs").to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table("signal_hits").to_owned())
            .await?;
        // SQLite refuses to drop a column an index still names.
        manager
            .drop_index(
                Index::drop()
                    .name("ix_notification_deliveries_run")
                    .table("notification_deliveries")
                    .to_owned(),
            )
            .await?;
        for (table, column) in [
            ("automations", "enabled_at"),
            ("notification_deliveries", "automation_run_id"),
            ("notification_deliveries", "attempt_log"),
        ] {
            manager
                .alter_table(Table::alter().table(table).drop_column(column).to_owned())
                .await?;
        }
        Ok(())
    }
}
