//! Who is asking, from where, under which request id: the `audit::Context` of a change.
//!
//! - The request id comes from `X-Request-Id` when it is 1 to 128 printable ASCII
//!   characters, and is a fresh UUID otherwise; a present but invalid one is a 400. The
//!   [`request_id`] middleware wraps the whole router, so every response, errors included,
//!   echoes the id, and a row's `request_id` always equals the header its caller got back.
//! - The remote IP is the TCP peer's, unless the peer is a configured trusted proxy: then
//!   it is the right-most `X-Forwarded-For` address that is not itself a trusted proxy.
//!   Anyone else's `X-Forwarded-For` is ignored, so a client cannot choose its own address.
//!   Entries may carry a port (`203.0.113.7:41234`, `[2001:db8::1]:443`); one that is no
//!   address (`unknown`, an obfuscated `_hidden`) stops the walk at the peer. The header never
//!   refuses a request: a trusted proxy's habits must not turn every write into a 400.
//! - The actor is the token's name (see `auth`).
//! - The trace is the request span's: a child of the caller's W3C `traceparent` (with its
//!   `tracestate`), or the root of a new trace when there is none. A malformed one is
//!   ignored, as the W3C spec says, never a 400: a caller's tracing must not refuse a
//!   change. The [`trace`] middleware runs inside [`request_id`], so the span names the id.

use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use super::auth::{AdminWrite, Authorized, RequiredScope};
use super::error::ApiError;
use super::AppState;
use crate::audit::{Context, Trace};
use crate::config::{Scope, TrustedProxy};
use crate::telemetry;

/// The request id header, read and echoed.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// The longest request id accepted.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// The request's id, set by [`request_id`] for everything after it.
#[derive(Debug, Clone)]
pub struct RequestId(pub Arc<str>);

/// Middleware: choose the request id, run the request, echo the id, log the request.
pub async fn request_id(mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let (id, refusal) = match presented_id(request.headers()) {
        Ok(Some(id)) => (id, None),
        Ok(None) => (uuid::Uuid::new_v4().to_string(), None),
        Err(e) => (uuid::Uuid::new_v4().to_string(), Some(e)),
    };
    request
        .extensions_mut()
        .insert(RequestId(id.as_str().into()));
    let mut response = match refusal {
        Some(e) => e.into_response(),
        None => next.run(request).await,
    };
    // The id is printable ASCII (checked, or a UUID): it is always a valid header value.
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(X_REQUEST_ID.clone(), value);
    }
    telemetry::api::request_served(&method, &path, response.status(), &id, started.elapsed());
    response
}

/// The trace of the request's span, set by [`trace`] for everything after it.
#[derive(Debug, Clone)]
pub struct RequestTrace(pub Option<Trace>);

/// Middleware: run the request in its span, joined to the caller's trace, and keep the
/// span's trace for the changes it makes.
pub async fn trace(mut request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let id = request.extensions().get::<RequestId>().map(|r| r.0.clone());
    let span = telemetry::trace::request_span(
        request.method(),
        route.as_ref().map(MatchedPath::as_str),
        id.as_deref().unwrap_or_default(),
    );
    // The context holds the request's span until the answer: kept alive to the end.
    let cx = telemetry::trace::join(&span, telemetry::trace::extract(request.headers()));
    let trace = telemetry::trace::trace_of(&cx);
    request.extensions_mut().insert(RequestTrace(trace));
    let response = next.run(request).instrument(span.clone()).await;
    telemetry::trace::request_answered(&span, response.status());
    drop(cx);
    response
}

/// The caller's `X-Request-Id`, if it sent one.
fn presented_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(&X_REQUEST_ID).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let invalid = || {
        ApiError::bad(
            "X-Request-Id",
            format!("must be one header of 1 to {MAX_REQUEST_ID_LEN} printable ASCII characters"),
        )
    };
    if values.next().is_some() {
        return Err(invalid());
    }
    let bytes = value.as_bytes();
    if bytes.is_empty()
        || bytes.len() > MAX_REQUEST_ID_LEN
        || !bytes.iter().all(|b| (0x20..=0x7e).contains(b))
    {
        return Err(invalid());
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// Where a request came from: its client address, request id and trace.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The client's address (see the module doc for proxies).
    pub remote_ip: Option<IpAddr>,
    /// The request id echoed to the client.
    pub request_id: Arc<str>,
    /// The trace of the request's span.
    pub trace: Option<Trace>,
}

