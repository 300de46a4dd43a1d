//! Every instance of the cluster, as etcd knows it: each keeps `<prefix>/members/<name>` on a
//! lease of its own while it runs, so that `strongsync status` on any of them lists them all
//! and one that died drops off within its lease.

use std::time::Duration;

use etcd_client::{Client, GetOptions, PutOptions};
use tokio_util::sync::CancellationToken;

use super::{Cluster, Member, CALL_TIMEOUT};

impl Cluster {
    /// Keeps this instance's member key until `cancel` fires (then deletes it).
    pub(super) async fn stay_present(&self, mut client: Client, cancel: CancellationToken) {
        let key = self.key(&format!("members/{}", self.me.name));
        let value = serde_json::to_vec(&self.me).unwrap_or_default();
        let ttl = i64::try_from(self.ttl.as_secs().max(2)).unwrap_or(i64::MAX);
        while !cancel.is_cancelled() {
            let kept = async {
                let lease = client.lease_grant(ttl, None).await?.id();
                client
                    .put(
                        key.clone(),
                        value.clone(),
                        Some(PutOptions::new().with_lease(lease)),
                    )
                    .await?;
                let (mut keeper, mut answers) = client.lease_keep_alive(lease).await?;
                loop {
                    tokio::time::sleep(self.ttl / 3).await;
                    keeper.keep_alive().await?;
                    match answers.message().await? {
                        Some(answer) if answer.ttl() > 0 => {}
                        _ => return Ok::<(), etcd_client::Error>(()),
                    }
                }
            };
            tokio::select! {
                () = cancel.cancelled() => {}
                _ = kept => {
                    // Lost (etcd away, or the lease expired): again, once etcd answers.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        let _ = tokio::time::timeout(CALL_TIMEOUT, client.delete(key, None)).await;
    }

    /// Every instance present now, by name.
    ///
    /// # Errors
    /// What etcd said.
    pub async fn members(&self) -> Result<Vec<Member>, String> {
        let mut client = self
            .client
            .get()
            .cloned()
            .ok_or_else(|| "not connected to etcd yet".to_owned())?;
        let prefix = self.key("members/");
        let answer = super::store::call(client.get(prefix, Some(GetOptions::new().with_prefix())))
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer
            .kvs()
            .iter()
            .filter_map(|kv| serde_json::from_slice::<Member>(kv.value()).ok())
            .collect())
    }
}
