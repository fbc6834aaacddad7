//! Data in: JSON Lines of customers, users, workspace users, sources and facts
//! (`custintel import`, and the demo seed through the same path).
//!
//! Each line is one record with a `kind`. Re-importing a line updates the record with the same
//! key instead of duplicating it: customers by `externalId` (then `domain`), users by
//! `externalId` (then email), workspace users by email, sources by `sourceType` + `sourceId`,
//! facts by customer, source and text.
//!
//! The file is streamed: lines are read and parsed in chunks of [`CHUNK_LINES`] on the
//! blocking pool while the previous chunk is written, so memory stays bounded whatever the
//! file's size. Each chunk is one short write transaction (`BEGIN IMMEDIATE` on SQLite): one
//! look-up per key for every record the chunk refers to (`IN (...)` on SQLite, `= ANY` of one
//! JSON array parameter on PostgreSQL), the lines applied in order to those rows in memory (so
//! a line sees what earlier lines of the file wrote, in the same chunk or before), then
//! multi-row upserts (on PostgreSQL one statement per table over `json_populate_recordset`).
//! Between chunks a serving instance's writers get the SQLite write lock. PostgreSQL writes
//! chunks whose lines find and create records by different keys at once ([`chunks_at_once`]).
//! A chunk whose write
//! fails is rolled back and written again one line per transaction, so only the line that
//! cannot be stored is rejected. PostgreSQL `ANALYZE`s the tables the import fills as they
//! grow ([`Growth`]) and `VACUUM (ANALYZE)`s every table it filled at the end (index-only scans
//! need the visibility map); SQLite `ANALYZE`s them at the end.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    io::BufRead,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use entity::{
    change,
    customer::{self, BillingStatus},
    fact::{self, FactStatus},
    source, user, workspace_user, StatusEnum,
};
use sea_orm::{
    sea_query::{OnConflict, Query},
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, DatabaseTransaction, DbBackend,
    DbErr, EntityTrait, IdenStatic, IntoActiveModel, Iterable, NotSet, QueryFilter, QuerySelect,
    QueryTrait, Set, Statement, TransactionTrait,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use tokio::sync::oneshot;

use crate::db::name_search::{index_names, NamesOf};
pub use chunks_at_once::DEFAULT_CHUNKS_AT_ONCE;
use chunks_at_once::{ChunksAtOnce, Footprint};

mod chunks_at_once;
use crate::tools::common::{normalize_email, normalize_source_type};

/// Lines per chunk: one write transaction each. At the import's pace a chunk holds the SQLite
/// write lock for tens of milliseconds, short enough for a serving instance's writers to wait.
pub const CHUNK_LINES: usize = 2_000;
/// Values per `IN (...)` look-up.
const LOOKUP_BATCH: usize = 500;
/// Bound parameters per multi-row statement (SQLite allows 32,766, PostgreSQL 65,535).
const STATEMENT_PARAMETERS: usize = 20_000;

/// One import line.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ImportRecord {
    Customer(CustomerRecord),
    User(UserRecord),
    WorkspaceUser(WorkspaceUserRecord),
    Source(SourceRecord),
    Fact(FactRecord),
}

/// A customer (account). Needs a `domain` or an `externalId`; fields left out keep their
/// stored value on re-import.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CustomerRecord {
    pub name: Option<String>,
    pub domain: Option<String>,
    pub external_id: Option<String>,
    pub billing_status: Option<String>,
    pub mrr_cents: Option<i64>,
    pub traits: Option<Map<String, Value>>,
    pub last_activity_at: Option<DateTime<Utc>>,
    pub created_at: Option<DateTime<Utc>>,
}

/// A user (a person at a customer). Needs an `email` or an `externalId`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UserRecord {
    /// The user's customer: its domain or externalId.
    pub customer: Option<String>,
    pub email: Option<String>,
    pub external_id: Option<String>,
    pub name: Option<String>,
    pub stage: Option<String>,
    pub traits: Option<Map<String, Value>>,
    pub last_activity_at: Option<DateTime<Utc>>,
    pub created_at: Option<DateTime<Utc>>,
}

/// A workspace user (one of the organization's own people), keyed by email.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkspaceUserRecord {
    pub name: String,
    pub email: String,
    pub role: String,
    pub created_at: Option<DateTime<Utc>>,
}

/// A source record (call, email, calendar event, support ticket, opportunity).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SourceRecord {
    pub source_type: String,
    pub source_id: String,
    /// The customer it is about: its domain or externalId.
    pub customer: Option<String>,
    pub title: String,
    #[serde(default)]
    pub body: String,
    pub occurred_at: DateTime<Utc>,
    #[serde(default)]
    pub permalink: Option<String>,
    #[serde(default)]
    pub participants: Vec<String>,
    pub created_at: Option<DateTime<Utc>>,
}

/// A fact about a customer, with its evidence in an already imported source.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FactRecord {
    /// The customer: its domain or externalId.
    pub customer: String,
    pub text: String,
    pub status: Option<String>,
    pub source_type: String,
    pub source_id: String,
    #[serde(default)]
    pub source_quote: String,
    /// Defaults to the source's permalink.
    pub permalink: Option<String>,
    pub created_at: Option<DateTime<Utc>>,
}

/// Records imported per kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ImportCounts {
    pub customer: u64,
    pub user: u64,
    pub workspace_user: u64,
    pub source: u64,
    pub fact: u64,
}

impl ImportCounts {
    fn count(&mut self, record: &ImportRecord) {
        match record {
            ImportRecord::Customer(_) => self.customer += 1,
            ImportRecord::User(_) => self.user += 1,
            ImportRecord::WorkspaceUser(_) => self.workspace_user += 1,
            ImportRecord::Source(_) => self.source += 1,
            ImportRecord::Fact(_) => self.fact += 1,
        }
    }

    fn add(&mut self, other: &ImportCounts) {
        self.customer += other.customer;
        self.user += other.user;
        self.workspace_user += other.workspace_user;
        self.source += other.source;
        self.fact += other.fact;
    }
}

/// A line that was not imported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejected {
    /// 1-based line number.
    pub line: usize,
    pub error: String,
}

/// What an import did; printed by `custintel import`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    pub imported: ImportCounts,
    pub rejected: Vec<Rejected>,
}

/// A line's number and its record, or why it could not be parsed.
pub type NumberedRecord = (usize, Result<ImportRecord, String>);

use entity::user::STAGES;
const ROLES: [&str; 4] = ["CSM", "MANAGER", "ACCOUNT_OWNER", "ADMIN"];

/// Parses one JSON Lines line, naming the offending field.
pub fn parse_line(text: &str) -> Result<ImportRecord, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not a JSON object: {e}"))?;
    if !value.is_object() {
        return Err("not a JSON object".into());
    }
    match value.get("kind").and_then(Value::as_str) {
        Some("customer" | "user" | "workspace_user" | "source" | "fact") => {}
        Some(other) => {
            return Err(format!(
                "kind: unknown kind `{other}` (customer, user, workspace_user, source, fact)"
            ))
        }
        None => return Err("kind: required (customer, user, workspace_user, source, fact)".into()),
    }
    serde_path_to_error::deserialize::<_, ImportRecord>(value).map_err(|e| {
        let path = e.path().to_string();
        if path.is_empty() || path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}

/// Reads and parses up to [`CHUNK_LINES`] non-blank lines; `line` is the number of the last
/// line read so far. Returns the chunk and whether the input ended.
fn read_chunk<R: BufRead>(
    reader: &mut R,
    line: &mut usize,
) -> std::io::Result<(Vec<NumberedRecord>, bool)> {
    let mut chunk = Vec::with_capacity(CHUNK_LINES);
    let mut buf = Vec::new();
    while chunk.len() < CHUNK_LINES {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            return Ok((chunk, true));
        }
        *line += 1;
        let mut bytes = buf.as_slice();
        if let Some(rest) = bytes.strip_suffix(b"\n") {
            bytes = rest.strip_suffix(b"\r").unwrap_or(rest);
        }
        match std::str::from_utf8(bytes) {
            Ok(text) if text.trim().is_empty() => {}
            Ok(text) => chunk.push((*line, parse_line(text))),
            Err(_) => chunk.push((*line, Err("not UTF-8 text".into()))),
        }
    }
    Ok((chunk, false))
}