impl Origin {
    /// The audit context of a change `actor` makes from here.
    pub fn context(&self, actor: &str) -> Context {
        Context::new(
            actor,
            self.remote_ip.map(|ip| ip.to_string()),
            Some(self.request_id.to_string()),
        )
        .traced(self.trace.clone())
    }
}

impl FromRequestParts<AppState> for Origin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let request_id = parts
            .extensions
            .get::<RequestId>()
            .map(|r| r.0.clone())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string().into());
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip());
        let remote_ip =
            peer.map(|peer| client_ip(peer, &parts.headers, &state.admin.trusted_proxies));
        let trace = parts
            .extensions
            .get::<RequestTrace>()
            .and_then(|t| t.0.clone());
        Ok(Origin {
            remote_ip,
            request_id,
            trace,
        })
    }
}

/// The client behind `peer`: `peer` itself unless it is a trusted proxy (see the module doc).
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[TrustedProxy]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|t| t.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    let mut hops = Vec::new();
    for value in headers.get_all("x-forwarded-for") {
        // Not text: no hop in it can be believed, so none beyond it either.
        let Ok(value) = value.to_str() else {
            hops.push(None);
            continue;
        };
        let entries = value.split(',').map(str::trim).filter(|e| !e.is_empty());
        hops.extend(entries.map(hop_address));
    }
    // Right to left: each trusted proxy appended the address it saw; the first address no
    // trusted proxy owns is the client. An entry that is no address (`unknown`, `_hidden`)
    // hides who is beyond it: the peer is as far as we can see. All trusted: the left-most.
    let mut left_most = None;
    for hop in hops.iter().rev() {
        match hop {
            Some(ip) if is_trusted(*ip) => left_most = Some(*ip),
            Some(ip) => return *ip,
            None => return peer,
        }
    }
    left_most.unwrap_or(peer)
}

/// The address of one `X-Forwarded-For` entry as proxies write it: `203.0.113.7`,
/// `203.0.113.7:41234`, `2001:db8::1`, `[2001:db8::1]` or `[2001:db8::1]:443`, quoted or
/// not (RFC 7239 style); `None` for anything else (`unknown`, an obfuscated `_hidden`).
fn hop_address(entry: &str) -> Option<IpAddr> {
    let entry = entry
        .strip_prefix('"')
        .and_then(|e| e.strip_suffix('"'))
        .unwrap_or(entry);
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = entry.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        let ip = ip.parse::<std::net::Ipv6Addr>().ok()?;
        return match after {
            "" => Some(IpAddr::V6(ip)),
            _ => after
                .strip_prefix(':')
                .filter(|p| is_port(p))
                .map(|_| IpAddr::V6(ip)),
        };
    }
    let (ip, port) = entry.split_once(':')?;
    let ip = ip.parse::<std::net::Ipv4Addr>().ok()?;
    is_port(port).then_some(IpAddr::V4(ip))
}

/// A port number, or an RFC 7239 obfuscated port (`_` and letters, digits, `.`, `_`, `-`).
fn is_port(port: &str) -> bool {
    let obfuscated = port.len() > 1
        && port.starts_with('_')
        && port
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    obfuscated || (port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok())
}

/// The context of a change: a caller with scope `S` (`admin:write` unless a route says
/// otherwise) and where it asked from.
#[derive(Debug, Clone)]
pub struct WriteContext<S = AdminWrite> {
    /// Who asked, and from where.
    pub ctx: Context,
    /// Whether the caller may also read subjects (`admin:read`): a write answers with the
    /// subject's view only then, so that a write-only token cannot read through a change
    /// (a PATCH that changes nothing answers the whole subject).
    pub reads: bool,
    scope: PhantomData<S>,
}

