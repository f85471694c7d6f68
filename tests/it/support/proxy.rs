//! A TCP proxy in front of a server, for tests of a write that arrives late: armed, it holds
//! the next client bytes that contain a marker (a Redis script call, say) instead of passing
//! them on, and closes that connection on the client's side, as a client that gave up on it
//! sees it; the server's side stays open, and [`Proxy::release`] sends the withheld bytes on it
//! later, as a connection that was replaced and still delivers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};

/// A proxy on 127.0.0.1, stopped with the test's runtime.
pub struct Proxy {
    /// Its port.
    pub port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    /// The marker the next withheld bytes contain, while armed.
    marker: Mutex<Option<Vec<u8>>>,
    armed: AtomicBool,
    /// Bytes withheld, with the server side they are for.
    withheld: Mutex<Vec<(OwnedWriteHalf, Vec<u8>)>>,
}

impl Proxy {
    /// A proxy to `upstream` (`127.0.0.1:<port>`).
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            marker: Mutex::new(None),
            armed: AtomicBool::new(false),
            withheld: Mutex::new(Vec::new()),
        });
        let accepting = shared.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                tokio::spawn(relay(client, server, accepting.clone()));
            }
        });
        Proxy { port, shared }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Hold the next client bytes that contain `marker`.
    pub fn hold_next(&self, marker: &[u8]) {
        *self.shared.marker.lock().unwrap() = Some(marker.to_vec());
        self.shared.armed.store(true, Ordering::SeqCst);
    }

    /// How many sends are withheld.
    pub fn withheld(&self) -> usize {
        self.shared.withheld.lock().unwrap().len()
    }

    /// Send what is withheld to the server, late.
    pub async fn release(&self) {
        let withheld = std::mem::take(&mut *self.shared.withheld.lock().unwrap());
        for (mut server, bytes) in withheld {
            server.write_all(&bytes).await.unwrap();
            // Kept open a moment, so the server reads it all before the connection goes.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
}

/// Pass bytes both ways until either side closes, or until bytes with the marker are withheld.
async fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from_client.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let marker = shared.marker.lock().unwrap().clone();
        let hit = marker.is_some_and(|m| chunk.windows(m.len()).any(|w| w == m));
        if hit && shared.armed.swap(false, Ordering::SeqCst) {
            shared
                .withheld
                .lock()
                .unwrap()
                .push((to_server, chunk.to_vec()));
            // The client's side closes: its answers never come.
            back.abort();
            return;
        }
        if to_server.write_all(chunk).await.is_err() {
            break;
        }
    }
    back.abort();
}
