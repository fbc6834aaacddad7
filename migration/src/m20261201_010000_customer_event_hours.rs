//! Hourly event counts for the customers with many events: `customers.events_counted` and
//! `customer_event_hours`.
//!
//! A timeline's total counted its window's events from the index, up to 10,001 of them: for a
//! customer with 100,000 events in 30 days that read was most of a call. The ingest applier
//! now adds each customer's tracked events (billing events left out, as the timeline leaves
//! them) to `events_counted`, in the update of the customer's last activity it already makes.
//! Once a customer reaches the threshold (`custintel::db::customer_event_hours`), its events
//! are counted per hour in `customer_event_hours` (the hour as whole hours since 1970, UTC),
//! written from the events table at that moment and kept by the applier after, in the same
//! transaction as the events. A window's total then sums its whole hours and counts the
//! events of the part-hour at its edge.
//!
//! The counter starts at zero for the customers already there: it only decides when the
//! hourly counts start, and those are counted from the events themselves.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("customers")
                    .add_column(big_integer("events_counted").default(0))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("customer_event_hours")
                    .col(string("organization_id"))
                    .col(string("customer_id"))
                    .col(big_integer("hour"))
                    .col(big_integer("n"))
                    .primary_key(
                        Index::create()
                            .col("organization_id")
                            .col("customer_id")
                            .col("hour"),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("customer_event_hours").to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("customers")
                    .drop_column("events_counted")
                    .to_owned(),
            )
            .await
    }
}