impl<S: RequiredScope> FromRequestParts<AppState> for WriteContext<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Authorized::<S>::from_request_parts(parts, state).await?.0;
        let origin = Origin::from_request_parts(parts, state).await?;
        Ok(WriteContext {
            ctx: origin.context(&caller.name),
            reads: caller.has(Scope::AdminRead),
            scope: PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xff(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted = [TrustedProxy::try_from("10.0.0.0/8".to_owned()).unwrap()];
        let proxy: IpAddr = "10.1.1.1".parse().unwrap();
        let stranger: IpAddr = "198.51.100.1".parse().unwrap();
        let h = xff("203.0.113.9, 10.2.2.2");
        assert_eq!(client_ip(stranger, &h, &trusted), stranger);
        assert_eq!(client_ip(proxy, &h, &trusted).to_string(), "203.0.113.9");
        let spoofed = xff("1.2.3.4, 203.0.113.9");
        assert_eq!(
            client_ip(proxy, &spoofed, &trusted).to_string(),
            "203.0.113.9"
        );
        assert_eq!(client_ip(proxy, &HeaderMap::new(), &trusted), proxy);
        assert_eq!(client_ip(proxy, &xff("nope"), &trusted), proxy);
        assert_eq!(client_ip(stranger, &xff("nope"), &trusted), stranger);
    }

    #[test]
    fn forwarded_for_takes_ports_brackets_and_tokens() {
        let trusted = [TrustedProxy::try_from("10.0.0.0/8".to_owned()).unwrap()];
        let proxy: IpAddr = "10.1.1.1".parse().unwrap();
        let client = |v: &str| client_ip(proxy, &xff(v), &trusted).to_string();
        // An address with a port, bracketed or not.
        assert_eq!(client("203.0.113.7:41234"), "203.0.113.7");
        assert_eq!(client("[2001:db8::1]:443"), "2001:db8::1");
        assert_eq!(client("[2001:db8::1]"), "2001:db8::1");
        assert_eq!(client("2001:db8::1"), "2001:db8::1");
        assert_eq!(client("\"[2001:db8::1]:443\""), "2001:db8::1");
        assert_eq!(client("203.0.113.7:_port"), "203.0.113.7");
        // Trusted hops with ports are walked over like any other.
        assert_eq!(client("203.0.113.7, 10.2.2.2:8080"), "203.0.113.7");
        // An empty entry (a stray comma) is no hop.
        assert_eq!(client("203.0.113.7, "), "203.0.113.7");
        // Not an address: nothing beyond it can be believed, so the peer it came from.
        for token in [
            "unknown",
            "_hidden",
            "203.0.113.7, unknown",
            "203.0.113.7, _hidden, 10.2.2.2",
            "nope",
            "203.0.113.7:99999",
            "[2001:db8::1",
            "2001:db8::1]:443",
        ] {
            assert_eq!(client(token), proxy.to_string(), "{token}");
        }
        // Tokens left of the client do not matter.
        assert_eq!(client("unknown, 203.0.113.7"), "203.0.113.7");
        // A header that is not text at all is no refusal either.
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"203.0.113.7\xff").unwrap(),
        );
        assert_eq!(client_ip(proxy, &h, &trusted), proxy);
    }

    #[test]
    fn request_ids_are_checked() {
        let mut h = HeaderMap::new();
        assert_eq!(presented_id(&h).unwrap(), None);
        h.insert(&X_REQUEST_ID, HeaderValue::from_static("abc-1"));
        assert_eq!(presented_id(&h).unwrap().as_deref(), Some("abc-1"));
        h.insert(
            &X_REQUEST_ID,
            HeaderValue::from_str(&"a".repeat(129)).unwrap(),
        );
        assert!(presented_id(&h).is_err());
        h.insert(&X_REQUEST_ID, HeaderValue::from_bytes(b"a\xffb").unwrap());
        assert!(presented_id(&h).is_err());
        h.insert(&X_REQUEST_ID, HeaderValue::from_bytes(b"a\tb").unwrap());
        assert!(presented_id(&h).is_err());
    }
}
