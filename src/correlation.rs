//! Correlation ids: the id of the request (or operation) the current task works for, written on
//! audit rows and answered in envelopes. The HTTP side sets it from `X-Correlation-Id`.

use std::future::Future;

tokio::task_local! {
    static CORRELATION_ID: String;
}

/// The current correlation id (a fresh UUID outside a scope).
pub fn current() -> String {
    CORRELATION_ID
        .try_with(|id| id.clone())
        .unwrap_or_else(|_| uuid::Uuid::new_v4().to_string())
}

/// Runs `work` with `id` as the current correlation id.
pub async fn scope<F: Future>(id: String, work: F) -> F::Output {
    CORRELATION_ID.scope(id, work).await
}
