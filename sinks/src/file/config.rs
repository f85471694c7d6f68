//! The file sink's configuration (`kind = "file"`).

use std::path::PathBuf;

use serde::Deserialize;

use crate::retry::RetryPolicy;
use crate::SinkError;

/// Configuration of a file sink.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The file events are appended to, one JSON line each. Created if missing (its parent
    /// directories too); never truncated. Required, no default.
    pub path: PathBuf,
    /// The publisher's retry schedule for this sink. Default: [`RetryPolicy::default`].
    #[serde(default)]
    pub retry: RetryPolicy,
}

impl FileConfig {
    /// Checks the config; errors name the field.
    pub fn validate(&self) -> Result<(), SinkError> {
        if self.path.as_os_str().is_empty() {
            return Err(SinkError::Config("path must not be empty".into()));
        }
        Ok(())
    }
}
