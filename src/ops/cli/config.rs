//! Where the client keeps its API key: `$XDG_CONFIG_HOME/custintel/config.json`, else
//! `~/.config/custintel/config.json`, readable by the user only. `CUSTINTEL_API_KEY` and
//! `CUSTINTEL_BASE_URL` override it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::CliError;

pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8080";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredConfig {
    pub api_key: String,
    pub base_url: String,
}

/// The key and service the client talks to.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub api_key: String,
    pub base_url: String,
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The config file's path.
pub fn path() -> Result<PathBuf, CliError> {
    if let Some(dir) = non_empty_env("XDG_CONFIG_HOME") {
        return Ok(PathBuf::from(dir).join("custintel").join("config.json"));
    }
    let home = non_empty_env("HOME").ok_or_else(|| {
        CliError::Usage("neither XDG_CONFIG_HOME nor HOME is set: cannot find the config".into())
    })?;
    Ok(PathBuf::from(home)
        .join(".config")
        .join("custintel")
        .join("config.json"))
}

pub fn load() -> Result<Option<StoredConfig>, CliError> {
    let path = path()?;
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| {
            CliError::Usage(format!(
                "{} is not a valid config ({e}); run `custintel login` again",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::Usage(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// Writes the config with mode 0600 (the directory 0700).
pub fn save(config: &StoredConfig) -> Result<PathBuf, CliError> {
    use std::io::Write;
    let path = path()?;
    let io = |e: std::io::Error| CliError::Usage(format!("cannot write {}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
        }
    }
    let text = serde_json::to_string_pretty(config).map_err(|e| CliError::Usage(e.to_string()))?;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut file = opts.open(&path).map_err(io)?;
    // An existing file keeps its old mode on open: tighten it as well.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io)?;
    }
    file.write_all(text.as_bytes()).map_err(io)?;
    file.write_all(b"\n").map_err(io)?;
    Ok(path)
}

/// Environment first, then the stored config.
pub fn credentials() -> Result<Credentials, CliError> {
    let stored = load()?;
    let api_key = non_empty_env("CUSTINTEL_API_KEY")
        .or_else(|| stored.as_ref().map(|s| s.api_key.clone()))
        .ok_or_else(|| {
            CliError::Usage(
                "not logged in: run `custintel login --api-key ok_...` or set CUSTINTEL_API_KEY"
                    .into(),
            )
        })?;
    let base_url = non_empty_env("CUSTINTEL_BASE_URL")
        .or_else(|| stored.map(|s| s.base_url))
        .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
    Ok(Credentials {
        api_key,
        base_url: base_url.trim_end_matches('/').to_string(),
    })
}
