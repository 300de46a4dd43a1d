//! Strong sync: the replicas and what they hold, the quorum position their holdings add up to, and
//! the commits parked until the quorum holds them — with the timeout policy and the visible
//! STRONG/DEGRADED state.

mod counters;
mod coverage;
mod degraded;
mod door;
mod fence;
mod index;
mod inner;
mod lag;
mod outcome;
mod persisted;
mod policy;
mod quorum;
mod registry;
mod release;
mod replica;
mod status;
mod wait;
mod waiters;
mod watermark;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use strongsync_proto::gtid::{Gtid, GtidPosition, GtidSet};
use strongsync_proto::position::Position;
use tracing::warn;

use crate::commit::Commit;
use crate::config::{DurabilityConfig, Topology};
use crate::gate::{Gate, Refused};
use counters::Counters;
pub use counters::WaitObserver;
pub use coverage::StreamCoverage;
pub use degraded::{DomainRange, ReleasedWithoutQuorum};
pub use door::{CommitHook, Door};
pub use fence::Fence;
pub use inner::UnresolvedRelease;
use inner::{DurableState, Inner, Plan};
pub use outcome::GtidOutcome;
pub use persisted::{Persisted, PersistedReplica};
pub use policy::{Outcome, SessionQuorum, State, OUTCOMES};
pub use quorum::{QuorumRule, Unmet};
pub use release::{Cutoff, NotAcknowledged, Release};
pub use replica::{AckError, ReplicaHandle};
pub use status::{DurabilityStatus, NotCandidate, ReplicaStatus};
use waiters::waking;

/// The strong-sync service shared by sessions and replica pipes.
///
/// A facade: this file's one `impl Durability` is its whole interface, and each method hands its
/// work to the part that owns the state it touches, each part in its own file with its own
/// `impl`:
///
/// - `counters` (what is counted, and the metrics observer told of it);
/// - `door` (the one handle sessions hold) and `release` (how a wait ended);
/// - `inner` (everything under the one lock, and what moves when a replica moves, the fence
///   goes up or the state file is read back), over its parts: `registry` (the replicas and
///   what each holds), `waiters` (parked commits and their wake-ups), `index` (where each
///   relayed transaction ends), `fence` (the fence and its tail), `watermark` and `degraded`;
/// - `outcome`, `persisted` and `status`: what a commit's outcome, the state file and
///   `/status` say, as types;
/// - `wait` (one commit's wait for its quorum) and `replica` (a replica pipe's [`ReplicaHandle`]).
///
/// Sessions park on its [`CommitHook`], through their [`Door`], before releasing a response that
/// reported a commit. The gate every write to the primary passes is its own part
/// ([`crate::gate`]), which strong sync moves with the fence.
pub struct Durability {
    /// What the hot paths read of the settings, derived from them at each change.
    fast: FastSettings,
    /// Everything else of strong sync's state, under one lock.
    inner: Mutex<Inner>,
    /// What it counts, and the observer it tells.
    counters: Counters,
    /// The gate writes to the primary pass: the epoch in force, the fence's flag and the
    /// lease. Strong sync raises and lifts the flag with the fence's state, under its lock.
    gate: Arc<Gate>,
    shutting_down: AtomicBool,
    /// Parked commits are being released with an error: the shutdown's grace is over.
    releasing: AtomicBool,
    /// The primary records transactions without a GTID (MySQL with `gtid_mode` not `ON`):
    /// what a session commits cannot be named, so every response is bounded.
    untracked: AtomicBool,
    /// Replica pipes registered now (the fence waits for them to close).
    pipes: tokio::sync::watch::Sender<usize>,
}