/// Why an import stopped before the end of its input.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{0}")]
    Read(#[from] std::io::Error),
    #[error("{0}")]
    Store(#[from] DbErr),
}

/// Imports JSON Lines from a reader (blank lines are skipped), reading the next chunk while
/// the current one is written; on PostgreSQL up to `chunks_at_once` chunks are written at once.
pub async fn import_reader<R>(
    db: &sea_orm::DatabaseConnection,
    organization_id: &str,
    reader: R,
    chunks_at_once: usize,
) -> Result<ImportReport, ImportError>
where
    R: BufRead + Send + 'static,
{
    let read_next = |mut reader: R, mut line: usize| {
        tokio::task::spawn_blocking(move || {
            let chunk = read_chunk(&mut reader, &mut line);
            (reader, line, chunk)
        })
    };
    let mut report = ImportReport::default();
    let mut growth = Growth {
        enabled: db.get_database_backend() == DbBackend::Postgres,
        ..Growth::default()
    };
    let mut at_once = match db.get_database_backend() {
        DbBackend::Postgres if chunks_at_once > 1 => {
            Some(ChunksAtOnce::new(db, organization_id, chunks_at_once).await?)
        }
        _ => None,
    };
    let mut next = Some(read_next(reader, 0));
    while let Some(reading) = next.take() {
        let (reader, line, chunk) = reading.await.map_err(std::io::Error::other)?;
        let (chunk, ended) = chunk?;
        if !ended {
            next = Some(read_next(reader, line));
        }
        if chunk.is_empty() {
            continue;
        }
        let round_ended = match &mut at_once {
            Some(at_once) => at_once.start(chunk, &mut report).await?,
            None => {
                import_chunk(db, organization_id, chunk, &mut report, Hold::Alone, None).await?;
                true
            }
        };
        if round_ended {
            growth.after_chunk(db, &report.imported).await?;
        }
    }
    if let Some(at_once) = at_once {
        at_once.finish(&mut report).await?;
    }
    let mut filled = filled_tables(&report.imported);
    // PostgreSQL counts rare trait values through the trait index (which triggers on
    // customers and users fill) with index-only scans: it is vacuumed too. SQLite's serving
    // instances analyze it when `PRAGMA optimize` asks.
    let imported = &report.imported;
    if db.get_database_backend() == DbBackend::Postgres && imported.customer + imported.user > 0 {
        filled.push("trait_values");
    }
    if !filled.is_empty() {
        let started = Instant::now();
        crate::db::statistics::after_bulk_load(db, &filled).await?;
        tracing::debug!(
            tables = ?filled,
            took_ms = started.elapsed().as_millis() as u64,
            "import: planner statistics (and PostgreSQL's visibility map) refreshed"
        );
    }
    Ok(report)
}

/// PostgreSQL: rows an import writes to a table before its first `ANALYZE` during the import.
const ANALYZE_AFTER_ROWS: u64 = 10_000;

/// PostgreSQL plans the chunks' look-ups with the tables' statistics, and a table an import
/// fills from empty has none until autovacuum's `ANALYZE` (which may be off, or a minute
/// late). Planned as if the organization had a handful of rows, the look-up of a chunk's
/// sources by `source_id = ANY (...)` scanned all the organization's sources of the type and
/// filtered them (1.2 s a chunk at 60,000 sources, growing with the table), where with
/// statistics it probes the unique index (2 ms). So the import `ANALYZE`s a table it writes
/// to once [`ANALYZE_AFTER_ROWS`] lines went to it and again each time that number doubles:
/// a handful of `ANALYZE`s of a 30,000-row sample each, however long the import.
#[derive(Default)]
struct Growth {
    /// On PostgreSQL only: SQLite plans the look-ups' `IN (...)` well without statistics.
    enabled: bool,
    /// Per table, the lines imported into it when it was last analyzed.
    analyzed_at: HashMap<&'static str, u64>,
}

impl Growth {
    async fn after_chunk<C>(&mut self, db: &C, imported: &ImportCounts) -> Result<(), DbErr>
    where
        C: ConnectionTrait,
    {
        if !self.enabled {
            return Ok(());
        }
        let mut due = Vec::new();
        for (table, n) in imported_by_table(imported) {
            let last = self.analyzed_at.get(table).copied().unwrap_or(0);
            if n >= ANALYZE_AFTER_ROWS && n >= 2 * last {
                due.push(table);
                self.analyzed_at.insert(table, n);
            }
        }
        if due.is_empty() {
            return Ok(());
        }
        refresh_statistics(db, &due).await
    }
}

/// Lines imported per table.
fn imported_by_table(imported: &ImportCounts) -> [(&'static str, u64); 5] {
    [
        ("customers", imported.customer),
        ("users", imported.user),
        ("workspace_users", imported.workspace_user),
        ("sources", imported.source),
        ("facts", imported.fact),
    ]
}

/// The tables an import of `imported` wrote to.
fn filled_tables(imported: &ImportCounts) -> Vec<&'static str> {
    let mut tables: Vec<&'static str> = imported_by_table(imported)
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(table, _)| table)
        .collect();
    if imported.source + imported.fact > 0 {
        tables.push("change_log");
    }
    tables
}

/// PostgreSQL, during the import: planner statistics of the tables it is filling, so that its
/// own look-ups and a serving instance's reads are planned for what is now in them (DESIGN.md
/// "Reads at scale"): `ANALYZE`, a sample of at most 30,000 rows each (well under a second at
/// millions of rows). At the end, `db::statistics::after_bulk_load`.
async fn refresh_statistics<C>(db: &C, tables: &[&'static str]) -> Result<(), DbErr>
where
    C: ConnectionTrait,
{
    if tables.is_empty() {
        return Ok(());
    }
    let started = Instant::now();
    crate::db::statistics::analyze_tables(db, tables).await?;
    tracing::debug!(
        tables = ?tables,
        took_ms = started.elapsed().as_millis() as u64,
        "import: planner statistics refreshed"
    );
    Ok(())
}

/// Imports the lines of a JSON Lines text (blank lines are skipped).
pub async fn import_text<C: TransactionTrait<Transaction = DatabaseTransaction>>(
    db: &C,
    organization_id: &str,
    text: &str,
) -> Result<ImportReport, DbErr> {
    let lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, parse_line(l)));
    import_records(db, organization_id, lines).await
}

/// Imports numbered records (parsed, or the reason they could not be) in order, in chunks of
/// [`CHUNK_LINES`], one transaction (or savepoint, inside a caller's transaction) each.
pub async fn import_records<C, I>(
    db: &C,
    organization_id: &str,
    records: I,
) -> Result<ImportReport, DbErr>
where
    C: TransactionTrait<Transaction = DatabaseTransaction>,
    I: IntoIterator<Item = NumberedRecord>,
{
    let mut records = records.into_iter();
    let mut report = ImportReport::default();
    loop {
        let chunk: Vec<NumberedRecord> = records.by_ref().take(CHUNK_LINES).collect();
        if chunk.is_empty() {
            return Ok(report);
        }
        import_chunk(db, organization_id, chunk, &mut report, Hold::Alone, None).await?;
    }
}

/// Why a chunk (or one line of it) was not written.
enum WriteError {
    /// No transaction could be begun: the import cannot go on.
    Begin(DbErr),
    /// A look-up, a write or the commit failed: the chunk was rolled back.
    Write(DbErr),
}

/// What a written chunk did.
#[derive(Default)]
struct ChunkOutcome {
    imported: ImportCounts,
    rejected: Vec<Rejected>,
    /// How long the chunk's transaction held the SQLite write lock (zero on PostgreSQL).
    held_sqlite_lock: Duration,
}

