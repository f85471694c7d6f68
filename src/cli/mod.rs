//! Subcommands of the `ankusa` binary other than `serve`: `audit tail|key|verify|export`,
//! `backup`, `config`, `follow` and `token`.

pub mod audit;
pub mod audit_export;
pub mod backup;
pub mod config;
pub mod follow;
pub mod progress;
pub mod tail;
pub mod token;
