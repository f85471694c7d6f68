//! Backups, restores and incarnations: at the library level (`store`), with the subjects
//! kept outside the store (`routes`), and through the real binary and HTTP (`backup_cli`).

pub(crate) mod backup_cli;
pub(crate) mod routes;
pub(crate) mod store;
