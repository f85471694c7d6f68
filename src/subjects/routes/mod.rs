//! Routes: where a tenant's messages from one source go. Unlike the local subjects, route
//! definitions live outside this node's RocksDB, in a route store (`[routes] store`): in
//! memory (the embedded default) or in Redis, shared by a fleet of nodes (see
//! [`super::remote`]).
//!
//! A change there cannot share a batch with its row, so it takes the trail's second way in
//! (`Trail::record`: a pending row, the store's write, then the row with the outcome). The
//! store keeps each route's `revision` itself and writes only if the revision is still the one
//! the change read (compare-and-set, one atomic step in Redis), so two nodes sharing a store
//! never lose an update, and every change that took effect is in exactly one node's trail. A
//! pending row that its caller never finished is settled by reading the route back.

mod ops;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::key::check_name;
use super::redact::ROUTE_SECRET_FIELDS;
use super::remote::memory::MemoryStore;
use super::remote::redis::RedisStore;
use super::remote::{RemoteStore, RemoteSubject};
use super::{char_len, is_object_key, SubjectError};
use crate::audit::State;
use crate::config::{RemoteStoreKind, RoutesConfig};
use crate::store::StoreError;

pub use ops::Routes;

/// Where routes live.
pub type RouteStore = dyn RemoteStore<Route>;

/// The most keys a route's `filter` may have.
pub const MAX_FILTER_KEYS: usize = 64;
/// The longest `destination`, in characters.
pub const MAX_DESTINATION_LEN: usize = 2048;

/// A route as stored.
///
/// Its fields are declared in bytewise order of their names and its one map is a
/// `serde_json::Map`, so serde_json writes a route in its canonical encoding as it is: its
/// state is written straight from it (`State::of_sorted`). A field added out of order fails
/// `a_route_is_written_in_its_canonical_encoding`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Where its messages go: an `http://` or `https://` URL without credentials.
    pub destination: String,
    /// Whether it routes at all.
    pub enabled: bool,
    /// Which messages it takes (attribute equality; empty: all).
    pub filter: Map<String, Value>,
    /// Its id within the tenant.
    pub id: String,
    /// Its change counter, kept by the route store: 1 on create, +1 on every change.
    pub revision: u64,
    /// The id of the source whose messages it routes.
    pub source: String,
    /// Its tenant.
    pub tenant: String,
}

/// The body of a create.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewRoute {
    /// The new route's id.
    pub id: String,
    /// The source it routes.
    pub source: String,
    /// Where to.
    pub destination: String,
    /// Which messages (default: all).
    #[serde(default)]
    pub filter: Map<String, Value>,
    /// Whether it routes (default: yes).
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

/// The body of an update: the fields to replace.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutePatch {
    /// A new source.
    #[serde(default, deserialize_with = "super::present")]
    pub source: Option<String>,
    /// A new destination.
    #[serde(default, deserialize_with = "super::present")]
    pub destination: Option<String>,
    /// A new filter (replaces the whole object).
    #[serde(default, deserialize_with = "super::present")]
    pub filter: Option<Map<String, Value>>,
    /// Turn it on or off.
    #[serde(default, deserialize_with = "super::present")]
    pub enabled: Option<bool>,
}

impl RemoteSubject for Route {
    const KIND: &'static str = "route";
    const PLURAL: &'static str = "routes";
    const SECRET_FIELDS: &'static [&'static str] = ROUTE_SECRET_FIELDS;

    fn tenant(&self) -> &str {
        &self.tenant
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn revision(&self) -> u64 {
        self.revision
    }

    fn set_revision(&mut self, revision: u64) {
        self.revision = revision;
    }

    fn state(&self) -> Result<State, serde_json::Error> {
        State::of_sorted(self)
    }
}

/// The route store `[routes]` configures. Connecting to Redis is lazy (and retried on every
/// use), so a node starts, and settles what it can, while Redis is down.
pub fn open(config: &RoutesConfig) -> Result<Arc<RouteStore>, StoreError> {
    Ok(match config.store {
        RemoteStoreKind::Memory => Arc::new(MemoryStore::<Route>::default()),
        RemoteStoreKind::Redis => Arc::new(RedisStore::<Route>::open(&config.redis())?),
    })
}

impl NewRoute {
    /// Check every field.
    pub fn check(&self) -> Result<(), SubjectError> {
        check_name("id", &self.id)?;
        check_name("source", &self.source)?;
        check_destination(&self.destination)?;
        check_filter(&self.filter)
    }
}

impl RoutePatch {
    /// Check the fields it names; it must name one.
    pub fn check(&self) -> Result<(), SubjectError> {
        if self.source.is_none()
            && self.destination.is_none()
            && self.filter.is_none()
            && self.enabled.is_none()
        {
            return Err(SubjectError::invalid(
                "body",
                "names no field to change (source, destination, filter, enabled)",
            ));
        }
        if let Some(source) = &self.source {
            check_name("source", source)?;
        }
        if let Some(destination) = &self.destination {
            check_destination(destination)?;
        }
        if let Some(filter) = &self.filter {
            check_filter(filter)?;
        }
        Ok(())
    }

