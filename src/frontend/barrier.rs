//! The read barrier (`visibility = "quorum"`): before any part of a response goes to the
//! client, the primary's binlog position is read (by the probe, after that part arrived) and
//! the part waits until the quorum holds it. MariaDB writes a transaction to its binlog before
//! the engine commits it, so nothing the part can reveal is past that position.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use super::commits::ResponseCommits;
use super::session::Session;
use crate::commit::Unresolved;
use crate::durability::{GtidPosition, OnTimeout};
use crate::error::Error;
use crate::probe::ProbeError;

/// First pause before asking a failed probe again; it doubles up to [`RETRY_AT_MOST`].
const RETRY_FIRST: Duration = Duration::from_millis(10);
const RETRY_AT_MOST: Duration = Duration::from_secs(1);

// === impl Session (read barrier) ===

impl Session {
    /// Bounds what is queued for the client by the primary's binlog position; if no reading
    /// can be had, what is queued goes as unresolved (counted, logged, listed in `/status`).
    pub(super) async fn bound_read(&mut self, commits: &mut ResponseCommits) -> Result<(), Error> {
        match self.read_bound().await? {
            Ok(bound) => commits.bounded_read(&bound),
            Err(error) => commits.unbounded(Unresolved::ReadUnbounded {
                error: error.to_string(),
            }),
        }
        Ok(())
    }

    /// The primary's binlog position, read after everything queued arrived. A failed reading
    /// is asked again (the probe reconnects) for as long as `ack_timeout` allows — forever
    /// under `on_timeout = block`, which never lets a response go unbounded.
    async fn read_bound(&mut self) -> Result<Result<Arc<GtidPosition>, Arc<ProbeError>>, Error> {
        let Some(probe) = self.shared.probe.clone() else {
            // Configuration refuses the barrier without a probe account.
            return Ok(Err(Arc::new(ProbeError::NotConfigured)));
        };
        let since = Instant::now();
        let mut pause = RETRY_FIRST;
        loop {
            let reading = self.while_watching_client(probe.binlog_position()).await?;
            let metrics = &self.shared.metrics;
            match reading {
                Ok(bound) => {
                    metrics.probe_bounds.with_label_values(&["ok"]).inc();
                    return Ok(Ok(bound));
                }
                Err(error) => {
                    metrics.probe_bounds.with_label_values(&["failed"]).inc();
                    let config = self.shared.durability.config();
                    let waited = since.elapsed();
                    if config.on_timeout != OnTimeout::Block && waited >= config.ack_timeout {
                        warn!(connection_id = self.connection_id, %error, ?waited, "the probe could not read the primary's binlog position: the response goes unbounded");
                        return Ok(Err(error));
                    }
                    if pause == RETRY_FIRST {
                        warn!(connection_id = self.connection_id, %error, "the probe could not read the primary's binlog position: the response waits and asks again");
                    }
                    self.while_watching_client(tokio::time::sleep(pause))
                        .await?;
                    pause = (pause * 2).min(RETRY_AT_MOST);
                }
            }
        }
    }
}
