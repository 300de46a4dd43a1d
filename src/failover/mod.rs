//! Failover: the fence, the primary strongsync follows and its epoch, the primaries it retired, and
//! the state that must outlive strongsync's own restart, kept in the [state file](state).

mod candidate;
mod error;
mod follow;
mod promote;
mod state;
mod takeover;
mod token;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use strongsync_proto::gtid::GtidSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::cluster::Cluster;
use crate::config::{Config, ProbeAccount};
use crate::durability::{Durability, Fence};
use crate::flavour::ServerIdentity;
use crate::metrics::Metrics;
use crate::tracking_defaults::SessionDefaults;
pub use candidate::CandidateError;
pub use error::{ControlError, ControlStartError};
pub use follow::{Follow, FollowReport, PromoteReport};
pub use promote::{LookedAt, PromoteError, Seen};
pub use state::{KnownPrimary, State, StateError};
pub use token::{AdminToken, Refusal};

/// Where the state is kept.
enum Store {
    /// Nowhere: a restart forgets it.
    Memory,
    /// `failover.state_file`.
    File(PathBuf),
    /// In etcd, written under the cluster's lease.
    Cluster(Arc<Cluster>),
}

/// The fence, the epoch and the primary, and where they are kept.
///
/// The admin port's calls that change any of it need the [admin token](token).
///
/// [`Control`] is the one place these change (the fence and reinstate here, follow and promote in
/// [`follow`]). Each change is written to the state file before the call that made it returns — the
/// fence before it drains; strong sync's positions are written behind, at most every
/// `failover.state_interval` ([`Control::write_behind`]). Primaries are known by their identity as
/// well as their address, so a retired primary is refused however it is spelt.
pub struct Control {
    durability: Arc<Durability>,
    /// What the watch of the primary finds of its session defaults, which sessions read.
    session_defaults: Arc<SessionDefaults>,
    metrics: Arc<Metrics>,
    store: Store,
    token: Option<AdminToken>,
    fence_drain: Duration,
    /// `failover.fenced_reads`: the fence does not wait for statements, which go on.
    fenced_reads: bool,
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
    /// In a cluster: this instance read the cluster's state since it last won the lease, so
    /// what it holds may be written (until then it holds a placeholder, or an older state).
    taken_over: std::sync::atomic::AtomicBool,
    /// The primary followed and those retired as last saved, for readers that must not wait
    /// for a change under way (a promote holds `upstream` for as long as it takes).
    known: std::sync::Mutex<(KnownPrimary, Vec<KnownPrimary>)>,
}

/// Which primary, in which epoch, and the ones retired.
#[derive(Debug, Clone)]
struct Upstream {
    epoch: u64,
    primary: KnownPrimary,
    retired: Vec<KnownPrimary>,
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
    /// Written to the state file (false: none is configured, and a restart forgets it).
    pub persisted: bool,
}

/// What strongsync says of a change when no state file is configured.
pub const NOT_PERSISTED: &str = "nothing was persisted: no failover.state_file is configured, so a restart of strongsync forgets the fence, the epoch and the retired primaries";

// === impl Control ===

