//! PostgreSQL: an import writes chunks that find and create records by different keys at
//! once, each in a transaction of its own. One chunk's statements keep one server process
//! busy (90-100% of a core, the import's own process 15%), so one chunk at a time left the
//! server's other cores idle.
//!
//! A chunk starts once every chunk in flight before it has applied its lines in memory and
//! told its [`Footprint`]: each key of the rows it writes, as they were and as it leaves them.
//! A chunk whose lines look nothing up by those keys cannot see or change what the others write,
//! so it ends the same whichever commits first, as if it came after them. One whose keys meet
//! theirs waits for them to commit. The chunks in flight share the organization's identities
//! ([`crate::db::share_identities`]); the ingest applier and the other writers that create
//! customers and users by key wait for all of them, as they waited for one chunk.
//!
//! Chunks go in rounds of at most [`DEFAULT_CHUNKS_AT_ONCE`] (or as configured): the next round begins when every chunk of
//! the last one has committed, so between rounds the organization is free for the applier, as
//! it was between chunks.
//!
//! Only one import can be sure of its own chunks' keys: an import holds its organization's
//! [`ImportTurn`] from its first chunk to its end, and a second import into the same
//! organization waits for it.

use std::{collections::HashSet, sync::Arc};

use sea_orm::{
    sqlx::{self, pool::PoolConnection, Postgres},
    DatabaseConnection, DbErr, RuntimeErr,
};
use tokio::{sync::oneshot, task::JoinHandle};

use super::{import_chunk, source_key, ChunkRows, Hold, ImportReport, NumberedRecord, Wanted};

/// Chunks of one import written at once on PostgreSQL unless configured otherwise
/// (`CUSTINTEL_IMPORT_CHUNKS_AT_ONCE`): the cores of this project's reference machine, which the
/// server shares with the service.
pub const DEFAULT_CHUNKS_AT_ONCE: usize = 2;

/// Keys by which a chunk finds records, or of the records it writes, each tagged with its
/// table. Compared case-insensitively: two keys that differ only in case count as one, which
/// can only make a chunk wait when it need not.
#[derive(Debug, Default)]
pub(super) struct Footprint(HashSet<String>);

impl Footprint {
    fn add(&mut self, table: char, value: &str) {
        self.0
            .insert(format!("{table}{}", value.trim().to_lowercase()));
    }

    fn add_all<'a>(&mut self, table: char, values: impl IntoIterator<Item = &'a String>) {
        for value in values {
            self.add(table, value);
        }
    }

    /// Every key a chunk's lines may look a record up by (before any look-up).
    fn of_lines(chunk: &[NumberedRecord]) -> Self {
        let w = Wanted::of(chunk.iter().filter_map(|(_, r)| r.as_ref().ok()));
        let mut f = Footprint::default();
        f.add_all('c', &w.customer_external_ids);
        f.add_all('c', &w.customer_domains);
        f.add_all('c', &w.customer_references);
        f.add_all('u', &w.user_external_ids);
        f.add_all('u', &w.user_emails);
        f.add_all('w', &w.workspace_emails);
        for (source_type, ids) in &w.source_ids {
            for id in ids {
                f.add('s', &source_key(source_type, id));
            }
        }
        for (source_type, ids) in &w.fact_source_ids {
            for id in ids {
                f.add('f', &source_key(source_type, id));
            }
        }
        f
    }

    /// Every key of the rows a chunk writes, before and after its lines changed them (a
    /// customer is also found by its id; a fact by its source).
    pub(super) fn of_rows(rows: &ChunkRows) -> Self {
        let mut f = Footprint::default();
        for key in rows.customers.written_keys() {
            f.add('c', &key);
        }
        for key in rows.users.written_keys() {
            f.add('u', &key);
        }
        for key in rows.workspace_users.written_keys() {
            f.add('w', &key);
        }
        for key in rows.sources.written_keys() {
            f.add('s', &key);
        }
        for fact in rows.facts.written_rows() {
            f.add('f', &source_key(&fact.source_type, &fact.source_id));
        }
        f
    }

    fn meets(&self, other: &Footprint) -> bool {
        let (fewer, more) = if self.0.len() <= other.0.len() {
            (self, other)
        } else {
            (other, self)
        };
        fewer.0.iter().any(|key| more.0.contains(key))
    }
}

