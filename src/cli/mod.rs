//! Subcommands of the `ankusa` binary other than `serve`: `audit tail`, `backup`, `follow` and
//! `token`.

pub mod backup;
pub mod follow;
pub mod progress;
pub mod tail;
pub mod token;