/// After a chunk, the import leaves the SQLite write lock free for this share of the time it
/// held it (at least [`MIN_LOCK_GAP`]). SQLite hands the lock to no one in particular: a
/// waiting writer polls for it (every millisecond, `db::install_busy_handler`), and an import
/// that began its next chunk at once would take the lock again before any waiter tried. (A
/// fixed 3 ms gap imported 9% faster but left the server's writes waiting a whole chunk at
/// p50: 232 ms instead of 12.)
const LOCK_GAP_SHARE: u32 = 3;
const MIN_LOCK_GAP: Duration = Duration::from_millis(10);

/// How a chunk's transaction holds the organization's identities (PostgreSQL).
#[derive(Debug, Clone, Copy)]
enum Hold {
    /// Alone: no other writer of customers and users by key runs meanwhile.
    Alone,
    /// Shared with the import's other chunks in flight, whose keys it does not share
    /// ([`chunks_at_once`]).
    Shared,
}

/// Writes one chunk, adding what it did to `report`; `applied` is told the chunk's
/// [`Footprint`] once its lines are applied, before its rows are written. An `Err` ends the
/// import.
async fn import_chunk<C>(
    db: &C,
    org: &str,
    chunk: Vec<NumberedRecord>,
    report: &mut ImportReport,
    hold: Hold,
    applied: Option<oneshot::Sender<Footprint>>,
) -> Result<(), DbErr>
where
    C: TransactionTrait<Transaction = DatabaseTransaction>,
{
    let mut rejected = Vec::new();
    let mut records = Vec::with_capacity(chunk.len());
    for (line, record) in chunk {
        match record {
            Ok(r) => records.push((line, r)),
            Err(error) => rejected.push(Rejected { line, error }),
        }
    }
    match write_chunk(db, org, &records, hold, applied).await {
        Ok(outcome) => {
            report.imported.add(&outcome.imported);
            rejected.extend(outcome.rejected);
            if !outcome.held_sqlite_lock.is_zero() {
                let gap = (outcome.held_sqlite_lock / LOCK_GAP_SHARE).max(MIN_LOCK_GAP);
                tokio::time::sleep(gap).await;
            }
        }
        Err(WriteError::Begin(e)) => return Err(e),
        Err(WriteError::Write(e)) => {
            tracing::warn!(
                error = %e,
                first_line = records.first().map(|(l, _)| *l),
                "import chunk could not be written at once; writing its lines one by one"
            );
            for record in &records {
                match write_chunk(db, org, std::slice::from_ref(record), hold, None).await {
                    Ok(outcome) => {
                        report.imported.add(&outcome.imported);
                        rejected.extend(outcome.rejected);
                    }
                    Err(WriteError::Begin(e)) => return Err(e),
                    Err(WriteError::Write(e)) => rejected.push(Rejected {
                        line: record.0,
                        error: format!("could not be stored: {e}"),
                    }),
                }
            }
        }
    }
    rejected.sort_by_key(|r| r.line);
    report.rejected.extend(rejected);
    Ok(())
}

/// One transaction: look up what the records refer to, apply them in order in memory, write
/// the rows they changed.
async fn write_chunk<C>(
    db: &C,
    org: &str,
    records: &[(usize, ImportRecord)],
    hold: Hold,
    applied_to: Option<oneshot::Sender<Footprint>>,
) -> Result<ChunkOutcome, WriteError>
where
    C: TransactionTrait<Transaction = DatabaseTransaction>,
{
    let waited = Instant::now();
    let txn = crate::db::begin_write(db)
        .await
        .map_err(WriteError::Begin)?;
    // The chunk finds users and customers by key and creates the missing ones, as the ingest
    // applier does: on PostgreSQL the two take turns per organization, or both could create a
    // user for one email.
    match hold {
        Hold::Alone => crate::db::hold_identities(&txn, org).await,
        Hold::Shared => crate::db::share_identities(&txn, org).await,
    }
    .map_err(WriteError::Begin)?;
    let began = Instant::now();
    let mut looked_up = began;
    let mut applied = began;
    let written = async {
        let mut rows = ChunkRows::load(&txn, org, records).await?;
        looked_up = Instant::now();
        let mut outcome = ChunkOutcome::default();
        for (line, record) in records {
            match rows.apply(record) {
                Ok(()) => outcome.imported.count(record),
                Err(error) => outcome.rejected.push(Rejected { line: *line, error }),
            }
        }
        applied = Instant::now();
        if let Some(applied_to) = applied_to {
            // The driver may be gone (an earlier chunk failed); the chunk is written all the same.
            let _ = applied_to.send(Footprint::of_rows(&rows));
        }
        rows.write(&txn).await?;
        Ok::<_, DbErr>(outcome)
    }
    .await;
    match written {
        Ok(outcome) => {
            let wrote = Instant::now();
            let sqlite = txn.get_database_backend() == sea_orm::DbBackend::Sqlite;
            txn.commit().await.map_err(WriteError::Write)?;
            let mut outcome = outcome;
            if sqlite {
                outcome.held_sqlite_lock = began.elapsed();
            }
            tracing::debug!(
                lines = records.len(),
                lock_wait_ms = (began - waited).as_millis() as u64,
                look_up_ms = (looked_up - began).as_millis() as u64,
                apply_ms = (applied - looked_up).as_millis() as u64,
                write_ms = (wrote - applied).as_millis() as u64,
                commit_ms = wrote.elapsed().as_millis() as u64,
                "import chunk written"
            );
            Ok(outcome)
        }
        Err(e) => {
            // Dropping the transaction would roll it back too; saying so keeps the error ours.
            let _ = txn.rollback().await;
            Err(WriteError::Write(e))
        }
    }
}

/// How a row is found by one of the import's keys (`None`: the row has no such key).
type KeyOf<M> = fn(&M) -> Option<String>;

/// The rows of one table a chunk reads or writes, found by the import's keys as the chunk's
/// lines change them. When several rows share a key the first one loaded wins.
struct Rows<M: 'static> {
    rows: Vec<M>,
    written: Vec<bool>,
    by_id: HashMap<String, usize>,
    id_of: fn(&M) -> &str,
    keys: &'static [KeyOf<M>],
    index: Vec<HashMap<String, BTreeSet<usize>>>,
    /// Key values of rows before the chunk changed them (a row found by an old email, say).
    replaced_keys: Vec<String>,
}

impl<M: Clone> Rows<M> {
    fn new(id_of: fn(&M) -> &str, keys: &'static [KeyOf<M>]) -> Self {
        Rows {
            rows: Vec::new(),
            written: Vec::new(),
            by_id: HashMap::new(),
            id_of,
            keys,
            index: keys.iter().map(|_| HashMap::new()).collect(),
            replaced_keys: Vec::new(),
        }
    }

    /// Adds rows read from the database (each once, however many look-ups found it).
    fn load(&mut self, found: Vec<M>) {
        for row in found {
            if !self.by_id.contains_key((self.id_of)(&row)) {
                self.push(row, false);
            }
        }
    }

    fn push(&mut self, row: M, written: bool) -> usize {
        let at = self.rows.len();
        self.by_id.insert((self.id_of)(&row).to_string(), at);
        self.index_row(at, &row);
        self.rows.push(row);
        self.written.push(written);
        at
    }

    fn index_row(&mut self, at: usize, row: &M) {
        for (k, key_of) in self.keys.iter().enumerate() {
            if let Some(value) = key_of(row) {
                self.index[k].entry(value).or_default().insert(at);
            }
        }
    }

    /// The row whose key number `key` is `value`.
    fn find(&self, key: usize, value: &str) -> Option<usize> {
        self.index[key]
            .get(value)
            .and_then(|rows| rows.first().copied())
    }

    fn get(&self, at: usize) -> &M {
        &self.rows[at]
    }

    /// Replaces row `at` with its new state, to be written.
    fn update(&mut self, at: usize, row: M) {
        for (k, key_of) in self.keys.iter().enumerate() {
            if let Some(value) = key_of(&self.rows[at]) {
                if let Some(rows) = self.index[k].get_mut(&value) {
                    rows.remove(&at);
                }
                self.replaced_keys.push(value);
            }
        }
        self.index_row(at, &row);
        self.rows[at] = row;
        self.written[at] = true;
    }

    /// Adds a new row, to be written.
    fn insert(&mut self, row: M) -> usize {
        self.push(row, true)
    }

