//! The node as an operator runs it: its log lines, and every shipped config file.

mod audit_cli;
mod config_cli;
mod config_files;
mod files;
mod logging;
