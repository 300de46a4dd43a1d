//! Strong sync: the replicas and what they hold, the quorum position their holdings add up to, and
//! the commits parked until the quorum holds them — with the timeout policy and the visible
//! STRONG/DEGRADED state.

mod coverage;
mod degraded;
mod epoch;
mod fence;
mod index;
mod lag;
mod lease;
mod outcome;
mod persisted;
mod policy;
mod quorum;
mod registry;
mod replica;
mod status;
mod wait;
mod waiters;
mod watermark;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use strongsync_proto::gtid::{Gtid, GtidPosition, GtidSet};
use strongsync_proto::position::Position;
use tokio::time::Instant;
use tracing::warn;

use crate::commit::{Commit, CommitHook, Release, WaitKind};
use crate::config::{DurabilityConfig, Topology};
use crate::tracking_defaults::SessionDefaults;
pub use coverage::StreamCoverage;
pub use degraded::{DomainRange, ReleasedWithoutQuorum};
pub use epoch::{Epoch, OnEpoch, Pass, Refused};
pub use fence::Fence;
use index::{GtidIndex, Lookup};
pub use lease::LeaseClock;
pub use outcome::GtidOutcome;
pub use persisted::{Persisted, PersistedReplica};
pub use policy::{Outcome, SessionQuorum, State, OUTCOMES};
pub use quorum::{QuorumRule, Unmet};
use registry::{Holders, Registry};
pub use replica::{AckError, ReplicaHandle};
pub use status::{DurabilityStatus, NotCandidate, ReplicaStatus, UnresolvedRelease};
use waiters::{waking, Until, Verdict, Waiters};
use watermark::Watermark;

/// Releases without quorum of unknown GTIDs remembered for `/status`, the most recent ones.
const UNRESOLVED_KEPT: usize = 32;

/// Hears of every commit released, with how and after how long, and of state changes (for
/// metrics).
pub trait WaitObserver: Send + Sync + 'static {
    /// A parked commit was released (or abandoned) after waiting `waited`.
    fn released(&self, outcome: Outcome, waited: Duration);

    /// A response held by the read barrier was released (or abandoned) after waiting
    /// `waited`.
    fn read_released(&self, _outcome: Outcome, _waited: Duration) {}

    /// A response went without a bound of its own: its transaction's snapshot was held.
    fn read_in_snapshot(&self) {}

    /// A commit was released that waited for `quorum` replicas (0: its session asked for
    /// none).
    fn commit_quorum(&self, _quorum: usize) {}

    /// The durability state changed to `to`.
    fn state_changed(&self, _to: State) {}
}

/// The strong-sync service shared by sessions and replica pipes.
///
/// The parts, each its own type: [`registry`] (replicas admitted once the primary accepted their
/// dump, what each holds), [`waiters`] (parked commits and their wake-ups), [`index`] (where each
/// relayed transaction ends), [`degraded`] (what was released without quorum). Replica pipes report
/// through a [`ReplicaHandle`]; sessions park on [`Durability`]'s [`CommitHook`] before releasing a
/// response that reported a commit.
pub struct Durability {
    /// What the hot paths read of the settings, derived from them at each change.
    fast: FastSettings,
    inner: Mutex<Inner>,
    parked: AtomicUsize,
    /// Responses held by the read barrier now.
    reads_parked: AtomicUsize,
    /// Responses the read barrier had to queue (the quorum did not hold their bound at once).
    reads_queued: AtomicU64,
    /// Responses the read barrier released, by how.
    reads_released: [AtomicU64; OUTCOMES.len()],
    /// Responses that went without a bound of their own, their transaction's snapshot held.
    reads_in_snapshot: AtomicU64,
    /// Parked commits past their `ack_timeout` that `block` keeps waiting.
    overdue: AtomicUsize,
    released: [AtomicU64; OUTCOMES.len()],
    shutting_down: AtomicBool,
    /// Parked commits are being released with an error: the shutdown's grace is over.
    releasing: AtomicBool,
    /// Mirrors [`Inner::fence`] for the hot paths (every command, every relayed batch).
    fenced: AtomicBool,
    /// Mirrors the number of [`Inner::epoch`] for the hot paths (every write to the primary).
    epoch_now: AtomicU64,
    /// Writes to the primary under way (see [`Durability::pass`]).
    writing: AtomicUsize,
    /// ACKs and reports of replica pipes of an epoch that is over, ignored.
    stale_reports: AtomicU64,
    /// The primary records transactions without a GTID (MySQL with `gtid_mode` not `ON`):
    /// what a session commits cannot be named, so every response is bounded.
    untracked: AtomicBool,
    /// Whether new sessions start with the tracking strongsync needs, as the watch of the
    /// primary found its global defaults.
    pub session_defaults: SessionDefaults,
    /// Replica pipes registered now (the fence waits for them to close).
    pipes: tokio::sync::watch::Sender<usize>,
    observer: Option<Arc<dyn WaitObserver>>,
    /// Until when this instance may relay and release: always alone, while it holds the
    /// lease in a cluster.
    lease: LeaseClock,
}

