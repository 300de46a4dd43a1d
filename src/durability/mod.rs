//! Strong sync: the replicas' acknowledgements, the quorum position they add up to, and the
//! commits parked until that position passes them — with the timeout policy and the visible
//! STRONG/DEGRADED state.
//!
//! Replica pipes report what they relay ([`ReplicaHandle::transaction_relayed`]) and what their
//! replica acknowledges ([`ReplicaHandle::acknowledged`]); sessions park on
//! [`Durability`]'s [`CommitHook`] before releasing a response that reported a commit. All
//! shared state sits behind one short-held mutex; each parked session has its own wake-up.

mod held;
mod index;
mod lag;
mod quorum;
mod replicas;
mod wait;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use strongsync_proto::gtid::MariaGtid;
use strongsync_proto::position::Position;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::commit::{Commit, CommitHook, Release};
pub use held::GtidPosition;
use index::GtidIndex;
pub use replicas::{AckError, ReplicaHandle};

/// Settings of strong sync. All but `gtid_index_capacity` can change while the proxy runs
/// ([`Durability::reconfigure`]); a change applies to the commits made after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurabilityConfig {
    /// Replicas that must acknowledge a transaction before its commit is acknowledged to the
    /// client. Default 1.
    pub quorum: usize,
    /// Relay only: commits never wait (the proxy's own cost, in benchmarks; a migration step).
    /// Default false.
    pub passthrough: bool,
    /// How long a commit waits for its quorum before `on_timeout` applies. Default 10 s.
    pub ack_timeout: Duration,
    /// What happens to a commit whose quorum does not come in time. Default `degrade`.
    pub on_timeout: OnTimeout,
    /// What a commit does while fewer than `quorum` semisync replicas are connected.
    /// Default `wait` (for `ack_timeout`).
    pub without_quorum: WithoutQuorum,
    /// A replica that has not acknowledged a transaction end this long after it was sent is
    /// asked again (lost ACKs must not leave commits waiting). Default 1 s.
    pub ack_nudge_after: Duration,
    /// Most transactions whose end position is remembered exactly (older ones are remembered
    /// as a bound per replication domain). Default 100,000.
    pub gtid_index_capacity: usize,
}

/// What happens to a commit that waited `ack_timeout` without its quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTimeout {
    /// Release it, and stop waiting for quorum (DEGRADED) until the replicas have caught up.
    Degrade,
    /// Keep waiting: never acknowledge a commit without its quorum.
    Block,
    /// Answer the client with an error saying the transaction committed on the primary
    /// without reaching quorum.
    Error,
}

/// What a commit does while fewer than `quorum` semisync replicas are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WithoutQuorum {
    /// Wait as usual; `on_timeout` applies after `ack_timeout`.
    Wait,
    /// Apply `on_timeout` at once (with `block`, this still waits).
    Immediate,
}

/// Whether commits currently wait for their quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Every commit waits for its quorum.
    Strong,
    /// Commits are released without waiting, until the replicas have caught up.
    Degraded,
}

/// How a parked commit was released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The quorum acknowledged it.
    Quorum,
    /// It waited `ack_timeout` (or found no quorum with `without_quorum = immediate`) and the
    /// timeout policy released it (with OK for `degrade`, with an error for `error`).
    Timeout,
    /// The proxy was DEGRADED: released without waiting.
    Degraded,
    /// Its GTID could not be learnt: released without waiting.
    Unresolved,
    /// The client went away while it waited.
    ClientGone,
    /// The proxy shut down while it waited.
    Shutdown,
}

/// A commit released without its quorum, with an error for its client: `on_timeout = error`,
/// or the proxy shutting down with the commit still parked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}transaction {gtids} committed on the primary but was not acknowledged by {quorum} replica(s) within {waited:?}; it may be lost if the primary fails", if *.shutdown { "proxy shutting down: " } else { "" })]
pub struct NotAcknowledged {
    /// The GTIDs, comma-separated.
    pub gtids: String,
    /// The quorum it needed.
    pub quorum: usize,
    /// How long it waited.
    pub waited: Duration,
    /// Released because the proxy is shutting down (not by the timeout policy).
    pub shutdown: bool,
}

