//! Failures injected at named points in this process (the `failpoints` feature): a store
//! that cannot be written, a group held in the syncer, a change refused on its way out.

mod cases;
