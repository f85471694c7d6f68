//! The one way a test waits for something that happens on another task or process: poll a
//! check until it holds, within a bound, and fail naming what it waited for.

use std::time::Duration;

/// How often a check is polled.
const POLL: Duration = Duration::from_millis(20);

/// What a check gives: `true`/`Some(value)` when what it waits for has happened.
pub trait Check {
    /// What [`eventually`] returns once the check holds.
    type Value;
    /// The value, if the check holds.
    fn passed(self) -> Option<Self::Value>;
}

impl Check for bool {
    type Value = ();
    fn passed(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Check for Option<T> {
    type Value = T;
    fn passed(self) -> Option<T> {
        self
    }
}

/// Run `check` every 20 ms until it holds and return what it gave; panic with "timed out
/// waiting for `what`" when it still does not hold after `bound` (a bound for a loaded
/// machine: it returns as soon as the check holds).
pub async fn eventually<C: Check>(
    what: &str,
    bound: Duration,
    mut check: impl AsyncFnMut() -> C,
) -> C::Value {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        if let Some(value) = check().await.passed() {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {bound:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}