/// What is read of the settings on every commit, response or replica packet, derived from
/// [`Inner::config`] whenever it changes.
struct FastSettings {
    /// `passthrough`, read by every commit before anything else.
    passthrough: AtomicBool,
    /// Responses wait for the quorum to hold what they may reveal (`visibility = "quorum"`,
    /// not passthrough), read by every response.
    reads_wait: AtomicBool,
    /// A transaction's reads from its snapshot may be bounded once (`visibility = "snapshot"`,
    /// not passthrough).
    snapshot_reads: AtomicBool,
    /// Replicas without semisync get a transaction once the quorum holds it
    /// (`async_replicas = "after_quorum"`, not passthrough), read for each of their packets.
    async_held_back: AtomicBool,
    /// `ack_nudge_after` in microseconds, read by replica pipes while an ACK is owed.
    ack_nudge_after_us: AtomicU64,
}

struct Inner {
    /// The settings in force: the one place they live, swapped whole on a reload. Commits read
    /// them under the lock they look with; [`FastSettings`] derives from them.
    config: Arc<DurabilityConfig>,
    /// The replicas' zones and labels.
    topology: Arc<Topology>,
    registry: Registry,
    waiters: Waiters,
    index: GtidIndex,
    lag: lag::LagBook,
    /// The end of the newest transaction relayed to any replica.
    head: Option<Position>,
    state: DurableState,
    /// DEGRADED time of the spells that ended.
    degraded_before: Duration,
    /// See [`DurabilityStatus::acknowledged`].
    watermark: Watermark,
    /// Recent releases of commits whose GTIDs could not be learnt.
    unresolved: VecDeque<Arc<UnresolvedRelease>>,
    /// Every commit acknowledged to its client without its quorum (DEGRADED, the timeout
    /// policy, a session that asked for none), kept for the commit outcome.
    released_without_quorum: GtidSet,
    /// The epoch in force: its number and primary, and what fires when it is fenced or over.
    epoch: Arc<Epoch>,
    /// Why commits cannot be named by GTID now, if they cannot.
    untracked_why: Option<String>,
    /// The fence, while it is up.
    fence: Option<Fence>,
    /// See [`Durability::tail`].
    tail: GtidSet,
    /// Bumped whenever something the state file keeps changes.
    version: u64,
    observer: Option<Arc<dyn WaitObserver>>,
    /// The quorum position under the configured rule, for the pipes of async replicas (which
    /// are also told when the settings change).
    quorum_watch: tokio::sync::watch::Sender<Option<Position>>,
}

/// The state, with what DEGRADED owes.
enum DurableState {
    Strong,
    Degraded {
        since: Instant,
        /// Acknowledged to clients without their quorum since STRONG ended.
        released: ReleasedWithoutQuorum,
        /// How many of those the last periodic summary counted.
        summarized: u64,
    },
}

// === impl Durability ===

impl Durability {
    /// The service for `config`.
    pub fn new(config: DurabilityConfig) -> Arc<Self> {
        Self::build(config, None)
    }

    /// The service for `config`, telling `observer` about every release.
    pub fn with_observer(config: DurabilityConfig, observer: Arc<dyn WaitObserver>) -> Arc<Self> {
        Self::build(config, Some(observer))
    }

