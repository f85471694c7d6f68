//! A failpoint that holds the thread that reaches it, for tests that must act while some
//! step is under way (a group in the syncer, a backup taken and not yet recorded).

use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// The first thread to reach failpoint `name` waits there until [`PausedAt::release`] (or until
/// this is dropped); later ones pass.
pub struct PausedAt {
    reached: Option<tokio::sync::oneshot::Receiver<()>>,
    _release: mpsc::Sender<()>,
}

impl PausedAt {
    /// Arm failpoint `name`.
    pub fn new(name: &str) -> PausedAt {
        let (reached, heard) = tokio::sync::oneshot::channel();
        let (release, released) = mpsc::channel::<()>();
        let first = Mutex::new(Some((reached, released)));
        fail::cfg_callback(name, move || {
            if let Some((reached, released)) = first.lock().unwrap().take() {
                let _ = reached.send(());
                // Returns when the test's end of the channel is dropped.
                let _ = released.recv();
            }
        })
        .unwrap();
        PausedAt {
            reached: Some(heard),
            _release: release,
        }
    }

    /// Wait until a thread is paused there.
    pub async fn reached(&mut self) {
        let reached = self.reached.take().expect("reached once");
        tokio::time::timeout(Duration::from_secs(30), reached)
            .await
            .expect("the failpoint was reached")
            .unwrap();
    }

    /// Let the paused thread go on.
    pub fn release(self) {}
}
