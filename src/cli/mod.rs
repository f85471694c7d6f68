//! Subcommands of the `ankusa` binary other than `serve`: `audit tail`, `backup` and `token`.

pub mod backup;
pub mod progress;
pub mod tail;
pub mod token;
