//! What the applier does with applied events inside its transaction, after their effects and
//! rows are written. The automation engine evaluates them there (so a run exists exactly when
//! its event does); ingest knows it only by this trait, and whoever starts the applier hands it
//! one.

use sea_orm::DbErr;

use super::{apply_txn::ApplyTxn, store::EventRow};

#[async_trait::async_trait]
pub trait AfterApply: Send {
    /// Copies of the rows it will look at, taken before the rows move into the insert (an
    /// event nothing looks at is not copied).
    async fn select(&mut self, txn: &ApplyTxn, rows: &[EventRow]) -> Result<Vec<EventRow>, DbErr>;

    /// Works on the selected rows in the applier's transaction; answers how many automation
    /// runs that created.
    async fn apply(&mut self, txn: &ApplyTxn, selected: &[EventRow]) -> Result<usize, DbErr>;

    /// After the transaction committed with `runs_created` new runs.
    fn committed(&self, runs_created: usize);
}
