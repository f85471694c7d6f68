//! Bounding the trail.

pub(crate) mod limits;
pub(crate) mod prune;
pub mod retention;
pub(crate) mod usage;
