//! Group commit: one task takes accepted batches from every concurrent request, writes as
//! many as are waiting in one transaction, commits, and only then answers each request. One
//! fsync-bound commit then serves many requests, and nothing is acknowledged before it is
//! durable.

use sea_orm::{DatabaseConnection, DbErr};
use tokio::sync::{mpsc, oneshot};

use super::{effects, validate::Batch};

/// Batches that may wait for the writer before senders wait too (backpressure).
pub const QUEUE_BATCHES: usize = 1_024;
/// Most events written in one transaction.
pub const MAX_GROUP_EVENTS: usize = 10_000;

/// A batch waiting to be written, and where to send how many of its events are stored.
pub struct Job {
    pub batch: Batch,
    pub reply: oneshot::Sender<Result<usize, DbErr>>,
}

/// Starts the writer task on the current runtime; it ends when every sender is dropped.
pub fn spawn(db: DatabaseConnection) -> mpsc::Sender<Job> {
    let (tx, rx) = mpsc::channel(QUEUE_BATCHES);
    tokio::spawn(run(db, rx));
    tx
}

async fn run(db: DatabaseConnection, mut rx: mpsc::Receiver<Job>) {
    while let Some(first) = rx.recv().await {
        let mut events = first.batch.events.len();
        let mut jobs = vec![first];
        while events < MAX_GROUP_EVENTS {
            match rx.try_recv() {
                Ok(job) => {
                    events += job.batch.events.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let batches: Vec<&Batch> = jobs.iter().map(|j| &j.batch).collect();
        match write_group(&db, &batches).await {
            Ok(counts) => {
                for (job, count) in jobs.into_iter().zip(counts) {
                    let _ = job.reply.send(Ok(count));
                }
            }
            Err(err) if jobs.len() > 1 => {
                // One batch must not fail its neighbours: write each on its own.
                tracing::warn!(error = %err, batches = jobs.len(), "group write failed; retrying batches one by one");
                for job in jobs {
                    let result = write_group(&db, &[&job.batch])
                        .await
                        .map(|counts| counts.into_iter().next().unwrap_or(0));
                    let _ = job.reply.send(result);
                }
            }
            Err(err) => {
                for job in jobs {
                    let _ = job.reply.send(Err(DbErr::Custom(err.to_string())));
                }
            }
        }
    }
}

/// Writes batches and their effects in one transaction.
pub async fn write_group(db: &DatabaseConnection, batches: &[&Batch]) -> Result<Vec<usize>, DbErr> {
    let txn = crate::db::begin_write(db).await?;
    let counts = effects::write_batches(&txn, batches).await?;
    txn.commit().await?;
    Ok(counts)
}