/// The chunks of one import on PostgreSQL, written up to `limit` at once.
pub(super) struct ChunksAtOnce {
    db: DatabaseConnection,
    org: String,
    limit: usize,
    /// In the file's order.
    in_flight: Vec<InFlight>,
    _turn: ImportTurn,
}

struct InFlight {
    /// Answers the chunk's footprint once its lines are applied (dropped unanswered if the
    /// chunk could not be written at once).
    applied: Option<oneshot::Receiver<Footprint>>,
    footprint: Option<Footprint>,
    written: JoinHandle<Result<ImportReport, DbErr>>,
}

impl ChunksAtOnce {
    /// Waits for the organization's [`ImportTurn`].
    pub(super) async fn new(
        db: &DatabaseConnection,
        org: &str,
        limit: usize,
    ) -> Result<Self, DbErr> {
        Ok(ChunksAtOnce {
            db: db.clone(),
            org: org.to_string(),
            limit,
            in_flight: Vec::new(),
            _turn: ImportTurn::take(db, org).await?,
        })
    }

    /// Starts writing `chunk`, after the chunks in flight if there are `limit` of them or its
    /// keys meet theirs. Returns whether a round ended (its chunks' outcome is then
    /// in `report`).
    pub(super) async fn start(
        &mut self,
        chunk: Vec<NumberedRecord>,
        report: &mut ImportReport,
    ) -> Result<bool, DbErr> {
        let looked_up_by = Footprint::of_lines(&chunk);
        let round_ended =
            self.in_flight.len() >= self.limit || !self.apart_from(&looked_up_by).await;
        if round_ended {
            self.finish_round(report).await?;
        }
        let (applied_to, applied) = oneshot::channel();
        let (db, org) = (self.db.clone(), self.org.clone());
        let written = tokio::spawn(async move {
            let mut report = ImportReport::default();
            import_chunk(
                &db,
                &org,
                chunk,
                &mut report,
                Hold::Shared,
                Some(applied_to),
            )
            .await
            .map(|()| report)
        });
        self.in_flight.push(InFlight {
            applied: Some(applied),
            footprint: None,
            written,
        });
        Ok(round_ended)
    }

    /// Whether lines that look records up by `keys` can be written beside every chunk in
    /// flight: each has told its footprint, and none meets `keys`.
    async fn apart_from(&mut self, keys: &Footprint) -> bool {
        for chunk in &mut self.in_flight {
            if let Some(applied) = chunk.applied.take() {
                chunk.footprint = applied.await.ok();
            }
            match &chunk.footprint {
                Some(footprint) if !footprint.meets(keys) => {}
                _ => return false,
            }
        }
        true
    }