    /// The rows to write, in their final state.
    fn written_rows(&self) -> impl Iterator<Item = &M> {
        self.rows
            .iter()
            .zip(&self.written)
            .filter_map(|(row, written)| written.then_some(row))
    }

    /// Every key value of the rows to write, before and after the chunk's changes.
    fn written_keys(&self) -> impl Iterator<Item = String> + '_ {
        self.written_rows()
            .flat_map(|row| self.keys.iter().filter_map(|key_of| key_of(row)))
            .chain(self.replaced_keys.iter().cloned())
    }

    /// The rows to write, in their final state.
    fn into_written(self) -> Vec<M> {
        self.rows
            .into_iter()
            .zip(self.written)
            .filter_map(|(row, written)| written.then_some(row))
            .collect()
    }
}

const CUSTOMER_EXTERNAL_ID: usize = 0;
const CUSTOMER_DOMAIN: usize = 1;
const CUSTOMER_ID: usize = 2;
const CUSTOMER_KEYS: [KeyOf<customer::Model>; 3] = [
    |c| c.external_id.clone(),
    |c| c.domain.clone(),
    |c| Some(c.id.clone()),
];

const USER_EXTERNAL_ID: usize = 0;
const USER_EMAIL: usize = 1;
const USER_KEYS: [KeyOf<user::Model>; 2] = [|u| u.external_id.clone(), |u| u.email.clone()];

const WORKSPACE_USER_KEYS: [KeyOf<workspace_user::Model>; 1] = [|w| Some(w.email.clone())];

fn source_key(source_type: &str, source_id: &str) -> String {
    format!("{source_type}\u{1f}{source_id}")
}
const SOURCE_KEYS: [KeyOf<source::Model>; 1] = [|s| Some(source_key(&s.source_type, &s.source_id))];

fn fact_key(customer_id: &str, source_type: &str, source_id: &str, text: &str) -> String {
    format!("{customer_id}\u{1f}{source_type}\u{1f}{source_id}\u{1f}{text}")
}
const FACT_KEYS: [KeyOf<fact::Model>; 1] = [|f| {
    Some(fact_key(
        &f.customer_id,
        &f.source_type,
        &f.source_id,
        &f.text,
    ))
}];

/// A `change_log` row to append for a source or fact write.
struct Change {
    artifact_type: &'static str,
    artifact_id: String,
    at: DateTime<Utc>,
}

/// The keys a chunk's lines look records up by.
#[derive(Default)]
struct Wanted {
    /// The keys of the chunk's customer lines.
    customer_external_ids: BTreeSet<String>,
    customer_domains: BTreeSet<String>,
    /// References to customers from other lines (trimmed): a domain, an externalId or an id.
    customer_references: BTreeSet<String>,
    /// Whether a line of the chunk is a customer: only those change the keys references
    /// resolve by.
    customer_lines: bool,
    user_external_ids: BTreeSet<String>,
    user_emails: BTreeSet<String>,
    workspace_emails: BTreeSet<String>,
    /// Source ids by source type: each type is one look-up of (type, ids), so an index probe
    /// per id instead of one per (type, id) pair of `type IN (...) AND id IN (...)`.
    source_ids: BTreeMap<&'static str, BTreeSet<String>>,
    /// The evidence (source type and id) of the chunk's facts.
    fact_source_ids: BTreeMap<&'static str, BTreeSet<String>>,
}

impl Wanted {
    /// A reference to a customer is tried as a domain, an externalId and an id.
    fn customer_reference(&mut self, reference: &str) {
        let wanted = reference.trim();
        if !wanted.is_empty() {
            self.customer_references.insert(wanted.to_string());
        }
    }

    fn of<'a>(records: impl IntoIterator<Item = &'a ImportRecord>) -> Wanted {
        let mut w = Wanted::default();
        for record in records {
            match record {
                ImportRecord::Customer(r) => {
                    w.customer_lines = true;
                    if let Some(e) = clean(&r.external_id) {
                        w.customer_external_ids.insert(e);
                    }
                    if let Some(d) = clean(&r.domain) {
                        w.customer_domains.insert(d.to_lowercase());
                    }
                }
                ImportRecord::User(r) => {
                    if let Some(c) = clean(&r.customer) {
                        w.customer_reference(&c);
                    }
                    if let Some(e) = clean(&r.external_id) {
                        w.user_external_ids.insert(e);
                    }
                    if let Some(e) = clean(&r.email) {
                        w.user_emails.insert(normalize_email(&e));
                    }
                }
                ImportRecord::WorkspaceUser(r) => {
                    w.workspace_emails.insert(normalize_email(&r.email));
                }
                ImportRecord::Source(r) => {
                    if let Some(c) = clean(&r.customer) {
                        w.customer_reference(&c);
                    }
                    if let Some(t) = normalize_source_type(&r.source_type) {
                        let id = r.source_id.trim().to_string();
                        w.source_ids.entry(t).or_default().insert(id);
                    }
                }
                ImportRecord::Fact(r) => {
                    w.customer_reference(&r.customer);
                    if let Some(t) = normalize_source_type(&r.source_type) {
                        let id = r.source_id.trim().to_string();
                        w.source_ids.entry(t).or_default().insert(id.clone());
                        w.fact_source_ids.entry(t).or_default().insert(id);
                    }
                }
            }
        }
        w
    }
}

/// The organization's rows a chunk refers to, as its lines leave them.
struct ChunkRows {
    org: String,
    customers: Rows<customer::Model>,
    /// Customer ids by key (indexed as [`CUSTOMER_KEYS`]) for references, read without their
    /// rows when no line of the chunk is a customer.
    referenced: [HashMap<String, String>; 3],
    users: Rows<user::Model>,
    workspace_users: Rows<workspace_user::Model>,
    sources: Rows<source::Model>,
    facts: Rows<fact::Model>,
    changes: Vec<Change>,
    /// New names of customers and users, `(id, name)`, for SQLite's name indexes.
    new_names: NewNames,
}

/// Names the chunk gave customers and users (new records and renamed ones), written to the
/// name indexes with the records (see [`crate::db::name_search`]).
#[derive(Default)]
struct NewNames {
    customers: Vec<(String, String)>,
    users: Vec<(String, String)>,
}

/// Rows of `E` whose `scope` columns equal their values and whose `column` is one of
/// `values`: on SQLite in batches of [`LOOKUP_BATCH`] (`IN (...)`), on PostgreSQL in one
/// statement ([`any_of`]).
async fn find_in<E: EntityTrait>(
    txn: &DatabaseTransaction,
    scope: &[(E::Column, &str)],
    column: E::Column,
    values: &BTreeSet<String>,
) -> Result<Vec<E::Model>, DbErr> {
    if values.is_empty() {
        return Ok(Vec::new());
    }
    if txn.get_database_backend() == DbBackend::Postgres {
        let (sql, params) = any_of::<E>("*", scope, column, values);
        return E::find()
            .from_raw_sql(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                params,
            ))
            .all(txn)
            .await;
    }
    let condition = scope
        .iter()
        .fold(Condition::all(), |c, (col, value)| c.add(col.eq(*value)));
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let mut found = Vec::new();
    for batch in values.chunks(LOOKUP_BATCH) {
        found.extend(
            E::find()
                .filter(condition.clone())
                .filter(column.is_in(batch.iter().copied()))
                .all(txn)
                .await?,
        );
    }
    Ok(found)
}

/// PostgreSQL: `SELECT {select} FROM E WHERE scope... AND column = ANY (values)`, the values
/// travelling as one JSON array: one short statement whatever their number, the same text
/// every time (prepared once per connection). Without statistics PostgreSQL planned
/// `organization_id = $1 AND email IN ($2, ..., $501)` as a scan of the organization's rows
/// through another index (every user of the organization read per batch); `= ANY` of an
/// array probes the key's index.
fn any_of<E: EntityTrait>(
    select: &str,
    scope: &[(E::Column, &str)],
    column: E::Column,
    values: &BTreeSet<String>,
) -> (String, Vec<sea_orm::Value>) {
    let mut sql = format!(
        "SELECT {select} FROM \"{}\" WHERE ",
        E::default().table_name()
    );
    let mut params: Vec<sea_orm::Value> = Vec::with_capacity(scope.len() + 1);
    for (col, value) in scope {
        params.push((*value).into());
        sql.push_str(&format!("\"{}\" = ${} AND ", col.as_str(), params.len()));
    }
    params.push(
        Value::from(values.iter().cloned().collect::<Vec<_>>())
            .to_string()
            .into(),
    );
    sql.push_str(&format!(
        "\"{}\" = ANY (ARRAY(SELECT json_array_elements_text(${}::json)))",
        column.as_str(),
        params.len()
    ));
    (sql, params)
}

