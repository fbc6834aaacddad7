//! Process configuration from flags and environment, and the shared state built from it.

use crate::{api::AppState, crypto::SecretBox, db, search::SearchIndex};

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
