//! A new leader's takeover: it reads the state the last leader left in etcd, opens an epoch of
//! its own, and follows the primary if that answers and was not fenced, or promotes a replica
//! under the same rules as `strongsync promote` (the candidate must hold the whole
//! GTID). Until it is done the instance relays and releases nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;

use tracing::{info, warn};

use super::candidate;
use super::{Control, ControlError, KnownPrimary, State, StateError, Store};
use crate::cluster::{Takeover, TakeoverFailed};

impl Takeover for Control {
    fn take_over(&self) -> Pin<Box<dyn Future<Output = Result<(), TakeoverFailed>> + Send + '_>> {
        Box::pin(async move { Ok(self.take_over_now().await?) })
    }

    fn stepped_down(&self) {
        self.taken_over.store(false, Ordering::SeqCst);
    }
}

impl Control {
    /// See the module's documentation.
    ///
    /// # Errors
    /// [`ControlError`]: no state in etcd, or one that cannot be read or written. A promote
    /// that finds no candidate is not an error: the leader stays fenced, and says so.
    pub async fn take_over_now(&self) -> Result<(), ControlError> {
        let Store::Cluster(cluster) = &self.store else {
            return Ok(());
        };
        let json = cluster
            .read_state()
            .await
            .map_err(|e| ControlError::NotSaved(StateError::Cluster(e)))?
            .ok_or(ControlError::NoClusterState)?;
        let kept = State::from_json(&json).map_err(ControlError::ClusterStateCorrupt)?;
        let fenced = kept.durability.fence.is_some();
        let mut upstream = self.upstream.lock().await;
        // From here on what this instance holds is the cluster's state: it may write it.
        self.taken_over.store(true, Ordering::SeqCst);
        info!(epoch = kept.epoch, primary = %kept.primary.address, fenced, "takeover: the cluster's state read back");
        self.durability
            .start_epoch(kept.epoch, kept.primary.address.clone());
        self.durability.restore(kept.durability);
        upstream.epoch = kept.epoch;
        upstream.primary = kept.primary;
        upstream.retired = kept.retired;
        upstream.written = None;
        let answers = !fenced && self.primary_answers(&upstream.primary).await;
        if answers {
            // The primary goes on, in an epoch of this leader's: whatever the last leader
            // still had open belongs to the one before.
            upstream.epoch += 1;
            let primary = upstream.primary.address.clone();
            self.durability
                .open_epoch(upstream.epoch, primary.clone(), self.fence_drain)
                .await;
            self.current.send_replace((upstream.epoch, primary.clone()));
            self.save(&mut upstream).await?;
            self.refresh_metrics();
            warn!(epoch = upstream.epoch, %primary, "takeover: following the primary in a new epoch");
            return Ok(());
        }
        self.current
            .send_replace((upstream.epoch, upstream.primary.address.clone()));
        drop(upstream);
        warn!(
            fenced,
            "takeover: the primary is fenced or does not answer: promoting"
        );
        match self.promote().await {
            Ok(report) => {
                warn!(
                    server_id = report.server_id,
                    epoch = report.follow.epoch,
                    "takeover: promoted"
                );
                Ok(())
            }
            Err(e @ ControlError::NotSaved(_)) => Err(e),
            Err(e) => {
                // The fence stays: an operator follows or promotes by hand.
                warn!(error = %e, "takeover: nothing promoted; the primary stays fenced");
                Ok(())
            }
        }
    }

    /// Whether `primary` answers the probe account, as the server it was.
    async fn primary_answers(&self, primary: &KnownPrimary) -> bool {
        let Some(account) = &self.account else {
            // Nothing to look with: it is taken as it was.
            return true;
        };
        let addr = &primary.address;
        match candidate::inspect(addr, account, self.connect_timeout).await {
            Ok(seen) => {
                let same = primary.identity.is_none_or(|known| known == seen.identity);
                if !same {
                    warn!(primary = %addr, found = %seen.identity, "takeover: the primary's address reaches another server");
                }
                same
            }
            Err(problem) => {
                warn!(primary = %addr, %problem, "takeover: the primary does not answer");
                false
            }
        }
    }
}
