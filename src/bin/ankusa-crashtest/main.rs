//! The test programs of the crash tests, one subcommand each: a child process the tests kill
//! (kill -9) or abort at a named failpoint, then check what it left in its store.
//!
//! Built only with the `failpoints` feature, so that named crash points can be armed through
//! `FAILPOINTS`: it is a test program, not part of a release.

mod commit;
mod publish;
mod restore;
mod routes;
mod sweep;

use clap::{Parser, Subcommand};

/// `ankusa-crashtest <subcommand> ...`.
#[derive(Parser)]
#[command(
    name = "ankusa-crashtest",
    about = "Test programs for Ankusa's crash tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The programs.
#[derive(Subcommand)]
enum Command {
    /// Commit changes to local subjects from several tasks, printing `ack <seq> <key>`, until
    /// killed.
    Commit(commit::Args),
    /// Commit changes, then publish them to a file sink, printing `published`.
    Publish(publish::Args),
    /// Make one route change in a Redis route store (or, `loop`, many), printing `done`.
    Routes(routes::Args),
    /// Boot the trail on a (restored) store, printing `booted <last seq>`.
    Restore(restore::Args),
    /// Commit while sweeping expired rows, printing `ack`, `sweep` and `swept`, until killed.
    Sweep(sweep::Args),
}

fn main() {
    match Cli::parse().command {
        Command::Commit(args) => commit::exec(args),
        Command::Publish(args) => publish::exec(args),
        Command::Routes(args) => routes::exec(args),
        Command::Restore(args) => restore::exec(args),
        Command::Sweep(args) => sweep::exec(args),
    }
}
