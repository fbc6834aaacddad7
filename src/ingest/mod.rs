//! The Ingest API's domain: public keys, rate limits, allowed origins, request bodies,
//! validation of every event type, `messageId` repeats, the acknowledging group-commit writer
//! (into the journal), and the applier behind it (identity resolution and the effects on the
//! customer model). Knows nothing of HTTP responses.

pub mod after_apply;
pub mod applier;
pub mod apply_txn;
pub mod backlog;
pub mod dedup;
pub mod effects;
pub mod journal;
pub mod model;
pub mod sensitive;
pub mod stats;
pub mod store;
pub mod validate;
pub mod window;
pub mod writer;

use std::{
    collections::HashMap,
    num::NonZeroU32,
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use entity::{organization, tracking_config, tracking_domain};
use governor::{
    clock::{Clock, DefaultClock},
    middleware::StateInformationMiddleware,
    state::{InMemoryState, NotKeyed},
    Quota, RateLimiter,
};
use sea_orm::{ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter};
use tokio::sync::{mpsc, oneshot};

pub use validate::{EventError, MAX_EVENTS_PER_REQUEST};

/// How long a public key's configuration is trusted before it is read again: a key that is
/// disabled, or a domain that is added, takes effect within this time (and the moment the read
/// takes) while the database answers.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(5);
/// How long a request waits for an expired key's configuration to be read again before it
/// goes on with the one read last.
const STALE_WAIT: Duration = Duration::from_millis(250);
/// A read of a key's configuration still under way after this long is no longer waited for:
/// the next request starts another.
const REFRESH_GIVEN_UP: Duration = Duration::from_secs(10);
/// Keys remembered at most; beyond this, expired entries are dropped.
const KEY_CACHE_MAX: usize = 10_000;

type Limiter = RateLimiter<NotKeyed, InMemoryState, DefaultClock, StateInformationMiddleware>;

/// Default Ingest API requests per second per public key (an organization's own limit is set
/// when it is created).
pub const DEFAULT_RATE_LIMIT: i32 = 100;

/// Largest batch accepted, in bytes after decompression (1 MB = 1,048,576 bytes).
pub const MAX_BODY_BYTES: usize = 1_048_576;

/// A request the Ingest API refuses as a whole.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IngestError {
    /// Unknown or inactive public key, or a browser origin that is not an enabled domain.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("request body is larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error("rate limit exceeded: at most {limit} requests per second for this public key")]
    RateLimited { limit: u32, retry_after_secs: u64 },
    /// The database could not be reached: nothing was stored, retry.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

/// What a request is told when the database cannot be reached.
const UNAVAILABLE: &str = "the database is unavailable: the events were not acknowledged; retry";
/// What a request is told when the instance holds as many unanswered batches as it may.
const SATURATED: &str = "the service is receiving events faster than it can store them: \
     the events were not acknowledged; retry after the time in Retry-After";

/// The error a failed database read of the Ingest API answers.
fn db_error(context: &str, err: &DbErr) -> IngestError {
    if crate::db::is_unavailable(err) {
        IngestError::Unavailable(UNAVAILABLE.into())
    } else {
        IngestError::Internal(format!("{context}: {err}"))
    }
}

/// The rate-limit state a response reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateInfo {
    /// Requests per second allowed.
    pub limit: u32,
    /// Requests left in the current second.
    pub remaining: u32,
    /// Seconds until the allowance is full again.
    pub reset_secs: u64,
}

/// An enabled public key's organization, as cached.
pub struct Tracking {
    pub organization_id: String,
    /// Enabled tracking domains (hosts, lower case).
    pub domains: Vec<String>,
    limiter: Arc<Limiter>,
    rate_limit: u32,
}

struct CachedKey {
    fetched: Instant,
    tracking: Option<Arc<Tracking>>,
    /// When the read now under way began, if one is.
    refreshing: Option<Instant>,
}

/// What an accepted request did.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestOutcome {
    /// Events stored (including repeats of a `messageId` already stored).
    pub processed: usize,
    pub errors: Vec<EventError>,
}

/// The Ingest API's state: one per running application.
#[derive(Clone)]
pub struct Ingest {
    inner: Arc<Inner>,
}

struct Inner {
    db: DatabaseConnection,
    /// The `messageId` de-duplication window.
    window: Duration,
    writer: OnceLock<mpsc::Sender<writer::Job>>,
    /// Set by the writer once its `messageId` window is loaded: until then batches wait in its
    /// queue, and the instance does not call itself ready.
    window_loading: Arc<writer::WindowLoading>,
    keys: Mutex<HashMap<String, CachedKey>>,
    /// Requests with keys that name no enabled configuration share one default allowance.
    unknown_keys: Limiter,
    /// Room for the bodies of batches not yet answered.
    backlog: backlog::Backlog,
}

