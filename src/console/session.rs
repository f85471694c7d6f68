//! The console's sessions: an API token traded once for a cookie.
//!
//! The browser never holds the token after sign-in: it holds a random session id in an
//! `HttpOnly`, `SameSite=Strict` cookie scoped to `/console`, so a script cannot read it and
//! another site cannot send it. The node keeps only the id's SHA-256 digest, beside the
//! caller the token authenticated and the session's CSRF token, in memory: a restart signs
//! everyone out. Every form that changes something carries the CSRF token, compared in
//! constant time; a POST whose `Origin` names another site is refused before that.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::page::Refusal;
use crate::api::auth::{Caller, RequiredScope};
use crate::api::AppState;

/// The session cookie's name.
pub const COOKIE: &str = "ankusa_console";
/// A session unused this long is over.
const IDLE: Duration = Duration::from_secs(30 * 60);
/// A session is over this long after sign-in, used or not.
const MAX_AGE: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at once; signing in past it ends the least recently used.
const MAX_SESSIONS: usize = 1024;

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// Who signed in: the token's name and scopes.
    pub caller: Caller,
    /// The token every form that changes something must carry.
    pub csrf: String,
    created: Instant,
    seen: Instant,
}

/// The sessions of one node, by the digest of their id.
#[derive(Debug, Default)]
pub struct Sessions {
    open: Mutex<HashMap<[u8; 32], Session>>,
}

impl Sessions {
    /// Open a session for `caller`: the cookie value the browser keeps.
    pub fn open(&self, caller: Caller) -> String {
        let id = random_token();
        let now = Instant::now();
        let session = Session {
            caller,
            csrf: random_token(),
            created: now,
            seen: now,
        };
        let mut open = self.lock();
        open.retain(|_, s| live(s, now));
        if open.len() >= MAX_SESSIONS {
            let oldest = open.iter().min_by_key(|(_, s)| s.seen).map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                open.remove(&oldest);
            }
        }
        open.insert(digest(&id), session);
        id
    }

    /// The live session of cookie value `id`, marked as used now.
    pub fn find(&self, id: &str) -> Option<Session> {
        let now = Instant::now();
        let mut open = self.lock();
        let key = digest(id);
        let session = open.get_mut(&key)?;
        if !live(session, now) {
            open.remove(&key);
            return None;
        }
        session.seen = now;
        Some(session.clone())
    }

    /// End the session of cookie value `id`.
    pub fn close(&self, id: &str) {
        self.lock().remove(&digest(id));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        // A poisoned map still holds valid sessions: a panic elsewhere signs no one out.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn live(s: &Session, now: Instant) -> bool {
    now.duration_since(s.seen) < IDLE && now.duration_since(s.created) < MAX_AGE
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The `Set-Cookie` value that keeps session `id` in the browser.
pub fn set_cookie(id: &str) -> String {
    format!("{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict")
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// The session cookie's value in `headers`, if one was sent.
pub fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(name, value)| (name == COOKIE).then_some(value))
}

/// A signed-in caller holding scope `S`. Without a session the browser is sent to sign in;
/// without the scope it is told which one it lacks.
#[derive(Debug)]
pub struct Signed<S> {
    /// The session.
    pub session: Session,
    scope: PhantomData<S>,
}

impl<S> Signed<S> {
    /// Whether the session's token holds `scope` (what a page shows or hides).
    pub fn has(&self, scope: crate::config::Scope) -> bool {
        self.session.caller.has(scope)
    }

    /// Refuse a form whose CSRF token is not this session's.
    pub fn check_csrf(&self, presented: &str) -> Result<(), Refusal> {
        let ok: bool = presented
            .as_bytes()
            .ct_eq(self.session.csrf.as_bytes())
            .into();
        if ok {
            Ok(())
        } else {
            crate::telemetry::api::console_forged();
            Err(Refusal::Forged)
        }
    }
}

impl<S: RequiredScope> FromRequestParts<AppState> for Signed<S> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let Some(console) = state.console.as_deref() else {
            return Err(crate::api::error::ApiError::NoEndpoint.into_response());
        };
        if !same_origin(&parts.headers) {
            crate::telemetry::api::console_forged();
            return Err(Refusal::Forged.into_response());
        }
        let session = cookie(&parts.headers).and_then(|id| console.sessions.find(id));
        let Some(session) = session else {
            return Err(Redirect::to("/console/login").into_response());
        };
        if !S::admits(&session.caller) {
            return Err(Refusal::Scope(S::SCOPE).into_response());
        }
        Ok(Signed {
            session,
            scope: PhantomData,
        })
    }
}

/// Whether a request came from the console's own pages: no `Origin`, or one whose host is
/// the `Host` it was sent to (browsers send `Origin` on every POST).
pub fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, host)| host);
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; ankusa_console=xyz; b=2"),
        );
        assert_eq!(cookie(&h), Some("xyz"));
        assert_eq!(cookie(&HeaderMap::new()), None);
    }

    #[test]
    fn another_sites_origin_is_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(!same_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(!same_origin(&h));
    }

    #[test]
    fn a_closed_session_is_gone_and_ids_differ() {
        let sessions = Sessions::default();
        let caller = crate::api::auth::Tokens::from_config(&[crate::config::TokenConfig {
            name: "ops".into(),
            sha256: crate::api::auth::digest_hex("t"),
            scopes: vec![crate::config::Scope::AuditRead],
        }])
        .unwrap()
        .authenticate("t")
        .unwrap();
        let a = sessions.open(caller.clone());
        let b = sessions.open(caller);
        assert_ne!(a, b);
        assert_eq!(&*sessions.find(&a).unwrap().caller.name, "ops");
        sessions.close(&a);
        assert!(sessions.find(&a).is_none());
        assert!(sessions.find(&b).is_some());
        assert!(sessions.find("made-up").is_none());
    }
}