/// What is read of the settings on every commit, response or replica packet, derived from
/// the settings in force whenever they change.
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
        Arc::new(Durability {
            fast: FastSettings::of(&config),
            inner: Mutex::new(Inner::new(config, observer.clone())),
            counters: Counters::new(observer),
            gate: Arc::new(Gate::new()),
            shutting_down: AtomicBool::new(false),
            releasing: AtomicBool::new(false),
            untracked: AtomicBool::new(false),
            pipes: tokio::sync::watch::Sender::new(0),
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

    /// How long a replica may take to ACK a transaction end before it is asked again.
    pub fn ack_nudge_after(&self) -> Duration {
        Duration::from_micros(self.fast.ack_nudge_after_us.load(Ordering::Relaxed))
    }

    /// Whether a response may go without a bound of its own because it was read from a
    /// snapshot that `bound` bounds and the quorum holds `bound` (only under `visibility =
    /// "snapshot"`). `held_under` is the rule under which the quorum was already seen holding
    /// it (`None` if not yet): replicas that ACKed a transaction keep it, as for a
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
            self.counters.read_in_snapshot();
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
        self.gate.lease().stop();
        waking(|woken| self.lock().waiters.all(woken));
    }

    /// Logs what an operator needs while something is wrong, once per call (the proxy calls
    /// it periodically): while DEGRADED, how many commits were released without quorum since
    /// the last summary and, per domain, which; and commits `block` keeps parked past their
    /// `ack_timeout`.
    pub fn log_summary(&self) {
        let overdue = self.counters.parked_overdue();
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

    // --- waiting (wait.rs) ---

    /// Waits until `commit` may be acknowledged to the client, as the policy says.
    pub(super) async fn wait(self: Arc<Self>, commit: Commit) -> Release {
        wait::wait(self, commit).await
    }

    // --- the gate (src/gate/), which the fence moves with its state ---

    /// The gate every write to the primary passes, which sessions and replica pipes hold.
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Sets the epoch strongsync starts in (from the state file, or the first), before anything
    /// connects.
    pub fn start_epoch(&self, number: u64, primary: String) {
        let mut inner = self.lock();
        inner.epoch_number = number;
        let fenced = inner.fencing.up().is_some();
        self.gate.start(number, primary, fenced);
    }

    // --- the fence (raised and drained in inner.rs; its state: fence.rs) ---

    /// The fence in force, if any.
    pub fn fence_state(&self) -> Option<Fence> {
        self.lock().fencing.up()
    }

    /// The tail of every fence so far: committed on a fenced primary, known to strongsync,
    /// and not held by the quorum. It outlives the fence (a follow lifts the fence, not what
    /// the old primary holds).
    pub fn tail(&self) -> GtidSet {
        self.lock().fencing.tail().clone()
    }

    /// Raises the fence over the primary of the epoch in force, `epoch` (idempotent: a second
    /// call changes nothing and returns the fence in force). The epoch's replica pipes stop
    /// before their next write; parked commits look again and those the quorum does not hold
    /// get the fence's error; commands are refused (see [`Gate::pass`]). Returns the
    /// fence in force and whether this call raised it. [`drain_fence`](Self::drain_fence)
    /// then waits for what was under way.
    pub fn raise_fence(&self, epoch: u64) -> (Fence, bool) {
        waking(|woken| {
            let mut inner = self.lock();
            let raised = inner.raise_fence(epoch, woken);
            self.gate.fence_up();
            raised
        })
    }

    /// Waits up to `drain` for every replica pipe to close and (with `writes`) for every
    /// command under way to the primary to be written, then adds what was relayed and not held
    /// by the quorum to the tail. Returns false if something was still open when the drain
    /// ran out (it writes nothing more, whether or not it closed in time).
    pub async fn drain_fence(&self, drain: Duration, writes: bool) -> bool {
        let deadline = tokio::time::Instant::now() + drain;
        let mut pipes = self.pipes.subscribe();
        let closed = tokio::time::timeout_at(deadline, pipes.wait_for(|open| *open == 0))
            .await
            .is_ok();
        if !closed {
            warn!(
                open = *pipes.borrow(),
                ?drain,
                "replica pipes still open after the fence's drain; they write nothing more"
            );
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let written = !writes || self.gate.writes_done(left).await;
        if !written {
            warn!(
                ?drain,
                "commands still being written to the fenced primary after the fence's drain"
            );
        }
        self.lock().drained();
        closed && written
    }

    /// Fences the primary of `epoch` and drains (see [`raise_fence`](Self::raise_fence) and
    /// [`drain_fence`](Self::drain_fence)), waiting for commands under way too.
    pub async fn fence(&self, epoch: u64, drain: Duration) -> (Fence, bool) {
        let raised = self.raise_fence(epoch);
        self.drain_fence(drain, true).await;
        raised
    }

    /// Ends the fenced epoch and opens `number` on `primary`, whose binlog positions have
    /// nothing to do with the old one's: writes to the old primary are refused from now on,
    /// those under way are waited for (up to `drain`), every connection of the old epoch is
    /// told to close, and the fence lifts. Every position known goes (the index, the
    /// replicas' ACKed positions, the quorum position); what each replica holds by GTID,
    /// the watermark, the releases and the tail stay. Nothing is parked: the fence answered
    /// it, and a commit of the old epoch that comes later is refused. Returns false if writes
    /// were still under way when the drain ran out.
    pub async fn open_epoch(&self, number: u64, primary: String, drain: Duration) -> bool {
        let drained = self.gate.end_writes(number, drain).await;
        let old = waking(|woken| {
            let mut inner = self.lock();
            inner.open_epoch(number, woken);
            self.gate.open(number, primary)
        });
        // Each session and pipe of the old epoch closes its connection to the old primary
        // (a reset: nothing it queued is sent) as soon as it runs; once they all have, nothing
        // written to it before the fence can still arrive, however long it was on its way.
        if !old.connections_closed(drain).await {
            warn!(
                epoch = old.number(),
                open = old.open_connections(),
                "connections to the retired primary still open after the drain; each closes as its session next runs"
            );
        }
        drained
    }

    // --- a commit's outcome (read in inner.rs; the answer: outcome.rs) ---

    /// What became of `gtid`, by its identity: the watermark's exact set says whether the
    /// quorum held that very GTID (a new primary numbering a MariaDB domain past a fenced
    /// one's tail does not make the tail acknowledged). Once the watermark is no longer exact,
    /// only a GTID the connected replicas hold now reads held.
    pub fn outcome(&self, gtid: &Gtid) -> GtidOutcome {
        self.lock().outcome(gtid)
    }

    // --- what the state file keeps (inner.rs; the types: persisted.rs) ---

    /// A number that changes whenever something [`persisted`](Self::persisted) returns may
    /// have (cheap: the state file's writer polls it).
    pub fn version(&self) -> u64 {
        self.lock().version
    }

    /// What to keep, with the [`version`](Self::version) it is of.
    pub fn persisted(&self) -> (u64, Persisted) {
        self.lock().persisted()
    }

    /// Takes back what a previous run kept, before any replica connects: its replicas as
    /// departed ones, its watermark, its releases, and its fence.
    pub fn restore(&self, kept: Persisted) {
        if self.lock().restore(kept) {
            self.gate.fence_up();
        }
    }

    // --- replicas (admitted in inner.rs; the handle: replica.rs) ---

    /// Admits a replica whose dump the primary of `epoch` has accepted (its first event came
    /// back), as holding `connect_state` (the GTIDs the primary was told it has). A replica
    /// already connected with the same `server_id` is replaced, as the primary replaces its
    /// dump. Parked commits look again: the newcomer may hold what they wait for.
    ///
    /// # Errors
    /// [`Refused`] if `epoch` is fenced or over: its dump must not be relayed.
    pub fn admit(
        self: &Arc<Self>,
        epoch: u64,
        server_id: u32,
        address: SocketAddr,
        semisync: bool,
        connect_state: GtidPosition,
    ) -> Result<ReplicaHandle, Refused> {
        let pipe = waking(|woken| {
            self.lock()
                .admit(epoch, server_id, address, semisync, &connect_state, woken)
        })?;
        self.pipes.send_modify(|open| *open += 1);
        tracing::info!(server_id, %address, semisync, %connect_state, epoch, "replica connected");
        Ok(ReplicaHandle::new(Arc::clone(self), server_id, pipe, epoch))
    }

    /// Reports of replica pipes of an epoch that is over, ignored so far (ACKs and relayed
    /// transactions: their positions are in an old primary's binlog).
    pub fn stale_reports(&self) -> u64 {
        self.counters.stale_reports()
    }

    // --- the snapshot (status.rs) ---

    /// A snapshot of the state, the replicas and the parked commits.
    pub fn status(&self) -> DurabilityStatus {
        // Read before the lock is taken, so that nothing is built under it.
        let counts = self.counters.counts();
        status::snapshot(self.lock(), counts)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind, never a broken invariant
        // worth refusing service for.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
