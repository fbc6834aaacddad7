//! How much an instance holds of event batches that are not yet answered: the request bodies
//! from the moment a batch is read until its commit (or refusal) is answered. Without a bound,
//! a client fleet that sends faster than the database commits (an open-loop load, a burst after
//! an outage) parks ever more batches in memory, each waiting longer: the instance's memory
//! grows with the overload and every answer comes late. With the bound, a batch that finds no
//! room within [`ROOM_WAIT`] is refused with 503 and `Retry-After`, which SDKs and load
//! balancers retry (nothing of it was stored), and memory stays flat whatever the offered rate.

use std::{sync::Arc, time::Duration};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Request bytes of unanswered batches an instance holds by default (4 MiB): about 170 typical
/// 100-event batches (24 KB each), well above what the full acknowledged rate keeps in flight
/// (at 60,000 events/s and a 0.1 s commit, about 1.5 MiB), and well below what makes the
/// admitted batches wait long: PostgreSQL on two cores commits 4 MiB of batches in about
/// 0.4 s, SQLite in under 0.1 s.
pub const DEFAULT_BYTES: usize = 4 * 1024 * 1024;

/// The longest a batch waits for room before it is refused: enough for the writer's next
/// commit to make room after a short burst, short enough that under sustained overload the
/// excess is answered at once, instead of piling up as connections and bodies held.
pub const ROOM_WAIT: Duration = Duration::from_millis(250);

/// The budget is kept in KiB, so that any configured size fits the semaphore's counts.
const UNIT: usize = 1024;

/// The room for unanswered batches, shared by every request of an instance.
#[derive(Clone)]
pub struct Backlog {
    room: Arc<Semaphore>,
    /// The whole budget, in units.
    units: u32,
}

/// Room held for one batch until it is answered (dropping it gives the room back).
pub struct Room {
    _permit: OwnedSemaphorePermit,
}

impl Backlog {
    /// A backlog of at most `bytes` (at least one unit).
    pub fn new(bytes: usize) -> Self {
        let units = u32::try_from(bytes.div_ceil(UNIT).max(1)).unwrap_or(u32::MAX >> 4);
        Self {
            room: Arc::new(Semaphore::new(units as usize)),
            units,
        }
    }

    /// Room for a body of `bytes`, waiting at most [`ROOM_WAIT`] for it; `None` when there is
    /// none by then. A body larger than the whole budget waits for all of it.
    pub async fn admit(&self, bytes: usize) -> Option<Room> {
        self.admit_within(bytes, ROOM_WAIT).await
    }

    async fn admit_within(&self, bytes: usize, wait: Duration) -> Option<Room> {
        let wanted = u32::try_from(bytes.div_ceil(UNIT).max(1))
            .unwrap_or(u32::MAX)
            .min(self.units);
        let permit = self.room.clone().acquire_many_owned(wanted);
        match tokio::time::timeout(wait, permit).await {
            Ok(Ok(permit)) => Some(Room { _permit: permit }),
            // Timed out, or closed (never: the semaphore is not closed).
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes held now by unanswered batches (to the unit).
    fn held_bytes(backlog: &Backlog) -> usize {
        (backlog.units as usize - backlog.room.available_permits()) * UNIT
    }

    #[tokio::test]
    async fn room_is_refused_when_full_and_given_back_when_answered() {
        let backlog = Backlog::new(10 * UNIT);
        let first = backlog.admit_within(6 * UNIT, Duration::ZERO).await;
        assert!(first.is_some());
        assert_eq!(held_bytes(&backlog), 6 * UNIT);
        // 5 more units do not fit beside the 6 held: refused after the wait.
        let started = tokio::time::Instant::now();
        let wait = Duration::from_millis(50);
        assert!(backlog.admit_within(5 * UNIT, wait).await.is_none());
        assert!(started.elapsed() >= wait);
        // A small body still fits (3 bytes count as one unit).
        let small = backlog.admit_within(3, Duration::ZERO).await;
        assert!(small.is_some());
        assert_eq!(held_bytes(&backlog), 7 * UNIT);
        drop(first);
        drop(small);
        assert_eq!(held_bytes(&backlog), 0);
        // A body larger than the whole budget takes all of it, and only when all is free.
        let whole = backlog.admit_within(100 * UNIT, Duration::ZERO).await;
        assert!(whole.is_some());
        assert!(backlog.admit_within(1, Duration::ZERO).await.is_none());
    }

    #[tokio::test]
    async fn a_waiting_batch_gets_the_room_an_answer_frees() {
        let backlog = Backlog::new(4 * UNIT);
        let held = backlog.admit_within(4 * UNIT, Duration::ZERO).await;
        let waiter = {
            let backlog = backlog.clone();
            tokio::spawn(async move {
                backlog
                    .admit_within(2 * UNIT, Duration::from_secs(5))
                    .await
                    .is_some()
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        assert!(waiter.await.expect("joined"), "the freed room is taken");
    }
}
