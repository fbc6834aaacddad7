//! Process configuration from flags and environment, and the shared state built from it.

use crate::{crypto::SecretBox, db, search::SearchIndex, state::AppState};

/// Opens the database, migrates it and loads the secret key: everything `serve` needs.
pub async fn open_state(database_url: &str, public_url: &str) -> anyhow::Result<AppState> {
    let db = db::connect(database_url, None).await?;
    db::migrate(&db).await?;
    let secrets = load_secrets(database_url)?;
    // Builds in the background from the database, then follows its change log.
    let search = SearchIndex::start(db.clone())?;
    Ok(AppState {
        db,
        secrets,
        public_url: public_url.trim_end_matches('/').to_string(),
        integrations: crate::integrations::IntegrationsConfig::from_env(),
        search,
        agents: crate::agents::AgentsConfig::from_env(),
        name_trigrams: Default::default(),
        allowance: Default::default(),
    })
}

/// `CUSTINTEL_SECRET_KEY`, else the development key file beside the SQLite database.
pub fn load_secrets(database_url: &str) -> anyhow::Result<SecretBox> {
    let env_key = std::env::var("CUSTINTEL_SECRET_KEY").ok();
    SecretBox::load(
        env_key.as_deref(),
        &crate::crypto::default_key_file(database_url),
    )
}

/// The `messageId` de-duplication window (`CUSTINTEL_DEDUP_WINDOW`: `<n>s|m|h|d|w`, default
/// 24 h); `serve` refuses to start on a malformed value.
pub fn dedup_window() -> anyhow::Result<std::time::Duration> {
    match std::env::var("CUSTINTEL_DEDUP_WINDOW") {
        Ok(v) if !v.trim().is_empty() => crate::ingest::dedup::parse_window(&v)
            .map_err(|e| anyhow::anyhow!("CUSTINTEL_DEDUP_WINDOW: {e}")),
        _ => Ok(crate::ingest::dedup::DEFAULT_WINDOW),
    }
}

/// The request bytes of unanswered ingest batches an instance holds
/// (`CUSTINTEL_INGEST_BACKLOG_MB`, whole MiB, default 4); `serve` refuses to start on a
/// malformed value.
pub fn ingest_backlog_bytes() -> anyhow::Result<usize> {
    match std::env::var("CUSTINTEL_INGEST_BACKLOG_MB") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
            Ok(mb) if (1..=4096).contains(&mb) => Ok(mb * 1024 * 1024),
            _ => anyhow::bail!(
                "CUSTINTEL_INGEST_BACKLOG_MB: expected whole MiB from 1 to 4096, got {v:?}"
            ),
        },
        _ => Ok(crate::ingest::backlog::DEFAULT_BYTES),
    }
}

/// Chunks of 2,000 lines an import writes at once on PostgreSQL
/// (`CUSTINTEL_IMPORT_CHUNKS_AT_ONCE`, 1 to 16, default 2; 1 writes one after the other, leaving
/// the server's other cores to a serving instance). `custintel import` refuses a malformed value.
pub fn import_chunks_at_once() -> anyhow::Result<usize> {
    match std::env::var("CUSTINTEL_IMPORT_CHUNKS_AT_ONCE") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
            Ok(n) if (1..=16).contains(&n) => Ok(n),
            _ => anyhow::bail!("CUSTINTEL_IMPORT_CHUNKS_AT_ONCE: expected 1 to 16, got {v:?}"),
        },
        _ => Ok(crate::import::DEFAULT_CHUNKS_AT_ONCE),
    }
}

/// How long PostgreSQL's shared table keeps a `messageId` claim
/// (`CUSTINTEL_DEDUP_SHARED_SPAN`); `serve` refuses to start on a malformed value.
pub fn dedup_shared_timing() -> anyhow::Result<crate::ingest::window::shared::SharedTiming> {
    crate::ingest::window::shared::SharedTiming::from_env()
        .map_err(|e| anyhow::anyhow!("CUSTINTEL_DEDUP_SHARED_SPAN: {e}"))
}
