//! Process crashes: a child `ankusa-crashtest` is killed (kill -9, or a failpoint that
//! aborts it) at named points, and the store it leaves is checked after every restart.

mod commit;
mod publisher;
mod restore;
mod routes;
mod sweep;