/// Hears of every commit released, with how and after how long, and of state changes (for
/// metrics).
pub trait WaitObserver: Send + Sync + 'static {
    /// A parked commit was released (or abandoned) after waiting `waited`.
    fn released(&self, outcome: Outcome, waited: Duration);

    /// The durability state changed to `to`.
    fn state_changed(&self, _to: State) {}
}

/// A snapshot of strong sync for status pages and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurabilityStatus {
    /// Current state.
    pub state: State,
    /// Configured quorum.
    pub quorum: usize,
    /// Commits do not wait (relay only).
    pub passthrough: bool,
    /// The highest position acknowledged by `quorum` connected semisync replicas.
    pub quorum_position: Option<Position>,
    /// The end of the last transaction relayed to any replica.
    pub head: Option<Position>,
    /// Connected replicas, by server id.
    pub replicas: Vec<ReplicaStatus>,
    /// Commits waiting right now.
    pub parked: usize,
    /// Transactions whose end position is remembered exactly.
    pub gtid_index_entries: usize,
    /// Time spent DEGRADED so far (the current spell included).
    pub degraded_total: Duration,
    /// Commits released so far, by how.
    pub released: BTreeMap<&'static str, u64>,
    /// Replicas that disconnected, as last known (the most recent ones), by `server_id`.
    pub departed: Vec<ReplicaStatus>,
    /// The newest GTID per domain whose commit was acknowledged to its client with its
    /// quorum (since the proxy started).
    pub acknowledged: GtidPosition,
    /// Replicas, connected or departed, that hold every one of those: safe to promote.
    pub failover_candidates: Vec<u32>,
}

/// One connected replica (or one that was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// The replica's `server_id`.
    pub server_id: u32,
    /// Where it connected from.
    pub address: String,
    /// It asked for semisync (and so counts towards the quorum).
    pub semisync: bool,
    /// The highest position it acknowledged.
    pub acked: Option<Position>,
    /// Binlog bytes between `acked` and the newest transaction relayed (when known).
    pub lag_bytes: Option<u64>,
    /// Transactions relayed but not acknowledged by it (when known).
    pub lag_transactions: Option<u64>,
    /// Time since its last acknowledgement.
    pub last_ack_age: Option<Duration>,
    /// The GTIDs it holds: what it said it had when it connected, then every transaction it
    /// acknowledged.
    pub held: GtidPosition,
    /// Time since it disconnected (`None` while connected).
    pub gone_for: Option<Duration>,
}

/// The strong-sync service shared by sessions and replica pipes.
pub struct Durability {
    config: RwLock<DurabilityConfig>,
    inner: Mutex<Inner>,
    parked: AtomicUsize,
    released: [AtomicU64; OUTCOMES.len()],
    shutting_down: AtomicBool,
    /// Parked commits are being released with an error: the shutdown's grace is over.
    releasing: AtomicBool,
    observer: Option<Arc<dyn WaitObserver>>,
}

/// Every outcome, in the order of the counters.
pub const OUTCOMES: [Outcome; 6] = [
    Outcome::Quorum,
    Outcome::Timeout,
    Outcome::Degraded,
    Outcome::Unresolved,
    Outcome::ClientGone,
    Outcome::Shutdown,
];

struct Inner {
    replicas: HashMap<u32, replicas::Replica>,
    departed: HashMap<u32, replicas::Departed>,
    /// See [`DurabilityStatus::acknowledged`].
    acknowledged: GtidPosition,
    next_pipe: u64,
    index: GtidIndex,
    lag: lag::LagBook,
    head: Option<Position>,
    quorum: Option<Position>,
    state: DurableState,
    /// DEGRADED time of the spells that ended.
    degraded_before: Duration,
    waiters: Waiters,
    observer: Option<Arc<dyn WaitObserver>>,
}

/// The state with what DEGRADED still owes: per domain, the last GTID released without quorum.
enum DurableState {
    Strong,
    Degraded {
        since: Instant,
        owed: HashMap<u32, MariaGtid>,
    },
}

/// A parked commit's own wake-up: something it waits for may have happened, so it looks at
/// the state again.
type Wake = oneshot::Sender<()>;