fn limiter(per_second: u32) -> Limiter {
    let rate = NonZeroU32::new(per_second.max(1)).unwrap_or(NonZeroU32::MIN);
    RateLimiter::direct(Quota::per_second(rate)).with_middleware::<StateInformationMiddleware>()
}

fn rate_check(limiter: &Limiter, limit: u32) -> Result<RateInfo, IngestError> {
    match limiter.check() {
        Ok(snapshot) => {
            let remaining = snapshot.remaining_burst_capacity();
            let used = limit.saturating_sub(remaining);
            Ok(RateInfo {
                limit,
                remaining,
                // GCRA refills one request every 1/limit s: full again within a second.
                reset_secs: u64::from(used > 0),
            })
        }
        Err(not_until) => {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            Err(IngestError::RateLimited {
                limit,
                retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
            })
        }
    }
}

impl Ingest {
    /// The Ingest API over `db`, dropping `messageId` repeats within `window` and holding at
    /// most `backlog_bytes` of unanswered batches ([`backlog`]). The applier that applies the
    /// effects runs beside it ([`applier::Applier`]).
    pub fn new(db: DatabaseConnection, window: Duration, backlog_bytes: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                db,
                window,
                writer: OnceLock::new(),
                window_loading: Default::default(),
                keys: Mutex::new(HashMap::new()),
                unknown_keys: limiter(DEFAULT_RATE_LIMIT as u32),
                backlog: backlog::Backlog::new(backlog_bytes),
            }),
        }
    }

    /// Starts the writer, which loads the `messageId` window, if it has not started yet. The
    /// server calls it at start, so the window is loading before the first batch comes.
    pub fn start(&self) {
        self.writer();
    }

    /// Whether batches are taken at once: the writer has loaded its `messageId` window. Before
    /// that they wait in its queue (a start on a long window takes seconds), so readiness
    /// waits for it too.
    pub fn window_loaded(&self) -> bool {
        self.inner.window_loading.is_loaded()
    }

    /// Why the last try to load the `messageId` window failed, while it is not loaded (the
    /// writer keeps trying): a window directory that cannot be written, a database that does not
    /// answer.
    pub fn window_failure(&self) -> Option<String> {
        self.inner.window_loading.failure()
    }

    fn writer(&self) -> &mpsc::Sender<writer::Job> {
        self.inner.writer.get_or_init(|| {
            writer::spawn(
                self.inner.db.clone(),
                self.inner.window,
                self.inner.window_loading.clone(),
            )
        })
    }

    /// The enabled configuration of a public key, from the cache when fresh.
    ///
    /// An expired entry is read again, and the request waits for that read at most
    /// [`STALE_WAIT`]: past it, or when the read fails (the database is unreachable), the
    /// configuration read last answers, so that a browser keeps its CORS headers (and can read
    /// a 503's `Retry-After`) through an outage. Only one read per key is under way at a time;
    /// requests meanwhile use the configuration read last. A key not read before, or read and
    /// found unknown, waits for the database.
    pub async fn lookup(&self, public_key: &str) -> Result<Option<Arc<Tracking>>, IngestError> {
        if !public_key.starts_with("pk_") {
            return Ok(None);
        }
        let stale = {
            let mut keys = self.inner.keys.lock().map_err(|_| poisoned())?;
            match keys.get_mut(public_key) {
                Some(c) if c.fetched.elapsed() < KEY_CACHE_TTL => return Ok(c.tracking.clone()),
                Some(c) if c.refreshing.is_some_and(|t| t.elapsed() < REFRESH_GIVEN_UP) => {
                    return Ok(c.tracking.clone())
                }
                // A key known to be unknown is not served stale: the database decides.
                Some(c) => c
                    .tracking
                    .clone()
                    .inspect(|_| c.refreshing = Some(Instant::now())),
                None => None,
            }
        };
        let Some(stale) = stale else {
            return self.refresh(public_key).await;
        };
        let this = self.clone();
        let key = public_key.to_string();
        let read = tokio::spawn(async move { this.refresh(&key).await });
        match tokio::time::timeout(STALE_WAIT, read).await {
            Ok(Ok(Ok(tracking))) => Ok(tracking),
            Ok(Ok(Err(e))) => {
                tracing::warn!(error = %e, "tracking configuration not read again; using the last one read");
                Ok(Some(stale))
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "reading the tracking configuration failed");
                Ok(Some(stale))
            }
            Err(_) => Ok(Some(stale)),
        }
    }

    /// Reads a key's configuration from the database and caches it.
    async fn refresh(&self, public_key: &str) -> Result<Option<Arc<Tracking>>, IngestError> {
        let loaded = match load_tracking(&self.inner.db, public_key).await {
            Ok(loaded) => loaded,
            Err(e) => {
                let mut keys = self.inner.keys.lock().map_err(|_| poisoned())?;
                if let Some(c) = keys.get_mut(public_key) {
                    c.refreshing = None;
                }
                return Err(db_error("could not read the tracking configuration", &e));
            }
        };
        let mut keys = self.inner.keys.lock().map_err(|_| poisoned())?;
        let previous = keys.get(public_key).and_then(|c| c.tracking.clone());
        let tracking = loaded.map(|(organization_id, domains, rate_limit)| {
            // Keep the allowance already used when the limit did not change.
            let limiter = match &previous {
                Some(p) if p.rate_limit == rate_limit => p.limiter.clone(),
                _ => Arc::new(limiter(rate_limit)),
            };
            Arc::new(Tracking {
                organization_id,
                domains,
                limiter,
                rate_limit,
            })
        });
        if keys.len() >= KEY_CACHE_MAX {
            keys.retain(|_, c| c.fetched.elapsed() < KEY_CACHE_TTL);
        }
        keys.insert(
            public_key.to_string(),
            CachedKey {
                fetched: Instant::now(),
                tracking: tracking.clone(),
                refreshing: None,
            },
        );
        Ok(tracking)
    }

    /// Counts a request against the key's allowance (or the shared one of unknown keys).
    pub fn check_rate(&self, tracking: Option<&Tracking>) -> Result<RateInfo, IngestError> {
        match tracking {
            Some(t) => rate_check(&t.limiter, t.rate_limit),
            None => rate_check(&self.inner.unknown_keys, DEFAULT_RATE_LIMIT as u32),
        }
    }

    /// Validates a body and journals its valid events (repeats dropped); answers once they are
    /// committed. Their effects follow behind, applied by the applier.
    pub async fn accept(
        &self,
        tracking: &Tracking,
        body: &[u8],
        received_at: DateTime<Utc>,
    ) -> Result<IngestOutcome, IngestError> {
        // Room is taken before the body is parsed, so a refused batch costs no parsing and the
        // parsed batches held stay within the budget too. It is given back once answered.
        let Some(_room) = self.inner.backlog.admit(body.len()).await else {
            stats::stats()
                .saturated_batches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(IngestError::Unavailable(SATURATED.into()));
        };
        let (batch, errors) =
            validate::validate_batch(&tracking.organization_id, body, received_at)
                .map_err(|r| IngestError::BadRequest(r.0))?;
        stats::stats()
            .refused
            .fetch_add(errors.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let processed = if batch.events.is_empty() {
            0
        } else {
            let (reply, answer) = oneshot::channel();
            let writer = self.writer();
            // Encoded here, on the request's task, in parallel with other requests: the one
            // writer task then only writes the text.
            let encoded = journal::encode(&batch).ok();
            writer
                .send(writer::Job {
                    batch,
                    encoded,
                    reply,
                })
                .await
                .map_err(|_| IngestError::Internal("the event writer has stopped".into()))?;
            answer
                .await
                .map_err(|_| IngestError::Internal("the event writer has stopped".into()))?
                .map_err(|e| match e {
                    writer::WriteError::Unavailable(_) => {
                        IngestError::Unavailable(UNAVAILABLE.into())
                    }
                    // The database answers: say what held the batch up, not that it is down.
                    writer::WriteError::Busy(reason) => IngestError::Unavailable(format!(
                        "{reason}: the events were not acknowledged; retry"
                    )),
                    writer::WriteError::Failed(e) => {
                        tracing::error!(error = %e, "storing events failed");
                        IngestError::Internal("the events could not be stored; retry later".into())
                    }
                })?
        };
        Ok(IngestOutcome { processed, errors })
    }
}

