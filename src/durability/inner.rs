//! The state strong sync keeps under its one lock, over its parts (the registry, the waiters, the
//! index, the fence, the watermark), and what moves them together.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use strongsync_proto::gtid::{Gtid, GtidPosition, GtidSet};
use strongsync_proto::position::Position;
use tokio::time::Instant;
use tracing::warn;

use super::counters::WaitObserver;
use super::degraded::ReleasedWithoutQuorum;
use super::fence::{Fence, Fencing};
use super::index::{self, GtidIndex, Lookup};
use super::lag::LagBook;
use super::outcome::GtidOutcome;
use super::persisted::{Persisted, PersistedReplica};
use super::policy::State;
use super::quorum::QuorumRule;
use super::registry::{Departed, Replica};
use super::registry::{Holders, Registry};
use super::waiters::{Until, Verdict, Waiters};
use super::watermark::Watermark;
use crate::config::{DurabilityConfig, Topology};
use crate::gate::Refused;

/// Releases without quorum of unknown GTIDs remembered for `/status`, the most recent ones.
const UNRESOLVED_KEPT: usize = 32;

/// A commit released to its client although what it committed could not be learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnresolvedRelease {
    /// The primary's id for the client's connection.
    pub connection_id: u32,
    /// Why it could not be learnt.
    pub reason: String,
    /// The GTIDs that were learnt, if any (waited for).
    pub gtids: String,
    /// When.
    pub at: Instant,
}

/// Everything strong sync keeps under its one lock.
pub(super) struct Inner {
    /// The settings in force: the one place they live, swapped whole on a reload. Commits read
    /// them under the lock they look with; [`super::FastSettings`] derives from them.
    pub(super) config: Arc<DurabilityConfig>,
    /// The replicas' zones and labels.
    pub(super) topology: Arc<Topology>,
    pub(super) registry: Registry,
    pub(super) waiters: Waiters,
    pub(super) index: GtidIndex,
    pub(super) lag: LagBook,
    /// The end of the newest transaction relayed to any replica.
    pub(super) head: Option<Position>,
    pub(super) state: DurableState,
    /// DEGRADED time of the spells that ended.
    pub(super) degraded_before: Duration,
    /// See [`super::DurabilityStatus::watermark`].
    pub(super) watermark: Watermark,
    /// Recent releases of commits whose GTIDs could not be learnt.
    pub(super) unresolved: VecDeque<Arc<UnresolvedRelease>>,
    /// Every commit acknowledged to its client without its quorum (DEGRADED, the timeout
    /// policy, a session that asked for none), kept for the commit outcome.
    pub(super) released_without_quorum: GtidSet,
    /// The number of the epoch in force, as strong sync's state has it (the gate holds the
    /// epoch itself; its own number moves first when a follow begins).
    pub(super) epoch_number: u64,
    /// Why commits cannot be named by GTID now, if they cannot.
    pub(super) untracked_why: Option<String>,
    /// The fence, while it is up, and the tail of every fence so far.
    pub(super) fencing: Fencing,
    /// Bumped whenever something the state file keeps changes.
    pub(super) version: u64,
    pub(super) observer: Option<Arc<dyn WaitObserver>>,
    /// The quorum position under the configured rule, for the pipes of async replicas (which
    /// are also told when the settings change).
    pub(super) quorum_watch: tokio::sync::watch::Sender<Option<Position>>,
}

/// The state, with what DEGRADED owes.
pub(super) enum DurableState {
    Strong,
    Degraded {
        since: Instant,
        /// Acknowledged to clients without their quorum since STRONG ended.
        released: ReleasedWithoutQuorum,
        /// How many of those the last periodic summary counted.
        summarized: u64,
    },
}

/// What a commit waits for, as the shared state stands.
pub(super) enum Plan {
    /// The quorum holds every transaction it reported.
    Held,
    /// Not yet.
    Wait(Until),
}

// === impl Inner ===

impl Inner {
    pub(super) fn new(config: DurabilityConfig, observer: Option<Arc<dyn WaitObserver>>) -> Self {
        let capacity = config.gtid_index_capacity;
        Inner {
            watermark: Watermark::new(config.max_gtid_intervals),
            config: Arc::new(config),
            topology: Arc::default(),
            registry: Registry::default(),
            waiters: Waiters::default(),
            index: GtidIndex::new(capacity),
            lag: LagBook::new(capacity),
            head: None,
            state: DurableState::Strong,
            degraded_before: Duration::ZERO,
            unresolved: VecDeque::new(),
            released_without_quorum: GtidSet::default(),
            epoch_number: 1,
            untracked_why: None,
            fencing: Fencing::default(),
            version: 0,
            observer,
            quorum_watch: tokio::sync::watch::Sender::new(None),
        }
    }