impl ChunkRows {
    /// Reads every row the records could refer to, with one look-up per key and table.
    async fn load(
        txn: &DatabaseTransaction,
        org: &str,
        records: &[(usize, ImportRecord)],
    ) -> Result<ChunkRows, DbErr> {
        let t0 = Instant::now();
        let w = Wanted::of(records.iter().map(|(_, r)| r));
        let mut rows = ChunkRows {
            org: org.to_string(),
            customers: Rows::new(|c| &c.id, &CUSTOMER_KEYS),
            referenced: Default::default(),
            users: Rows::new(|u| &u.id, &USER_KEYS),
            workspace_users: Rows::new(|u| &u.id, &WORKSPACE_USER_KEYS),
            sources: Rows::new(|s| &s.id, &SOURCE_KEYS),
            facts: Rows::new(|f| &f.id, &FACT_KEYS),
            changes: Vec::new(),
            new_names: NewNames::default(),
        };
        rows.load_customers(txn, &w).await?;
        let t_customers = Instant::now();
        let scope = [(user::Column::OrganizationId, org)];
        for (column, values) in [
            (user::Column::ExternalId, &w.user_external_ids),
            (user::Column::Email, &w.user_emails),
        ] {
            let found = find_in::<user::Entity>(txn, &scope, column, values).await?;
            rows.users.load(found);
        }
        let scope = [(workspace_user::Column::OrganizationId, org)];
        let found = find_in::<workspace_user::Entity>(
            txn,
            &scope,
            workspace_user::Column::Email,
            &w.workspace_emails,
        )
        .await?;
        rows.workspace_users.load(found);
        let t_users = Instant::now();
        for (source_type, ids) in &w.source_ids {
            let scope = [
                (source::Column::OrganizationId, org),
                (source::Column::SourceType, *source_type),
            ];
            let found =
                find_in::<source::Entity>(txn, &scope, source::Column::SourceId, ids).await?;
            rows.sources.load(found);
        }
        let t_sources = Instant::now();
        for (source_type, ids) in &w.fact_source_ids {
            let scope = [
                (fact::Column::OrganizationId, org),
                (fact::Column::SourceType, *source_type),
            ];
            let found = find_in::<fact::Entity>(txn, &scope, fact::Column::SourceId, ids).await?;
            rows.facts.load(found);
        }
        tracing::debug!(
            customers_ms = (t_customers - t0).as_secs_f64() * 1e3,
            users_ms = (t_users - t_customers).as_secs_f64() * 1e3,
            sources_ms = (t_sources - t_users).as_secs_f64() * 1e3,
            facts_ms = t_sources.elapsed().as_secs_f64() * 1e3,
            "import chunk looked up"
        );
        Ok(rows)
    }

    /// Reads the customers the chunk's lines name. References are resolved by domain, then
    /// externalId, then id (`referenced_customer`). When a line of the chunk is a customer, whole
    /// rows are read by every key a reference could match, since that line may change the keys.
    /// Otherwise nothing changes a customer meanwhile: a reference found by domain is not looked
    /// up by the other two keys (nor one found by externalId by id), and only ids and keys are
    /// read (a chunk of user lines naming their customers' domains reads each customer's id once).
    async fn load_customers(&mut self, txn: &DatabaseTransaction, w: &Wanted) -> Result<(), DbErr> {
        let org = self.org.clone();
        let scope = [(customer::Column::OrganizationId, org.as_str())];
        let lower = |r: &String| r.to_lowercase();
        if w.customer_lines {
            let mut external_ids = w.customer_external_ids.clone();
            external_ids.extend(w.customer_references.iter().cloned());
            let mut domains = w.customer_domains.clone();
            domains.extend(w.customer_references.iter().map(lower));
            for (column, values) in [
                (customer::Column::ExternalId, &external_ids),
                (customer::Column::Domain, &domains),
            ] {
                let found = find_in::<customer::Entity>(txn, &scope, column, values).await?;
                self.customers.load(found);
            }
            let found = if txn.get_database_backend() == DbBackend::Postgres {
                // By id alone, the organization checked on the rows, as on SQLite.
                find_in::<customer::Entity>(txn, &[], customer::Column::Id, &w.customer_references)
                    .await?
                    .into_iter()
                    .filter(|c| c.organization_id == self.org)
                    .collect()
            } else {
                crate::db::find_by_ids_in_organization::<customer::Entity, _, _>(
                    txn,
                    customer::Column::Id,
                    w.customer_references.iter().map(String::as_str),
                    &self.org,
                    |c| &c.organization_id,
                )
                .await?
            };
            self.customers.load(found);
            return Ok(());
        }
        let domains: BTreeSet<String> = w.customer_references.iter().map(lower).collect();
        self.load_customer_keys(txn, customer::Column::Domain, &domains)
            .await?;
        let unresolved: BTreeSet<String> = w
            .customer_references
            .iter()
            .filter(|r| !self.referenced[CUSTOMER_DOMAIN].contains_key(&r.to_lowercase()))
            .cloned()
            .collect();
        self.load_customer_keys(txn, customer::Column::ExternalId, &unresolved)
            .await?;
        let unresolved: BTreeSet<String> = unresolved
            .into_iter()
            .filter(|r| !self.referenced[CUSTOMER_EXTERNAL_ID].contains_key(r))
            .collect();
        self.load_customer_keys(txn, customer::Column::Id, &unresolved)
            .await
    }

    /// Reads the id and keys of the organization's customers whose `column` is one of `values`
    /// into `referenced` (the first row read for a key wins, as in [`Rows`]). By id the
    /// organization is checked here, not in SQL (see `db::find_by_ids_in_organization`).
    async fn load_customer_keys(
        &mut self,
        txn: &DatabaseTransaction,
        column: customer::Column,
        values: &BTreeSet<String>,
    ) -> Result<(), DbErr> {
        use customer::Column as C;
        if values.is_empty() {
            return Ok(());
        }
        let by_id = matches!(column, C::Id);
        let mut found: Vec<(String, String, Option<String>, Option<String>)> = Vec::new();
        if txn.get_database_backend() == DbBackend::Postgres {
            let org = self.org.as_str();
            let scope: &[(C, &str)] = if by_id {
                &[]
            } else {
                &[(C::OrganizationId, org)]
            };
            let (sql, params) = any_of::<customer::Entity>(
                "id, organization_id, domain, external_id",
                scope,
                column,
                values,
            );
            let statement = Statement::from_sql_and_values(DbBackend::Postgres, sql, params);
            for row in txn.query_all_raw(statement).await? {
                found.push((
                    row.try_get_by_index(0)?,
                    row.try_get_by_index(1)?,
                    row.try_get_by_index(2)?,
                    row.try_get_by_index(3)?,
                ));
            }
        } else {
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            for batch in values.chunks(LOOKUP_BATCH) {
                let mut query = customer::Entity::find()
                    .select_only()
                    .columns([C::Id, C::OrganizationId, C::Domain, C::ExternalId])
                    .filter(column.is_in(batch.iter().copied()));
                if !by_id {
                    query = query.filter(C::OrganizationId.eq(self.org.as_str()));
                }
                found.extend(query.into_tuple().all(txn).await?);
            }
        }
        for (id, organization_id, domain, external_id) in found {
            if organization_id != self.org {
                continue;
            }
            for (key, value) in [
                (CUSTOMER_DOMAIN, domain),
                (CUSTOMER_EXTERNAL_ID, external_id),
                (CUSTOMER_ID, Some(id.clone())),
            ] {
                if let Some(value) = value {
                    self.referenced[key]
                        .entry(value)
                        .or_insert_with(|| id.clone());
                }
            }
        }
        Ok(())
    }

