//! Summaries of a bench's repeated figures (rounds, runs), computed one way in every bench.

// Each bench includes this file and uses some of it.
#![allow(dead_code)]

/// The median of `figures` (the upper one of an even count).
pub fn median(mut figures: Vec<f64>) -> f64 {
    figures.sort_by(f64::total_cmp);
    figures[figures.len() / 2]
}

/// The lowest and the highest of `figures`.
pub fn spread(figures: &[f64]) -> (f64, f64) {
    figures
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), f| {
            (lo.min(*f), hi.max(*f))
        })
}

/// The `p` quantile of `sorted` (ascending), by nearest rank: the value at `len * p`, the
/// last one for 1.0 (`None` when there is none). Every bench's p50 and p99 come from here.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[((sorted.len() as f64 * p) as usize).min(last)])
}
