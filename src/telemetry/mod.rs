//! Named telemetry events, one file per area. The trail's events are still re-exported at
//! the top while the areas move in.

pub mod api;
mod audit;
pub mod dual;
pub mod lifecycle;
pub mod remote;

pub use audit::*;
