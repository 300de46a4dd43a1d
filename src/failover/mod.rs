//! Failover: the fence, the primary strongsync follows and its epoch, and the state that must
//! outlive strongsync's own restart, kept in the [state file](state). The admin port's calls
//! that change any of it need the [admin token](token).
//!
//! [`Control`] is the one place these change. Each change is written to the state file before
//! the call that made it returns; strong sync's positions are written behind, at most every
//! `failover.state_interval` ([`Control::write_behind`]).

mod state;
mod token;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use strongsync_proto::gtid::GtidSet;
use thiserror::Error;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::{Config, ConfigError};
use crate::durability::{Durability, Fence};
use crate::metrics::Metrics;
pub use state::{State, StateError};
pub use token::{AdminToken, Refusal};

/// The fence, the epoch and the primary, and where they are kept.
pub struct Control {
    durability: Arc<Durability>,
    metrics: Arc<Metrics>,
    path: Option<PathBuf>,
    token: Option<AdminToken>,
    fence_drain: Duration,
    /// Held across a change and its write, so changes (and writes) happen one at a time.
    upstream: tokio::sync::Mutex<Upstream>,
    /// The primary sessions connect to now, with its epoch, for readers that must not wait.
    current: tokio::sync::watch::Sender<(u64, String)>,
}

/// Which primary, in which epoch, and the ones retired.
#[derive(Debug, Clone)]
struct Upstream {
    epoch: u64,
    primary: String,
    retired: Vec<String>,
    /// The strong-sync version last written.
    written: Option<u64>,
}

/// What a fence did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceReport {
    /// The epoch fenced.
    pub epoch: u64,
    /// False if the fence was already up (nothing changed).
    pub newly: bool,
    /// Every fence's tail so far.
    pub tail: GtidSet,
}

/// Why a control call failed.
#[derive(Debug, Error)]
pub enum ControlError {
    /// The change was made in memory but could not be written: it would not survive a
    /// restart.
    #[error("{0}; the change is in force but would not survive a restart of strongsync")]
    NotSaved(#[source] StateError),
}

// === impl Control ===

impl Control {
    /// Reads the state file (if one is configured) and gives strong sync back what it kept.
    /// The file's primary and epoch win over the configuration's `primary`: a primary that
    /// was followed away from is never used again because a config file still names it.
    ///
    /// # Errors
    /// [`ControlStartError`]: an unreadable state file or token file.
    pub fn start(
        config: &Config,
        durability: Arc<Durability>,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Self>, ControlStartError> {
        let token = config
            .failover
            .admin_token_file
            .as_deref()
            .map(AdminToken::read)
            .transpose()?;
        let path = config.failover.state_file.clone();
        let kept = path.as_deref().map(State::load).transpose()?.flatten();
        let upstream = match kept {
            Some(kept) => {
                if kept.primary != config.primary {
                    let retired = kept.retired.contains(&config.primary);
                    warn!(
                        configured = %config.primary,
                        followed = %kept.primary,
                        epoch = kept.epoch,
                        retired,
                        "the state file's primary wins over the configured one (strongsync follow changes it)"
                    );
                }
                info!(epoch = kept.epoch, primary = %kept.primary, fenced = kept.durability.fence.is_some(), "state file read back");
                durability.restore(kept.durability);
                Upstream {
                    epoch: kept.epoch,
                    primary: kept.primary,
                    retired: kept.retired,
                    written: None,
                }
            }
            None => Upstream {
                epoch: 1,
                primary: config.primary.clone(),
                retired: Vec::new(),
                written: None,
            },
        };
        let control = Arc::new(Control {
            current: tokio::sync::watch::Sender::new((upstream.epoch, upstream.primary.clone())),
            durability,
            metrics,
            path,
            token,
            fence_drain: config.failover.fence_drain,
            upstream: tokio::sync::Mutex::new(upstream),
        });
        control.refresh_metrics();
        Ok(control)
    }

    /// The primary sessions connect to now.
    pub fn primary(&self) -> String {
        self.current.borrow().1.clone()
    }

    /// The epoch now.
    pub fn epoch(&self) -> u64 {
        self.current.borrow().0
    }

    /// The admin token, if one is configured.
    pub fn token(&self) -> Option<&AdminToken> {
        self.token.as_ref()
    }

    /// Fences the primary of the current epoch (see [`Durability::fence`]) and writes the
    /// fence to the state file before returning. Idempotent.
    ///
    /// # Errors
    /// [`ControlError::NotSaved`]: fenced, but the state file could not be written.
    pub async fn fence(&self, reason: &str) -> Result<FenceReport, ControlError> {
        let mut upstream = self.upstream.lock().await;
        let (Fence { epoch }, newly) = self
            .durability
            .fence(upstream.epoch, self.fence_drain)
            .await;
        let tail = self.durability.tail();
        if newly {
            warn!(epoch, primary = %upstream.primary, %reason, tail = %tail, "primary FENCED: nothing of it is relayed or acknowledged until strongsync follows a new primary");
        } else {
            info!(epoch, %reason, "fence requested again: already fenced");
        }
        self.refresh_metrics();
        self.save(&mut upstream).await?;
        Ok(FenceReport { epoch, newly, tail })
    }

    /// Writes the state file when strong sync's positions changed, at most every
    /// `interval`, until `cancel` fires (then once more).
    pub async fn write_behind(self: Arc<Self>, interval: Duration, cancel: CancellationToken) {
        if self.path.is_none() {
            return;
        }
        let mut every = tokio::time::interval(interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stop = tokio::select! {
                () = cancel.cancelled() => true,
                _ = every.tick() => false,
            };
            let mut upstream = self.upstream.lock().await;
            if upstream.written != Some(self.durability.version()) {
                // A failure is counted and logged; the next tick tries again.
                let _ = self.save(&mut upstream).await;
            }
            drop(upstream);
            if stop {
                return;
            }
        }
    }

    /// Writes the state file now (if one is configured).
    async fn save(&self, upstream: &mut Upstream) -> Result<(), ControlError> {
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        let (version, durability) = self.durability.persisted();
        let state = State {
            epoch: upstream.epoch,
            primary: upstream.primary.clone(),
            retired: upstream.retired.clone(),
            durability,
        };
        let saved = tokio::task::spawn_blocking(move || state.save(&path))
            .await
            .unwrap_or_else(|join| {
                Err(StateError::Io {
                    path: self.path.clone().unwrap_or_default(),
                    source: std::io::Error::other(join.to_string()),
                })
            });
        match saved {
            Ok(()) => {
                upstream.written = Some(version);
                self.metrics.state_writes.with_label_values(&["ok"]).inc();
                Ok(())
            }
            Err(e) => {
                self.metrics
                    .state_writes
                    .with_label_values(&["failed"])
                    .inc();
                error!(error = %e, "state file not written");
                Err(ControlError::NotSaved(e))
            }
        }
    }

    fn refresh_metrics(&self) {
        let m = &self.metrics;
        m.fenced.set(i64::from(self.durability.fenced()));
        m.epoch.set(i64::try_from(self.epoch()).unwrap_or(i64::MAX));
        m.tail_gtids
            .set(i64::try_from(self.durability.tail().len()).unwrap_or(i64::MAX));
    }
}

/// Why failover control could not start.
#[derive(Debug, Error)]
pub enum ControlStartError {
    /// The token file.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The state file.
    #[error(transparent)]
    State(#[from] StateError),
}
