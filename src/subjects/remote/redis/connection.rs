//! The Redis store's connection: made on first use, to `redis_url`'s server or to the
//! primary the sentinels name, and, behind sentinels, made again on the primary they name
//! after one fails.

use std::marker::PhantomData;
use std::sync::atomic::AtomicU64;
use std::sync::RwLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::Script;

use super::scripts::{DELETE, PUT};
use super::RedisStore;
use crate::config::RedisSettings;
use crate::store::StoreError;
use crate::subjects::remote::RemoteSubject;

/// Where the store finds its server.
pub(super) enum Server {
    /// One address (`redis_url`): the connection manager reconnects to it by itself.
    Direct(redis::Client),
    /// The primary the sentinels name, asked for again once a connection to it fails.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

pub(super) fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {}", e.kind_description()))
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
    let bad = |_| StoreError::Unavailable("redis: a sentinel is not host:port".into());
    let mut url = url::Url::parse(&format!("redis://{addr}")).map_err(bad)?;
    if let Some(password) = password {
        url.set_password(Some(password))
            .map_err(|()| StoreError::Unavailable("redis: a sentinel is not host:port".into()))?;
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
        })
    }

    /// A store as `settings` say: on `url`'s server, or on the primary the sentinels name.
    /// Does not connect: the first call does.
    pub fn open(settings: &RedisSettings<'_>) -> Result<RedisStore<T>, StoreError> {
        let not_redis = |_| StoreError::Unavailable("the Redis URL is not a Redis URL".into());
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
                StoreError::Unavailable("redis: the sentinels are not addresses".into())
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
            floor: AtomicU64::new(0),
            counted: AtomicU64::new(0),
            lost: std::sync::Mutex::new(None),
            kind: PhantomData,
        })
    }

    /// The connection made, if it is.
    fn made(&self) -> Option<(ConnectionManager, String)> {
        self.conn.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The connection, and the store's name as events carry it (`redis:<id>`).
    pub(super) async fn conn(&self) -> Result<(ConnectionManager, String), StoreError> {
        if let Some(made) = self.made() {
            return Ok(made);
        }
        let _one = self.connecting.lock().await;
        if let Some(made) = self.made() {
            return Ok(made);
        }
        let made = self.connect().await?;
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
            *self.conn.write().unwrap_or_else(|p| p.into_inner()) = None;
        }
        unavailable(e)
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
                    .map_err(|_| StoreError::Unavailable("redis: the sentinels timed out".into()))?
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
        .map_err(|_| StoreError::Unavailable("redis: connecting timed out".into()))?
        .map_err(|e| self.failed(e))?;
        let name = format!("redis:{}", self.store_id(made.clone()).await?);
        Ok((made, name))
    }

    /// The store's id: the one the first node to connect set, whoever that was.
    async fn store_id(&self, mut conn: ConnectionManager) -> Result<String, StoreError> {
        let key = format!("{}store_id", self.prefix);
        let (id,): (String,) = redis::pipe()
            .cmd("SET")
            .arg(&key)
            .arg(uuid::Uuid::new_v4().to_string())
            .arg("NX")
            .ignore()
            .cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(id)
    }
}