    /// Waits for every chunk in flight and adds their outcomes to `report` in the file's order.
    /// The first error is returned after all of them ended.
    async fn finish_round(&mut self, report: &mut ImportReport) -> Result<(), DbErr> {
        let mut failed = None;
        for chunk in self.in_flight.drain(..) {
            let outcome = chunk
                .written
                .await
                .unwrap_or_else(|e| Err(DbErr::Custom(format!("an import chunk stopped: {e}"))));
            match outcome {
                Ok(outcome) => {
                    report.imported.add(&outcome.imported);
                    report.rejected.extend(outcome.rejected);
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Waits for the last round.
    pub(super) async fn finish(mut self, report: &mut ImportReport) -> Result<(), DbErr> {
        self.finish_round(report).await
    }
}

/// An organization's import turn: a PostgreSQL session lock, held on a connection of its own
/// for as long as the import runs. The connection is closed with the turn rather than returned
/// to the pool, which releases the lock however the import ends.
struct ImportTurn(Option<PoolConnection<Postgres>>);

/// The turn's lock, keyed by the schema's imports and the organization (`$1`).
const TRY_TAKE_TURN: &str =
    "SELECT pg_try_advisory_lock(hashtext(current_schema() || '.import'), hashtext($1))";
const TAKE_TURN: &str =
    "SELECT pg_advisory_lock(hashtext(current_schema() || '.import'), hashtext($1))";

impl ImportTurn {
    async fn take(db: &DatabaseConnection, org: &str) -> Result<Self, DbErr> {
        let mut conn = db
            .get_postgres_connection_pool()
            .acquire()
            .await
            .map_err(|e| DbErr::Conn(RuntimeErr::SqlxError(Arc::new(e))))?;
        let exec_err = |e| DbErr::Exec(RuntimeErr::SqlxError(Arc::new(e)));
        let taken: bool = sqlx::query_scalar(TRY_TAKE_TURN)
            .bind(org)
            .fetch_one(&mut *conn)
            .await
            .map_err(exec_err)?;
        if !taken {
            tracing::info!(
                organization = org,
                "another import into this organization is running: waiting for it to end"
            );
            sqlx::query(TAKE_TURN)
                .bind(org)
                .execute(&mut *conn)
                .await
                .map_err(exec_err)?;
        }
        Ok(ImportTurn(Some(conn)))
    }
}

impl Drop for ImportTurn {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            drop(conn.detach());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::parse_line;

    fn lines(texts: &[&str]) -> Vec<NumberedRecord> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| (i + 1, parse_line(t)))
            .collect()
    }

    fn keys(f: &Footprint) -> Vec<&str> {
        let mut keys: Vec<&str> = f.0.iter().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn lines_look_up_by_every_key_they_name_case_folded() {
        let f = Footprint::of_lines(&lines(&[
            r#"{"kind":"customer","name":"Acme","domain":"Acme.com","externalId":"cus_1"}"#,
            r#"{"kind":"user","customer":" cus_2 ","email":"Ada@Acme.com","externalId":"u_1"}"#,
            r#"{"kind":"workspace_user","name":"Sam","email":"Sam@ourco.com","role":"CSM"}"#,
            r#"{"kind":"source","sourceType":"call","sourceId":"c1","customer":"acme.com","title":"QBR","occurredAt":"2026-10-01T15:00:00Z"}"#,
            r#"{"kind":"fact","customer":"acme.com","text":"40 seats","sourceType":"EMAIL","sourceId":"e1"}"#,
            r#"{"kind":"nonsense"}"#,
        ]));
        assert_eq!(
            keys(&f),
            [
                "ccus_1",
                "ccus_2",
                "cacme.com",
                "femail\u{1f}e1",
                "scall\u{1f}c1",
                "semail\u{1f}e1",
                "uada@acme.com",
                "uu_1",
                "wsam@ourco.com",
            ]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
        );
    }

    #[test]
    fn footprints_meet_on_a_shared_key_of_the_same_table_only() {
        let customer = Footprint::of_lines(&lines(&[
            r#"{"kind":"customer","name":"Acme","domain":"acme.com"}"#,
        ]));
        let its_user = Footprint::of_lines(&lines(&[
            r#"{"kind":"user","customer":"ACME.com","email":"ada@acme.com"}"#,
        ]));
        let another_user = Footprint::of_lines(&lines(&[
            r#"{"kind":"user","customer":"globex.com","email":"acme.com"}"#,
        ]));
        assert!(customer.meets(&its_user) && its_user.meets(&customer));
        // The same text as a user's key is another record's key.
        assert!(!customer.meets(&another_user));
        assert!(!Footprint::default().meets(&customer));
    }
}
