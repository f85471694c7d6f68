//! Subjects kept in Redis, shared by a fleet of nodes: routes, and sources when
//! `[sources] store = "redis"`. One generic store, so that both kinds have the same layout and
//! the same atomic compare-and-set.
//!
//! Layout, under the configured prefix (`ankusa:` by default), `<kind>` being `route` or
//! `source`:
//! - `<prefix><kind>:{<tenant>}:<id>`: a hash, `rev` (the store-kept revision), `ver` (the
//!   version of the change that wrote it), `json` (the subject; its `revision` is `rev`),
//!   `mac` (its MAC under the fleet's secret, see `drift.rs`) and, while the rows of a drift
//!   the node adopted are not yet written, `drift`;
//! - `<prefix><kind>s:{<tenant>}`: a sorted set of the tenant's ids (all at score 0, so that
//!   `ZRANGEBYLEX` pages them in id order);
//! - `<prefix><kind>:version`: the kind's version counter, which every change increments in
//!   its script, kept at or above Redis's clock in microseconds and above this process's
//!   floor (the greatest version it issued or read): a Redis that lost its data (a failover,
//!   a restart without persistence, an old backup) issues no version it published before;
//! - `<prefix>store_id`: a random id, set by the first node to connect, that names the store
//!   in events (`redis:<id>`): every node of a fleet sharing the Redis names it alike, and a
//!   node gives a Redis that lost it the id it knew (see `recall.rs`);
//! - `<prefix><kind>:fleet`: what the fleet's secret signs a fixed text to, set by the first
//!   node to connect: a node with another secret is refused at its connection;
//! - `<prefix>fence:<token>`: set for a day when settlement reads back a change whose write
//!   did not answer; that change's script (`token` names it) is then refused if it still
//!   arrives, on a connection since replaced.
//!
//! The tenants are found by scanning for their index keys (`SCAN MATCH`), only by the refresh
//! that follows a restore.
//!
//! Each write is ONE Lua script: compare the stored version with the one the change read,
//! take the next version from the counter, write the subject and its index entry, bump the
//! revision. Redis runs a script atomically, so two nodes racing on one subject cannot both
//! win, neither loses the other's update, and versions follow the order changes applied.
//! Comparing the version, not the revision, refuses a change read before a delete and a
//! create again (the revision restarts at 1; the version never does). The scripts touch the
//! counter beside the subject's keys, so the store needs one Redis, not a Cluster. Tenants and
//! ids have passed `key::check_name`, so they hold no brace: a key names one tenant and one id.
//!
//! The connection is made on first use and remade after a failure (the `redis` crate's
//! `ConnectionManager` reconnects by itself once it exists), so the node starts, and keeps
//! retrying settlement, while Redis is down. Every call is bounded by the configured timeout.

mod connection;
mod counter;
mod drift;
mod read;
mod replicas;
mod scripts;

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use redis::Script;

use self::connection::Server;
use self::read::{decode, read_fields, Fields};
use self::scripts::{cas, FENCE_SECS};
use super::drift::{DriftPage, Drifted};
use super::{Cas, Found, Recalled, RemoteStore, RemoteSubject, StoreLoss, Versioned};
use crate::audit::{Stamp, State};
use crate::store::StoreError;

/// Subjects of one kind in Redis.
pub struct RedisStore<T> {
    server: Server,
    prefix: String,
    /// `<prefix><kind>:version`.
    counter_key: String,
    timeout: Duration,
    /// Replicas that must hold a write before it is acknowledged (0: none), and how long
    /// a write waits for them.
    replicas: (u32, Duration),
    /// Made on first use, with the store's name; a std lock, held only to clone or replace
    /// it. Behind sentinels it is dropped when the primary fails, to be made again on the
    /// primary they name then.
    conn: RwLock<Option<connection::Made>>,
    /// One connection attempt at a time, not one per caller; a failed attempt leaves the
    /// connection unmade for the next caller to try again.
    connecting: tokio::sync::Mutex<()>,
    put: Script,
    delete: Script,
    adopt: Script,
    unmark: Script,
    gone: Script,
    unindex: Script,
    /// The fleet's secret as an HMAC key: every write signs the subject's JSON with it (the
    /// hash's `mac`), and the drift check holds what it finds against it.
    signer: drift::Signer,
    /// The greatest version this process has issued or read: every write script takes it as
    /// a floor, so a Redis that lost its counter (a failover, a restart without persistence,
    /// an old backup) never issues a version this node has seen again.
    floor: AtomicU64,
    /// The greatest counter value this process has seen in Redis (versions it issued, the
    /// counter read): a counter found below it means Redis lost data.
    counted: AtomicU64,
    /// A loss found and not yet taken by [`RemoteStore::take_loss`]; a std mutex, held to
    /// set or take it.
    lost: std::sync::Mutex<Option<StoreLoss>>,
    /// The store's id as this node knows it (kept across restarts, see `recall.rs`): given
    /// back to a Redis that lost it, so that the store keeps its name.
    known: std::sync::Mutex<Option<String>>,
    kind: PhantomData<fn() -> T>,
}