    /// Some replica's position changed (or the quorum did): recomputes the quorum position,
    /// wakes the commits it reaches, moves those counted by connect states, drops the index
    /// entries it passes, and checks whether DEGRADED may end.
    pub(super) fn positions_changed(&mut self, woken: &mut Vec<std::task::Waker>) {
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
    pub(super) fn relayed(&mut self, gtid: &Gtid, woken: &mut Vec<std::task::Waker>) {
        for slot in self.waiters.take_relayed(gtid) {
            self.replan(slot, woken);
        }
    }

    /// Puts a commit taken out of its index under what it waits for now, or wakes it if the
    /// quorum holds it.
    pub(super) fn replan(&mut self, slot: usize, woken: &mut Vec<std::task::Waker>) {
        let rule = self.waiters.rule(slot);
        match self.plan(self.waiters.gtids(slot), &rule) {
            Plan::Held => {
                let Inner {
                    waiters, watermark, ..
                } = self;
                for gtid in waiters.gtids(slot) {
                    watermark.take(*gtid);
                }
                waiters.wake(slot, Verdict::Held, woken);
            }
            Plan::Wait(until) => self.waiters.wait_for(slot, until),
        }
    }

    /// What a commit of `gtids` waits for under `rule`: the first transaction whose end is
    /// not known yet, else the end of the last one the quorum does not hold — or any replica
    /// moving, if some counted only by what they connected with.
    pub(super) fn plan(&self, gtids: &[Gtid], rule: &QuorumRule) -> Plan {
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
    pub(super) fn holders(&self, gtid: &Gtid) -> (Holders<'_>, Option<Position>) {
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
    pub(super) fn maybe_strong(&mut self) {
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
    pub(super) fn degrade(&mut self, reason: &str, woken: &mut Vec<std::task::Waker>) {
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
    pub(super) fn changed(&mut self) {
        self.version = self.version.wrapping_add(1);
    }

    /// Remembers a release whose GTIDs could not be learnt.
    pub(super) fn unresolved(&mut self, release: UnresolvedRelease) {
        if self.unresolved.len() == UNRESOLVED_KEPT {
            self.unresolved.pop_front();
        }
        self.unresolved.push_back(Arc::new(release));
    }

    // --- the fence (its state: fence.rs) ---

    /// Raises the fence over the primary of `epoch` unless one is up: its pipes stop, and
    /// parked commits look again. Returns the fence in force and whether this raised it.
    pub(super) fn raise_fence(&mut self, epoch: u64, woken: &mut Vec<Waker>) -> (Fence, bool) {
        let (fence, raised) = self.fencing.raise(epoch);
        if raised {
            self.waiters.all(woken);
            self.changed();
        }
        (fence, raised)
    }

    /// The fence's drain is over: what was relayed and the quorum does not hold joins the tail.
    pub(super) fn drained(&mut self) {
        let unheld = self.unheld(self.index.relayed());
        self.fencing.join_tail(unheld);
        self.changed();
    }

    /// Opens epoch `number` and lifts the fence: every position known goes (the index, the
    /// replicas' ACKed positions, the quorum position), parked commits look again (and, of
    /// the old epoch, are refused).
    pub(super) fn open_epoch(&mut self, number: u64, woken: &mut Vec<Waker>) {
        self.epoch_number = number;
        let capacity = self.config.gtid_index_capacity;
        self.index = GtidIndex::new(capacity);
        self.lag = LagBook::new(capacity);
        self.head = None;
        self.registry.forget_positions();
        self.quorum_watch.send_replace(None);
        self.fencing.lift();
        self.waiters.all(woken);
        self.changed();
    }

    /// Of `gtids`, those the configured quorum does not hold.
    fn unheld<'a>(&self, gtids: impl Iterator<Item = &'a Gtid>) -> Vec<Gtid> {
        let rule = self.config.rule();
        gtids
            .filter(|gtid| !matches!(self.plan(std::slice::from_ref(*gtid), &rule), Plan::Held))
            .copied()
            .collect()
    }

    /// A commit of `gtids` meets the fence: the ones the quorum does not hold join the tail.
    pub(super) fn fenced_commit(&mut self, gtids: &[Gtid]) {
        let unheld = self.unheld(gtids.iter());
        self.fencing.join_tail(unheld);
        self.changed();
    }

    // --- a commit's outcome (outcome.rs) ---

    /// See [`Durability::outcome`](super::Durability::outcome).
    pub(super) fn outcome(&self, gtid: &Gtid) -> GtidOutcome {
        let inner = self;
        let exactly = !inner.watermark.inexact() && inner.watermark.exact().contains(gtid);
        if inner.waiters.all_gtids().any(|g| g == gtid) {
            GtidOutcome::Waiting
        } else if inner.fencing.tail().contains(gtid) {
            GtidOutcome::Tail
        } else if inner.released_without_quorum.contains(gtid) {
            GtidOutcome::ReleasedWithoutQuorum { held: exactly }
        } else if exactly
            || matches!(
                inner.plan(std::slice::from_ref(gtid), &inner.config.rule()),
                Plan::Held
            )
        {
            GtidOutcome::Acknowledged
        } else {
            GtidOutcome::Unknown
        }
    }

    // --- what the state file keeps (persisted.rs) ---

    /// See [`Durability::persisted`](super::Durability::persisted).
    pub(super) fn persisted(&self) -> (u64, Persisted) {
        let known = self
            .registry
            .connected()
            .chain(self.registry.departed().map(|(id, d)| (id, &d.replica)));
        let mut replicas: Vec<PersistedReplica> = known
            .map(|(server_id, r)| PersistedReplica {
                server_id,
                address: r.address.to_string(),
                semisync: r.semisync,
                held: GtidPosition::clone(&r.held),
            })
            .collect();
        replicas.sort_by_key(|r| r.server_id);
        let persisted = Persisted {
            watermark: GtidPosition::clone(self.watermark.position()),
            watermark_set: self.watermark.exact().clone(),
            watermark_inexact: self.watermark.inexact(),
            released_without_quorum: self.released_without_quorum.clone(),
            replicas,
            fence: self.fencing.up(),
            tail: self.fencing.tail().clone(),
        };
        (self.version, persisted)
    }

    /// See [`Durability::restore`](super::Durability::restore). Returns whether it raised the
    /// fence (which the gate must then mirror).
    pub(super) fn restore(&mut self, kept: Persisted) -> bool {
        self.watermark
            .restore(&kept.watermark, &kept.watermark_set, kept.watermark_inexact);
        self.released_without_quorum
            .extend(&kept.released_without_quorum);
        for replica in kept.replicas {
            let zone = self.topology.zone_of(replica.server_id);
            self.registry.remember(
                replica.server_id,
                Departed {
                    replica: Replica::remembered(
                        replica.address,
                        zone,
                        replica.semisync,
                        replica.held,
                    ),
                    left: Instant::now(),
                },
            );
        }
        let fenced = self.fencing.restore(kept.fence, &kept.tail);
        self.changed();
        fenced
    }

    // --- replicas (replica.rs) ---

    /// Registers a replica whose dump the primary of `epoch` accepted, unless that epoch is
    /// fenced or over (see [`Durability::admit`](super::Durability::admit)); returns its pipe's
    /// number.
    pub(super) fn admit(
        &mut self,
        epoch: u64,
        server_id: u32,
        address: SocketAddr,
        semisync: bool,
        connect_state: &GtidPosition,
        woken: &mut Vec<Waker>,
    ) -> Result<u64, Refused> {
        if self.epoch_number != epoch {
            return Err(Refused::Retired {
                epoch,
                now: self.epoch_number,
            });
        }
        if self.fencing.up().is_some() {
            return Err(Refused::Fenced { epoch });
        }
        let zone = self.topology.zone_of(server_id);
        let pipe = self.registry.admit(
            server_id,
            address.to_string(),
            semisync,
            connect_state.clone(),
            zone,
        );
        self.positions_changed(woken);
        self.waiters.all(woken);
        Ok(pipe)
    }
}

// === impl DurableState ===

impl DurableState {
    pub(super) fn public(&self) -> State {
        match self {
            DurableState::Strong => State::Strong,
            DurableState::Degraded { .. } => State::Degraded,
        }
    }
}
