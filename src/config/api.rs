//! `[api]`: the admin server's address, its limits (body size, time to read a request, time
//! to answer one, connections at once, the grace a stop gives them), the proxies it
//! believes, and its bearer tokens (known by digest only) with their scopes.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[api]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// The admin server's address.
    pub listen: SocketAddr,
    /// The largest request body the admin API reads, in bytes; larger ones get 413.
    pub body_limit: usize,
    /// How long a client has to send a request's head (and, on a kept-alive connection, to
    /// start the next one); past it the connection is closed.
    #[serde(with = "humantime_serde")]
    pub header_timeout: Duration,
    /// How long a client has to send a request's whole body, from the end of its head; past
    /// it the request is refused with 408 and nothing is changed.
    #[serde(with = "humantime_serde")]
    pub body_timeout: Duration,
    /// How long a request may take, from the end of its head to its answer; past it the
    /// client gets 503 `request_timeout` (work already under way still ends with its row).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// How long a response may wait on a client that does not read it; past it the
    /// connection is closed.
    #[serde(with = "humantime_serde")]
    pub write_timeout: Duration,
    /// Connections served at once; more wait in the listen queue until one closes.
    pub max_connections: usize,
    /// Of `max_connections`, how many one client address may hold (trusted proxies aside).
    pub max_connections_per_peer: usize,
    /// Connections served beside `max_connections` for probes and authenticated requests
    /// only, when a client finds no slot it may take.
    pub reserved_connections: usize,
    /// How long a stopping node lets open connections finish their requests before it
    /// closes them.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Peers whose `X-Forwarded-For` is believed (IPs or CIDRs). Anyone else's is ignored.
    pub trusted_proxies: Vec<TrustedProxy>,
    /// Watchers of the lifecycle events at once (long-polls and streams); one more is
    /// answered 503 `too_many_watchers`.
    pub max_watchers: usize,
    /// Whether the node serves its console at `/console/` (`auto`: when `listen` is a
    /// loopback address).
    pub console: ConsoleMode,
    /// Bearer tokens. Empty: the node makes one admin token on first start (see
    /// `api::auth`).
    pub tokens: Vec<TokenConfig>,
}

/// One `[[api.tokens]]` entry: a bearer token known only by its SHA-256 digest.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The token's name: the `actor` of every row its requests write.
    pub name: String,
    /// Hex SHA-256 digest of the token (`ankusa token hash`).
    pub sha256: String,
    /// What the token may do.
    pub scopes: Vec<Scope>,
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum Scope {
    /// Read local subjects.
    #[serde(rename = "admin:read")]
    AdminRead,
    /// Create, change and delete local subjects.
    #[serde(rename = "admin:write")]
    AdminWrite,
    /// Read the audit trail.
    #[serde(rename = "audit:read")]
    AuditRead,
    /// Watch the lifecycle events (`GET /admin/v1/lifecycle/events`) and ask for a snapshot
    /// to relist: what a consumer needs, and nothing else.
    #[serde(rename = "events:read")]
    EventsRead,
}

impl Scope {
    /// Every scope (the first-start admin token has them all).
    pub const ALL: [Scope; 4] = [
        Scope::AdminRead,
        Scope::AdminWrite,
        Scope::AuditRead,
        Scope::EventsRead,
    ];

    /// The scope's name, as configured.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::AdminRead => "admin:read",
            Scope::AdminWrite => "admin:write",
            Scope::AuditRead => "audit:read",
            Scope::EventsRead => "events:read",
        }
    }
}

/// `api.console`: whether the node serves its console.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConsoleMode {
    /// Served when the admin server listens on a loopback address only.
    Auto,
    /// Served wherever the admin server listens.
    On,
    /// Not served: `/console/` answers 404 like any unknown path.
    Off,
}

/// An address or network whose `X-Forwarded-For` header the admin API believes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct TrustedProxy(pub IpNet);

impl TrustedProxy {
    /// Whether `ip` is this proxy (or inside its network).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip)
    }
}

impl TryFrom<String> for TrustedProxy {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        if let Ok(net) = IpNet::from_str(&s) {
            return Ok(TrustedProxy(net));
        }
        IpAddr::from_str(&s)
            .map(|ip| TrustedProxy(IpNet::from(ip)))
            // Not the value: the error names the key, and a misplaced secret must not show.
            .map_err(|_| "is neither an IP address nor a CIDR network".to_owned())
    }
}

