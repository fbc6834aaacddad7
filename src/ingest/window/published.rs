//! A PostgreSQL database's `messageId` window runs, kept in the database so that an instance
//! started without runs of its own (a new container, a lost volume) copies them instead of
//! reading the whole window back from the stored events (minutes at a hundred million
//! messages, against seconds for the copy).
//!
//! Every instance keeps the whole window, so one copy is enough: one instance at a time (the
//! holder of a lease renewed on the server's clock) publishes its runs, in seal order, into
//! `ingest_window_runs`, in parts of [`PART_BYTES`]. What it has published is always an
//! unbroken chain of its seals: a run covering seals already published replaces them in the
//! transaction that stores it, and a run is published only once every seal before it is.
//! An instance that copies the chain therefore holds every key its publisher had sealed, and
//! replays from the events only what came after the newest copied run, as a restarted instance
//! does after its own runs.
//!
//! What is published: each seal as it is written (each key once), and the merged run of each
//! part of the window that is over (each key once more), which then replaces that part's
//! seals. A merge within the current part is published only when it covers a seal the
//! database lacks: merges there repeat as the part grows, and storing each would write the
//! part over and over. Runs leave the database with the window.

use std::{
    io,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use chrono::Utc;
use futures::StreamExt;
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, TransactionTrait,
    Value as DbValue,
};

use super::{
    runs::{self, KeyRun, PendingRun},
    LocalWindow, RunsRead,
};

/// The file in a window's directory that names it as a publisher.
pub const PUBLISHER_FILE: &str = "publisher";
/// The most bytes of a run one row holds: each connection that carries a part keeps a buffer
/// that large.
const PART_BYTES: u64 = 1 << 20;
/// How often the publisher renews its lease and publishes what is new.
const EVERY: Duration = Duration::from_secs(2);
/// How long a lease not renewed lasts before another instance takes it.
const LEASE: Duration = Duration::from_secs(30);

/// This window directory's name as a publisher, made once and kept in the directory: a
/// restarted instance publishes under the same name and continues where it stopped.
pub fn publisher_name(dir: &Path) -> io::Result<String> {
    let path = dir.join(PUBLISHER_FILE);
    match std::fs::read_to_string(&path) {
        Ok(name) if !name.trim().is_empty() => Ok(name.trim().to_string()),
        _ => {
            let name = uuid::Uuid::new_v4().to_string();
            std::fs::write(&path, &name)?;
            Ok(name)
        }
    }
}

/// The window's expiry as the database's columns hold seconds.
fn expired_second(window: Duration) -> i64 {
    i64::from(super::expired_second(window))
}

/// A run as the database lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PublishedRun {
    first_seal: i64,
    last_seal: i64,
    parts: i64,
}

/// The newest unbroken chain of `runs` (any order), oldest first: from the run with the
/// newest seal back while each run ends where the next begins. A run inside one already taken
/// is left out.
fn newest_chain(mut runs: Vec<PublishedRun>) -> Vec<PublishedRun> {
    runs.sort_by_key(|r| (std::cmp::Reverse(r.last_seal), r.first_seal));
    let mut chain: Vec<PublishedRun> = Vec::new();
    for run in runs {
        match chain.last() {
            None => chain.push(run),
            Some(newer) if run.last_seal >= newer.first_seal => {}
            Some(newer) if run.last_seal + 1 == newer.first_seal => chain.push(run),
            Some(_) => break,
        }
    }
    chain.reverse();
    chain
}

/// Makes `dir` an empty window of the database `identity`: what it held was another
/// database's, or no runs at all. A new publisher name is made with the next window opened
/// there (the copied runs carry their publisher's seal numbers, not the old name's).
fn prepare(dir: &Path, identity: &str) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::remove_file(entry.path())?;
        }
    }
    std::fs::write(dir.join("database"), identity)?;
    Ok(())
}

fn io_error(e: io::Error) -> DbErr {
    DbErr::Custom(format!("copying the messageId window's runs: {e}"))
}