impl Control {
    /// Reads the state file (if one is configured) and gives strong sync back what it kept.
    /// The file's primary and epoch win over the configuration's `primary`: a primary that
    /// was followed away from is never used again because a config file still names it.
    ///
    /// # Errors
    /// [`ControlStartError`]: a state file that is missing or unreadable, a token file that
    /// cannot be read or that others may read.
    pub fn start(
        config: &Config,
        durability: Arc<Durability>,
        metrics: Arc<Metrics>,
        cluster: Option<Arc<Cluster>>,
    ) -> Result<Arc<Self>, ControlStartError> {
        let token = config
            .failover
            .admin_token_file
            .as_deref()
            .map(AdminToken::read)
            .transpose()?;
        let (store, kept) = match (cluster, config.failover.state_file.clone()) {
            // A new leader reads the state from etcd before it acts ([`Control::take_over`]).
            (Some(cluster), _) => (Store::Cluster(cluster), State::fresh(&config.primary)),
            (None, Some(path)) => {
                let kept = State::load(&path)?;
                info!(epoch = kept.epoch, primary = %kept.primary.address, fenced = kept.durability.fence.is_some(), "state file read back");
                (Store::File(path), kept)
            }
            (None, None) => {
                warn!("{NOT_PERSISTED}");
                (Store::Memory, State::fresh(&config.primary))
            }
        };
        if kept.primary.address != config.primary {
            let retired = kept.retired.iter().any(|r| r.address == config.primary);
            warn!(
                configured = %config.primary,
                followed = %kept.primary.address,
                epoch = kept.epoch,
                retired,
                "the state file's primary wins over the configured one (strongsync follow changes it)"
            );
        }
        durability.start_epoch(kept.epoch, kept.primary.address.clone());
        durability.restore(kept.durability);
        let upstream = Upstream {
            epoch: kept.epoch,
            primary: kept.primary,
            retired: kept.retired,
            written: None,
        };
        let control = Arc::new(Control {
            session_defaults: Arc::default(),
            known: std::sync::Mutex::new((upstream.primary.clone(), upstream.retired.clone())),
            current: tokio::sync::watch::Sender::new((
                upstream.epoch,
                upstream.primary.address.clone(),
            )),
            durability,
            metrics,
            store,
            token,
            fence_drain: config.failover.fence_drain,
            fenced_reads: config.failover.fenced_reads,
            account: config.probe_account()?,
            connect_timeout: config.timeouts.primary_connect,
            promote_account: config.failover_account()?,
            replicas: config
                .replica
                .iter()
                .filter_map(|r| Some((r.server_id, r.address.clone()?)))
                .collect(),
            apply_timeout: config.failover.promote_apply_timeout,
            upstream: tokio::sync::Mutex::new(upstream),
            taken_over: std::sync::atomic::AtomicBool::new(false),
        });
        control.refresh_metrics();
        Ok(control)
    }

    /// The primary sessions connect to now.
    pub fn primary(&self) -> String {
        self.current.borrow().1.clone()
    }

