//! The connection calls go over: one multiplexed connection to one Redis,
//! or a cluster client's connections to every node; and which errors mean
//! "not reached" rather than "answered about this call".

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// How new connections are made.
pub(super) enum Client {
    One(redis::Client, ConnectionManagerConfig),
    /// The client, and the bound on connecting to a node and on its
    /// answer.
    #[cfg(feature = "redis-cluster")]
    Cluster(redis::cluster::ClusterClient, std::time::Duration),
}

impl Client {
    /// A connection that connects on first use.
    pub(super) fn connect(&self) -> redis::RedisResult<Conn> {
        match self {
            Client::One(client, manager) => Ok(Conn::One(ConnectionManager::new_lazy_with_config(
                client.clone(),
                manager.clone(),
            )?)),
            #[cfg(feature = "redis-cluster")]
            Client::Cluster(client, timeout) => Ok(Conn::Cluster(
                client.get_pending_async_connection_with_config(cluster_config(*timeout)),
            )),
        }
    }

    /// A cluster connection made now: every node it can reach connected
    /// and the slot map read, so that it can be swapped in without making
    /// the calls after it wait for that. `None` for one Redis.
    #[cfg(feature = "redis-cluster")]
    pub(super) async fn connect_now(&self) -> Option<redis::RedisResult<Conn>> {
        match self {
            Client::One(..) => None,
            Client::Cluster(client, timeout) => Some(
                client
                    .get_async_connection_with_config(cluster_config(*timeout))
                    .await
                    .map(Conn::Cluster),
            ),
        }
    }
}

/// A cluster connection's bounds: on connecting to a node, and on its
/// answer.
#[cfg(feature = "redis-cluster")]
fn cluster_config(timeout: std::time::Duration) -> redis::cluster::ClusterConfig {
    redis::cluster::ClusterConfig::new()
        .set_connection_timeout(timeout)
        .set_response_timeout(timeout)
}

/// One multiplexed connection, or a cluster client's connections to every
/// node.
#[derive(Clone)]
pub(super) enum Conn {
    One(ConnectionManager),
    #[cfg(feature = "redis-cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::One(c) => c.req_packed_command(cmd),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::One(c) => c.req_packed_commands(cmd, offset, count),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::One(c) => c.get_db(),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Whether `e` says the server was not reached (or the connection broke),
/// rather than that it answered this call with an error. A server that
/// answers that it cannot take writes now (`READONLY`: a master demoted to
/// a replica by a failover that left it up, behind a DNS name or a proxy
/// that now points elsewhere; `MASTERDOWN`, `LOADING`, `TRYAGAIN`,
/// `CLUSTERDOWN`) counts too: the answer is a new connection, not an error
/// about this key.
pub(super) fn unreachable(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::ReadOnly
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
            )
        )
}