    /// `route` with the patch applied (revision unchanged), and how many fields changed.
    pub fn apply(self, route: &Route) -> (Route, u32) {
        let mut after = route.clone();
        let mut fields = 0;
        if let Some(source) = self.source.filter(|s| *s != route.source) {
            after.source = source;
            fields += 1;
        }
        if let Some(destination) = self.destination.filter(|d| *d != route.destination) {
            after.destination = destination;
            fields += 1;
        }
        if let Some(filter) = self.filter.filter(|f| *f != route.filter) {
            after.filter = filter;
            fields += 1;
        }
        if let Some(enabled) = self.enabled.filter(|e| *e != route.enabled) {
            after.enabled = enabled;
            fields += 1;
        }
        (after, fields)
    }
}

/// An `http://` or `https://` URL of at most [`MAX_DESTINATION_LEN`] characters, without
/// whitespace, control characters or credentials (a route's view is published: a password in
/// a URL would go with it).
fn check_destination(destination: &str) -> Result<(), SubjectError> {
    let invalid = |why: &str| Err(SubjectError::invalid("destination", why));
    if destination.is_empty() || char_len(destination) > MAX_DESTINATION_LEN {
        return invalid("must be 1 to 2048 characters");
    }
    if destination
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return invalid("must not contain whitespace or control characters");
    }
    let Some(rest) = destination
        .strip_prefix("https://")
        .or_else(|| destination.strip_prefix("http://"))
    else {
        return invalid("must be an http:// or https:// URL");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return invalid("must name a host");
    }
    if authority.contains('@') {
        return invalid("must not carry credentials");
    }
    Ok(())
}

fn check_filter(filter: &Map<String, Value>) -> Result<(), SubjectError> {
    if filter.len() > MAX_FILTER_KEYS {
        return Err(SubjectError::invalid(
            "filter",
            format!("has more than {MAX_FILTER_KEYS} keys"),
        ));
    }
    if !filter.keys().all(|k| is_object_key(k)) {
        return Err(SubjectError::invalid(
            "filter",
            "keys must be 1 to 128 characters without control characters",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subjects::redact;
    use proptest::prelude::*;

    /// Any JSON value a filter may hold, maps and arrays nested.
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter_map("finite", |f| {
                serde_json::Number::from_f64(f).map(Value::Number)
            }),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn route() -> impl Strategy<Value = Route> {
        let filter = prop::collection::btree_map(any::<String>(), json(), 0..4);
        let names = (any::<String>(), any::<String>(), any::<String>());
        (any::<String>(), any::<bool>(), filter, any::<u64>(), names).prop_map(
            |(destination, enabled, filter, revision, (id, source, tenant))| Route {
                destination,
                enabled,
                filter: filter.into_iter().collect(),
                id,
                revision,
                source,
                tenant,
            },
        )
    }

    proptest! {
        #[test]
        fn a_route_is_written_in_its_canonical_encoding(route in route()) {
            let text = |state: &State| String::from_utf8_lossy(state.encoded()).into_owned();
            let canonical = State::of_subject(&route).unwrap();
            prop_assert_eq!(text(&route.state().unwrap()), text(&canonical));
            let (state, view) = route.state_and_view().unwrap();
            let (slow_state, slow_view) =
                redact::state_and_view(&route, ROUTE_SECRET_FIELDS).unwrap();
            prop_assert_eq!(text(&state), text(&slow_state));
            prop_assert_eq!(view, slow_view);
        }
    }

    #[test]
    fn destinations_are_http_urls_without_credentials() {
        for good in [
            "https://example.com/hook",
            "http://10.0.0.1:8080",
            "https://h?x=1",
        ] {
            check_destination(good).unwrap();
        }
        for bad in [
            "",
            "ftp://h",
            "https://",
            "https://user:pw@h/x",
            "https://h/ x",
            "https://h/\n",
            "h/x",
        ] {
            assert!(check_destination(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_patch_counts_only_real_changes() {
        let route = Route {
            id: "r1".into(),
            tenant: "t1".into(),
            source: "s1".into(),
            destination: "https://a".into(),
            filter: Map::new(),
            enabled: true,
            revision: 3,
        };
        let patch = RoutePatch {
            source: Some("s1".into()),
            enabled: Some(false),
            ..RoutePatch::default()
        };
        let (after, fields) = patch.apply(&route);
        assert_eq!(fields, 1);
        assert!(!after.enabled);
        assert_eq!(after.revision, 3);
        assert!(RoutePatch::default().check().is_err());
    }
}