    fn build(config: DurabilityConfig, observer: Option<Arc<dyn WaitObserver>>) -> Arc<Self> {
        let capacity = config.gtid_index_capacity;
        let max_intervals = config.max_gtid_intervals;
        let fast = FastSettings::of(&config);
        Arc::new(Durability {
            fast,
            inner: Mutex::new(Inner {
                config: Arc::new(config),
                topology: Arc::default(),
                registry: Registry::default(),
                waiters: Waiters::default(),
                index: GtidIndex::new(capacity),
                lag: lag::LagBook::new(capacity),
                head: None,
                state: DurableState::Strong,
                degraded_before: Duration::ZERO,
                watermark: Watermark::new(max_intervals),
                unresolved: VecDeque::new(),
                released_without_quorum: GtidSet::default(),
                epoch: Epoch::new(1, String::new()),
                untracked_why: None,
                fence: None,
                tail: GtidSet::default(),
                version: 0,
                observer: observer.clone(),
                quorum_watch: tokio::sync::watch::Sender::new(None),
            }),
            parked: AtomicUsize::new(0),
            reads_parked: AtomicUsize::new(0),
            reads_queued: AtomicU64::new(0),
            reads_released: Default::default(),
            reads_in_snapshot: AtomicU64::new(0),
            overdue: AtomicUsize::new(0),
            released: Default::default(),
            shutting_down: AtomicBool::new(false),
            releasing: AtomicBool::new(false),
            fenced: AtomicBool::new(false),
            epoch_now: AtomicU64::new(1),
            writing: AtomicUsize::new(0),
            stale_reports: AtomicU64::new(0),
            untracked: AtomicBool::new(false),
            session_defaults: SessionDefaults::default(),
            pipes: tokio::sync::watch::Sender::new(0),
            observer,
            lease: LeaseClock::always(),
        })
    }

    /// The settings in force.
    pub fn config(&self) -> DurabilityConfig {
        DurabilityConfig::clone(&self.lock().config)
    }

    /// Applies new settings (the index capacity stays): the quorum position is recomputed for
    /// the new quorum, and parked commits look again under the new settings.
    pub fn reconfigure(&self, config: DurabilityConfig) {
        waking(|woken| {
            let mut inner = self.lock();
            let config = DurabilityConfig {
                gtid_index_capacity: inner.config.gtid_index_capacity,
                max_gtid_intervals: inner.config.max_gtid_intervals,
                ..config
            };
            self.fast.derive(&config);
            inner.config = Arc::new(config);
            inner.positions_changed(woken);
            inner.waiters.all(woken);
            // Pipes of async replicas look at the settings again too.
            inner.quorum_watch.send_modify(|_| {});
        });
    }

    /// The quorum position under the configured rule, as it moves (and a change whenever the
    /// settings change).
    pub fn watch_quorum(&self) -> tokio::sync::watch::Receiver<Option<Position>> {
        self.lock().quorum_watch.subscribe()
    }

    /// Applies the replicas' zones and labels: the quorum position is recomputed and parked
    /// commits look again under them.
    pub fn set_topology(&self, topology: Topology) {
        waking(|woken| {
            let mut inner = self.lock();
            inner.registry.relabel(&topology);
            inner.topology = Arc::new(topology);
            inner.positions_changed(woken);
            inner.waiters.all(woken);
        });
    }

    /// Says whether (and why) the primary records transactions without a GTID: while it
    /// does, every response is bounded by the primary's binlog position (see
    /// [`commits_untracked`](Self::commits_untracked)).
    pub fn untracked_commits(&self, why: Option<String>) {
        let on = why.is_some();
        let mut inner = self.lock();
        if inner.untracked_why != why {
            match &why {
                Some(why) => {
                    warn!(%why, "commits can no longer be named by GTID: every response is bounded by the primary's binlog position")
                }
                None if inner.untracked_why.is_some() => {
                    tracing::info!("the primary records a GTID for every transaction again")
                }
                None => {}
            }
            inner.untracked_why = why;
        }
        self.untracked.store(on, Ordering::SeqCst);
    }

