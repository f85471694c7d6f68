//! Blocking work (RocksDB reads and compactions, file writes, a thread's join, librdkafka's
//! blocking calls) runs on tokio's blocking pool one way: every call names its work, and a
//! task that panicked becomes one typed error, [`StoreError::Task`], which the API answers
//! 500. `clippy.toml` refuses a bare `tokio::task::spawn_blocking` anywhere else.

use super::StoreError;

/// Run `what`, `f`, on the blocking pool and wait for it.
pub async fn run<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    #[allow(clippy::disallowed_methods)] // The one place it is called.
    let task = tokio::task::spawn_blocking(f);
    task.await.map_err(|e| StoreError::Task {
        what,
        detail: e.to_string(),
    })
}

/// [`run`] for work that fails with a [`StoreError`] of its own.
pub async fn try_run<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    run(what, f).await?
}

/// Start `f` on the blocking pool and do not wait for it (freeing a large value, say, off
/// the runtime's threads).
pub fn detach(f: impl FnOnce() + Send + 'static) {
    #[allow(clippy::disallowed_methods)] // The one place it is called.
    drop(tokio::task::spawn_blocking(f));
}
