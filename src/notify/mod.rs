//! Notification delivery to destinations: Standard Webhooks-signed JSON to webhook endpoints,
//! incoming-webhook messages to Slack, with retries now and, durably, later.

pub mod delivery;
pub mod destinations;
pub mod signing;
pub mod worker;

pub use delivery::{deliver_notification, Delivery, DeliveryStatus, Notification};