    /// Whether the primary records transactions without a GTID (read for every response).
    pub fn commits_untracked(&self) -> bool {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Whether replicas without semisync get a transaction only once the quorum holds it.
    pub fn async_held_back(&self) -> bool {
        self.fast.async_held_back.load(Ordering::Relaxed)
    }

    /// Whether every response waits for the quorum to hold what it may reveal.
    pub fn reads_wait(&self) -> bool {
        self.fast.reads_wait.load(Ordering::Relaxed)
    }

    /// Whether a transaction's reads from its snapshot may be bounded once, by the snapshot.
    pub fn snapshot_reads(&self) -> bool {
        self.fast.snapshot_reads.load(Ordering::Relaxed)
    }

    /// How long a replica may take to acknowledge a transaction end before it is asked again.
    pub fn ack_nudge_after(&self) -> Duration {
        Duration::from_micros(self.fast.ack_nudge_after_us.load(Ordering::Relaxed))
    }

    /// Whether a response may go without a bound of its own because it was read from a
    /// snapshot that `bound` bounds and the quorum holds `bound` (only under `visibility =
    /// "snapshot"`). `held_under` is the rule under which the quorum was already seen holding
    /// it (`None` if not yet): replicas that acknowledged a transaction keep it, as for a
    /// commit acknowledged earlier, so once the quorum held it the snapshot stays covered while
    /// the rule stays. Otherwise strong sync must be STRONG (under DEGRADED a read goes with
    /// what DEGRADED released, counted as such) and connected replicas meeting the rule must
    /// hold every transaction of `bound`.
    /// Returns the rule it is known to be held under if the response may go, and counts it.
    pub fn read_in_snapshot(
        &self,
        bound: &GtidPosition,
        held_under: Option<QuorumRule>,
    ) -> Option<QuorumRule> {
        if !self.snapshot_reads() {
            return None;
        }
        let held_under = {
            let inner = self.lock();
            let rule = inner.config.rule();
            if held_under == Some(rule) {
                held_under
            } else {
                let held = matches!(inner.state, DurableState::Strong)
                    && bound.gtids().all(|gtid| {
                        matches!(inner.plan(std::slice::from_ref(gtid), &rule), Plan::Held)
                    });
                held.then_some(rule)
            }
        };
        if held_under.is_some() {
            self.reads_in_snapshot.fetch_add(1, Ordering::Relaxed);
            if let Some(observer) = &self.observer {
                observer.read_in_snapshot();
            }
        }
        held_under
    }

    /// From now on, commits abandoned while parked count as released by shutdown.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    /// The shutdown's grace is over: every parked commit is released now, its client told
    /// (with an error) that the commit did not reach its quorum.
    pub fn release_for_shutdown(&self) {
        self.begin_shutdown();
        self.releasing.store(true, Ordering::Relaxed);
        waking(|woken| self.lock().waiters.all(woken));
    }

    /// This instance stopped leading its cluster (its lease lapsed or was lost): every parked
    /// commit looks again and, the lease's clock saying no, is answered with an error.
    pub fn stopped_leading(&self) {
        self.lease.stop();
        waking(|woken| self.lock().waiters.all(woken));
    }

    /// Logs what an operator needs while something is wrong, once per call (the proxy calls
    /// it periodically): while DEGRADED, how many commits were released without quorum since
    /// the last summary and, per domain, which; and commits `block` keeps parked past their
    /// `ack_timeout`.
    pub fn log_summary(&self) {
        let overdue = self.overdue.load(Ordering::Relaxed);
        let (config, connected, degraded) = {
            let mut inner = self.lock();
            let config = Arc::clone(&inner.config);
            let connected = inner.registry.semisync_count();
            let degraded = match &mut inner.state {
                DurableState::Degraded {
                    since,
                    released,
                    summarized,
                } => {
                    let new = released.count() - *summarized;
                    *summarized = released.count();
                    Some((since.elapsed(), released.clone(), new))
                }
                DurableState::Strong => None,
            };
            (config, connected, degraded)
        };
        if let Some((spell, released, new)) = degraded {
            warn!(
                degraded_for = ?spell,
                released_without_quorum = released.count(),
                since_last_summary = new,
                gtids = %released,
                semisync_replicas = connected,
                quorum = config.quorum,
                "still DEGRADED: commits are acknowledged without their quorum"
            );
        }
        if overdue > 0 {
            warn!(
                parked = overdue,
                ack_timeout = ?config.ack_timeout,
                semisync_replicas = connected,
                quorum = config.quorum,
                "commits parked longer than ack_timeout (on_timeout = block keeps them waiting for their quorum)"
            );
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind, never a broken invariant
        // worth refusing service for.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn count(&self, kind: WaitKind, outcome: Outcome, waited: Duration) {
        match kind {
            WaitKind::Commit => {
                self.released[outcome.index()].fetch_add(1, Ordering::Relaxed);
                if let Some(observer) = &self.observer {
                    observer.released(outcome, waited);
                }
            }
            WaitKind::Read => {
                self.reads_released[outcome.index()].fetch_add(1, Ordering::Relaxed);
                if let Some(observer) = &self.observer {
                    observer.read_released(outcome, waited);
                }
            }
        }
    }
}

impl CommitHook for Arc<Durability> {
    // One allocation per commit: the boxed future, which holds everything the wait needs.
    fn on_commit(&self, commit: Commit) -> BoxFuture<'static, Release> {
        Box::pin(Arc::clone(self).wait(commit))
    }
}

impl fmt::Debug for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Durability")
            .field("config", &self.config())
            .finish_non_exhaustive()
    }
}

