use sea_orm_migration::{prelude::*, schema::*};

/// Agent runs and agent schedules' time zones.
///
/// `agent_runs` records each run of an agent (by its schedule or for an automation run): its
/// status, model turns, tool calls, actions, token counts and final message. A scheduled run
/// carries the tick it runs for in `scheduled_for`, unique per agent, so two instances that both
/// saw a due tick never both run it. `lease_until` bounds how long a `RUNNING` row may stay so:
/// a run whose instance stopped is closed as `FAILED` by whichever instance sweeps next.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("agents")
                    .add_column(string("schedule_timezone").default("UTC"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("agent_runs")
                    .col(string("id").primary_key())
                    .col(string("organization_id"))
                    .col(string("agent_id"))
                    .col(string("trigger"))
                    .col(string_null("automation_run_id"))
                    .col(timestamp_with_time_zone_null("scheduled_for"))
                    .col(string("status"))
                    .col(text_null("reason"))
                    .col(json_binary("warnings"))
                    .col(timestamp_with_time_zone("started_at"))
                    .col(timestamp_with_time_zone_null("finished_at"))
                    .col(timestamp_with_time_zone_null("lease_until"))
                    .col(integer("turns"))
                    .col(json_binary("tool_calls"))
                    .col(json_binary("actions"))
                    .col(big_integer("prompt_tokens"))
                    .col(big_integer("completion_tokens"))
                    .col(big_integer("total_tokens"))
                    .col(text_null("message"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_agent_runs_org_agent_started")
                    .table("agent_runs")
                    .col("organization_id")
                    .col("agent_id")
                    .col("started_at")
                    .col("id")
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_agent_runs_agent_scheduled_for")
                    .table("agent_runs")
                    .col("agent_id")
                    .col("scheduled_for")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_agent_runs_status_lease")
                    .table("agent_runs")
                    .col("status")
                    .col("lease_until")
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_agents_schedule_due")
                    .table("agents")
                    .col("schedule_enabled")
                    .col("next_run_at")
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("agent_runs").to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("agents")
                    .drop_column("schedule_timezone")
                    .to_owned(),
            )
            .await
    }
}
