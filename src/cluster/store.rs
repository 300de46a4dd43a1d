//! The cluster's failover state in etcd, under its prefix: read by a new leader, and written
//! only in a transaction guarded on the writer's lease (the leader key still holds this
//! instance, on the lease it leads with), so that a deposed leader's write fails.

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp};
use thiserror::Error;

use super::{Cluster, Standing, CALL_TIMEOUT};

/// The state's key under the prefix.
const STATE: &str = "state";

/// Why the state could not be read or written.
#[derive(Debug, Error)]
pub enum StoreError {
    /// This instance does not hold the lease (any more): nothing it writes counts.
    #[error("not written: this instance does not lead the cluster (its lease is gone)")]
    NotLeading,
    /// This instance has not reached etcd yet.
    #[error("etcd: not connected yet")]
    NotConnected,
    /// etcd did not answer within `CALL_TIMEOUT`.
    #[error("etcd: no answer in time")]
    NoAnswer,
    /// etcd refused, or the connection failed.
    #[error("etcd: {0}")]
    Etcd(#[source] etcd_client::Error),
    /// A new cluster's state exists already.
    #[error("the cluster's state exists already at {key}: init-state creates only a new one")]
    Exists {
        /// The state's key in etcd.
        key: String,
    },
}

impl Cluster {
    /// The state the last leader wrote, if any.
    ///
    /// # Errors
    /// [`StoreError::NotConnected`], [`StoreError::NoAnswer`], [`StoreError::Etcd`].
    pub async fn read_state(&self) -> Result<Option<Vec<u8>>, StoreError> {
        let mut client = self.client().await?;
        let answer = call(client.get(self.key(STATE), None)).await?;
        Ok(answer.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// Writes `state`, if this instance still leads on the lease it won.
    ///
    /// # Errors
    /// [`StoreError::NotLeading`]: the guard failed (or this instance does not lead);
    /// [`StoreError::NotConnected`], [`StoreError::NoAnswer`], [`StoreError::Etcd`].
    pub async fn write_state(&self, state: Vec<u8>) -> Result<(), StoreError> {
        let Standing::Leading { lease, .. } = *self.standing.borrow() else {
            return Err(StoreError::NotLeading);
        };
        let leader = self.key("leader");
        let me = serde_json::to_vec(&self.me).unwrap_or_default();
        let txn = Txn::new()
            .when([
                Compare::value(leader.clone(), CompareOp::Equal, me),
                Compare::lease(leader, CompareOp::Equal, lease),
            ])
            .and_then([TxnOp::put(self.key(STATE), state, None)]);
        let mut client = self.client().await?;
        if call(client.txn(txn)).await?.succeeded() {
            Ok(())
        } else {
            Err(StoreError::NotLeading)
        }
    }

    async fn client(&self) -> Result<Client, StoreError> {
        self.client.get().cloned().ok_or(StoreError::NotConnected)
    }
}

/// Writes a new cluster's state under `prefix` in the etcd at `endpoints`, unless one exists
/// (`strongsync init-state` with a `[cluster]`).
///
/// # Errors
/// [`StoreError::Exists`], [`StoreError::NoAnswer`], [`StoreError::Etcd`].
pub async fn create_state(
    endpoints: &[String],
    options: ConnectOptions,
    prefix: &str,
    state: Vec<u8>,
) -> Result<String, StoreError> {
    let key = format!("{}/{STATE}", prefix.trim_end_matches('/'));
    let mut client = call(Client::connect(endpoints, Some(options))).await?;
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key.clone(), state, Some(PutOptions::new()))]);
    if call(client.txn(txn)).await?.succeeded() {
        Ok(key)
    } else {
        Err(StoreError::Exists { key })
    }
}

/// One call to etcd, within [`CALL_TIMEOUT`].
pub(super) async fn call<T>(
    request: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(CALL_TIMEOUT, request)
        .await
        .map_err(|_| StoreError::NoAnswer)?
        .map_err(StoreError::Etcd)
}
