//! Failures injected at named points in this process (the `failpoints` feature), every case
//! together, by the capability it breaks. A failpoint is process-wide: these rely on nextest
//! running every test in a process of its own. Their set-up helpers are their capability's
//! (`crate::api::lifecycle`, `crate::restore::routes`...), shared with the cases without a
//! failpoint.

mod api;
mod backup;
mod commit;
mod lifecycle;
mod limits;
mod refresh;
mod restore;
mod retention;
mod routes;
