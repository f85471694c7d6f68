//! `--verify`: compare a replica with what a node's admin API lists, subject by subject.
//!
//! The API lists routes and sources per tenant (`GET /admin/v1/tenants/{t}/routes`, pages
//! of up to 1000 joined by `after`/`next`); it has no list of tenants, so the tenants are
//! those of the replica's keys, plus any named with `--tenant` (a tenant the replica has
//! never heard of can only be checked when named). Both sides are the same redacted view
//! (`secret` reads `"[redacted]"` when set, in events and in the API alike), so entities are
//! compared whole, `revision` included: no field differs legitimately.
//!
//! A node lists the shared stores (Redis) and its own (memory routes, local sources); the
//! replica holds every node's own stores too. `--store` restricts the comparison to the
//! stores of the node asked; a key held by more than one compared store is reported as
//! ambiguous rather than guessed at.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::Value;

use super::rule::Replica;

/// Where and how to read the node's API.
#[derive(Clone)]
pub struct VerifyOptions {
    /// The node's base URL (`http://127.0.0.1:8080`).
    pub url: String,
    /// A bearer token with `admin:read`.
    pub token: String,
    /// Tenants to list beside those of the replica.
    pub tenants: Vec<String>,
    /// The stores (`subjectstore`) to compare; empty: all.
    pub stores: Vec<String>,
}

impl std::fmt::Debug for VerifyOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyOptions")
            .field("url", &self.url)
            .field("token", &"<redacted>")
            .field("tenants", &self.tenants)
            .field("stores", &self.stores)
            .finish()
    }
}

/// One subject on which the replica and the API disagree.
#[derive(Debug, Clone, PartialEq)]
pub enum Difference {
    /// The API lists it; the replica does not hold it.
    Missing {
        /// `tenant/routes/id`.
        key: String,
        /// The API's view.
        api: Value,
    },
    /// The replica holds it; the API does not list it.
    Extra {
        /// `tenant/routes/id`.
        key: String,
        /// The replica's entity.
        replica: Value,
    },
    /// Both have it, not alike.
    Different {
        /// `tenant/routes/id`.
        key: String,
        /// The top-level fields that differ.
        fields: Vec<String>,
        /// The replica's entity.
        replica: Value,
        /// The API's view.
        api: Value,
    },
    /// More than one compared store holds it (pass `--store`).
    Ambiguous {
        /// `tenant/routes/id`.
        key: String,
        /// The stores.
        stores: Vec<String>,
    },
}

/// Why the API could not be read.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The URL is not one.
    #[error("--url {0:?} is not an http(s) URL")]
    Url(String),
    /// The request failed (connection, timeout, a body that is not the API's).
    #[error("GET {path}: {detail}")]
    Request {
        /// The path asked.
        path: String,
        /// What failed.
        detail: String,
    },
}

/// The replica's subjects that exist, by key, from the compared stores; and the keys held
/// by more than one of them.
pub fn replica_view(
    replica: &Replica,
    stores: &[String],
) -> (BTreeMap<String, Value>, Vec<Difference>) {
    let mut by_key: BTreeMap<String, Vec<(&str, &Value)>> = BTreeMap::new();
    for (store, key, entry) in replica.present() {
        if stores.is_empty() || stores.iter().any(|s| s == store) {
            let entity = entry.entity.as_ref().expect("present() gives entities");
            by_key
                .entry(key.to_owned())
                .or_default()
                .push((store, entity));
        }
    }
    let mut view = BTreeMap::new();
    let mut ambiguous = Vec::new();
    for (key, holders) in by_key {
        match holders.as_slice() {
            [(_, entity)] => {
                view.insert(key, (*entity).clone());
            }
            _ => ambiguous.push(Difference::Ambiguous {
                key,
                stores: holders.iter().map(|(s, _)| (*s).to_owned()).collect(),
            }),
        }
    }
    (view, ambiguous)
}

/// The differences between the replica's view and the API's, in key order.
pub fn compare(
    replica: &BTreeMap<String, Value>,
    api: &BTreeMap<String, Value>,
) -> Vec<Difference> {
    let keys: BTreeSet<&String> = replica.keys().chain(api.keys()).collect();
    keys.into_iter()
        .filter_map(|key| match (replica.get(key), api.get(key)) {
            (Some(r), Some(a)) if r == a => None,
            (Some(r), Some(a)) => Some(Difference::Different {
                key: key.clone(),
                fields: differing_fields(r, a),
                replica: r.clone(),
                api: a.clone(),
            }),
            (Some(r), None) => Some(Difference::Extra {
                key: key.clone(),
                replica: r.clone(),
            }),
            (None, Some(a)) => Some(Difference::Missing {
                key: key.clone(),
                api: a.clone(),
            }),
            (None, None) => None,
        })
        .collect()
}

/// The top-level fields whose values differ (`*` when either is not an object).
fn differing_fields(a: &Value, b: &Value) -> Vec<String> {
    let (Value::Object(a), Value::Object(b)) = (a, b) else {
        return vec!["*".into()];
    };
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .filter(|n| a.get(*n) != b.get(*n))
        .cloned()
        .collect()
}

/// The tenants to list: those of the replica's keys (`tenant/...`) and `extra`.
pub fn tenants(view: &BTreeMap<String, Value>, extra: &[String]) -> BTreeSet<String> {
    view.keys()
        .filter_map(|k| k.split_once('/').map(|(t, _)| t.to_owned()))
        .chain(extra.iter().cloned())
        .collect()
}

/// Compare `replica` with the node's API.
pub async fn verify(
    replica: &Replica,
    options: &VerifyOptions,
) -> Result<Vec<Difference>, VerifyError> {
    let (view, mut differences) = replica_view(replica, &options.stores);
    let client = super::api::Client::new(&options.url, &options.token)?;
    let mut listed = BTreeMap::new();
    for tenant in tenants(&view, &options.tenants) {
        for plural in ["routes", "sources"] {
            for item in client.list(&tenant, plural).await? {
                let id = item.get("id").and_then(Value::as_str).unwrap_or_default();
                listed.insert(format!("{tenant}/{plural}/{id}"), item);
            }
        }
    }
    let ambiguous: BTreeSet<String> = differences.iter().map(key).map(str::to_owned).collect();
    listed.retain(|k, _| !ambiguous.contains(k));
    differences.extend(compare(&view, &listed));
    differences.sort_by(|a, b| key(a).cmp(key(b)));
    Ok(differences)
}

/// The key a difference is about.
pub fn key(d: &Difference) -> &str {
    match d {
        Difference::Missing { key, .. }
        | Difference::Extra { key, .. }
        | Difference::Different { key, .. }
        | Difference::Ambiguous { key, .. } => key,
    }
}

/// The report: one line per difference (entities are redacted views: no secret in them).
pub fn report(differences: &[Difference]) -> String {
    let mut out = String::new();
    for d in differences {
        let _ = match d {
            Difference::Missing { key, api } => writeln!(out, "missing   {key}: api {api}"),
            Difference::Extra { key, replica } => {
                writeln!(out, "extra     {key}: replica {replica}")
            }
            Difference::Different {
                key,
                fields,
                replica,
                api,
            } => writeln!(
                out,
                "different {key} ({}): replica {replica}, api {api}",
                fields.join(", ")
            ),
            Difference::Ambiguous { key, stores } => writeln!(
                out,
                "ambiguous {key}: holders by stores {} (pass --store)",
                stores.join(", ")
            ),
        };
    }
    out
}

#[cfg(test)]
mod tests;
