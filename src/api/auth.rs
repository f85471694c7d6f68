//! Bearer tokens and scopes.
//!
//! The node never keeps a token, only its SHA-256 digest: configured as `[[api.tokens]]`, or,
//! on a node with none configured, the first-start admin token's digest in
//! `<data_dir>/admin-token.sha256` (the token itself is printed once, on stdout, when it is
//! made). A presented token is digested and compared with every known digest in constant
//! time, so neither the comparison nor the order of the tokens tells an attacker anything.
//! A refusal (401 without a valid token, 403 without the scope) happens in the extractor,
//! before any handler runs, so it can never write a row.

use std::io::Write;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{FromRequestParts, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::IntoResponse as _;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::context::RequestId;
use super::error::ApiError;
use super::AppState;
use crate::config::{Scope, TokenConfig};
use crate::store::owner_only;
use crate::telemetry;

/// The file, in the data dir, that keeps the first-start admin token's digest.
pub const ADMIN_TOKEN_FILE: &str = "admin-token.sha256";
/// The name (row actor) of the first-start admin token.
pub const ADMIN_TOKEN_NAME: &str = "admin";
/// Longer `Authorization` values are refused without being digested.
const MAX_TOKEN_LEN: usize = 512;

/// Why the tokens could not be set up at start.
#[derive(Debug, thiserror::Error)]
pub enum TokenSetupError {
    /// A configured digest is not 64 hex digits (config validation should have caught it).
    #[error("api.tokens: token `{0}` has a sha256 that is not 64 hex digits")]
    BadDigest(String),
    /// The first-start token's digest file could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The digest file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The first-start token could not be shown (stdout closed or full): nothing was kept,
    /// so the next start makes another instead of locking the operator out.
    #[error(
        "could not print the first-start admin token on stdout ({0}); no digest was kept: \
         start again with stdout open, or configure [[api.tokens]]"
    )]
    Print(#[source] std::io::Error),
    /// The digest file does not hold a digest.
    #[error(
        "{0}: does not hold a 64-hex-digit SHA-256 digest (delete it to make a new admin token)"
    )]
    CorruptFile(PathBuf),
}

/// The hex SHA-256 digest of `token`: what `[[api.tokens]]` keeps.
pub fn digest_hex(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A fresh random token: `ank_` and 32 random bytes, base64url.
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    format!(
        "ank_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// An authenticated caller: the token's name and scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name, the `actor` of the rows its requests write.
    pub name: Arc<str>,
    scopes: Vec<Scope>,
}

impl Caller {
    /// Whether the caller holds `scope`.
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }
}

/// The tokens the node accepts, by digest.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    known: Vec<([u8; 32], Caller)>,
}

impl Tokens {
    /// The configured tokens.
    pub fn from_config(tokens: &[TokenConfig]) -> Result<Tokens, TokenSetupError> {
        let mut known = Vec::with_capacity(tokens.len());
        for t in tokens {
            let digest = parse_digest(&t.sha256)
                .ok_or_else(|| TokenSetupError::BadDigest(t.name.clone()))?;
            let caller = Caller {
                name: t.name.as_str().into(),
                scopes: t.scopes.clone(),
            };
            known.push((digest, caller));
        }
        Ok(Tokens { known })
    }

    /// The configured tokens; with none configured, the first-start admin token: read from
    /// `data_dir`, or made, printed once on `out` and, once that worked, written there
    /// (digest only, readable by the owner only).
    pub fn load_or_create(
        configured: &[TokenConfig],
        data_dir: &Path,
        out: &mut dyn Write,
    ) -> Result<Tokens, TokenSetupError> {
        if !configured.is_empty() {
            return Tokens::from_config(configured);
        }
        let path = data_dir.join(ADMIN_TOKEN_FILE);
        let file_error = |source| TokenSetupError::File {
            path: path.clone(),
            source,
        };
        let digest = match std::fs::read_to_string(&path) {
            Ok(text) => {
                let digest = parse_digest(text.trim())
                    .ok_or_else(|| TokenSetupError::CorruptFile(path.clone()))?;
                telemetry::api::admin_token_loaded(&path);
                digest
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let token = new_token();
                // Shown first, kept after: a digest kept for a token no one saw would lock
                // the operator out for good.
                announce(out, &token, &path).map_err(TokenSetupError::Print)?;
                write_digest_file(&path, &digest_hex(&token)).map_err(file_error)?;
                telemetry::api::admin_token_created(&path);
                Sha256::digest(token.as_bytes()).into()
            }
            Err(e) => return Err(file_error(e)),
        };
        let caller = Caller {
            name: ADMIN_TOKEN_NAME.into(),
            scopes: Scope::ALL.to_vec(),
        };
        Ok(Tokens {
            known: vec![(digest, caller)],
        })
    }