#[derive(Default)]
struct Waiters {
    next_id: u64,
    /// Waiting for the quorum position to reach a position.
    by_position: BTreeMap<(Position, u64), Wake>,
    /// Waiting to learn where a transaction ends.
    by_gtid: HashMap<MariaGtid, Vec<(u64, Wake)>>,
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
        Arc::new(Durability {
            config: RwLock::new(config),
            inner: Mutex::new(Inner {
                replicas: HashMap::new(),
                departed: HashMap::new(),
                acknowledged: GtidPosition::default(),
                next_pipe: 0,
                index: GtidIndex::new(capacity),
                lag: lag::LagBook::new(capacity),
                head: None,
                quorum: None,
                state: DurableState::Strong,
                degraded_before: Duration::ZERO,
                waiters: Waiters::default(),
                observer: observer.clone(),
            }),
            parked: AtomicUsize::new(0),
            released: Default::default(),
            shutting_down: AtomicBool::new(false),
            releasing: AtomicBool::new(false),
            observer,
        })
    }

    /// The settings in force.
    pub fn config(&self) -> DurabilityConfig {
        *self
            .config
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies new settings to the commits made from now on (the index capacity stays); the
    /// quorum position is recomputed for the new quorum, and parked commits look again.
    pub fn reconfigure(&self, config: DurabilityConfig) {
        {
            let mut held = self
                .config
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            *held = DurabilityConfig {
                gtid_index_capacity: held.gtid_index_capacity,
                ..config
            };
        }
        let mut woken = Vec::new();
        {
            let mut inner = self.lock();
            inner.update_quorum(config.quorum, &mut woken);
            inner.waiters.all(&mut woken);
        }
        wake(woken);
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
        let mut woken = Vec::new();
        self.lock().waiters.all(&mut woken);
        wake(woken);
    }

    /// A snapshot of the state, the replicas and the parked commits.
    pub fn status(&self) -> DurabilityStatus {
        let config = self.config();
        let inner = self.lock();
        let now = Instant::now();
        let mut replicas: Vec<ReplicaStatus> = inner
            .replicas
            .iter()
            .map(|(&server_id, r)| ReplicaStatus {
                lag_bytes: r
                    .acked
                    .zip(inner.head)
                    .and_then(|(a, h)| inner.lag.bytes_behind(a, h)),
                lag_transactions: r.acked.and_then(|a| inner.lag.transactions_behind(a)),
                ..r.status(server_id, now)
            })
            .collect();
        replicas.sort_by_key(|r| r.server_id);
        let mut departed: Vec<ReplicaStatus> = inner
            .departed
            .iter()
            .map(|(&server_id, d)| ReplicaStatus {
                gone_for: Some(now - d.left),
                ..d.replica.status(server_id, now)
            })
            .collect();
        departed.sort_by_key(|r| r.server_id);
        let mut failover_candidates: Vec<u32> = replicas
            .iter()
            .chain(&departed)
            .filter(|r| r.held.covers(&inner.acknowledged))
            .map(|r| r.server_id)
            .collect();
        failover_candidates.sort_unstable();
        DurabilityStatus {
            state: inner.state.public(),
            quorum: config.quorum,
            passthrough: config.passthrough,
            quorum_position: inner.quorum,
            head: inner.head,
            replicas,
            parked: self.parked.load(Ordering::Relaxed),
            gtid_index_entries: inner.index.len(),
            degraded_total: inner.degraded_before
                + match &inner.state {
                    DurableState::Degraded { since, .. } => now - *since,
                    DurableState::Strong => Duration::ZERO,
                },
            released: OUTCOMES
                .iter()
                .zip(&self.released)
                .map(|(o, n)| (o.label(), n.load(Ordering::Relaxed)))
                .collect(),
            departed,
            acknowledged: inner.acknowledged.clone(),
            failover_candidates,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind, never a broken invariant
        // worth refusing service for.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn count(&self, outcome: Outcome, waited: Duration) {
        let i = OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(0);
        self.released[i].fetch_add(1, Ordering::Relaxed);
        if let Some(observer) = &self.observer {
            observer.released(outcome, waited);
        }
    }

    fn semisync_replicas(inner: &Inner) -> usize {
        inner.replicas.values().filter(|r| r.semisync).count()
    }
}

impl CommitHook for Arc<Durability> {
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

// === impl Inner ===

impl Inner {
    /// Recomputes the quorum position from the connected semisync replicas; wakes what it
    /// passes, drops the index entries it passes, and checks whether DEGRADED may end.
    fn update_quorum(&mut self, k: usize, woken: &mut Vec<Wake>) {
        let acked = self
            .replicas
            .values()
            .filter(|r| r.semisync)
            .map(|r| r.acked);
        self.quorum = quorum::quorum_position(acked, k);
        if let Some(slowest) = self.replicas.values().map(|r| r.acked).min().flatten() {
            self.lag.forget_before(slowest);
        }
        if let Some(q) = self.quorum {
            self.waiters.reached(q, woken);
            self.index.prune_through(q);
        }
        self.maybe_strong(k);
    }

    /// DEGRADED ends once enough semisync replicas are connected and the quorum has every
    /// transaction relayed so far, including each one released without quorum.
    fn maybe_strong(&mut self, k: usize) {
        let DurableState::Degraded { since, owed } = &self.state else {
            return;
        };
        let enough = self.replicas.values().filter(|r| r.semisync).count() >= k;
        let Some(quorum) = self.quorum else { return };
        let caught_up = self.head.is_none_or(|head| quorum >= head)
            && owed.values().all(|gtid| match self.index.lookup(gtid) {
                index::Lookup::Exact(p) | index::Lookup::AtMost(p) => p <= quorum,
                index::Lookup::Unknown => false,
            });
        if enough && caught_up {
            let spell = since.elapsed();
            tracing::warn!(degraded_for = ?spell, %quorum, "durability state DEGRADED -> STRONG: the quorum has every commit");
            self.degraded_before += spell;
            self.state = DurableState::Strong;
            if let Some(observer) = &self.observer {
                observer.state_changed(State::Strong);
            }
        }
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

// === impl Waiters ===

impl Waiters {
    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Takes every waiter at or before `quorum`.
    fn reached(&mut self, quorum: Position, woken: &mut Vec<Wake>) {
        let later = self.by_position.split_off(&(quorum, u64::MAX));
        let reached = std::mem::replace(&mut self.by_position, later);
        woken.extend(reached.into_values());
    }

    /// Takes every waiter: the state changed under all of them.
    fn all(&mut self, woken: &mut Vec<Wake>) {
        woken.extend(std::mem::take(&mut self.by_position).into_values());
        for (_, list) in self.by_gtid.drain() {
            woken.extend(list.into_iter().map(|(_, tx)| tx));
        }
    }
}

/// Wakes parked commits (outside the lock).
fn wake(woken: Vec<Wake>) {
    for tx in woken {
        let _ = tx.send(());
    }
}

// === impl Outcome / OnTimeout / WithoutQuorum ===

impl Outcome {
    /// Label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Quorum => "quorum",
            Outcome::Timeout => "timeout",
            Outcome::Degraded => "degraded",
            Outcome::Unresolved => "unresolved",
            Outcome::ClientGone => "client_gone",
            Outcome::Shutdown => "shutdown",
        }
    }
}

impl fmt::Display for OnTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnTimeout::Degrade => "degrade",
            OnTimeout::Block => "block",
            OnTimeout::Error => "error",
        })
    }
}

impl fmt::Display for WithoutQuorum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WithoutQuorum::Wait => "wait",
            WithoutQuorum::Immediate => "immediate",
        })
    }
}

impl FromStr for OnTimeout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "degrade" => Ok(OnTimeout::Degrade),
            "block" => Ok(OnTimeout::Block),
            "error" => Ok(OnTimeout::Error),
            other => Err(format!("expected degrade, block or error, got {other:?}")),
        }
    }
}

impl FromStr for WithoutQuorum {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "wait" => Ok(WithoutQuorum::Wait),
            "immediate" => Ok(WithoutQuorum::Immediate),
            other => Err(format!("expected wait or immediate, got {other:?}")),
        }
    }
}

impl Default for DurabilityConfig {
    fn default() -> Self {
        DurabilityConfig {
            quorum: 1,
            ack_timeout: Duration::from_secs(10),
            on_timeout: OnTimeout::Degrade,
            without_quorum: WithoutQuorum::Wait,
            ack_nudge_after: Duration::from_secs(1),
            gtid_index_capacity: 100_000,
            passthrough: false,
        }
    }
}
