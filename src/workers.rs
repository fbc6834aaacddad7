//! The work a serving instance does beside answering requests, started and stopped as one:
//! retries of notification deliveries, agents' schedules, integrations' syncs and connect
//! sessions' expiry, database maintenance (WAL
//! checkpoints, planner statistics, kept counts), and, on a runtime of lower priority, the
//! ingest applier with the automation engine's evaluation, its processor and schedule ticks.
//! Runs, ticks and applied batches are claimed once across instances, so every instance runs
//! all of it.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::{
    background::Background, db::name_search::NamesOf, ingest::applier::Applier, state::AppState,
};

/// How often the retry worker looks for deliveries due again.
const RETRY_TICK: Duration = Duration::from_secs(5);

/// The running background work of one instance.
pub struct Workers {
    tasks: Vec<JoinHandle<()>>,
    _agent_schedules: crate::agents::schedules::ScheduleHandle,
    _integrations: Option<crate::integrations::scheduler::SchedulerHandle>,
    applier: Applier,
    /// Kept last: dropping it stops the tasks spawned on it.
    _background: Background,
}

impl Workers {
    /// Starts everything on the current runtime, except the applier and the engine, which run
    /// on a background runtime of their own (see [`crate::background`]).
    pub async fn start(state: &AppState) -> anyhow::Result<Self> {
        let mut tasks = vec![crate::notify::worker::spawn(
            state.db.clone(),
            state.secrets.clone(),
            RETRY_TICK,
        )];
        let agent_schedules =
            crate::agents::schedules::spawn(crate::agents::AgentRuntime::new(state.clone()));
        // Syncs are claimed with a lease, so several instances never run one twice.
        let integrations = state.integrations.runs_scheduler.then(|| {
            crate::integrations::scheduler::spawn(
                state.db.clone(),
                state.secrets.clone(),
                state.integrations.clone(),
            )
        });
        tasks.extend(crate::db::spawn_wal_checkpointer(
            &state.db,
            crate::db::WalUpkeep::Passive,
        ));
        // The planner's statistics: missing ones at start (a database filled before this
        // version, or by another process), stale ones as tables grow.
        tasks.push(crate::db::statistics::spawn_refresher(state.db.clone()));
        // Which trigrams are common among names, sampled now (in the background) so that the
        // first name lookups need not ask the trigram index for whole needles (PostgreSQL).
        if state.db.get_database_backend() == sea_orm::DbBackend::Postgres {
            for names in [NamesOf::Customers, NamesOf::Users] {
                state.name_trigrams.of(&state.db, names);
            }
        }
        // Kept counts of ended database backends folded into one row per bucket (PostgreSQL).
        tasks.extend(crate::tools::record_counts::spawn_folder(state.db.clone()));
        // Opened here, before any background task: the journal file's shared connections serve
        // the acknowledging writer and must be opened at the normal priority.
        let journal = crate::ingest::journal::Journal::of(&state.db).await;
        let on_file = match &journal {
            Ok(journal) => journal.own_file(),
            Err(e) => {
                tracing::warn!(error = %e, "could not open the ingest journal at start (the writer retries)");
                None
            }
        };
        tasks.extend(
            on_file.and_then(|db| {
                crate::db::spawn_wal_checkpointer(db, crate::db::WalUpkeep::Passive)
            }),
        );
        // Applying effects, evaluating signals and working automation runs give way to
        // requests on a saturated machine: a runtime of their own at a lower priority, and on a
        // SQLite file connections of their own opened there (PostgreSQL does their database
        // work itself).
        let background = Background::start()?;
        let background_state = AppState {
            db: match on_file {
                Some(_) => crate::db::second_sqlite_pool(&state.db),
                None => state.db.clone(),
            },
            ..state.clone()
        };
        let applier = {
            let _on_background = background.handle().enter();
            tasks.extend(crate::engine::spawn(background_state.clone()));
            Applier::spawn(
                background_state.db.clone(),
                crate::engine::evaluate::RulesCache::default(),
            )
        };
        Ok(Self {
            tasks,
            _agent_schedules: agent_schedules,
            _integrations: integrations,
            applier,
            _background: background,
        })
    }

    /// Stops the work; with a deadline, what was acknowledged is applied until then first.
    pub async fn stop(self, deadline: Option<tokio::time::Instant>) {
        for task in &self.tasks {
            task.abort();
        }
        match deadline {
            Some(deadline) => {
                tracing::info!("applying acknowledged events before exit");
                self.applier.drain(deadline).await;
            }
            None => self.applier.abort(),
        }
    }
}
