//! Schema migrations, run by `custintel serve` at start and by `custintel migrate`.
pub use sea_orm_migration::prelude::*;

mod kept_counts;
mod m20261122_000001_initial;
mod m20261122_000020_tool_gateway_indexes;
mod m20261122_000401_query_sessions;
mod m20261122_000501_integration_connection_unique;
mod m20261122_010000_engagement_session_restarts;
mod m20261122_020000_fact_source_type_index;
mod m20261122_020100_customer_name_search;
mod m20261122_020200_customer_revenue_index;
mod m20261122_020300_record_counts;
mod m20261123_010000_ingest_journal;
mod m20261124_010000_email_normal_form;
mod m20261124_030000_agent_runs;
mod m20261125_010000_automation_runs;
mod m20261125_020000_destination_managed_by;
mod m20261125_030000_ingest_applied;
mod m20261126_010000_drop_user_event_index;
mod m20261126_020000_reads_at_scale_indexes;
mod m20261126_030000_trait_values;
mod m20261126_040000_revenue_keys_indexes;
mod m20261126_050000_record_totals_revenue;
mod m20261127_010000_customer_name_trigrams;
mod m20261127_020000_postgres_activity_revenue_keys;
mod m20261127_030000_postgres_journal_text;
mod m20261127_040000_postgres_message_keys;
mod m20261127_050000_users_with_traits_activity;
mod m20261127_060000_user_name_trigrams;
mod m20261127_070000_drop_customer_activity_prefix_index;
mod m20261128_010000_name_search_by_writers;
mod m20261128_020000_message_claims_by_time;
mod m20261128_030000_source_fact_counts;
mod m20261128_040000_customer_revenue_counts;
mod m20261128_050000_trait_value_counts;
mod m20261128_060000_counts_per_statement;
mod m20261128_070000_journal_by_organization;
mod m20261129_010000_name_trigrams_short_pending_list;
mod m20261129_020000_ingest_tables_keep_their_pages;
mod m20261129_030000_published_window_runs;
mod m20261129_040000_counts_per_customer;
mod m20261130_010000_customer_traits_by_organization;
mod m20261130_020000_customer_activity_counts;
mod m20261201_010000_customer_event_hours;
mod m20261201_020000_finer_revenue_bands;
mod m20261201_030000_activity_moves_per_statement;
mod postgres_only;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_initial::Migration),
            Box::new(m20261122_000020_tool_gateway_indexes::Migration),
            Box::new(m20261122_000401_query_sessions::Migration),
            Box::new(m20261122_000501_integration_connection_unique::Migration),
            Box::new(m20261122_010000_engagement_session_restarts::Migration),
            Box::new(m20261122_020000_fact_source_type_index::Migration),
            Box::new(m20261122_020100_customer_name_search::Migration),
            Box::new(m20261122_020200_customer_revenue_index::Migration),
            Box::new(m20261122_020300_record_counts::Migration),
            Box::new(m20261123_010000_ingest_journal::Migration),
            Box::new(m20261124_010000_email_normal_form::Migration),
            Box::new(m20261124_030000_agent_runs::Migration),
            Box::new(m20261125_010000_automation_runs::Migration),
            Box::new(m20261125_020000_destination_managed_by::Migration),
            Box::new(m20261125_030000_ingest_applied::Migration),
            Box::new(m20261126_010000_drop_user_event_index::Migration),
            Box::new(m20261126_020000_reads_at_scale_indexes::Migration),
            Box::new(m20261126_030000_trait_values::Migration),
            Box::new(m20261126_040000_revenue_keys_indexes::Migration),
            Box::new(m20261126_050000_record_totals_revenue::Migration),
            Box::new(m20261127_010000_customer_name_trigrams::Migration),
            Box::new(m20261127_020000_postgres_activity_revenue_keys::Migration),
            Box::new(m20261127_030000_postgres_journal_text::Migration),
            Box::new(m20261127_040000_postgres_message_keys::Migration),
            Box::new(m20261127_050000_users_with_traits_activity::Migration),
            Box::new(m20261127_060000_user_name_trigrams::Migration),
            Box::new(m20261127_070000_drop_customer_activity_prefix_index::Migration),
            Box::new(m20261128_010000_name_search_by_writers::Migration),
            Box::new(m20261128_020000_message_claims_by_time::Migration),
            Box::new(m20261128_030000_source_fact_counts::Migration),
            Box::new(m20261128_040000_customer_revenue_counts::Migration),
            Box::new(m20261128_050000_trait_value_counts::Migration),
            Box::new(m20261128_060000_counts_per_statement::Migration),
            Box::new(m20261128_070000_journal_by_organization::Migration),
            Box::new(m20261129_010000_name_trigrams_short_pending_list::Migration),
            Box::new(m20261129_020000_ingest_tables_keep_their_pages::Migration),
            Box::new(m20261129_030000_published_window_runs::Migration),
            Box::new(m20261129_040000_counts_per_customer::Migration),
            Box::new(m20261130_010000_customer_traits_by_organization::Migration),
            Box::new(m20261130_020000_customer_activity_counts::Migration),
            Box::new(m20261201_010000_customer_event_hours::Migration),
            Box::new(m20261201_020000_finer_revenue_bands::Migration),
            Box::new(m20261201_030000_activity_moves_per_statement::Migration),
        ]
    }
}