/// Copies the published runs into `dir` when it holds no runs of this database (`identity`);
/// answers the runs copied, each read (checked whole, its fingerprints made) on a thread of its
/// own while the next is fetched, or `None` when nothing was copied. A run that leaves the
/// database while it is copied (a merged run replaced it) is looked for again in the new chain;
/// whatever could not be copied, the window reads from the stored events, as without runs.
pub async fn copy_into(
    db: &DatabaseConnection,
    dir: &Path,
    identity: &str,
    window: Duration,
) -> Result<Option<RunsRead>, DbErr> {
    if super::holds_runs(dir, identity) {
        return Ok(None);
    }
    let expired = expired_second(window);
    let publisher = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT publisher FROM ingest_window_runs WHERE newest_second > $1 \
             GROUP BY publisher ORDER BY max(sealed_at_second) DESC, publisher LIMIT 1",
            [expired.into()],
        ))
        .await?
        .map(|row| row.try_get_by_index::<String>(0))
        .transpose()?;
    let Some(publisher) = publisher else {
        return Ok(None);
    };
    prepare(dir, identity).map_err(io_error)?;
    // The fingerprints are sized for the records published (the length of a part is read from
    // its stored header, not its content).
    let bytes: i64 = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT coalesce(sum(octet_length(content)), 0)::bigint FROM ingest_window_runs \
             WHERE publisher = $1 AND newest_second > $2",
            [publisher.clone().into(), expired.into()],
        ))
        .await?
        .map(|row| row.try_get_by_index::<i64>(0))
        .transpose()?
        .unwrap_or(0);
    let records = runs::records_in(u64::try_from(bytes).unwrap_or(0));
    let (copied_tx, copied_rx) = std::sync::mpsc::channel::<PathBuf>();
    let reader = tokio::task::spawn_blocking(move || {
        let mut read = RunsRead::for_records(records, window);
        for path in copied_rx {
            read.add(&path)?;
        }
        Ok::<_, io::Error>(read)
    });
    let copied = copy_chain(db, dir, &publisher, expired, copied_tx).await;
    // The reader is waited for even when the copy failed: the window's opening then reads
    // the directory, which the reader must no longer change.
    let read = reader
        .await
        .map_err(|e| DbErr::Custom(format!("reading the copied runs stopped: {e}")))?
        .map_err(io_error)?;
    copied?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error)?;
    Ok((!read.is_empty()).then_some(read))
}

/// Copies the newest chain of `publisher`'s runs into `dir`, sending each run's file to
/// `copied` once it is whole.
async fn copy_chain(
    db: &DatabaseConnection,
    dir: &Path,
    publisher: &str,
    expired: i64,
    copied: std::sync::mpsc::Sender<PathBuf>,
) -> Result<(), DbErr> {
    let mut done: Vec<(i64, i64)> = Vec::new();
    for _attempt in 0..3 {
        let listed = db
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT first_seal, last_seal, count(*) FROM ingest_window_runs \
                 WHERE publisher = $1 AND newest_second > $2 GROUP BY first_seal, last_seal",
                [publisher.into(), expired.into()],
            ))
            .await?
            .iter()
            .map(|row| {
                Ok(PublishedRun {
                    first_seal: row.try_get_by_index(0)?,
                    last_seal: row.try_get_by_index(1)?,
                    parts: row.try_get_by_index(2)?,
                })
            })
            .collect::<Result<Vec<_>, DbErr>>()?;
        let mut whole = true;
        for run in newest_chain(listed) {
            if done.contains(&(run.first_seal, run.last_seal)) {
                continue;
            }
            match copy_run(db, dir, publisher, run).await? {
                Some(path) => {
                    done.push((run.first_seal, run.last_seal));
                    // The reader stops only on a failure, which its result reports.
                    let _ = copied.send(path);
                }
                None => {
                    whole = false;
                    break;
                }
            }
        }
        if whole {
            break;
        }
    }
    Ok(())
}