    /// The primary's session defaults as the watch of the primary last found them.
    pub fn session_defaults(&self) -> &Arc<SessionDefaults> {
        &self.session_defaults
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

    /// Whether changes are written to a state file.
    pub fn persists(&self) -> bool {
        !matches!(self.store, Store::Memory)
    }

    /// The primary followed now, and who it is if that is known (without waiting for a
    /// change under way).
    pub fn followed(&self) -> KnownPrimary {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// Fences the primary of the current epoch (see [`Durability::raise_fence`]): the fence
    /// is written to the state file before anything else, then what was under way drains and
    /// the tail is written too. Idempotent.
    ///
    /// # Errors
    /// [`ControlError::NotSaved`]: fenced, but the state file could not be written.
    pub async fn fence(&self, reason: &str) -> Result<FenceReport, ControlError> {
        self.leading()?;
        let mut upstream = self.upstream.lock().await;
        self.fence_locked(&mut upstream, reason).await
    }

    async fn fence_locked(
        &self,
        upstream: &mut Upstream,
        reason: &str,
    ) -> Result<FenceReport, ControlError> {
        let (Fence { epoch }, newly) = self.durability.raise_fence(upstream.epoch);
        self.refresh_metrics();
        if newly {
            warn!(epoch, primary = %upstream.primary.address, %reason, "primary FENCED: nothing of it is relayed, written or acknowledged until strongsync follows a new primary");
            // Kept before the drain: a crash (or a hook that hangs up) during it still comes
            // back fenced.
            self.save(upstream).await?;
        } else {
            info!(epoch, %reason, "fence requested again: already fenced");
        }
        self.durability
            .drain_fence(self.fence_drain, !self.fenced_reads)
            .await;
        let tail = self.durability.tail();
        if newly {
            info!(epoch, tail = %tail, "fence drained");
        }
        self.refresh_metrics();
        self.save(upstream).await?;
        if !self.persists() {
            warn!(epoch, "fence: {NOT_PERSISTED}");
        }
        Ok(FenceReport {
            epoch,
            newly,
            tail,
            persisted: self.persists(),
        })
    }

    /// Takes `primary` off the retired list: the operator says it rejoined without its tail
    /// (as a replica, from the current primary's data) and may be followed again. Written to
    /// the state file before it returns.
    ///
    /// # Errors
    /// [`ControlError::NotRetired`] if it is not retired; [`ControlError::NotSaved`].
    pub async fn reinstate(&self, primary: &str) -> Result<bool, ControlError> {
        self.leading()?;
        let mut upstream = self.upstream.lock().await;
        let primary = primary.trim();
        let Some(at) = upstream.retired.iter().position(|r| r.address == primary) else {
            return Err(ControlError::NotRetired {
                addr: primary.to_owned(),
            });
        };
        let gone = upstream.retired.remove(at);
        warn!(%primary, identity = ?gone.identity, "reinstated: a retired primary may be followed (and promoted) again");
        self.save(&mut upstream).await?;
        Ok(self.persists())
    }

    /// The primaries retired (without waiting for a change under way).
    pub fn retired(&self) -> Vec<KnownPrimary> {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    /// Checks the primary at start, with the probe account if there is one: learns who it is
    /// (so that another spelling of it is known once it is retired) and, on MySQL, that every
    /// transaction gets a GTID. A primary that cannot be reached now is looked at later
    /// ([`watch_primary`](Self::watch_primary)).
    ///
    /// # Errors
    /// [`ControlStartError::GtidMode`]: a MySQL primary without `gtid_mode = ON` and
    /// `enforce_gtid_consistency = ON`.
    pub async fn check_primary(&self) -> Result<(), ControlStartError> {
        let Some(account) = &self.account else {
            warn!("no [probe] account: strongsync cannot learn who its primary is, nor check a MySQL primary's gtid_mode (failover needs the account)");
            return Ok(());
        };
        let addr = self.primary();
        match candidate::inspect(&addr, account, self.connect_timeout).await {
            Ok(seen) => {
                if let Some(problem) = seen.gtid_mode {
                    return Err(ControlStartError::GtidMode { addr, problem });
                }
                let mut upstream = self.upstream.lock().await;
                self.learnt(&mut upstream, &addr, seen.identity).await;
                Ok(())
            }
            Err(problem) => {
                warn!(primary = %addr, %problem, "cannot look at the primary now; strongsync goes on and looks again");
                Ok(())
            }
        }
    }

    /// Looks at the primary every `interval` until `cancel` fires (with the probe account, if
    /// there is one): learns its identity if it is not known yet; fences if its address now
    /// reaches another server than the one followed (nothing of an unknown server is
    /// acknowledged); and on MySQL, while it records transactions without a GTID
    /// (`gtid_mode` turned off at run time), has every response bounded by the primary's
    /// binlog position, since what it committed cannot be named.
    pub async fn watch_primary(self: Arc<Self>, interval: Duration, cancel: CancellationToken) {
        let Some(account) = self.account.clone() else {
            return;
        };
        let mut every = tokio::time::interval(interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // One connection, kept while it works and the primary stays the same: a look is two
        // queries, not a login.
        let mut conn: Option<(String, mysql_async::Conn)> = None;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = every.tick() => {}
            }
            if self.durability.gate().fenced() {
                continue;
            }
            let addr = self.primary();
            if conn.as_ref().is_none_or(|(to, _)| *to != addr) {
                // What another server's `SET NAMES` gave says nothing of this one's.
                self.session_defaults.record_names(Default::default());
                conn = candidate::connect(&addr, &account, self.connect_timeout)
                    .await
                    .ok()
                    .map(|c| (addr.clone(), c));
            }
            let Some((_, open)) = conn.as_mut() else {
                continue;
            };
            let seen = match candidate::identify(open, self.connect_timeout).await {
                Ok((flavour, seen)) => {
                    let defaults = &self.session_defaults;
                    defaults.record(seen.tracking.verdict(flavour));
                    let wanted = defaults.names_wanted();
                    if !wanted.is_empty() {
                        defaults.record_names(
                            candidate::names_collations(open, &wanted, self.connect_timeout).await,
                        );
                    }
                    seen
                }
                Err(_) => {
                    conn = None;
                    continue;
                }
            };
            self.durability
                .untracked_commits(seen.gtid_mode.as_ref().map(ToString::to_string));
            let mut upstream = self.upstream.lock().await;
            if upstream.primary.address != addr {
                continue;
            }
            match upstream.primary.identity {
                None => self.learnt(&mut upstream, &addr, seen.identity).await,
                Some(known) if known != seen.identity => {
                    error!(primary = %addr, followed = %known, found = %seen.identity, "the primary's address reaches another server than the one strongsync followed: fencing");
                    let reason = format!(
                        "{addr} is {} now, strongsync followed {known}",
                        seen.identity
                    );
                    let _ = self.fence_locked(&mut upstream, &reason).await;
                }
                Some(_) => {}
            }
        }
        if let Some((_, open)) = conn {
            let _ = open.disconnect().await;
        }
    }

    /// The primary at `addr`, followed now, is `identity`: kept.
    async fn learnt(&self, upstream: &mut Upstream, addr: &str, identity: ServerIdentity) {
        if upstream.primary.address == addr && upstream.primary.identity.is_none() {
            info!(primary = %addr, %identity, "primary identified");
            upstream.primary.identity = Some(identity);
            let _ = self.save(upstream).await;
        }
    }

    /// Writes the state file when strong sync's positions changed, at most every
    /// `interval`, until `cancel` fires (then once more).
    pub async fn write_behind(self: Arc<Self>, interval: Duration, cancel: CancellationToken) {
        if matches!(self.store, Store::Memory) {
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
            if upstream.written != Some(self.durability.version()) && self.may_write() {
                // A failure is counted and logged; the next tick tries again.
                let _ = self.save(&mut upstream).await;
            }
            drop(upstream);
            if stop {
                return;
            }
        }
    }

    /// Writes the state now where it is kept (if anywhere).
    async fn save(&self, upstream: &mut Upstream) -> Result<(), ControlError> {
        *self.known.lock().unwrap_or_else(|p| p.into_inner()) =
            (upstream.primary.clone(), upstream.retired.clone());
        if matches!(self.store, Store::Memory) {
            return Ok(());
        }
        if !self.may_write() {
            return Err(ControlError::NotSaved(StateError::Cluster(
                crate::cluster::StoreError::NotLeading,
            )));
        }
        let (version, durability) = self.durability.persisted();
        let state = State {
            epoch: upstream.epoch,
            primary: upstream.primary.clone(),
            retired: upstream.retired.clone(),
            durability,
        };
        let started = tokio::time::Instant::now();
        let saved = match &self.store {
            Store::Memory => Ok(()),
            Store::File(path) => {
                let writing = path.clone();
                tokio::task::spawn_blocking(move || state.save(&writing))
                    .await
                    .unwrap_or_else(|join| {
                        Err(StateError::Io {
                            path: path.clone(),
                            source: std::io::Error::other(join.to_string()),
                        })
                    })
            }
            Store::Cluster(cluster) => cluster
                .write_state(state.to_json())
                .await
                .map_err(StateError::Cluster),
        };
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
                error!(error = %e, "state not written");
                Err(ControlError::NotSaved(e))
            }
        }
    }

