//! Bounds read by the probe, strongsync's own connection to the primary, for one session's
//! responses.

// The primary's binlog position, read after a response arrived, holds everything the response
// may have committed or revealed. The read barrier (`visibility = "quorum"`) reads one before
// any part of a response goes to the client, asking again while the timeout policy allows; a
// response whose commits could not be learnt is bounded by one reading, or released as
// unresolved.

use std::sync::Arc;
use std::time::Duration;

use strongsync_proto::gtid::GtidPosition;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::commit::Unresolved;
use crate::config::{DurabilityConfig, OnTimeout};
use crate::durability::Door;
use crate::error::Error;
use crate::flavour::Flavour;
use crate::legs::Legs;
use crate::metrics::Metrics;
use crate::probe::{Probe, ProbeError, Reading};

/// First pause before asking a failed probe again; it doubles up to [`RETRY_AT_MOST`].
const RETRY_FIRST: Duration = Duration::from_millis(10);
const RETRY_AT_MOST: Duration = Duration::from_secs(1);

/// The bounds of one session's responses.
pub(crate) struct Bounds<'s> {
    /// strongsync's own connection to the primary, if an account is configured.
    probe: Option<&'s Probe>,
    /// Strong sync's live timeout policy, which says how long a failing probe is asked again.
    door: &'s Door,
    metrics: &'s Metrics,
    flavour: Flavour,
    connection_id: u32,
}

/// How long the read barrier goes on asking a failing probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Retry {
    since: Instant,
    pause: Duration,
}

/// What to do after a failed reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterFailure {
    /// Pause this long, then ask again.
    AskAgain(Duration),
    /// `ack_timeout` has passed: the response goes unbounded.
    GiveUp,
}

// === impl Bounds ===

impl<'s> Bounds<'s> {
    pub(crate) fn new(
        probe: Option<&'s Probe>,
        door: &'s Door,
        metrics: &'s Metrics,
        flavour: Flavour,
        connection_id: u32,
    ) -> Self {
        Bounds {
            probe,
            door,
            metrics,
            flavour,
            connection_id,
        }
    }

    /// The primary's id for the session's connection.
    pub(crate) fn connection_id(&self) -> u32 {
        self.connection_id
    }

    /// What is held must go before the session can say what it committed (or the session
    /// cannot say, for `reason`): the primary's binlog position, read once on strongsync's own
    /// connection, bounds it; `None` without a probe, or if the reading failed.
    pub(crate) async fn bound_once(
        &self,
        legs: &mut Legs,
        reason: &Unresolved,
    ) -> Result<Option<Arc<GtidPosition>>, Error> {
        let Some(probe) = self.probe else {
            return Ok(None);
        };
        let reading = legs
            .while_watching_client(probe.binlog_position(self.flavour))
            .await?;
        self.count(&reading);
        Ok(match reading {
            Ok(bound) => {
                debug!(connection_id = self.connection_id, %bound, %reason, "response bounded by the primary's binlog position");
                Some(bound)
            }
            Err(error) => {
                warn!(connection_id = self.connection_id, %error, "the probe could not read the primary's binlog position");
                None
            }
        })
    }

    /// Under the read barrier, the primary's binlog position, read after everything queued
    /// arrived. A failed reading is asked again (the probe reconnects) for as long as
    /// `ack_timeout` allows — forever under `on_timeout = block`, which never lets a response
    /// go unbounded; the last error once it gives up.
    pub(crate) async fn read_bound(
        &self,
        legs: &mut Legs,
    ) -> Result<Result<Arc<GtidPosition>, Arc<ProbeError>>, Error> {
        let Some(probe) = self.probe else {
            // Configuration refuses the barrier without a probe account.
            return Ok(Err(Arc::new(ProbeError::NotConfigured)));
        };
        let mut retry = Retry::new(Instant::now());
        loop {
            let reading = legs
                .while_watching_client(probe.binlog_position(self.flavour))
                .await?;
            self.count(&reading);
            let error = match reading {
                Ok(bound) => return Ok(Ok(bound)),
                Err(error) => error,
            };
            let first = retry.pause == RETRY_FIRST;
            match retry.after_failure(&self.door.settings(), Instant::now()) {
                AfterFailure::GiveUp => {
                    warn!(connection_id = self.connection_id, %error, waited = ?retry.since.elapsed(), "the probe could not read the primary's binlog position: the response goes unbounded");
                    return Ok(Err(error));
                }
                AfterFailure::AskAgain(pause) => {
                    if first {
                        warn!(connection_id = self.connection_id, %error, "the probe could not read the primary's binlog position: the response waits and asks again");
                    }
                    legs.while_watching_client(tokio::time::sleep(pause))
                        .await?;
                }
            }
        }
    }

    fn count(&self, reading: &Reading) {
        let result = if reading.is_ok() { "ok" } else { "failed" };
        self.metrics.probe_bounds.with_label_values(&[result]).inc();
    }
}

// === impl Retry ===

impl Retry {
    fn new(since: Instant) -> Self {
        Retry {
            since,
            pause: RETRY_FIRST,
        }
    }

    /// A reading failed at `now`, under `config`: ask again after a pause (doubling each time,
    /// up to [`RETRY_AT_MOST`]), or give up once `ack_timeout` has passed — never under
    /// `on_timeout = block`.
    fn after_failure(&mut self, config: &DurabilityConfig, now: Instant) -> AfterFailure {
        if config.on_timeout != OnTimeout::Block && now - self.since >= config.ack_timeout {
            return AfterFailure::GiveUp;
        }
        let pause = self.pause;
        self.pause = (pause * 2).min(RETRY_AT_MOST);
        AfterFailure::AskAgain(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_probe_is_asked_again_more_slowly_until_the_ack_timeout() {
        let config = |on_timeout| DurabilityConfig {
            on_timeout,
            ack_timeout: Duration::from_secs(3),
            ..DurabilityConfig::default()
        };
        let since = Instant::now();
        let mut retry = Retry::new(since);
        let ms = Duration::from_millis;
        let degrade = config(OnTimeout::Degrade);
        let pauses: Vec<AfterFailure> = (0..9)
            .map(|_| retry.after_failure(&degrade, since + ms(100)))
            .collect();
        let want: Vec<AfterFailure> = [10, 20, 40, 80, 160, 320, 640, 1000, 1000]
            .map(|p| AfterFailure::AskAgain(ms(p)))
            .to_vec();
        assert_eq!(pauses, want);
        assert_eq!(
            retry.after_failure(&degrade, since + ms(3000)),
            AfterFailure::GiveUp
        );
        assert_eq!(
            Retry::new(since).after_failure(&config(OnTimeout::Error), since + ms(3000)),
            AfterFailure::GiveUp
        );
        assert_eq!(
            Retry::new(since).after_failure(&config(OnTimeout::Block), since + ms(3_600_000)),
            AfterFailure::AskAgain(ms(10)),
            "block never lets a response go unbounded"
        );
    }
}