/// Copies one run's parts into a run file; answers its path, or `None` if a part is gone.
async fn copy_run(
    db: &DatabaseConnection,
    dir: &Path,
    publisher: &str,
    run: PublishedRun,
) -> Result<Option<PathBuf>, DbErr> {
    let (Ok(first), Ok(last)) = (u64::try_from(run.first_seal), u64::try_from(run.last_seal))
    else {
        return Ok(None);
    };
    let mut copy = PendingRun::create(dir).map_err(io_error)?;
    let fetch = |part: i64| async move {
        db.query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT content FROM ingest_window_runs \
             WHERE publisher = $1 AND first_seal = $2 AND last_seal = $3 AND part = $4",
            [
                publisher.into(),
                run.first_seal.into(),
                run.last_seal.into(),
                i32::try_from(part).unwrap_or(i32::MAX).into(),
            ],
        ))
        .await?
        .map(|row| row.try_get_by_index::<Vec<u8>>(0))
        .transpose()
    };
    // The next part is read while this one is written: the server and this process each
    // keep a core busy.
    let mut parts = futures::stream::iter(0..run.parts).map(fetch).buffered(2);
    while let Some(content) = parts.next().await {
        let Some(content) = content? else {
            return Ok(None);
        };
        copy.append(&content).map_err(io_error)?;
    }
    copy.finish(first, last).map(Some).map_err(io_error)
}

/// Publishes this instance's runs while it holds the lease, every [`EVERY`], until the window
/// is dropped.
pub async fn publish(db: DatabaseConnection, local: Weak<Mutex<LocalWindow>>, publisher: String) {
    let mut failing = false;
    loop {
        tokio::time::sleep(EVERY).await;
        let Some(window) = local.upgrade() else {
            return;
        };
        let (runs, length) = {
            let w = window.lock().unwrap_or_else(|p| p.into_inner());
            let now = Utc::now();
            let runs: Vec<(Arc<KeyRun>, bool)> = w
                .runs()
                .into_iter()
                .map(|r| {
                    let settled = w.part_is_over(&r, now);
                    (r, settled)
                })
                .collect();
            (runs, w.window_length())
        };
        drop(window);
        match publish_once(&db, &publisher, &runs, length).await {
            Ok(_) if failing => {
                failing = false;
                tracing::info!("publishing the messageId window's runs again");
            }
            Ok(_) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "could not publish the messageId window's runs; a new instance reads more of its window from the events meanwhile");
            }
            Err(_) => {}
        }
    }
}

/// Takes or renews the lease; answers whether this instance holds it.
async fn take_lease(db: &DatabaseConnection, publisher: &str) -> Result<bool, DbErr> {
    Ok(db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO ingest_window_publisher (id, publisher, renewed_at) \
             VALUES (1, $1, now()) \
             ON CONFLICT (id) DO UPDATE SET publisher = EXCLUDED.publisher, renewed_at = now() \
             WHERE ingest_window_publisher.publisher = EXCLUDED.publisher \
                OR ingest_window_publisher.renewed_at < now() - make_interval(secs => $2) \
             RETURNING 1",
            [publisher.into(), LEASE.as_secs_f64().into()],
        ))
        .await?
        .is_some())
}