    /// Applies one line to the rows in memory; `Err` is why the line is rejected (and then
    /// it changed nothing).
    fn apply(&mut self, record: &ImportRecord) -> Result<(), String> {
        match record {
            ImportRecord::Customer(r) => self.customer(r),
            ImportRecord::User(r) => self.user(r),
            ImportRecord::WorkspaceUser(r) => self.workspace_user(r),
            ImportRecord::Source(r) => self.source(r),
            ImportRecord::Fact(r) => self.fact(r),
        }
    }

    /// The id of the customer a line refers to: by domain, then externalId (then id).
    fn referenced_customer(&self, field: &str, reference: &str) -> Result<String, String> {
        let wanted = reference.trim();
        let lower = wanted.to_lowercase();
        let in_rows = |key: usize, value: &str| {
            self.customers
                .find(key, value)
                .map(|at| self.customers.get(at).id.clone())
        };
        let referenced = |key: usize, value: &str| self.referenced[key].get(value).cloned();
        let found = [
            (CUSTOMER_DOMAIN, lower.as_str()),
            (CUSTOMER_EXTERNAL_ID, wanted),
            (CUSTOMER_ID, wanted),
        ]
        .into_iter()
        .find_map(|(key, value)| in_rows(key, value).or_else(|| referenced(key, value)));
        found.ok_or_else(|| {
            format!("{field}: no customer with domain or externalId `{wanted}` (import it first)")
        })
    }

    fn customer(&mut self, r: &CustomerRecord) -> Result<(), String> {
        let domain = clean(&r.domain).map(|d| d.to_lowercase());
        let external_id = clean(&r.external_id);
        if domain.is_none() && external_id.is_none() {
            return Err("a customer needs a `domain` or an `externalId`".into());
        }
        let status = match &r.billing_status {
            Some(s) => Some(status_of::<BillingStatus>("billingStatus", s.trim())?),
            None => None,
        };
        if r.mrr_cents.is_some_and(|m| m < 0) {
            return Err("mrrCents: must not be negative".into());
        }
        if r.name.as_ref().is_some_and(|n| n.trim().is_empty()) {
            return Err("name: must not be empty".into());
        }
        let existing = external_id
            .as_deref()
            .and_then(|e| self.customers.find(CUSTOMER_EXTERNAL_ID, e))
            .or_else(|| {
                domain
                    .as_deref()
                    .and_then(|d| self.customers.find(CUSTOMER_DOMAIN, d))
            });
        let now = Utc::now();
        match existing {
            Some(at) => {
                let mut row = self.customers.get(at).clone();
                if let Some(n) = &r.name {
                    let n = n.trim();
                    if n != row.name {
                        row.name = n.to_string();
                        self.new_names
                            .customers
                            .push((row.id.clone(), row.name.clone()));
                    }
                }
                if domain.is_some() {
                    row.domain = domain;
                }
                if external_id.is_some() {
                    row.external_id = external_id;
                }
                if let Some(s) = status {
                    row.billing_status = s;
                }
                if let Some(m) = r.mrr_cents {
                    row.mrr_cents = m;
                }
                if let Some(t) = &r.traits {
                    row.traits = Value::Object(t.clone());
                }
                if r.last_activity_at.is_some() {
                    row.last_activity_at = r.last_activity_at;
                }
                if let Some(c) = r.created_at {
                    row.created_at = c;
                }
                row.updated_at = now;
                self.customers.update(at, row);
            }
            None => {
                // A customer without a name is named after its externalId (else its domain).
                let name = clean(&r.name)
                    .or_else(|| external_id.clone())
                    .or_else(|| domain.clone())
                    .unwrap_or_default();
                let created_at = r.created_at.unwrap_or(now);
                let id = new_id();
                self.new_names.customers.push((id.clone(), name.clone()));
                self.customers.insert(customer::Model {
                    id,
                    organization_id: self.org.clone(),
                    name,
                    domain,
                    external_id,
                    billing_status: status.unwrap_or(BillingStatus::None),
                    mrr_cents: r.mrr_cents.unwrap_or(0),
                    traits: Value::Object(r.traits.clone().unwrap_or_default()),
                    last_activity_at: r.last_activity_at,
                    events_counted: 0,
                    created_at,
                    updated_at: created_at.max(now),
                });
            }
        }
        Ok(())
    }

    fn user(&mut self, r: &UserRecord) -> Result<(), String> {
        let email = clean(&r.email);
        let external_id = clean(&r.external_id);
        if email.is_none() && external_id.is_none() {
            return Err("a user needs an `email` or an `externalId`".into());
        }
        if let Some(e) = &email {
            if !e.contains('@') {
                return Err(format!("email: `{e}` is not an email address"));
            }
        }
        let email = email.as_deref().map(normalize_email);
        let stage = match &r.stage {
            Some(s) => Some(one_of("stage", s.trim(), &STAGES)?),
            None => None,
        };
        let customer_id = match clean(&r.customer) {
            Some(reference) => Some(self.referenced_customer("customer", &reference)?),
            None => None,
        };
        let existing = external_id
            .as_deref()
            .and_then(|e| self.users.find(USER_EXTERNAL_ID, e))
            .or_else(|| {
                email
                    .as_deref()
                    .and_then(|e| self.users.find(USER_EMAIL, e))
            });
        let now = Utc::now();
        match existing {
            Some(at) => {
                let mut row = self.users.get(at).clone();
                if customer_id.is_some() {
                    row.customer_id = customer_id;
                }
                if email.is_some() {
                    row.email = email;
                }
                if external_id.is_some() {
                    row.external_id = external_id;
                }
                if let Some(n) = clean(&r.name) {
                    if row.name.as_deref() != Some(n.as_str()) {
                        self.new_names.users.push((row.id.clone(), n.clone()));
                        row.name = Some(n);
                    }
                }
                if let Some(s) = stage {
                    row.stage = s;
                }
                if let Some(t) = &r.traits {
                    row.traits = Value::Object(t.clone());
                }
                if r.last_activity_at.is_some() {
                    row.last_activity_at = r.last_activity_at;
                }
                if let Some(c) = r.created_at {
                    row.created_at = c;
                }
                row.updated_at = now;
                self.users.update(at, row);
            }
            None => {
                let created_at = r.created_at.unwrap_or(now);
                let id = new_id();
                let name = clean(&r.name);
                if let Some(n) = &name {
                    self.new_names.users.push((id.clone(), n.clone()));
                }
                self.users.insert(user::Model {
                    id,
                    organization_id: self.org.clone(),
                    customer_id,
                    email,
                    external_id,
                    name,
                    stage: stage.unwrap_or_else(|| "discovered".into()),
                    traits: Value::Object(r.traits.clone().unwrap_or_default()),
                    last_activity_at: r.last_activity_at,
                    created_at,
                    updated_at: r.last_activity_at.unwrap_or(created_at),
                });
            }
        }
        Ok(())
    }

    fn workspace_user(&mut self, r: &WorkspaceUserRecord) -> Result<(), String> {
        let name = r.name.trim();
        if name.is_empty() {
            return Err("name: must not be empty".into());
        }
        let email = normalize_email(&r.email);
        if !email.contains('@') {
            return Err(format!("email: `{}` is not an email address", r.email));
        }
        let role = one_of("role", r.role.trim(), &ROLES)?;
        match self.workspace_users.find(0, &email) {
            Some(at) => {
                let mut row = self.workspace_users.get(at).clone();
                row.name = name.to_string();
                row.role = role;
                if let Some(c) = r.created_at {
                    row.created_at = c;
                }
                self.workspace_users.update(at, row);
            }
            None => {
                self.workspace_users.insert(workspace_user::Model {
                    id: new_id(),
                    organization_id: self.org.clone(),
                    name: name.to_string(),
                    email,
                    role,
                    created_at: r.created_at.unwrap_or_else(Utc::now),
                });
            }
        }
        Ok(())
    }

