//! The file sink: structured-mode CloudEvents appended as JSON lines to one local file.
//!
//! It exists so that a node with no broker still shows its lifecycle events (the embedded
//! default config uses it), and as the simplest reference for what "delivered" means: the
//! line is on disk (`sync_data`) before the publisher may move past it.

mod config;
mod sink;
#[cfg(test)]
mod tests;

pub use config::FileConfig;
pub use sink::FileSink;
