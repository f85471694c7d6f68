//! Blocking work of the sinks (a file's append and sync, librdkafka's metadata calls, purges
//! and joins) on tokio's blocking pool, one way: the work is named, and a task that panicked
//! is a [`SinkError::Unhealthy`] saying which. `clippy.toml` refuses a bare
//! `tokio::task::spawn_blocking` anywhere else.

use crate::SinkError;

/// Run `what`, `f`, on the blocking pool and wait for it.
pub(crate) async fn run<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SinkError> {
    #[allow(clippy::disallowed_methods)] // The one place it is called.
    let task = tokio::task::spawn_blocking(f);
    task.await
        .map_err(|e| SinkError::Unhealthy(format!("{what} did not finish: {e}")))
}

/// Start `f` on the blocking pool and do not wait for it.
pub(crate) fn detach(f: impl FnOnce() + Send + 'static) {
    #[allow(clippy::disallowed_methods)] // The one place it is called.
    drop(tokio::task::spawn_blocking(f));
}