    /// Notes a source or fact write for the search index's change feed.
    fn changed(&mut self, artifact_type: &'static str, artifact_id: &str, at: DateTime<Utc>) {
        self.changes.push(Change {
            artifact_type,
            artifact_id: artifact_id.to_string(),
            at,
        });
    }

    fn source(&mut self, r: &SourceRecord) -> Result<(), String> {
        let source_type = source_type("sourceType", &r.source_type)?;
        let source_id = r.source_id.trim();
        if source_id.is_empty() {
            return Err("sourceId: must not be empty".into());
        }
        if r.title.trim().is_empty() {
            return Err("title: must not be empty".into());
        }
        let customer_id = match clean(&r.customer) {
            Some(reference) => Some(self.referenced_customer("customer", &reference)?),
            None => None,
        };
        let participants = Value::Array(
            r.participants
                .iter()
                .map(|p| Value::String(p.trim().to_string()))
                .collect(),
        );
        let now = Utc::now();
        let created_at = r.created_at.unwrap_or(now);
        match self.sources.find(0, &source_key(source_type, source_id)) {
            Some(at) => {
                let mut row = self.sources.get(at).clone();
                self.changed("source", &row.id, now.max(created_at));
                row.customer_id = customer_id;
                row.title = r.title.trim().to_string();
                row.body = r.body.clone();
                row.occurred_at = r.occurred_at;
                row.permalink = clean(&r.permalink);
                row.participants = participants;
                row.updated_at = now.max(created_at);
                self.sources.update(at, row);
            }
            None => {
                let id = new_id();
                self.changed("source", &id, created_at);
                self.sources.insert(source::Model {
                    id,
                    organization_id: self.org.clone(),
                    source_type: source_type.to_string(),
                    source_id: source_id.to_string(),
                    customer_id,
                    title: r.title.trim().to_string(),
                    body: r.body.clone(),
                    occurred_at: r.occurred_at,
                    permalink: clean(&r.permalink),
                    participants,
                    // Set from the change feed row when the chunk is written.
                    change_seq: 0,
                    created_at,
                    updated_at: created_at,
                });
            }
        }
        Ok(())
    }

    fn fact(&mut self, r: &FactRecord) -> Result<(), String> {
        let text = r.text.trim();
        if text.is_empty() {
            return Err("text: must not be empty".into());
        }
        let status = match r.status.as_deref() {
            Some(s) => status_of::<FactStatus>("status", s.trim())?,
            None => FactStatus::Active,
        };
        let source_type = source_type("sourceType", &r.source_type)?;
        let customer_id = self.referenced_customer("customer", &r.customer)?;
        let source_id = r.source_id.trim();
        let evidence = self
            .sources
            .find(0, &source_key(source_type, source_id))
            .map(|at| self.sources.get(at))
            .ok_or_else(|| {
                format!("sourceId: no {source_type} source `{source_id}` (import the source first)")
            })?;
        let permalink = clean(&r.permalink).or(evidence.permalink.clone());
        let evidence_id = evidence.source_id.clone();
        let evidence_occurred_at = evidence.occurred_at;
        let now = Utc::now();
        let created_at = r.created_at.unwrap_or(now);
        let key = fact_key(&customer_id, source_type, &evidence_id, text);
        match self.facts.find(0, &key) {
            Some(at) => {
                let mut row = self.facts.get(at).clone();
                self.changed("fact", &row.id, now.max(created_at));
                row.status = status;
                row.source_occurred_at = evidence_occurred_at;
                row.source_quote = r.source_quote.clone();
                row.permalink = permalink;
                row.updated_at = now.max(created_at);
                self.facts.update(at, row);
            }
            None => {
                let id = new_id();
                self.changed("fact", &id, created_at);
                self.facts.insert(fact::Model {
                    id,
                    organization_id: self.org.clone(),
                    customer_id,
                    text: text.to_string(),
                    status,
                    source_type: source_type.to_string(),
                    source_id: evidence_id,
                    source_occurred_at: evidence_occurred_at,
                    source_quote: r.source_quote.clone(),
                    permalink,
                    // Set from the change feed row when the chunk is written.
                    change_seq: 0,
                    created_at,
                    updated_at: created_at,
                });
            }
        }
        Ok(())
    }

    /// Writes every row the chunk created or changed, with multi-row upserts, and appends the
    /// change feed rows whose sequence numbers the sources and facts carry.
    async fn write(self, txn: &DatabaseTransaction) -> Result<(), DbErr> {
        upsert::<customer::Entity>(txn, self.customers.into_written()).await?;
        upsert::<user::Entity>(txn, self.users.into_written()).await?;
        index_names(txn, NamesOf::Customers, self.new_names.customers).await?;
        index_names(txn, NamesOf::Users, self.new_names.users).await?;
        upsert::<workspace_user::Entity>(txn, self.workspace_users.into_written()).await?;
        let seqs = append_changes(txn, &self.org, &self.changes).await?;
        let seq_of = |kind: &str, id: &str| {
            seqs.get(&(kind.to_string(), id.to_string()))
                .copied()
                .ok_or_else(|| DbErr::Custom(format!("no change feed row for {kind} {id}")))
        };
        let mut sources = self.sources.into_written();
        for s in &mut sources {
            s.change_seq = seq_of("source", &s.id)?;
        }
        upsert::<source::Entity>(txn, sources).await?;
        let mut facts = self.facts.into_written();
        for f in &mut facts {
            f.change_seq = seq_of("fact", &f.id)?;
        }
        upsert::<fact::Entity>(txn, facts).await?;
        Ok(())
    }
}

/// Inserts new rows and overwrites changed ones (by id), many rows per statement. Triggers on
/// the tables (record counts) fire as for single-row writes.
async fn upsert<E>(txn: &DatabaseTransaction, rows: Vec<E::Model>) -> Result<(), DbErr>
where
    E: EntityTrait,
    E::Model: IntoActiveModel<E::ActiveModel>,
    E::ActiveModel: ActiveModelTrait<Entity = E> + Send,
{
    if rows.is_empty() {
        return Ok(());
    }
    if txn.get_database_backend() == DbBackend::Postgres {
        return upsert_postgres::<E>(txn, rows).await;
    }
    let columns: Vec<E::Column> = E::Column::iter().collect();
    let id = columns
        .iter()
        .copied()
        .find(|c| c.as_str() == "id")
        .ok_or_else(|| DbErr::Custom("an imported table without an id column".into()))?;
    let others: Vec<E::Column> = columns
        .iter()
        .copied()
        .filter(|c| c.as_str() != "id" && !KEPT_BY_INGEST.contains(&c.as_str()))
        .collect();
    let per_statement = (STATEMENT_PARAMETERS / columns.len().max(1)).max(1);
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let batch: Vec<E::ActiveModel> = rows
            .by_ref()
            .take(per_statement)
            .map(|m| m.into_active_model().reset_all())
            .collect();
        E::insert_many(batch)
            .on_conflict(
                OnConflict::column(id)
                    .update_columns(others.iter().copied())
                    .to_owned(),
            )
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

/// Columns an import writes for new rows (their defaults) but leaves as they are in rows it
/// updates: ingest keeps them (a customer's tracked events counted, see
/// `crate::db::customer_event_hours`).
const KEPT_BY_INGEST: &[&str] = &["events_counted"];

/// PostgreSQL: [`upsert`] in one statement per table and chunk, the rows travelling as one
/// JSON array that `json_populate_recordset` turns into rows of the table's own type (so each
/// column is read as its type), instead of a multi-row `VALUES` of thousands of parameters,
/// a new statement to parse and plan for every row count.
async fn upsert_postgres<E>(txn: &DatabaseTransaction, rows: Vec<E::Model>) -> Result<(), DbErr>
where
    E: EntityTrait,
    E::Model: IntoActiveModel<E::ActiveModel>,
    E::ActiveModel: ActiveModelTrait<Entity = E> + Send,
{
    let columns: Vec<E::Column> = E::Column::iter().collect();
    let table = E::default().table_name();
    let quoted: Vec<String> = columns
        .iter()
        .map(|c| format!("\"{}\"", c.as_str()))
        .collect();
    let list = quoted.join(", ");
    let set: Vec<String> = quoted
        .iter()
        .filter(|c| *c != "\"id\"" && !KEPT_BY_INGEST.contains(&c.trim_matches('"')))
        .map(|c| format!("{c} = EXCLUDED.{c}"))
        .collect();
    let sql = format!(
        "INSERT INTO \"{table}\" ({list}) SELECT {list} \
         FROM json_populate_recordset(NULL::\"{table}\", $1::json) \
         ON CONFLICT (\"id\") DO UPDATE SET {}",
        set.join(", ")
    );
    let mut array = Vec::with_capacity(rows.len());
    for row in rows {
        let active = row.into_active_model();
        let mut object = Map::with_capacity(columns.len());
        for column in &columns {
            let value = active.get(*column).into_value();
            object.insert(column.as_str().to_string(), json_of(value)?);
        }
        array.push(Value::Object(object));
    }
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        sql,
        [Value::Array(array).to_string().into()],
    ))
    .await?;
    Ok(())
}

