//! The audit trail at the library level: the commit path, ceilings, retention (and its guard
//! against a clock that jumps), and the property that pruning never passes the lifecycle
//! cursor.

mod ceilings;
mod clock_jump;
mod commit;
mod index;
mod prune_props;
mod query;
pub(crate) mod retention;
pub(crate) mod tree;