// === impl FastSettings ===

impl FastSettings {
    fn of(config: &DurabilityConfig) -> Self {
        let fast = FastSettings {
            passthrough: AtomicBool::new(false),
            reads_wait: AtomicBool::new(false),
            snapshot_reads: AtomicBool::new(false),
            async_held_back: AtomicBool::new(false),
            ack_nudge_after_us: AtomicU64::new(0),
        };
        fast.derive(config);
        fast
    }

    fn derive(&self, config: &DurabilityConfig) {
        let store = |flag: &AtomicBool, on: bool| flag.store(on, Ordering::Relaxed);
        store(&self.passthrough, config.passthrough);
        store(&self.reads_wait, config.reads_wait());
        store(&self.snapshot_reads, config.snapshot_reads());
        store(&self.async_held_back, config.async_held_back());
        let nudge = u64::try_from(config.ack_nudge_after.as_micros()).unwrap_or(u64::MAX);
        self.ack_nudge_after_us.store(nudge, Ordering::Relaxed);
    }
}

// === impl Inner ===

/// What a commit waits for, as the shared state stands.
enum Plan {
    /// The quorum holds every transaction it reported.
    Held,
    /// Not yet.
    Wait(Until),
}

impl Inner {
    /// Some replica's position changed (or the quorum did): recomputes the quorum position,
    /// wakes the commits it reaches, moves those counted by connect states, drops the index
    /// entries it passes, and checks whether DEGRADED may end.
    fn positions_changed(&mut self, woken: &mut Vec<std::task::Waker>) {
        self.changed();
        let configured = self.config.rule();
        let quorum = self.registry.update_quorum(&configured);
        self.quorum_watch.send_if_modified(|held| {
            let moved = *held != quorum;
            *held = quorum;
            moved
        });
        if let Some(slowest) = self.registry.slowest() {
            self.lag.forget_before(slowest);
        }
        for slot in self.waiters.take_any_move() {
            self.replan(slot, woken);
        }
        // Nearly always one rule: the configured one (sessions may ask for their own).
        let mut rules: smallvec::SmallVec<[QuorumRule; 2]> = self.waiters.rules().collect();
        if !rules.contains(&configured) {
            rules.push(configured);
        }
        for rule in rules {
            let reached = if rule == configured {
                quorum
            } else {
                self.registry.quorum_under(&rule)
            };
            let Some(q) = reached else { continue };
            let Inner {
                waiters, watermark, ..
            } = self;
            waiters.reached(&rule, q, woken, |gtids| {
                for gtid in gtids {
                    watermark.take(*gtid);
                }
            });
        }
        // Entries the configured quorum holds go, into the watermark: every transaction it
        // holds, whoever committed it. A session's own rule finds them as bounded by their
        // domain's floor, which can only make it wait longer, never less.
        if let Some(q) = quorum {
            let Inner {
                index, watermark, ..
            } = self;
            index.prune_through(q, |held| match held {
                index::Held::One(gtid) => watermark.take(gtid),
                index::Held::Range {
                    domain,
                    server_id,
                    start,
                    end,
                } => watermark.take_range(domain, server_id, start, end),
            });
        }
        self.maybe_strong();
    }

    /// `gtid` ends at a position now known: the commits waiting to learn it move to that
    /// position (or are woken, if the quorum already holds them), without looking again.
    fn relayed(&mut self, gtid: &Gtid, woken: &mut Vec<std::task::Waker>) {
        for slot in self.waiters.take_relayed(gtid) {
            self.replan(slot, woken);
        }
    }