    /// The caller `token` belongs to, if any. Compares against every digest in constant
    /// time, whichever matches.
    pub fn authenticate(&self, token: &str) -> Option<Caller> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (digest, caller) in &self.known {
            if bool::from(digest.ct_eq(&presented)) {
                found = Some(caller);
            }
        }
        found.cloned()
    }
}

fn parse_digest(hex_digest: &str) -> Option<[u8; 32]> {
    hex::decode(hex_digest).ok()?.try_into().ok()
}

/// Write the digest through a temporary file and a rename, readable by the owner only, so a
/// crash never leaves a half-written file that would lock the operator out.
fn write_digest_file(path: &Path, digest: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("sha256.tmp");
    let mut file = owner_only::create_file(&tmp)?;
    writeln!(file, "{digest}")?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

fn announce(out: &mut dyn Write, token: &str, path: &Path) -> std::io::Result<()> {
    writeln!(
        out,
        "ankusa: no api.tokens configured: made the admin token `{ADMIN_TOKEN_NAME}` \
         (admin:read admin:write audit:read events:read).\n\
         ankusa: it is shown only this once; the node keeps only its SHA-256 digest, in {}.\n\
         ankusa: (delete that file and restart to make a new one)\n\
         ANKUSA_TOKEN={token}",
        path.display()
    )?;
    out.flush()
}

/// A scope a route requires, as a type.
pub trait RequiredScope: Send + Sync + 'static {
    /// The scope (a caller without it is told it lacks this one).
    const SCOPE: Scope;

    /// Whether `caller` may call the route: it holds [`Self::SCOPE`].
    fn admits(caller: &Caller) -> bool {
        caller.has(Self::SCOPE)
    }
}

/// `admin:read`.
#[derive(Debug)]
pub struct AdminRead;
/// `admin:write`.
#[derive(Debug)]
pub struct AdminWrite;
/// `audit:read`.
#[derive(Debug)]
pub struct AuditRead;

impl RequiredScope for AdminRead {
    const SCOPE: Scope = Scope::AdminRead;
}
impl RequiredScope for AdminWrite {
    const SCOPE: Scope = Scope::AdminWrite;
}
impl RequiredScope for AuditRead {
    const SCOPE: Scope = Scope::AuditRead;
}

/// `events:read`.
#[derive(Debug)]
pub struct EventsRead;

impl RequiredScope for EventsRead {
    const SCOPE: Scope = Scope::EventsRead;
}

/// `admin:write` or `events:read`: a snapshot, which an operator takes and a consumer asks
/// for to relist.
#[derive(Debug)]
pub struct Relist;

impl RequiredScope for Relist {
    const SCOPE: Scope = Scope::EventsRead;

    fn admits(caller: &Caller) -> bool {
        caller.has(Scope::AdminWrite) || caller.has(Scope::EventsRead)
    }
}

/// An extractor that admits only a caller with a valid token holding scope `S`.
#[derive(Debug)]
pub struct Authorized<S>(pub Caller, PhantomData<S>);

impl<S: RequiredScope> FromRequestParts<AppState> for Authorized<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let request_id = parts.extensions.get::<RequestId>().map(|r| r.0.clone());
        let request_id = request_id.as_deref();
        let token = match bearer(parts) {
            Ok(token) => token,
            Err(reason) => {
                telemetry::api::request_unauthenticated(reason, request_id);
                return Err(ApiError::Unauthorized);
            }
        };
        let Some(caller) = state.admin.tokens.authenticate(token) else {
            telemetry::api::request_unauthenticated("unknown token", request_id);
            return Err(ApiError::Unauthorized);
        };
        if !S::admits(&caller) {
            telemetry::api::request_forbidden(&caller.name, S::SCOPE, request_id);
            return Err(ApiError::Forbidden(S::SCOPE));
        }
        Ok(Authorized(caller, PhantomData))
    }
}

