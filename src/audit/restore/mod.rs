//! Restores.

pub(crate) mod first_boot;
pub(crate) mod incarnation;
pub(crate) mod refresh;
