//! The settings every bench reads from the environment, read one way.

// Each bench includes this file and uses some of it.
#![allow(dead_code)]

/// A setting from the environment (`None` when unset or not a `T`).
pub fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// Whether `name` is one of the parts to run: `ANKUSA_BENCH_ONLY` (comma-separated), all of
/// them when unset.
pub fn part(name: &str) -> bool {
    std::env::var("ANKUSA_BENCH_ONLY")
        .map_or(true, |only| only.split(',').any(|p| p.trim() == name))
}

/// The publisher's attempts in flight: `ANKUSA_BENCH_IN_FLIGHT`, the default config's 4 when
/// unset.
pub fn in_flight() -> usize {
    env("ANKUSA_BENCH_IN_FLIGHT").unwrap_or(4)
}