/// One round: if this instance holds the lease, removes runs that left the window and
/// publishes what is new of `runs` (oldest first, each with whether its part of the window is
/// over). Answers whether it held the lease.
pub async fn publish_once(
    db: &DatabaseConnection,
    publisher: &str,
    runs: &[(Arc<KeyRun>, bool)],
    window: Duration,
) -> Result<bool, DbErr> {
    if !take_lease(db, publisher).await? {
        return Ok(false);
    }
    let expired = expired_second(window);
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "DELETE FROM ingest_window_runs WHERE newest_second <= $1",
        [expired.into()],
    ))
    .await?;
    let published: Vec<(i64, i64)> = db
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT DISTINCT first_seal, last_seal FROM ingest_window_runs WHERE publisher = $1",
            [publisher.into()],
        ))
        .await?
        .iter()
        .map(|row| Ok((row.try_get_by_index(0)?, row.try_get_by_index(1)?)))
        .collect::<Result<_, DbErr>>()?;
    let mut upto: Option<i64> = published.iter().map(|(_, last)| *last).max();
    let mut caught_up = true;
    for (run, settled) in runs {
        let (first, last) = (
            i64::try_from(run.header.first_seal).unwrap_or(i64::MAX),
            i64::try_from(run.header.last_seal).unwrap_or(i64::MAX),
        );
        if i64::from(run.header.newest) <= expired || published.contains(&(first, last)) {
            continue;
        }
        if upto.is_some_and(|m| first > m + 1) {
            // A seal before it is not written yet: the chain waits for it.
            caught_up = false;
            break;
        }
        let needed = first == last || *settled || upto.is_none_or(|m| last > m);
        if needed {
            // A long backlog (a lease just taken over) outlasts the lease: renewed as it goes.
            if !take_lease(db, publisher).await? {
                return Ok(false);
            }
            upload(db, publisher, run).await?;
            upto = Some(upto.map_or(last, |m| m.max(last)));
        }
    }
    if caught_up && upto.is_some() {
        // Another publisher's runs (a lease taken over) are not needed once these are whole.
        db.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "DELETE FROM ingest_window_runs WHERE publisher <> $1",
            [publisher.into()],
        ))
        .await?;
    }
    Ok(true)
}

/// Stores one run in parts, replacing the runs of this publisher it covers, in one
/// transaction.
async fn upload(db: &DatabaseConnection, publisher: &str, run: &Arc<KeyRun>) -> Result<(), DbErr> {
    let first = i64::try_from(run.header.first_seal).unwrap_or(i64::MAX);
    let last = i64::try_from(run.header.last_seal).unwrap_or(i64::MAX);
    let txn = db.begin().await?;
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "DELETE FROM ingest_window_runs \
         WHERE publisher = $1 AND first_seal >= $2 AND last_seal <= $3",
        [publisher.into(), first.into(), last.into()],
    ))
    .await?;
    let len = run.file_len();
    let (mut offset, mut part) = (0u64, 0i32);
    while offset < len {
        let n = PART_BYTES.min(len - offset);
        let reading = run.clone();
        let content =
            tokio::task::spawn_blocking(move || reading.read_file_bytes(offset, n as usize))
                .await
                .map_err(|e| DbErr::Custom(format!("reading a messageId window run stopped: {e}")))?
                .map_err(|e| DbErr::Custom(format!("reading a messageId window run: {e}")))?;
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO ingest_window_runs \
             (publisher, first_seal, last_seal, part, newest_second, sealed_at_second, content) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            [
                publisher.into(),
                first.into(),
                last.into(),
                part.into(),
                i64::from(run.header.newest).into(),
                i64::from(run.header.sealed_at).into(),
                DbValue::Bytes(Some(content)),
            ],
        ))
        .await?;
        offset += n;
        part += 1;
    }
    txn.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(first: i64, last: i64) -> PublishedRun {
        PublishedRun {
            first_seal: first,
            last_seal: last,
            parts: 1,
        }
    }

    #[test]
    fn the_chain_is_the_newest_unbroken_one() {
        // A merged run that replaced 1..=4 and the seals after it.
        let chain = newest_chain(vec![run(5, 5), run(1, 4), run(6, 6)]);
        assert_eq!(chain, vec![run(1, 4), run(5, 5), run(6, 6)]);
        // A run inside a taken one is left out; a gap ends the chain.
        let chain = newest_chain(vec![run(2, 2), run(1, 3), run(4, 4), run(7, 8)]);
        assert_eq!(chain, vec![run(7, 8)]);
        let chain = newest_chain(vec![run(3, 3), run(1, 3), run(4, 4)]);
        assert_eq!(chain, vec![run(1, 3), run(4, 4)]);
        assert!(newest_chain(Vec::new()).is_empty());
    }
}
