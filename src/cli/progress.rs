//! A progress line on stderr for long operations (backups, restores), when it is a terminal.
//!
//! RocksDB's backup engine reports no progress through the Rust API, so this shows what is
//! being done and for how long: enough to tell a large copy from a hang. It draws nothing when
//! stderr is not a terminal, so logs and scripts see only the final result.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
const TICK: Duration = Duration::from_millis(100);

/// What the drawing thread shares with the operation.
#[derive(Default)]
struct Shared {
    /// The stage being run, shown after the spinner.
    message: Mutex<String>,
    /// Set to stop the drawing thread.
    done: AtomicBool,
}

/// A spinner with a message and the elapsed time, redrawn every 100 ms on a terminal.
pub struct Progress {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Start showing `message` (nothing is drawn unless stderr is a terminal).
    pub fn start(message: &str) -> Progress {
        let shared = Arc::new(Shared::default());
        shared.set(message);
        let thread = std::io::stderr().is_terminal().then(|| {
            let shared = shared.clone();
            std::thread::spawn(move || draw(&shared))
        });
        Progress { shared, thread }
    }

    /// Show `message` from now on.
    pub fn set(&self, message: &str) {
        self.shared.set(message);
    }

    /// Stop and clear the line.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.done.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn set(&self, message: &str) {
        match self.message.lock() {
            Ok(mut m) => *m = message.to_owned(),
            Err(poisoned) => *poisoned.into_inner() = message.to_owned(),
        }
    }

    fn message(&self) -> String {
        match self.message.lock() {
            Ok(m) => m.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

fn draw(shared: &Shared) {
    let started = Instant::now();
    let mut frame = 0;
    while !shared.done.load(Ordering::Acquire) {
        let elapsed = started.elapsed().as_secs();
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2K{} {} ({}:{:02})",
            FRAMES[frame % FRAMES.len()],
            shared.message(),
            elapsed / 60,
            elapsed % 60
        );
        let _ = err.flush();
        drop(err);
        frame += 1;
        std::thread::sleep(TICK);
    }
}
