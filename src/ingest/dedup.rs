//! The `messageId` de-duplication window: a repeat whose first copy arrived within the window
//! (`CUSTINTEL_DEDUP_WINDOW`, default 24 h) is dropped and counted as processed.
//!
//! SQLite (one serving process per file): 128-bit hashes of (organization, messageId) in a
//! window of bounded memory (`super::window`), without a random-key index on the acknowledging
//! path. PostgreSQL (several instances): each instance's own window of the same kind, and the
//! `ingest_message_keys` table of the last seconds' claims, claimed with `ON CONFLICT` in the
//! acknowledging transaction, so a repeat is dropped whichever instance it reaches
//! (`super::window::shared`).

use std::{collections::HashSet, time::Duration};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, TransactionTrait};

/// Default window.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Reads `CUSTINTEL_DEDUP_WINDOW`: `<n>s`, `<n>m`, `<n>h`, `<n>d` or `<n>w`, at least one
/// second.
pub fn parse_window(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    let err = || format!("`{raw}` is not a window: use <n>s, <n>m, <n>h, <n>d or <n>w (e.g. 24h)");
    let split = raw.len().checked_sub(1).ok_or_else(err)?;
    let (n, unit) = raw.split_at(split);
    let n: u64 = n.parse().map_err(|_| err())?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(err()),
    };
    let total = n.checked_mul(secs).filter(|t| *t > 0).ok_or_else(err)?;
    Ok(Duration::from_secs(total))
}

/// A message's identity in the window.
pub type MessageKey = (u64, u64);

/// The hash of (organization, messageId). 128 bits: a false repeat needs a collision among
/// the window's messages, which at 2^-128 per pair does not happen.
pub fn message_key(organization_id: &str, message_id: &str) -> MessageKey {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(organization_id.as_bytes());
    // A separator no id contains, so ("ab","c") and ("a","bc") differ.
    h.update(&[0xff]);
    h.update(message_id.as_bytes());
    let v = h.digest128();
    ((v >> 64) as u64, v as u64)
}

/// PostgreSQL: a message's claim key, 16 bytes of SHA-256 of (organization, 0xFF, messageId)
/// (the migration that introduced the keys computes the same bytes in SQL).
pub fn shared_key_bytes(organization_id: &str, message_id: &str) -> ClaimKey {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(organization_id.as_bytes());
    h.update([0xff]);
    h.update(message_id.as_bytes());
    let mut key = [0u8; 16];
    key.copy_from_slice(&h.finalize()[..16]);
    key
}

/// PostgreSQL: a message's key as each instance's own window holds it.
pub fn shared_message_key(organization_id: &str, message_id: &str) -> MessageKey {
    window_key(&shared_key_bytes(organization_id, message_id))
}

/// A claim key as each instance's own window holds it.
pub fn window_key(key: &ClaimKey) -> MessageKey {
    let (high, low) = key.split_at(8);
    let half = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or_default());
    (half(high), half(low))
}

/// A claim key read back from the claims table; `None` if it is not 16 bytes.
pub fn key_of_claim(bytes: &[u8]) -> Option<MessageKey> {
    bytes.try_into().ok().map(window_key)
}

/// PostgreSQL: a message's claim key ([`shared_key_bytes`]).
pub type ClaimKey = [u8; 16];

/// PostgreSQL: claims messages by their keys in the caller's transaction and answers the keys
/// that are new (not claimed, or claimed before the window). A concurrent instance's claim of
/// the same message waits for that transaction and then counts as a repeat. A claim is stamped
/// with the server's time of the transaction's start, the one clock every instance reads the
/// claims by. The caller passes distinct keys (a statement may not touch one row twice).
pub async fn claim_shared<C: ConnectionTrait>(
    conn: &C,
    mut keys: Vec<ClaimKey>,
    window: Duration,
) -> Result<HashSet<ClaimKey>, DbErr> {
    let mut fresh = HashSet::new();
    if keys.is_empty() {
        return Ok(fresh);
    }
    // The whole group's keys travel as one text parameter that the server splits: one short
    // statement whatever the count (a multi-row VALUES list cost 35-60 ms per thousand rows,
    // mostly planning). Keys in one order in every instance, so two groups that share messages
    // wait for each other instead of deadlocking.
    keys.sort_unstable();
    let mut text = String::with_capacity(keys.len() * 33);
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&hex::encode(key));
    }
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO ingest_message_keys (key, first_seen_at) \
             SELECT decode(k, 'hex'), now() FROM unnest(string_to_array($1, ',')) AS k \
             ON CONFLICT (key) DO UPDATE SET first_seen_at = EXCLUDED.first_seen_at \
             WHERE ingest_message_keys.first_seen_at <= now() - make_interval(secs => $2) \
             RETURNING key",
            [text.into(), window.as_secs_f64().into()],
        ))
        .await?;
    for row in rows {
        let key: Vec<u8> = row.try_get_by_index(0)?;
        if let Ok(key) = ClaimKey::try_from(key.as_slice()) {
            fresh.insert(key);
        }
    }
    Ok(fresh)
}

/// PostgreSQL: removes claims made more than `kept` ago by the server's clock (any instance may
/// run it): by then every instance's own window holds them. The table is vacuumed at once: it
/// turns over every few seconds, faster than autovacuum (a minute's nap, workers busy with the
/// large tables) comes back to it, and measured without this, its dead claims reached 10
/// million (1.1 GB) within minutes, and every claim and read of the claims slowed with them.
/// A vacuum another instance is running makes this one skip the table (`SKIP_LOCKED`) rather
/// than wait for it (seconds after a burst of claims); the table keeps its trailing pages (see
/// the migration that sets `vacuum_truncate`), so no vacuum holds up the writers' claims.
/// While another instance's expiry runs, this one does nothing and answers 0.
pub async fn expire_shared(conn: &DatabaseConnection, kept: Duration) -> Result<u64, DbErr> {
    // One instance at a time: a second would find the same old claims and wait for the first
    // one's row locks (measured up to 0.8 s), only to delete nothing.
    let txn = conn.begin().await?;
    let taken = txn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT pg_try_advisory_xact_lock(hashtext(current_schema() || '.ingest_claims_expiry'))",
        ))
        .await?
        .map(|row| row.try_get_by_index::<bool>(0))
        .transpose()?
        .unwrap_or(false);
    if !taken {
        txn.rollback().await?;
        return Ok(0);
    }
    let done = txn
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "DELETE FROM ingest_message_keys \
             WHERE first_seen_at < now() - make_interval(secs => $1)",
            [kept.as_secs_f64().into()],
        ))
        .await?;
    txn.commit().await?;
    conn.execute_unprepared("VACUUM (SKIP_LOCKED) ingest_message_keys")
        .await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_keys_read_back_as_written() {
        let bytes = shared_key_bytes("org", "m1");
        assert_eq!(key_of_claim(&bytes), Some(shared_message_key("org", "m1")));
        assert_ne!(
            shared_message_key("org", "m1"),
            shared_message_key("org2", "m1")
        );
        assert_eq!(key_of_claim(&bytes[..15]), None);
    }

    #[test]
    fn windows_parse() {
        assert_eq!(parse_window("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_window("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_window("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_window("0h").is_err());
        assert!(parse_window("h").is_err());
        assert!(parse_window("").is_err());
        assert!(parse_window("3y").is_err());
    }
}
