//! A connection's stream that tells how long its writes have been blocked.
//!
//! hyper bounds the wait for a request's head, and the API bounds a body and a handler, but
//! nothing bounds a response that the client does not read: the write waits on a full
//! socket buffer for ever, and the connection holds its slot. [`Watched`] notes when a write
//! first returned `Pending` and clears it when any byte goes out; the server closes a
//! connection blocked longer than its write timeout, whatever state hyper is in.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// Not blocked.
const FREE: u64 = u64::MAX;

/// Since when a connection's writes have been blocked (in ms from its start), shared by its
/// stream and its watchdog.
#[derive(Debug)]
pub struct WriteClock {
    start: Instant,
    blocked_since: AtomicU64,
}

impl WriteClock {
    fn new() -> Arc<WriteClock> {
        Arc::new(WriteClock {
            start: Instant::now(),
            blocked_since: AtomicU64::new(FREE),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(FREE - 1)
    }

    fn note<T>(&self, polled: &Poll<io::Result<T>>) {
        match polled {
            Poll::Pending => {
                let now = self.now_ms();
                // Only the first Pending of a blocked spell sets the time.
                let _ = self.blocked_since.compare_exchange(
                    FREE,
                    now,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            Poll::Ready(_) => self.blocked_since.store(FREE, Ordering::Relaxed),
        }
    }

    /// How long the writes have been blocked, if they are.
    fn blocked_for(&self) -> Option<Duration> {
        match self.blocked_since.load(Ordering::Relaxed) {
            FREE => None,
            since => Some(Duration::from_millis(self.now_ms().saturating_sub(since))),
        }
    }

    /// Resolves once the writes have been blocked for `limit`.
    pub async fn stalled(&self, limit: Duration) {
        // Checked four times per limit: a stall is seen within 1.25 limits.
        let tick = (limit / 4).max(Duration::from_millis(10));
        loop {
            match self.blocked_for() {
                Some(blocked) if blocked >= limit => return,
                Some(blocked) => tokio::time::sleep((limit - blocked).min(tick)).await,
                None => tokio::time::sleep(tick).await,
            }
        }
    }
}

/// `S`, with its writes timed by a [`WriteClock`].
#[derive(Debug)]
pub struct Watched<S> {
    inner: S,
    clock: Arc<WriteClock>,
}

impl<S> Watched<S> {
    /// Watch `inner`; the clock is for the watchdog.
    pub fn new(inner: S) -> (Watched<S>, Arc<WriteClock>) {
        let clock = WriteClock::new();
        let watched = Watched {
            inner,
            clock: clock.clone(),
        };
        (watched, clock)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.clock.note(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.clock.note(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.clock.note(&polled);
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    #[tokio::test]
    async fn a_write_blocked_past_the_limit_is_seen_and_progress_clears_it() {
        let (near, mut far) = tokio::io::duplex(64);
        let (mut watched, clock) = Watched::new(near);
        assert_eq!(clock.blocked_for(), None);
        // 64 bytes fit; the 65th blocks until the far side reads.
        watched.write_all(&[0; 64]).await.unwrap();
        assert_eq!(clock.blocked_for(), None, "nothing blocked yet");
        let blocked = tokio::spawn(async move {
            watched.write_all(&[1; 64]).await.unwrap();
            watched
        });
        let limit = Duration::from_millis(400);
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), clock.stalled(limit))
            .await
            .expect("blocked past the limit");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(350), "{waited:?}");
        assert!(clock.blocked_for().unwrap() >= limit);
        let mut buf = [0; 128];
        let mut read = 0;
        while read < 128 {
            read += tokio::io::AsyncReadExt::read(&mut far, &mut buf)
                .await
                .unwrap();
        }
        let _ = blocked.await.unwrap();
        assert_eq!(clock.blocked_for(), None, "bytes went out");
    }
}