    /// Refuses a change on an instance of a cluster that does not lead it (or has not taken
    /// over yet): only the leader fences, follows, promotes and reinstates.
    fn leading(&self) -> Result<(), ControlError> {
        if self.may_write() {
            Ok(())
        } else {
            Err(ControlError::NotLeading)
        }
    }

    /// Whether what this instance holds may be written where the state is kept: always alone;
    /// in a cluster, only once it took over (and until it steps down).
    fn may_write(&self) -> bool {
        !matches!(self.store, Store::Cluster(_))
            || self.taken_over.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Brings the fence's gauges up to date (on every change, and on each scrape: commits
    /// under `failover.fenced_reads` add to the tail between changes).
    pub fn refresh_metrics(&self) {
        let m = &self.metrics;
        m.fenced.set(i64::from(self.durability.gate().fenced()));
        m.epoch.set(i64::try_from(self.epoch()).unwrap_or(i64::MAX));
        m.tail_gtids
            .set(i64::try_from(self.durability.tail().len()).unwrap_or(i64::MAX));
    }
}

/// Creates the state of a new deployment from `config`: epoch 1, following its primary
/// (`strongsync init-state`): in etcd with a `[cluster]`, else in the state file. Returns
/// where it went.
///
/// # Errors
/// [`ControlStartError`]: no state file is configured, or the state exists already, or it
/// cannot be written.
pub fn init_state(config: &Config) -> Result<String, ControlStartError> {
    if config.cluster.enabled() {
        let options =
            crate::cluster::connect_options(config).map_err(ControlStartError::ClusterSettings)?;
        let state = State::fresh(&config.primary).to_json();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ControlStartError::Runtime)?;
        let key = runtime
            .block_on(crate::cluster::create_state(
                &config.cluster.endpoints,
                options,
                &config.cluster.prefix,
                state,
            ))
            .map_err(ControlStartError::ClusterStore)?;
        return Ok(format!("etcd key {key}"));
    }
    let path = config
        .failover
        .state_file
        .clone()
        .ok_or(ControlStartError::Config(
            crate::config::ConfigError::Missing {
                key: "failover.state_file",
            },
        ))?;
    State::create(&path, &config.primary).map_err(|e| match e {
        StateError::Exists { path } => ControlStartError::Exists(path),
        other => ControlStartError::State(other),
    })?;
    Ok(path.display().to_string())
}

#[cfg(test)]
mod tests;
