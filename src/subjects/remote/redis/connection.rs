//! The Redis store's connection: made on first use, to `redis_url`'s server or to the
//! primary the sentinels name, and, behind sentinels, made again on the primary they name
//! after one fails.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::Script;

use super::drift::Signer;
use super::replicas::Waits;
use super::scripts::{ADOPT, DELETE, GONE, PUT, UNINDEX, UNMARK};
use super::RedisStore;
use crate::config::RedisSettings;
use crate::store::StoreError;
use crate::subjects::remote::{RemoteSubject, StoreLoss};
use crate::telemetry;

/// A connection made, the store's name, and the tally of the writes answered on it.
pub(super) type Made = (ConnectionManager, String, Arc<Waits>);

/// Where the store finds its server.
pub(super) enum Server {
    /// One address (`redis_url`): the connection manager reconnects to it by itself.
    Direct(redis::Client),
    /// The primary the sentinels name, asked for again once a connection to it fails.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

pub(super) fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Redis(e.kind_description())
}

trait KindDescription {
    fn kind_description(&self) -> String;
}

impl KindDescription for redis::RedisError {
    /// The error's category and, for server errors, its code: never the URL.
    fn kind_description(&self) -> String {
        match self.code() {
            Some(code) => format!("{:?} {code}", self.kind()),
            None if self.is_timeout() => "timed out".into(),
            None if self.is_connection_refusal() => "connection refused".into(),
            None => format!("{:?}", self.kind()),
        }
    }
}

/// The URL of sentinel `addr` (`host:port`), with the sentinels' `password`.
pub(super) fn sentinel_url(addr: &str, password: Option<&str>) -> Result<String, StoreError> {
    let bad = |_| StoreError::Misconfigured("redis: a sentinel is not host:port".into());
    let mut url = url::Url::parse(&format!("redis://{addr}")).map_err(bad)?;
    if let Some(password) = password {
        url.set_password(Some(password))
            .map_err(|()| StoreError::Misconfigured("redis: a sentinel is not host:port".into()))?;
    }
    Ok(url.into())
}

impl<T: RemoteSubject> RedisStore<T> {
    /// A store on the Redis at `url`, its keys under `prefix`, every call bounded by `timeout`.
    /// Does not connect: the first call does.
    pub fn new(url: &str, prefix: &str, timeout: Duration) -> Result<RedisStore<T>, StoreError> {
        RedisStore::open(&RedisSettings {
            url,
            prefix,
            timeout,
            sentinels: &[],
            master: "",
            sentinel_password: None,
            min_replicas: 0,
            min_replicas_timeout: Duration::ZERO,
            fleet_secret: "",
        })
    }

    /// A store as `settings` say: on `url`'s server, or on the primary the sentinels name.
    /// Does not connect: the first call does.
    pub fn open(settings: &RedisSettings<'_>) -> Result<RedisStore<T>, StoreError> {
        let not_redis = |_| StoreError::Misconfigured("the Redis URL is not a Redis URL".into());
        let info =
            redis::IntoConnectionInfo::into_connection_info(settings.url).map_err(not_redis)?;
        // Commands go out as they are written: without TCP_NODELAY, one sent while another
        // awaits its reply would wait for that reply's ACK.
        let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
        let server = if settings.sentinels.is_empty() {
            Server::Direct(redis::Client::open(info.set_tcp_settings(tcp)).map_err(not_redis)?)
        } else {
            let node = SentinelNodeConnectionInfo::default()
                .set_redis_connection_info(info.redis_settings().clone())
                .set_tcp_settings(tcp);
            let sentinels = settings
                .sentinels
                .iter()
                .map(|addr| sentinel_url(addr, settings.sentinel_password))
                .collect::<Result<Vec<_>, _>>()?;
            let client = SentinelClient::build(
                sentinels,
                settings.master.to_owned(),
                Some(node),
                SentinelServerType::Master,
            )
            .map_err(|_| {
                StoreError::Misconfigured("redis: the sentinels are not addresses".into())
            })?;
            Server::Sentinel(tokio::sync::Mutex::new(client))
        };
        let prefix = settings.prefix;
        Ok(RedisStore {
            server,
            prefix: prefix.to_owned(),
            counter_key: [prefix, T::KIND, ":version"].concat(),
            timeout: settings.timeout,
            replicas: (settings.min_replicas, settings.min_replicas_timeout),
            conn: RwLock::new(None),
            connecting: tokio::sync::Mutex::new(()),
            put: Script::new(PUT),
            delete: Script::new(DELETE),
            adopt: Script::new(ADOPT),
            unmark: Script::new(UNMARK),
            gone: Script::new(GONE),
            unindex: Script::new(UNINDEX),
            signer: Signer::new(settings.fleet_secret),
            floor: AtomicU64::new(0),
            counted: AtomicU64::new(0),
            lost: std::sync::Mutex::new(None),
            known: std::sync::Mutex::new(None),
            kind: PhantomData,
        })
    }