    /// Puts a commit taken out of its index under what it waits for now, or wakes it if the
    /// quorum holds it.
    fn replan(&mut self, slot: usize, woken: &mut Vec<std::task::Waker>) {
        let rule = self.waiters.rule(slot);
        match self.plan(self.waiters.gtids(slot), &rule) {
            Plan::Held => {
                let Inner {
                    waiters, watermark, ..
                } = self;
                for gtid in waiters.gtids(slot) {
                    watermark.take(*gtid);
                }
                waiters.wake(slot, Verdict::Acknowledged, woken);
            }
            Plan::Wait(until) => self.waiters.wait_for(slot, until),
        }
    }

    /// What a commit of `gtids` waits for under `rule`: the first transaction whose end is
    /// not known yet, else the end of the last one the quorum does not hold — or any replica
    /// moving, if some counted only by what they connected with.
    fn plan(&self, gtids: &[Gtid], rule: &QuorumRule) -> Plan {
        let mut target = None;
        let mut by_connect_state = false;
        for gtid in gtids {
            let (holders, end) = self.holders(gtid);
            if holders.tally.meets(rule) {
                continue;
            }
            let Some(end) = end else {
                return Plan::Wait(Until::Relayed(*gtid));
            };
            target = target.max(Some(end));
            by_connect_state |= holders.by_connect_state > 0;
        }
        match target {
            None => Plan::Held,
            // Counted partly by what replicas connected with, the quorum may come from any
            // replica moving on, not only from the quorum position reaching the target.
            Some(_) if by_connect_state => Plan::Wait(Until::AnyMove),
            Some(target) => Plan::Wait(Until::Position(target)),
        }
    }

    /// Who holds `gtid`, and where it ends if that is known.
    fn holders(&self, gtid: &Gtid) -> (Holders<'_>, Option<Position>) {
        // A bound by binlog position ends where it says.
        let end = gtid
            .binlog_position()
            .or_else(|| match self.index.lookup(gtid) {
                Lookup::Exact(p) | Lookup::AtMost(p) => Some(p),
                Lookup::Unknown => None,
            });
        (self.registry.holders(gtid, end), end)
    }

    /// DEGRADED ends once enough semisync replicas are connected and the quorum holds every
    /// commit released without it.
    fn maybe_strong(&mut self) {
        let rule = self.config.rule();
        let DurableState::Degraded {
            since, released, ..
        } = &self.state
        else {
            return;
        };
        if self.registry.unmet(&rule).is_some()
            || released
                .newest()
                .any(|gtid| !self.holders(gtid).0.tally.meets(&rule))
        {
            return;
        }
        let spell = since.elapsed();
        warn!(
            degraded_for = ?spell,
            released_without_quorum = released.count(),
            gtids = %released,
            "durability state DEGRADED -> STRONG: the quorum holds every commit released without it"
        );
        self.degraded_before += spell;
        self.state = DurableState::Strong;
        if let Some(observer) = &self.observer {
            observer.state_changed(State::Strong);
        }
    }

    /// Enters DEGRADED (from STRONG) because of `reason`; everyone parked is released.
    fn degrade(&mut self, reason: &str, woken: &mut Vec<std::task::Waker>) {
        if matches!(self.state, DurableState::Degraded { .. }) {
            return;
        }
        warn!(%reason, "durability state STRONG -> DEGRADED: commits are acknowledged without their quorum until it holds them again");
        self.state = DurableState::Degraded {
            since: Instant::now(),
            released: ReleasedWithoutQuorum::default(),
            summarized: 0,
        };
        if let Some(observer) = &self.observer {
            observer.state_changed(State::Degraded);
        }
        self.waiters.all(woken);
    }

    /// Something the state file keeps changed.
    fn changed(&mut self) {
        self.version = self.version.wrapping_add(1);
    }

    /// Remembers a release whose GTIDs could not be learnt.
    fn unresolved(&mut self, release: UnresolvedRelease) {
        if self.unresolved.len() == UNRESOLVED_KEPT {
            self.unresolved.pop_front();
        }
        self.unresolved.push_back(Arc::new(release));
    }
}

// === impl DurableState ===

impl DurableState {
    fn public(&self) -> State {
        match self {
            DurableState::Strong => State::Strong,
            DurableState::Degraded { .. } => State::Degraded,
        }
    }
}