/// The paths a reserved connection slot serves without a token: the probes.
const PROBES: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Middleware: on a reserved connection slot (`server::Reserved`), only probes and requests
/// with a token that authenticates are served; any other gets 503 `busy` at once, so that
/// its slot frees.
pub async fn reserved_slots(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if request
        .extensions()
        .get::<crate::server::Reserved>()
        .is_none()
        || PROBES.contains(&request.uri().path())
    {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let known = bearer(&parts).is_ok_and(|token| state.admin.tokens.authenticate(token).is_some());
    if !known {
        telemetry::api::reserved_refused();
        return ApiError::Busy.into_response();
    }
    next.run(axum::extract::Request::from_parts(parts, body))
        .await
}

/// The token of an `Authorization: Bearer <token>` header, or why there is none.
fn bearer(parts: &Parts) -> Result<&str, &'static str> {
    let mut values = parts.headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next().ok_or("no Authorization header")?;
    if values.next().is_some() {
        return Err("more than one Authorization header");
    }
    let value = value.to_str().map_err(|_| "Authorization is not ASCII")?;
    let (scheme, token) = value.split_once(' ').ok_or("Authorization is not Bearer")?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("Authorization is not Bearer");
    }
    let token = token.trim();
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return Err("bearer token of impossible length");
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_start_token_is_made_once_and_only_its_digest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut out = Vec::new();
        let tokens = Tokens::load_or_create(&[], dir.path(), &mut out).unwrap();
        let printed = String::from_utf8(out).unwrap();
        let token = printed
            .lines()
            .find_map(|l| l.strip_prefix("ANKUSA_TOKEN="))
            .unwrap()
            .to_owned();
        let caller = tokens.authenticate(&token).unwrap();
        assert_eq!(&*caller.name, ADMIN_TOKEN_NAME);
        assert!(Scope::ALL.iter().all(|s| caller.has(*s)));
        let kept = std::fs::read_to_string(dir.path().join(ADMIN_TOKEN_FILE)).unwrap();
        assert_eq!(kept.trim(), digest_hex(&token));
        let mut again = Vec::new();
        let tokens = Tokens::load_or_create(&[], dir.path(), &mut again).unwrap();
        assert!(again.is_empty(), "printed only once");
        assert!(tokens.authenticate(&token).is_some());
        assert!(tokens.authenticate("ank_wrong").is_none());
    }

    /// A stdout that takes nothing.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }

    #[test]
    fn a_token_that_could_not_be_printed_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let err = Tokens::load_or_create(&[], dir.path(), &mut Closed).unwrap_err();
        assert!(
            err.to_string()
                .contains("could not print the first-start admin token"),
            "{err}"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "no digest file, not even a temporary one");
        // The next start, with a stdout that works, makes one.
        let mut out = Vec::new();
        Tokens::load_or_create(&[], dir.path(), &mut out).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("ANKUSA_TOKEN="));
    }

    #[cfg(unix)]
    #[test]
    fn the_digest_file_is_the_owners_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        Tokens::load_or_create(&[], dir.path(), &mut Vec::new()).unwrap();
        let meta = std::fs::metadata(dir.path().join(ADMIN_TOKEN_FILE)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn configured_tokens_win_and_are_matched_by_digest() {
        let dir = tempfile::tempdir().unwrap();
        let config = [TokenConfig {
            name: "reader".into(),
            sha256: digest_hex("t0k"),
            scopes: vec![Scope::AdminRead],
        }];
        let mut out = Vec::new();
        let tokens = Tokens::load_or_create(&config, dir.path(), &mut out).unwrap();
        assert!(out.is_empty());
        assert!(!dir.path().join(ADMIN_TOKEN_FILE).exists());
        let caller = tokens.authenticate("t0k").unwrap();
        assert!(caller.has(Scope::AdminRead) && !caller.has(Scope::AdminWrite));
        assert!(tokens.authenticate("t0k ").is_none());
    }

    #[test]
    fn new_tokens_differ() {
        let (a, b) = (new_token(), new_token());
        assert!(a.starts_with("ank_") && a.len() > 40);
        assert_ne!(a, b);
    }
}
