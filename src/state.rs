//! What the service shares between its parts: the database, the secrets box, the search index
//! and the configuration of integrations and agents. It belongs to no layer: the HTTP side hands
//! it to handlers, and domain code that needs the whole of it (the tool gateway's context, agent
//! runs) takes it from here, not from the HTTP side.

use sea_orm::DatabaseConnection;

use crate::crypto::SecretBox;

/// What every handler, tool call and background task shares.
#[derive(Clone, Debug)]
pub struct AppState {
    pub db: DatabaseConnection,
    pub secrets: SecretBox,
    /// Base URL the service hands out in links (`CUSTINTEL_PUBLIC_URL`).
    pub public_url: String,
    /// Stripe API base, sync interval and scheduler tick.
    pub integrations: crate::integrations::IntegrationsConfig,
    /// Full-text index over sources and facts, following the database's change log.
    pub search: crate::search::SearchIndex,
    /// The language model agents run on and the bounds of their runs.
    pub agents: crate::llm::AgentsConfig,
    /// Which trigrams are common among customers' and users' names (PostgreSQL's name lookups).
    pub name_trigrams: crate::db::name_trigrams::CommonTrigrams,
    /// The blocks of tool calls this instance has counted toward organizations' allowances.
    pub allowance: crate::db::allowance_grants::AllowanceGrants,
}