/// A column's value as `json_populate_recordset` reads it back into that column's type.
fn json_of(value: Option<sea_orm::Value>) -> Result<Value, DbErr> {
    use sea_orm::Value as V;
    Ok(match value {
        None => Value::Null,
        Some(V::String(v)) => v.map_or(Value::Null, Value::String),
        Some(V::BigInt(v)) => v.map_or(Value::Null, Value::from),
        Some(V::Int(v)) => v.map_or(Value::Null, Value::from),
        Some(V::Bool(v)) => v.map_or(Value::Null, Value::from),
        Some(V::Double(v)) => v.map_or(Value::Null, Value::from),
        Some(V::Json(v)) => v.map_or(Value::Null, |j| *j),
        // Microseconds, PostgreSQL's precision, cut as a bound `DateTime` is.
        Some(V::ChronoDateTimeUtc(v)) => v.map_or(Value::Null, |t| {
            Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        }),
        Some(other) => {
            return Err(DbErr::Custom(format!(
                "import: no JSON form for the column value {other:?}"
            )))
        }
    })
}

/// Appends the chunk's `change_log` rows and returns the last sequence number given to each
/// (artifact type, id): the `change_seq` its row carries.
async fn append_changes(
    txn: &DatabaseTransaction,
    org: &str,
    changes: &[Change],
) -> Result<HashMap<(String, String), i64>, DbErr> {
    let mut seqs = HashMap::new();
    let mut note = |seq: i64, key: (String, String)| {
        // Sequence numbers follow the rows' order: the largest is the artifact's last write.
        let last = seqs.entry(key).or_insert(seq);
        *last = (*last).max(seq);
    };
    if changes.is_empty() {
        return Ok(seqs);
    }
    if txn.get_database_backend() == DbBackend::Postgres {
        // One statement, the rows as one JSON array (see `upsert_postgres`).
        let rows: Vec<Value> = changes
            .iter()
            .map(|c| {
                serde_json::json!({"t": c.artifact_type, "i": c.artifact_id,
                    "a": c.at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)})
            })
            .collect();
        let statement = Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO change_log (organization_id, artifact_type, artifact_id, created_at) \
             SELECT $1, c.t, c.i, c.a FROM json_to_recordset($2::json) \
             AS c(t text, i text, a timestamptz) \
             RETURNING seq, artifact_type, artifact_id",
            [org.into(), Value::Array(rows).to_string().into()],
        );
        for row in txn.query_all_raw(statement).await? {
            note(
                row.try_get_by_index(0)?,
                (row.try_get_by_index(1)?, row.try_get_by_index(2)?),
            );
        }
        return Ok(seqs);
    }
    for batch in changes.chunks(STATEMENT_PARAMETERS / 4) {
        let rows = batch.iter().map(|c| change::ActiveModel {
            seq: NotSet,
            organization_id: Set(org.to_string()),
            artifact_type: Set(c.artifact_type.to_string()),
            artifact_id: Set(c.artifact_id.clone()),
            created_at: Set(c.at),
        });
        let mut insert = change::Entity::insert_many(rows).into_query();
        insert.returning(Query::returning().columns([
            change::Column::Seq,
            change::Column::ArtifactType,
            change::Column::ArtifactId,
        ]));
        for row in txn.query_all(&insert).await? {
            let seq: i64 = row.try_get("", "seq")?;
            let key = (
                row.try_get::<String>("", "artifact_type")?,
                row.try_get::<String>("", "artifact_id")?,
            );
            note(seq, key);
        }
    }
    Ok(seqs)
}

/// Ids of imported rows are time-ordered UUIDs (version 7): a chunk's new rows then land
/// side by side at the end of the id indexes instead of on random pages, so a chunk dirties
/// (and its commit writes) far fewer pages.
fn new_id() -> String {
    let millis = u64::try_from(Utc::now().timestamp_millis()).unwrap_or(0);
    let random: [u8; 10] = rand::random();
    uuid::Builder::from_unix_timestamp_millis(millis, &random)
        .into_uuid()
        .to_string()
}

/// Trimmed, `None` when empty.
fn clean(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

fn one_of(field: &str, value: &str, allowed: &[&str]) -> Result<String, String> {
    if allowed.contains(&value) {
        Ok(value.to_string())
    } else {
        Err(not_one_of(field, value, allowed))
    }
}

/// The status `value` names (exact, as stored).
fn status_of<S: StatusEnum>(field: &str, value: &str) -> Result<S, String> {
    S::parse(value).ok_or_else(|| not_one_of(field, value, &S::names()))
}

fn not_one_of(field: &str, value: &str, allowed: &[&str]) -> String {
    format!("{field}: `{value}` is not one of {}", allowed.join(", "))
}

fn source_type(field: &str, raw: &str) -> Result<&'static str, String> {
    normalize_source_type(raw).ok_or_else(|| {
        format!(
            "{field}: `{raw}` is not one of CALL, EMAIL, CALENDAR_EVENT, SUPPORT_TICKET, OPPORTUNITY"
        )
    })
}

/// Ids of the organization's customers by externalId, for callers that imported customers
/// and go on to write rows that point at them (the demo's events and billing history).
pub async fn customer_ids_by_external_id<C: ConnectionTrait>(
    db: &C,
    org: &str,
) -> Result<std::collections::BTreeMap<String, String>, DbErr> {
    Ok(customer::Entity::find()
        .filter(customer::Column::OrganizationId.eq(org))
        .all(db)
        .await?
        .into_iter()
        .filter_map(|c| c.external_id.map(|e| (e, c.id)))
        .collect())
}

/// Ids of the organization's users by externalId.
pub async fn user_ids_by_external_id<C: ConnectionTrait>(
    db: &C,
    org: &str,
) -> Result<std::collections::BTreeMap<String, String>, DbErr> {
    Ok(user::Entity::find()
        .filter(user::Column::OrganizationId.eq(org))
        .all(db)
        .await?
        .into_iter()
        .filter_map(|u| u.external_id.map(|e| (e, u.id)))
        .collect())
}

/// `custintel import`: checks that the organization exists, then streams `file` (`-` for
/// standard input) into it, up to `chunks_at_once` chunks at once on PostgreSQL.
pub async fn import_file(
    db: &sea_orm::DatabaseConnection,
    organization_id: &str,
    file: &str,
    chunks_at_once: usize,
) -> anyhow::Result<ImportReport> {
    let exists = entity::organization::Entity::find_by_id(organization_id.to_string())
        .one(db)
        .await?
        .is_some();
    anyhow::ensure!(exists, "no organization `{organization_id}`");
    let imported = if file == "-" {
        import_reader(
            db,
            organization_id,
            std::io::BufReader::new(std::io::stdin()),
            chunks_at_once,
        )
        .await
    } else {
        let reader =
            std::fs::File::open(file).map_err(|e| anyhow::anyhow!("cannot read {file}: {e}"))?;
        import_reader(
            db,
            organization_id,
            std::io::BufReader::new(reader),
            chunks_at_once,
        )
        .await
    };
    match imported {
        Ok(report) => Ok(report),
        Err(ImportError::Read(e)) => Err(anyhow::anyhow!("cannot read {file}: {e}")),
        Err(ImportError::Store(e)) => Err(e.into()),
    }
}
