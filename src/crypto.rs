//! API key material, key hashing and encryption of stored secrets.

use std::path::{Path, PathBuf};

use aes_gcm::{
    aead::{Aead, KeyInit},
    Aes256Gcm, Nonce,
};
use base64::{engine::general_purpose::STANDARD as B64, Engine};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Random token text: `prefix` + 40 characters of base62.
pub fn random_token(prefix: &str, len: usize) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::thread_rng();
    let mut out = String::with_capacity(prefix.len() + len);
    out.push_str(prefix);
    for _ in 0..len {
        out.push(ALPHABET[(rng.next_u32() % ALPHABET.len() as u32) as usize] as char);
    }
    out
}

/// The stored form of an API key. Keys carry 238 bits of randomness, so one SHA-256 pass is
/// enough; a slow password hash would only slow every request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyHash(pub String);

impl ApiKeyHash {
    pub fn of(key: &str) -> Self {
        Self(hex::encode(Sha256::digest(key.as_bytes())))
    }
}

/// Encrypts and decrypts stored secrets (integration credentials, destination secrets) with
/// AES-256-GCM. Text form: base64 of nonce || ciphertext.
#[derive(Clone)]
pub struct SecretBox {
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(..)")
    }
}

impl SecretBox {
    pub fn from_key(key: &[u8; 32]) -> Self {
        Self {
            cipher: Aes256Gcm::new(key.into()),
        }
    }

    /// `CUSTINTEL_SECRET_KEY` (base64 of 32 bytes) when set; otherwise a key file, created on
    /// first use, at `key_file` (development convenience beside the SQLite database).
    pub fn load(env_key: Option<&str>, key_file: &Path) -> anyhow::Result<Self> {
        if let Some(text) = env_key.filter(|s| !s.trim().is_empty()) {
            let bytes = B64
                .decode(text.trim())
                .map_err(|e| anyhow::anyhow!("CUSTINTEL_SECRET_KEY is not base64: {e}"))?;
            let key: [u8; 32] = bytes
                .try_into()
                .map_err(|_| anyhow::anyhow!("CUSTINTEL_SECRET_KEY must decode to 32 bytes"))?;
            return Ok(Self::from_key(&key));
        }
        if let Ok(text) = std::fs::read_to_string(key_file) {
            let bytes = B64.decode(text.trim())?;
            let key: [u8; 32] = bytes
                .try_into()
                .map_err(|_| anyhow::anyhow!("{} must hold 32 bytes", key_file.display()))?;
            return Ok(Self::from_key(&key));
        }
        let mut key = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut key);
        write_private(key_file, &B64.encode(key))?;
        Ok(Self::from_key(&key))
    }

    pub fn encrypt(&self, plaintext: &str) -> String {
        let mut nonce = [0u8; 12];
        rand::thread_rng().fill_bytes(&mut nonce);
        // Encryption with a fresh nonce and an in-memory buffer cannot fail.
        let sealed = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), plaintext.as_bytes())
            .unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend(sealed);
        B64.encode(out)
    }

    pub fn decrypt(&self, text: &str) -> anyhow::Result<String> {
        let raw = B64.decode(text)?;
        if raw.len() < 12 {
            anyhow::bail!("sealed secret is too short");
        }
        let (nonce, sealed) = raw.split_at(12);
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(nonce), sealed)
            .map_err(|_| anyhow::anyhow!("secret cannot be decrypted with this key"))?;
        Ok(String::from_utf8(plain)?)
    }
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut file = opts.open(path)?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

/// Where the development key file lives: beside a SQLite database file, else the working dir.
pub fn default_key_file(database_url: &str) -> PathBuf {
    if let Some(rest) = database_url.strip_prefix("sqlite:") {
        let path = rest
            .trim_start_matches("//")
            .split('?')
            .next()
            .unwrap_or("");
        if !path.is_empty() && path != ":memory:" {
            let p = Path::new(path);
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
            return dir.unwrap_or(Path::new(".")).join("custintel.key");
        }
    }
    PathBuf::from("custintel.key")
}

/// Masks a secret for display: its first `keep` characters, then asterisks, then the last 4.
pub fn mask(secret: &str, keep: usize) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() <= keep + 4 {
        return "****".to_string();
    }
    let head: String = chars[..keep].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}****{tail}")
}