    /// The connection made, if it is.
    fn made(&self) -> Option<Made> {
        self.conn.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The connection, and the store's name as events carry it (`redis:<id>`).
    pub(super) async fn conn(&self) -> Result<(ConnectionManager, String), StoreError> {
        let (conn, name, _) = self.made_for_write().await?;
        Ok((conn, name))
    }

    /// The connection, the store's name, and the tally of the writes answered on it.
    pub(super) async fn made_for_write(&self) -> Result<Made, StoreError> {
        if let Some(made) = self.made() {
            return Ok(made);
        }
        let _one = self.connecting.lock().await;
        if let Some(made) = self.made() {
            return Ok(made);
        }
        let (conn, name) = self.connect().await?;
        let made = (conn, name, Arc::default());
        *self.conn.write().unwrap_or_else(|p| p.into_inner()) = Some(made.clone());
        Ok(made)
    }

    /// `e` as the store's error. Behind sentinels, an error that says the primary is gone or
    /// is a primary no more (a failover) drops the connection, so that the next call asks
    /// the sentinels which server is the primary now.
    pub(super) fn failed(&self, e: redis::RedisError) -> StoreError {
        use redis::{ErrorKind, ServerErrorKind};
        let moved = e.is_connection_dropped()
            || e.is_io_error()
            || e.is_connection_refusal()
            || e.is_timeout()
            || matches!(
                e.kind(),
                ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
            );
        if moved && matches!(self.server, Server::Sentinel(_)) {
            self.disconnect();
        }
        unavailable(e)
    }

    /// Drop the connection: the next call connects again (and checks the store's id).
    pub(super) fn disconnect(&self) {
        *self.conn.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// `<prefix>store_id`.
    pub(super) fn id_key(&self) -> String {
        format!("{}store_id", self.prefix)
    }

    /// The client of the server to connect to: `redis_url`'s, or the primary the sentinels
    /// name now.
    async fn server(&self) -> Result<redis::Client, StoreError> {
        match &self.server {
            Server::Direct(client) => Ok(client.clone()),
            Server::Sentinel(sentinels) => {
                let asked = async { sentinels.lock().await.async_get_client().await };
                tokio::time::timeout(self.timeout * 2, asked)
                    .await
                    .map_err(|_| StoreError::Redis("the sentinels timed out".into()))?
                    .map_err(unavailable)
            }
        }
    }

    /// A new connection, and the store's name.
    async fn connect(&self) -> Result<(ConnectionManager, String), StoreError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_max_delay(self.timeout);
        let client = self.server().await?;
        let made = tokio::time::timeout(
            self.timeout * 2,
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| StoreError::Redis("connecting timed out".into()))?
        .map_err(|e| self.failed(e))?;
        let name = format!("redis:{}", self.store_id(made.clone()).await?);
        Ok((made, name))
    }

    /// The store's id: the one the first node to connect set, whoever that was. A store
    /// without one that this node knew lost its data (restarted empty, flushed): it gets the
    /// known id back, so that its name stays, and the loss is noted. A store with another
    /// id than the known one is another store.
    async fn store_id(&self, mut conn: ConnectionManager) -> Result<String, StoreError> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let offered = known
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let seen = self.counted.load(Ordering::Relaxed);
        let fingerprint = self.signer.fingerprint(T::KIND);
        let (set, id, counter, fleet): (Option<String>, String, Option<u64>, String) =
            redis::pipe()
                .atomic()
                .cmd("SET")
                .arg(self.id_key())
                .arg(&offered)
                .arg("NX")
                .cmd("GET")
                .arg(self.id_key())
                .cmd("GET")
                .arg(self.counter_key())
                .cmd("SET")
                .arg(self.fleet_key())
                .arg(&fingerprint)
                .arg("NX")
                .ignore()
                .cmd("GET")
                .arg(self.fleet_key())
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
        if fleet != fingerprint {
            // Every subject this node read would look drifted, and every one it wrote would
            // look drifted to the others.
            return Err(StoreError::Misconfigured(format!(
                "redis: this node's {}s fleet_secret is not the one the store's other nodes use",
                T::KIND
            )));
        }
        let name = format!("redis:{id}");
        let counter = counter.unwrap_or(0);
        match known {
            // Unless the loss was found already (its counter went back, and changes since
            // took it to what this process saw again).
            Some(_) if set.is_some() && (counter < seen || seen == 0) => {
                self.lost(&name, counter, seen, StoreLoss::ID_GONE);
            }
            Some(known) if known != id => {
                telemetry::remote::store_renamed(T::KIND, &known, &id);
                // What replicas hold under the known name may be gone: a loss, whose
                // snapshot tells them the present under the new one.
                self.lost(&name, counter, seen, StoreLoss::RENAMED);
            }
            _ => self.counter_read(&name, counter, seen),
        }
        *self.known.lock().unwrap_or_else(|p| p.into_inner()) = Some(id.clone());
        Ok(id)
    }
}
