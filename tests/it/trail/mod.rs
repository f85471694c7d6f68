//! The audit trail at the library level: the commit path, ceilings, retention, and the
//! property that pruning never passes the lifecycle cursor.

mod ceilings;
mod commit;
mod prune_props;
pub(crate) mod retention;
