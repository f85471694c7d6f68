//! The lane's reading and sending states: a page is taken from the reader and, if it holds
//! events, handed to the sink as one more attempt under way; a page with none lets the
//! position pass over rows that publish nothing, or sends the lane idle.

use std::time::{Duration, Instant};

use super::{pause, Lane, Step};
use crate::lifecycle::publisher::attempt::Attempt;
use crate::lifecycle::publisher::reader::Page;
use crate::lifecycle::status;

impl Lane {
    /// Take the next page; the next read goes on in the same reader after a full page.
    pub(super) async fn take_page(&mut self) -> Step {
        let Some(mut reader) = self.reader.take() else {
            return self.next_state();
        };
        let page = match reader.next().await {
            Ok(page) => page,
            Err(e) => return self.read_failed(&e.to_string()).await,
        };
        if page.deliveries.is_empty() {
            return self.nothing_to_send(page);
        }
        self.reader = match page.last {
            Some(_) if page.full => Some(reader),
            last => last.map(|last| self.read(last)),
        };
        Step::Sending(page)
    }

    /// A read failed: with attempts under way, read again once they are confirmed; else
    /// after a pause.
    async fn read_failed(&mut self, error: &str) -> Step {
        self.note_error(&format!("reading the outbox: {error}"));
        if !self.window.is_empty() {
            return self.next_state();
        }
        pause(&self.shutdown, Duration::from_secs(1)).await;
        Step::Resuming
    }

    /// A page with no event: wait for the window to drain, or pass over rows that publish
    /// nothing (or whose events cannot be built, logged), or idle when caught up.
    fn nothing_to_send(&mut self, page: Page) -> Step {
        if !self.window.is_empty() {
            // Nothing more to submit for now; read again once the window drained.
            return self.next_state();
        }
        match page.last.filter(|last| *last > self.position) {
            Some(last) => {
                self.position = last;
                self.persister.write(last, Vec::new());
                Step::Resuming
            }
            None => Step::Idle,
        }
    }

    /// Hand `page` to the sink: one more attempt under way.
    pub(super) async fn send(&mut self, page: Page) -> Step {
        if self.window.is_empty() {
            let oldest = page.ats.first().copied();
            status::update(&self.status, |s| s.oldest_unconfirmed_at = oldest);
        }
        let started = Instant::now();
        let submitted = self.spec.sink.submit(&page.deliveries).await;
        self.window.push_back(Attempt {
            page,
            outcomes: submitted.outcomes,
            open: submitted.open,
            started,
        });
        self.next_state()
    }
}
