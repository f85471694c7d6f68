//! Subcommands of the `ankusa` binary other than `serve`: `audit tail` and `token`.

pub mod tail;
pub mod token;
