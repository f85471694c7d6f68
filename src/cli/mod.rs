//! Subcommands of the `ankusa` binary other than `serve`.

pub mod tail;
