//! Failover: the fence, the primary strongsync follows and its epoch, and the state that must
//! outlive strongsync's own restart, kept in the [state file](state). The admin port's calls
//! that change any of it need the [admin token](token).
//!
//! [`Control`] is the one place these change. Each change is written to the state file before
//! the call that made it returns; strong sync's positions are written behind, at most every
//! `failover.state_interval` ([`Control::write_behind`]).

mod candidate;
mod promote;
mod state;
mod token;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use strongsync_proto::gtid::GtidSet;
use thiserror::Error;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::{Config, ConfigError, ProbeAccount};
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
    /// The probe's account, which checks a primary before it is followed.
    account: Option<ProbeAccount>,
    connect_timeout: Duration,
    /// The account promote logs in to the replicas with, and their addresses.
    promote_account: Option<ProbeAccount>,
    replicas: Vec<(u32, String)>,
    apply_timeout: Duration,
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

/// What a follow did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowReport {
    /// The new epoch.
    pub epoch: u64,
    /// The primary followed now.
    pub primary: String,
    /// The one retired.
    pub retired: String,
    /// Acknowledged GTIDs the new primary lacks (a forced follow only).
    pub lacking: String,
}

/// What a promote did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromoteReport {
    /// The replica promoted.
    pub server_id: u32,
    /// The follow that ended it.
    pub follow: FollowReport,
    /// Every replica looked at: its `server_id`, what it had received, or why it could not be
    /// looked at.
    pub looked: Vec<(u32, Result<String, String>)>,
}

/// How a follow is asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Follow {
    /// `HOST:PORT` or a Unix socket's path.
    pub primary: String,
    /// Follow even if it lacks acknowledged commits (counted and logged).
    pub force: bool,
    /// Follow even a primary followed before (the operator says it is safe again).
    pub allow_retired: bool,
}

/// Why a control call failed.
#[derive(Debug, Error)]
pub enum ControlError {
    /// The change was made in memory but could not be written: it would not survive a
    /// restart.
    #[error("{0}; the change is in force but would not survive a restart of strongsync")]
    NotSaved(#[source] StateError),
    /// No account to check a primary with.
    #[error("refused: following a primary needs the [probe] account, to check it first")]
    NoAccount,
    /// It was followed before.
    #[error("refused: {0} was followed before (a retired primary is never followed again unless allow_retired is given)")]
    Retired(String),
    /// It could not be checked.
    #[error("refused: cannot check {addr}: {problem}")]
    Unreachable {
        /// The primary named.
        addr: String,
        /// Why.
        problem: String,
    },
    /// It is read-only.
    #[error("refused: {0} is read-only (read_only or super_read_only is on)")]
    ReadOnly(String),
    /// It still replicates.
    #[error("refused: {addr} still replicates (channels {channels:?}); stop and reset its replication first")]
    Replicating {
        /// The primary named.
        addr: String,
        /// Its running channels.
        channels: Vec<String>,
    },
    /// It lacks acknowledged commits.
    #[error("refused: {addr} lacks acknowledged transactions {lacking} (follow with force to accept losing them)")]
    Lacks {
        /// The primary named.
        addr: String,
        /// What it lacks, newest per domain.
        lacking: String,
    },
    /// Reinstate names a primary that is not retired.
    #[error("refused: {0} is not a retired primary")]
    NotRetired(String),
    /// Promote has nothing to log in with.
    #[error(
        "refused: promote needs the [failover] account (user, password) and [[replica]] addresses"
    )]
    NoPromoteSetup,
    /// No replica holds every acknowledged commit.
    #[error("no replica holds every acknowledged transaction ({acknowledged}); nothing promoted (the fence stays): {looked}")]
    NoCandidate {
        /// The watermark.
        acknowledged: String,
        /// What each replica had.
        looked: String,
    },
    /// A step of promote failed; rerunning promote picks up from there.
    #[error("promote stopped at server {server_id}: {problem} (the fence stays; rerun promote)")]
    PromoteStep {
        /// The replica being promoted.
        server_id: u32,
        /// The step and why.
        problem: String,
    },
    /// It is a server of the other flavour.
    #[error("refused: {addr} is {found:?}, the replicas are {expected:?}")]
    OtherFlavour {
        /// The primary named.
        addr: String,
        /// What it is.
        found: crate::flavour::Flavour,
        /// What the acknowledged positions are of.
        expected: crate::flavour::Flavour,
    },
}