impl<T: RemoteSubject> std::fmt::Debug for RedisStore<T> {
    // The URL may hold a password: never shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("kind", &T::KIND)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl<T: RemoteSubject> RedisStore<T> {
    // Joined, not formatted: every change makes three keys, and `format!` costs several
    // times as much.
    fn key(&self, tenant: &str, id: &str) -> String {
        [&self.prefix, T::KIND, ":{", tenant, "}:", id].concat()
    }

    fn counter_key(&self) -> &str {
        &self.counter_key
    }

    /// `pipe` followed by reads of the counter and Redis's clock: the store's version
    /// ([`store_version`](Self::store_version)), read in the pipeline's step.
    fn counter_and_time<'p>(&self, pipe: &'p mut redis::Pipeline) -> &'p mut redis::Pipeline {
        pipe.cmd("GET").arg(self.counter_key()).cmd("TIME")
    }

    /// Run write script `invocation` of subject `key`, the process's floor its last argument,
    /// and take its reply: the counter it found, the replicas asked for, the outcome.
    async fn write(
        &self,
        key: &str,
        invocation: &mut redis::ScriptInvocation<'_>,
    ) -> Result<Cas, StoreError> {
        let (mut conn, name, waits) = self.made_for_write().await?;
        // Read before the script is sent: what it finds is checked against it.
        let seen = self.counted.load(Ordering::Relaxed);
        let reply = invocation
            .arg(self.floor.load(Ordering::Relaxed))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        let mine = waits.answered();
        self.script_answered(&name, reply, seen);
        let written = cas(key, &name, reply)?;
        if let Cas::Written(stamp) = &written {
            self.floor.fetch_max(stamp.version, Ordering::Relaxed);
            if self.replicas.0 > 0 {
                self.replicated(&mut conn, &waits, mine).await?;
            }
        }
        Ok(written)
    }

    /// `<prefix>fence:<token>`: set once settlement fenced change `token` (an empty token, a
    /// write outside a dual write, names a key never set).
    fn fence_key(&self, token: &str) -> String {
        [&self.prefix, "fence:", token].concat()
    }

    fn index_key(&self, tenant: &str) -> String {
        [&self.prefix, T::KIND, "s:{", tenant, "}"].concat()
    }

    /// The start of every tenant's index key: `<prefix><kind>s:{`.
    fn index_stem(&self) -> String {
        format!("{}{}s:{{", self.prefix, T::KIND)
    }
}

/// The stamp of version `version` of the store named `name`.
fn stamp(name: &str, version: u64) -> Stamp {
    Stamp {
        version,
        store: Some(name.to_owned()),
    }
}

