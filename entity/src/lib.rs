//! sea-orm entities, one file per table. No logic lives here: the service's domain modules
//! own behaviour and the API has its own DTO types named after the spec's resources.

pub mod agent;
pub mod agent_run;
pub mod api_key;
pub mod api_usage;
pub mod audit_entry;
pub mod automation;
pub mod automation_destination;
pub mod automation_run;
pub mod automation_signal;
pub mod billing_change;
pub mod change;
pub mod connect_session;
pub mod customer;
pub mod destination;
pub mod engagement_session;
pub mod event;
pub mod fact;
pub mod integration_connection;
pub mod job;
pub mod notification_delivery;
pub mod organization;
pub mod query_session;
pub mod signal;
pub mod signal_hit;
pub mod source;
pub mod sync_run;
pub mod tracking_config;
pub mod tracking_domain;
pub mod user;
pub mod visitor;
pub mod workspace_user;