fn poisoned() -> IngestError {
    IngestError::Internal("internal state unavailable".into())
}

/// Whether a browser `Origin` may send events: its host must be an enabled tracking domain
/// (any scheme and port).
pub fn origin_allowed(tracking: &Tracking, origin: &str) -> bool {
    let Ok(url) = url::Url::parse(origin.trim()) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    tracking.domains.contains(&host)
}

async fn load_tracking(
    db: &DatabaseConnection,
    public_key: &str,
) -> Result<Option<(String, Vec<String>, u32)>, DbErr> {
    let Some(config) = tracking_config::Entity::find()
        .filter(tracking_config::Column::PublicKey.eq(public_key))
        .filter(tracking_config::Column::Active.eq(true))
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let Some(org) = organization::Entity::find_by_id(config.organization_id.clone())
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let domains = tracking_domain::Entity::find()
        .filter(tracking_domain::Column::OrganizationId.eq(org.id.as_str()))
        .filter(tracking_domain::Column::Enabled.eq(true))
        .all(db)
        .await?
        .into_iter()
        .map(|d| d.domain.to_ascii_lowercase())
        .collect();
    let rate = u32::try_from(org.ingest_rate_limit.max(1)).unwrap_or(1);
    Ok(Some((org.id, domains, rate)))
}