#[async_trait::async_trait]
impl<T: RemoteSubject> RemoteStore<T> for RedisStore<T> {
    fn kind(&self) -> &'static str {
        "redis"
    }

    async fn tenants(&self) -> Result<Vec<String>, StoreError> {
        self.read_tenants().await
    }

    async fn get(&self, tenant: &str, id: &str) -> Result<Found<T>, StoreError> {
        let key = self.key(tenant, id);
        let (mut conn, name) = self.conn().await?;
        // A subject that exists carries its own version: one command.
        let fields: Fields = read_fields(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        if let Some(subject) = decode(&key, fields)? {
            return Ok(Found {
                stamp: self.seen(&name, subject.version),
                subject: Some(subject),
            });
        }
        // Absent: read again in one transaction, so that the store's version is read in the
        // same step as the subject's absence (it may have been created meanwhile).
        let seen = self.counted.load(Ordering::Relaxed);
        let mut pipe = redis::pipe();
        pipe.atomic().add_command(read_fields(&key));
        let (fields, counter, time): (Fields, Option<u64>, (u64, u64)) = self
            .counter_and_time(&mut pipe)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        let subject = decode(&key, fields)?;
        self.counter_read(&name, counter.unwrap_or(0), seen);
        let version = match &subject {
            Some(s) => s.version,
            None => self.store_version(counter, time),
        };
        Ok(Found {
            subject,
            stamp: self.seen(&name, version),
        })
    }

    async fn exists(&self, tenant: &str, id: &str) -> Result<bool, StoreError> {
        let (mut conn, _) = self.conn().await?;
        redis::cmd("HEXISTS")
            .arg(self.key(tenant, id))
            .arg("rev")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))
    }

    async fn list(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Versioned<T>>, StoreError> {
        self.read_list(tenant, after, limit).await
    }

    async fn version(&self) -> Result<Stamp, StoreError> {
        let (mut conn, name) = self.conn().await?;
        let seen = self.counted.load(Ordering::Relaxed);
        let (counter, time): (Option<u64>, (u64, u64)) = self
            .counter_and_time(redis::pipe().atomic())
            .query_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        self.counter_read(&name, counter.unwrap_or(0), seen);
        Ok(self.seen(&name, self.store_version(counter, time)))
    }

    async fn put(
        &self,
        subject: T,
        state: Option<State>,
        expected: Option<u64>,
    ) -> Result<Cas, StoreError> {
        self.put_fenced(subject, state, expected, "").await
    }

    async fn delete(&self, tenant: &str, id: &str, expected: u64) -> Result<Cas, StoreError> {
        self.delete_fenced(tenant, id, expected, "").await
    }

    async fn put_fenced(
        &self,
        subject: T,
        _state: Option<State>,
        expected: Option<u64>,
        token: &str,
    ) -> Result<Cas, StoreError> {
        let key = self.key(subject.tenant(), subject.id());
        // The stored `rev` is the truth; the JSON's revision is overwritten on every read.
        let json = serde_json::to_string(&subject).map_err(super::unencodable::<T>)?;
        let expected = expected.map_or(-1, |v| v as i64);
        let mut invocation = self.put.key(&key);
        invocation
            .key(self.index_key(subject.tenant()))
            .key(self.counter_key())
            .key(self.fence_key(token))
            .arg(expected)
            .arg(subject.id())
            .arg(&json)
            .arg(self.mac(subject.tenant(), subject.id(), &json));
        self.write(&key, &mut invocation).await
    }

    async fn delete_fenced(
        &self,
        tenant: &str,
        id: &str,
        expected: u64,
        token: &str,
    ) -> Result<Cas, StoreError> {
        let key = self.key(tenant, id);
        let mut invocation = self.delete.key(&key);
        invocation
            .key(self.index_key(tenant))
            .key(self.counter_key())
            .key(self.fence_key(token))
            .arg(expected)
            .arg(id);
        self.write(&key, &mut invocation).await
    }

    async fn drift_page(&self, from: u64, count: usize) -> Result<DriftPage<T>, StoreError> {
        self.scan_drift(from, count).await
    }

    async fn adopt(&self, drifted: &Drifted<T>) -> Result<Option<Stamp>, StoreError> {
        self.adopt_drift(drifted).await
    }

    async fn unmark(&self, drifted: &Drifted<T>, version: u64) -> Result<(), StoreError> {
        self.unmark_drift(drifted, version).await
    }

    async fn gone_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        count: usize,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        self.scan_gone(tenant, after, count).await
    }

    async fn unindex(&self, tenant: &str, id: &str) -> Result<(), StoreError> {
        self.drop_gone(tenant, id).await
    }

    fn take_loss(&self) -> Option<StoreLoss> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn recall(&self, recalled: &Recalled) {
        self.floor.fetch_max(recalled.floor, Ordering::Relaxed);
        if let Some(id) = recalled
            .store
            .as_deref()
            .and_then(|s| s.strip_prefix("redis:"))
        {
            *self.known.lock().unwrap_or_else(|p| p.into_inner()) = Some(id.to_owned());
        }
    }

    fn recollection(&self) -> Option<Recalled> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Some(Recalled {
            store: known.map(|id| format!("redis:{id}")),
            floor: self.floor.load(Ordering::Relaxed),
        })
    }

    async fn check(&self) -> Result<(), StoreError> {
        self.check_store().await
    }

    async fn fence(&self, token: &str) -> Result<(), StoreError> {
        if token.is_empty() {
            return Ok(());
        }
        let (mut conn, _) = self.conn().await?;
        // A day: far longer than any write can sit on a connection, and then gone by itself.
        redis::cmd("SET")
            .arg(self.fence_key(token))
            .arg(1)
            .arg("EX")
            .arg(FENCE_SECS)
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| self.failed(e))
    }
}