impl ControlError {
    /// Whether the call was refused (nothing changed), rather than failed half-way.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, ControlError::NotSaved(_))
    }
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
            account: config.probe.account()?,
            connect_timeout: config.timeouts.primary_connect,
            promote_account: config.failover.account()?,
            replicas: config
                .replica
                .iter()
                .filter_map(|r| Some((r.server_id, r.address.clone()?)))
                .collect(),
            apply_timeout: config.failover.promote_apply_timeout,
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

    /// The primary followed, with its epoch, as it changes.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<(u64, String)> {
        self.current.subscribe()
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

    /// Follows a new primary: checks it (reachable with the probe account, writable, not
    /// replicating, holding every acknowledged GTID unless forced), fences the current one if
    /// it is not fenced yet, raises the epoch, retires the old primary, and lifts the fence.
    /// New sessions go to the new primary; replicas reconnect through strongsync by
    /// themselves and start from their own positions. Written to the state file before it
    /// returns.
    ///
    /// # Errors
    /// [`ControlError`]: a refusal changes nothing.
    pub async fn follow(&self, call: &Follow) -> Result<FollowReport, ControlError> {
        let mut upstream = self.upstream.lock().await;
        let addr = call.primary.trim().to_owned();
        if addr == upstream.primary && !self.durability.fenced() {
            // Already followed (a manager's hook called twice): nothing changes.
            info!(primary = %addr, epoch = upstream.epoch, "follow: already following it");
            return Ok(FollowReport {
                epoch: upstream.epoch,
                primary: addr,
                retired: String::new(),
                lacking: String::new(),
            });
        }
        // A follow that stopped half-way (fenced, the new primary written, the fence not yet
        // lifted) left the fence of an earlier epoch: following that primary finishes it.
        let resuming = addr == upstream.primary
            && self
                .durability
                .fence_state()
                .is_some_and(|fence| fence.epoch < upstream.epoch);
        let again = upstream.retired.contains(&addr)
            || (addr == upstream.primary && self.durability.fenced() && !resuming);
        if again && !call.allow_retired {
            return Err(ControlError::Retired(addr));
        }
        let account = self.account.as_ref().ok_or(ControlError::NoAccount)?;
        let candidate = candidate::inspect(&addr, account, self.connect_timeout)
            .await
            .map_err(|problem| ControlError::Unreachable {
                addr: addr.clone(),
                problem,
            })?;
        if candidate.read_only {
            return Err(ControlError::ReadOnly(addr));
        }
        if !candidate.replicating.is_empty() {
            return Err(ControlError::Replicating {
                addr,
                channels: candidate.replicating,
            });
        }
        let acknowledged = self.durability.status().acknowledged;
        let expected = if acknowledged.intervals().next().is_some() {
            Some(crate::flavour::Flavour::MySql)
        } else if acknowledged.is_empty() {
            None
        } else {
            Some(crate::flavour::Flavour::MariaDb)
        };
        if let Some(expected) = expected.filter(|e| *e != candidate.flavour) {
            return Err(ControlError::OtherFlavour {
                addr,
                found: candidate.flavour,
                expected,
            });
        }
        let lacking: Vec<String> = candidate
            .holds
            .missing(&acknowledged)
            .map(ToString::to_string)
            .collect();
        let lacking = lacking.join(",");
        if !lacking.is_empty() {
            if !call.force {
                return Err(ControlError::Lacks { addr, lacking });
            }
            self.metrics.forced_follows.inc();
            warn!(primary = %addr, %lacking, "FORCED follow: the new primary lacks acknowledged transactions, which are lost");
        }
        // The old primary is fenced first: nothing more of it reaches anyone.
        let (Fence { epoch: fenced }, _) = self
            .durability
            .fence(upstream.epoch, self.fence_drain)
            .await;
        let retired = if resuming {
            String::new()
        } else {
            let retired = std::mem::replace(&mut upstream.primary, addr.clone());
            if !upstream.retired.contains(&retired) {
                upstream.retired.push(retired.clone());
            }
            upstream.epoch = upstream.epoch.max(fenced) + 1;
            retired
        };
        // Written fenced and with the new primary first: a crash now comes back fenced, and a
        // follow to the same primary again finishes the job.
        self.save(&mut upstream).await?;
        self.current
            .send_replace((upstream.epoch, upstream.primary.clone()));
        self.durability.unfence();
        let saved = self.save(&mut upstream).await;
        self.refresh_metrics();
        warn!(epoch = upstream.epoch, primary = %addr, %retired, "FOLLOWING a new primary; the old one is retired");
        saved?;
        Ok(FollowReport {
            epoch: upstream.epoch,
            primary: addr,
            retired,
            lacking,
        })
    }

    /// Takes `primary` off the retired list: the operator says it rejoined without its tail
    /// (as a replica, from the current primary's data) and may be followed again. Written to
    /// the state file before it returns.
    ///
    /// # Errors
    /// [`ControlError::NotRetired`] if it is not retired; [`ControlError::NotSaved`].
    pub async fn reinstate(&self, primary: &str) -> Result<(), ControlError> {
        let mut upstream = self.upstream.lock().await;
        let primary = primary.trim();
        let Some(at) = upstream.retired.iter().position(|r| r == primary) else {
            return Err(ControlError::NotRetired(primary.to_owned()));
        };
        upstream.retired.remove(at);
        warn!(%primary, "reinstated: a retired primary may be followed (and promoted) again");
        self.save(&mut upstream).await
    }

    /// The primaries retired.
    pub async fn retired(&self) -> Vec<String> {
        self.upstream.lock().await.retired.clone()
    }

    /// Promotes a replica, for users without a failover manager (see [`promote`]): fences,
    /// picks the replica that holds every acknowledged commit and has received the most, makes
    /// it a primary and follows it. Never promotes one that lacks an acknowledged commit; safe
    /// to rerun after a failure midway.
    ///
    /// # Errors
    /// [`ControlError`]; the fence stays up after any failure past it.
    pub async fn promote(&self) -> Result<PromoteReport, ControlError> {
        let account = self
            .promote_account
            .as_ref()
            .filter(|_| !self.replicas.is_empty())
            .ok_or(ControlError::NoPromoteSetup)?;
        info!("promote: fencing the primary");
        self.fence("promote").await?;
        let acknowledged = self.durability.status().acknowledged;
        let mut looked = Vec::new();
        let mut summary = Vec::new();
        let retired = self.retired().await;
        for (server_id, address) in &self.replicas {
            if retired.contains(address) || *address == self.primary() {
                summary.push((
                    *server_id,
                    Err("a primary strongsync followed (retired; strongsync reinstate makes it a candidate again)".to_owned()),
                ));
                continue;
            }
            match promote::look(*server_id, address, account, self.connect_timeout).await {
                Ok(l) => {
                    info!(server_id, received = %l.received, replicating = l.replicating, "promote: looked at replica");
                    summary.push((*server_id, Ok(l.received.to_string())));
                    looked.push(l);
                }
                Err(problem) => {
                    warn!(server_id, %problem, "promote: cannot look at replica");
                    summary.push((*server_id, Err(problem)));
                }
            }
        }
        let words = || {
            summary
                .iter()
                .map(|(id, r)| match r {
                    Ok(received) => format!("{id}: received {received}"),
                    Err(problem) => format!("{id}: {problem}"),
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        let Some(chosen) = promote::choose(&looked, &acknowledged) else {
            return Err(ControlError::NoCandidate {
                acknowledged: acknowledged.to_string(),
                looked: words(),
            });
        };
        info!(server_id = chosen.server_id, address = %chosen.address, received = %chosen.received, "promote: chosen");
        promote::make_primary(chosen, account, self.connect_timeout, self.apply_timeout)
            .await
            .map_err(|problem| ControlError::PromoteStep {
                server_id: chosen.server_id,
                problem,
            })?;
        let follow = self
            .follow(&Follow {
                primary: chosen.address.clone(),
                force: false,
                allow_retired: false,
            })
            .await?;
        info!(
            server_id = chosen.server_id,
            epoch = follow.epoch,
            "promote: done"
        );
        Ok(PromoteReport {
            server_id: chosen.server_id,
            follow,
            looked: summary,
        })
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
        let started = tokio::time::Instant::now();
        let saved = tokio::task::spawn_blocking(move || state.save(&path))
            .await
            .unwrap_or_else(|join| {
                Err(StateError::Io {
                    path: self.path.clone().unwrap_or_default(),
                    source: std::io::Error::other(join.to_string()),
                })
            });
        self.metrics
            .state_write
            .with_label_values::<&str>(&[])
            .observe(started.elapsed().as_secs_f64());
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

    /// Brings the fence's gauges up to date (on every change, and on each scrape: commits
    /// under `failover.fenced_reads` add to the tail between changes).
    pub fn refresh_metrics(&self) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durability::Persisted;

    #[tokio::test]
    async fn the_state_file_wins_over_the_configured_primary_and_a_retired_one_stays_retired() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        State {
            epoch: 3,
            primary: "10.0.0.2:3306".into(),
            retired: vec!["10.0.0.1:3306".into()],
            durability: Persisted {
                fence: Some(Fence { epoch: 3 }),
                ..Persisted::default()
            },
        }
        .save(&path)
        .unwrap();
        // An old config file still names the first primary.
        let mut config = Config::new("10.0.0.1:3306");
        config.failover.state_file = Some(path);
        let durability = Durability::new(config.durability.clone());
        let control =
            Control::start(&config, Arc::clone(&durability), Arc::new(Metrics::new())).unwrap();
        assert_eq!(
            (control.primary().as_str(), control.epoch()),
            ("10.0.0.2:3306", 3)
        );
        assert!(durability.fenced());
        let back = Follow {
            primary: "10.0.0.1:3306".into(),
            ..Follow::default()
        };
        assert!(matches!(
            control.follow(&back).await,
            Err(ControlError::Retired(addr)) if addr == "10.0.0.1:3306"
        ));
        // Nor is the fenced primary of this epoch followed again without the operator's word.
        let same = Follow {
            primary: "10.0.0.2:3306".into(),
            ..Follow::default()
        };
        assert!(matches!(
            control.follow(&same).await,
            Err(ControlError::Retired(_))
        ));
        // Reinstating takes it off the list (and only what is on it).
        control.reinstate("10.0.0.1:3306").await.unwrap();
        assert!(control.retired().await.is_empty());
        assert!(matches!(
            control.reinstate("10.0.0.9:3306").await,
            Err(ControlError::NotRetired(_))
        ));
    }
}