/// Bounds of `api.body_limit`: below 1 KiB no real request fits; above 64 MiB one request
/// could hold a worker's memory hostage.
const BODY_LIMIT_RANGE: std::ops::RangeInclusive<usize> = 1024..=(64 << 20);
/// Bounds of the API's timeouts: under 100ms a loaded node would refuse its own operators;
/// over an hour a limit no longer protects anything.
const TIMEOUT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(3600);
/// Bounds of `api.max_connections`: one, or as many as a process may reasonably hold open.
const MAX_CONNECTIONS_RANGE: std::ops::RangeInclusive<usize> = 1..=65536;

/// The most `api.reserved_connections`: a reserve is a few slots, not a second server.
const MAX_RESERVED: usize = 4096;

impl ApiConfig {
    /// Whether the console is served.
    pub fn console_enabled(&self) -> bool {
        match self.console {
            ConsoleMode::On => true,
            ConsoleMode::Off => false,
            ConsoleMode::Auto => self.listen.ip().is_loopback(),
        }
    }

    /// The admin server's connection limits.
    pub fn connection_limits(&self) -> crate::server::ConnectionLimits {
        crate::server::ConnectionLimits {
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            reserved_connections: self.reserved_connections,
            uncapped: self.trusted_proxies.iter().map(|p| p.0).collect(),
            header_timeout: self.header_timeout,
            write_timeout: self.write_timeout,
            shutdown_grace: self.shutdown_grace,
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !BODY_LIMIT_RANGE.contains(&self.body_limit) {
            return invalid("api.body_limit", "must be between 1024 and 67108864 bytes");
        }
        for (key, timeout) in [
            ("api.header_timeout", self.header_timeout),
            ("api.body_timeout", self.body_timeout),
            ("api.request_timeout", self.request_timeout),
            ("api.write_timeout", self.write_timeout),
        ] {
            if !TIMEOUT_RANGE.contains(&timeout) {
                return invalid(key, "must be between 100ms and 1h");
            }
        }
        // Past the request timeout the client hears 503 before the body's own 408.
        if self.body_timeout > self.request_timeout {
            return invalid("api.body_timeout", "must not be over api.request_timeout");
        }
        if !MAX_CONNECTIONS_RANGE.contains(&self.max_connections) {
            return invalid("api.max_connections", "must be between 1 and 65536");
        }
        if !MAX_CONNECTIONS_RANGE.contains(&self.max_connections_per_peer) {
            return invalid(
                "api.max_connections_per_peer",
                "must be between 1 and 65536",
            );
        }
        if self.reserved_connections > MAX_RESERVED {
            return invalid("api.reserved_connections", "must be between 0 and 4096");
        }
        if !MAX_CONNECTIONS_RANGE.contains(&self.max_watchers) {
            return invalid("api.max_watchers", "must be between 1 and 65536");
        }
        if self.shutdown_grace > *TIMEOUT_RANGE.end() {
            return invalid("api.shutdown_grace", "must be at most 1h");
        }
        let mut names = HashSet::new();
        for (i, token) in self.tokens.iter().enumerate() {
            token.validate(i, &mut names)?;
        }
        Ok(())
    }
}

impl TokenConfig {
    /// Check token number `i`; `names` are those of the tokens before it.
    fn validate<'a>(&'a self, i: usize, names: &mut HashSet<&'a str>) -> Result<(), ConfigError> {
        if !valid_token_name(&self.name) {
            return invalid(
                "api.tokens.name",
                &format!("token #{i}: must be 1 to 64 characters of A-Z a-z 0-9 . _ - : @"),
            );
        }
        if self.name == crate::audit::SYSTEM_ACTOR {
            return invalid(
                "api.tokens.name",
                &format!("token #{i}: `system` is the node's own actor name"),
            );
        }
        if !names.insert(self.name.as_str()) {
            return invalid(
                "api.tokens.name",
                &format!("token #{i}: `{}` is used by another token", self.name),
            );
        }
        if self.sha256.len() != 64 || hex::decode(&self.sha256).is_err() {
            return invalid(
                "api.tokens.sha256",
                &format!(
                    "token `{}`: must be the 64 hex digits of a SHA-256 digest \
                     (`ankusa token hash`)",
                    self.name
                ),
            );
        }
        if self.scopes.is_empty() {
            return invalid(
                "api.tokens.scopes",
                &format!("token `{}`: must name at least one scope", self.name),
            );
        }
        Ok(())
    }
}

/// A token name becomes a row's `actor`: keep it short, printable and unambiguous.
fn valid_token_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:@".contains(&b))
}
