//! The replica registry: the replicas whose dump the primary accepted, what each holds, and the
//! quorum position their holdings add up to.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use strongsync_proto::gtid::Gtid;
use strongsync_proto::position::Position;
use tokio::time::Instant;

use super::quorum::{QuorumRule, Tally, Unmet};
use super::ReplicaStatus;
use crate::config::Topology;
use strongsync_proto::gtid::GtidPosition;

/// Disconnected replicas remembered, the most recent ones.
pub(super) const DEPARTED_KEPT: usize = 64;

/// Every replica, connected or last known. Replicas that left are kept as last known, for a
/// failover tool once the primary (and with it every replica's stream) is gone.
#[derive(Debug, Default)]
pub(super) struct Registry {
    connected: HashMap<u32, Replica>,
    departed: HashMap<u32, Departed>,
    next_pipe: u64,
    /// The highest position held by connected semisync replicas that meet the configured rule
    /// (see [`update_quorum`](Self::update_quorum)).
    quorum: Option<Position>,
    /// The primary's zone, for `cross_zone`.
    primary_zone: Option<Arc<str>>,
}

/// One replica. What it holds is kept two ways, both exact: the binlog position through which it
/// has everything (`covered`: ACKed, or shown by its stream, see [`super::coverage`]), and per
/// replication domain the newest GTID it has (`held`: its connect state as the primary received
/// it, then each transaction ACKed).
#[derive(Debug)]
pub(super) struct Replica {
    /// Which dump this record belongs to (a reconnect replaces it).
    pub pipe: u64,
    pub address: Arc<str>,
    /// Its zone, from the config file.
    pub zone: Option<Arc<str>>,
    /// It asked for semisync, so it ACKs and counts towards the quorum.
    pub semisync: bool,
    /// Its stream goes in compressed frames (it asked, as `slave_compressed_protocol` does).
    pub compressed: bool,
    /// The highest position it ACKed.
    pub acked: Option<Position>,
    /// The position through which it holds every transaction (its ACKs and what
    /// its stream shows the primary skipped for it).
    pub covered: Option<Position>,
    pub last_ack: Option<Instant>,
    /// Per domain, the newest GTID it holds (shared with status snapshots, copied on write).
    pub held: Arc<GtidPosition>,
    /// Transactions relayed to it and not yet covered, with their GTIDs, oldest first.
    /// Bounded: past the capacity the oldest go, which only leaves `held` behind what the
    /// replica has (never ahead of it).
    pub unacked: VecDeque<(Position, Gtid)>,
}

/// A replica that has disconnected, as it was last known.
#[derive(Debug)]
pub(super) struct Departed {
    pub replica: Replica,
    pub left: Instant,
}

/// Who holds a transaction.
#[derive(Debug, Clone, Default)]
pub(super) struct Holders<'a> {
    /// Connected semisync replicas that hold it.
    pub tally: Tally<'a>,
    /// Of those, the ones counted only by the GTIDs they connected with (their position has
    /// not reached it): a commit counted this way is woken by any replica that moves.
    pub by_connect_state: usize,
}

// === impl Registry ===

impl Registry {
    /// Admits a replica whose dump the primary accepted, holding `connect_state`. A replica
    /// with the same `server_id` is replaced (the primary ends its old dump too). Returns the
    /// id of the new registration.
    pub(super) fn admit(
        &mut self,
        server_id: u32,
        address: String,
        semisync: bool,
        connect_state: GtidPosition,
        zone: Option<Arc<str>>,
    ) -> u64 {
        self.next_pipe += 1;
        self.departed.remove(&server_id);
        self.connected.insert(
            server_id,
            Replica {
                pipe: self.next_pipe,
                ..Replica::remembered(address, zone, semisync, connect_state)
            },
        );
        self.next_pipe
    }

    /// The replica `server_id`, if its registration is still `pipe`'s.
    pub(super) fn get_mut(&mut self, server_id: u32, pipe: u64) -> Option<&mut Replica> {
        self.connected
            .get_mut(&server_id)
            .filter(|r| r.pipe == pipe)
    }

    /// Moves the replica to the departed ones; false if `pipe` was no longer its registration.
    pub(super) fn leave(&mut self, server_id: u32, pipe: u64, now: Instant) -> bool {
        if self.get_mut(server_id, pipe).is_none() {
            return false;
        }
        let Some(mut gone) = self.connected.remove(&server_id) else {
            return false;
        };
        if self.departed.len() >= DEPARTED_KEPT {
            let oldest = self
                .departed
                .iter()
                .min_by_key(|(_, d)| d.left)
                .map(|(id, _)| *id);
            if let Some(oldest) = oldest {
                self.departed.remove(&oldest);
            }
        }
        gone.unacked.clear();
        self.departed.insert(
            server_id,
            Departed {
                replica: gone,
                left: now,
            },
        );
        true
    }

    /// Takes in the zones the config file gives now, for the replicas connected and departed.
    pub(super) fn relabel(&mut self, topology: &Topology) {
        self.primary_zone = topology.primary_zone.clone();
        for (server_id, replica) in &mut self.connected {
            replica.zone = topology.zone_of(*server_id);
        }
        for (server_id, departed) in &mut self.departed {
            departed.replica.zone = topology.zone_of(*server_id);
        }
    }

    /// Recomputes the quorum position under the configured `rule`.
    pub(super) fn update_quorum(&mut self, rule: &QuorumRule) -> Option<Position> {
        self.quorum = self.quorum_under(rule);
        self.quorum
    }

    /// The highest position held by connected semisync replicas that meet `rule`.
    pub(super) fn quorum_under(&self, rule: &QuorumRule) -> Option<Position> {
        let held = self
            .connected
            .values()
            .filter(|r| r.semisync)
            .map(|r| (r.zone.as_deref(), r.holds_through()));
        rule.position(held, self.primary_zone.as_deref())
    }

    /// What of `rule` the connected semisync replicas cannot meet whatever they ACK,
    /// if anything.
    pub(super) fn unmet(&self, rule: &QuorumRule) -> Option<Unmet> {
        let primary_zone = self.primary_zone.as_deref();
        let mut tally = Tally::default();
        for r in self.connected.values().filter(|r| r.semisync) {
            tally.add(r.zone.as_deref(), primary_zone);
        }
        tally.unmet(rule, primary_zone)
    }

    /// The quorum position as last computed.
    pub(super) fn quorum(&self) -> Option<Position> {
        self.quorum
    }

    /// Connected replicas that count towards the quorum.
    pub(super) fn semisync_count(&self) -> usize {
        self.connected.values().filter(|r| r.semisync).count()
    }

    /// Who holds `gtid`, which ends at or before `end` when that is known.
    pub(super) fn holders(&self, gtid: &Gtid, end: Option<Position>) -> Holders<'_> {
        let mut holders = Holders::default();
        for r in self.connected.values().filter(|r| r.semisync) {
            let by_position = end.is_some_and(|end| r.holds_through() >= Some(end));
            if by_position || r.held.holds(gtid) {
                holders
                    .tally
                    .add(r.zone.as_deref(), self.primary_zone.as_deref());
                holders.by_connect_state += usize::from(!by_position);
            }
        }
        holders
    }

    /// The lowest position any connected replica holds through.
    pub(super) fn slowest(&self) -> Option<Position> {
        self.connected
            .values()
            .map(Replica::holds_through)
            .min()
            .flatten()
    }

    /// A new primary's binlog: every position known belongs to the old one's and goes; what
    /// each replica holds by GTID stays.
    pub(super) fn forget_positions(&mut self) {
        let replicas = self
            .connected
            .values_mut()
            .chain(self.departed.values_mut().map(|d| &mut d.replica));
        for replica in replicas {
            replica.acked = None;
            replica.covered = None;
            replica.last_ack = None;
            replica.unacked.clear();
        }
        self.quorum = None;
    }

    /// Keeps `departed` as last known (a previous run's replica), unless it is connected.
    pub(super) fn remember(&mut self, server_id: u32, departed: Departed) {
        if !self.connected.contains_key(&server_id) && self.departed.len() < DEPARTED_KEPT {
            self.departed.insert(server_id, departed);
        }
    }

    /// Connected replicas, by server id.
    pub(super) fn connected(&self) -> impl Iterator<Item = (u32, &Replica)> {
        self.connected.iter().map(|(id, r)| (*id, r))
    }

    /// Departed replicas, by server id.
    pub(super) fn departed(&self) -> impl Iterator<Item = (u32, &Departed)> {
        self.departed.iter().map(|(id, d)| (*id, d))
    }
}

// === impl Replica ===

impl Replica {
    /// A replica as far as it is known before it ACKs anything: what it holds, no
    /// position in this binlog (one admitted just now, or one known only from the state file).
    pub(super) fn remembered(
        address: String,
        zone: Option<Arc<str>>,
        semisync: bool,
        held: GtidPosition,
    ) -> Self {
        Replica {
            pipe: 0,
            address: address.into(),
            zone,
            semisync,
            compressed: false,
            acked: None,
            covered: None,
            last_ack: None,
            held: Arc::new(held),
            unacked: VecDeque::new(),
        }
    }

    /// The position through which it holds every transaction.
    pub(super) fn holds_through(&self) -> Option<Position> {
        self.acked.max(self.covered)
    }

    /// A transaction ending at `end` was relayed to it.
    pub(super) fn relayed(&mut self, end: Position, gtid: Gtid, capacity: usize) {
        if !self.semisync {
            return;
        }
        if self.unacked.len() >= capacity {
            self.unacked.pop_front();
        }
        self.unacked.push_back((end, gtid));
    }

    /// It ACKed everything up to `position`.
    pub(super) fn acked(&mut self, position: Position, now: Instant) {
        self.acked = self.acked.max(Some(position));
        self.last_ack = Some(now);
        self.take_held();
    }

    /// Its stream shows it holds everything through `position`.
    pub(super) fn covered(&mut self, position: Position) {
        self.covered = self.covered.max(Some(position));
        self.take_held();
    }

    /// Moves the transactions it now holds from `unacked` into `held`.
    fn take_held(&mut self) {
        let Some(through) = self.holds_through() else {
            return;
        };
        while let Some(&(end, gtid)) = self.unacked.front() {
            if end > through {
                break;
            }
            Arc::make_mut(&mut self.held).advance(gtid);
            self.unacked.pop_front();
        }
    }

    /// What is known of it at `now`, without the lag (which needs the relayed stream's book).
    pub(super) fn status(&self, server_id: u32, now: Instant) -> ReplicaStatus {
        ReplicaStatus {
            server_id,
            address: Arc::clone(&self.address),
            zone: self.zone.clone(),
            labels: Default::default(),
            semisync: self.semisync,
            compressed: self.compressed,
            acked: self.acked,
            holds_through: self.holds_through(),
            lag_bytes: None,
            lag_transactions: None,
            last_ack_age: self.last_ack.map(|at| now - at),
            held: Arc::clone(&self.held),
            gone_for: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durability::testing::at as p;

    fn g(text: &str) -> Gtid {
        text.parse().unwrap()
    }

    fn state(text: &str) -> GtidPosition {
        GtidPosition::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn the_quorum_counts_semisync_replicas_by_the_position_they_hold_through() {
        let mut reg = Registry::default();
        let a = reg.admit(2, "a".into(), true, GtidPosition::default(), None);
        let b = reg.admit(3, "b".into(), true, GtidPosition::default(), None);
        let plain = reg.admit(4, "c".into(), false, GtidPosition::default(), None);
        let now = Instant::now();
        reg.get_mut(2, a).unwrap().acked(p(300), now);
        reg.get_mut(3, b).unwrap().covered(p(200));
        reg.get_mut(4, plain).unwrap().covered(p(900));
        let k = QuorumRule::count;
        assert_eq!(reg.update_quorum(&k(1)), Some(p(300)));
        assert_eq!(reg.update_quorum(&k(2)), Some(p(200)));
        assert_eq!(
            reg.update_quorum(&k(3)),
            None,
            "the async replica does not count"
        );
        assert_eq!(reg.unmet(&k(3)), Some(Unmet::Count { have: 2, need: 3 }));
        assert_eq!(reg.semisync_count(), 2);
        assert_eq!(reg.slowest(), Some(p(200)));
    }

    #[test]
    fn holders_are_exact_per_domain() {
        // Domains 0 and 1 interleave: 0-1-1 ends at 100, 1-1-1 at 200, 0-1-2 at 300, 1-1-2 at
        // 400. A replica that connected holding 0-1-1 and 1-1-2 does not hold 0-1-2.
        let mut reg = Registry::default();
        reg.admit(2, "a".into(), true, state("0-1-1,1-1-2"), None);
        let held = |reg: &Registry, gtid: &str, end: u64| {
            reg.holders(&g(gtid), Some(p(end))).tally.count()
        };
        assert_eq!(held(&reg, "0-1-1", 100), 1);
        assert_eq!(held(&reg, "1-1-2", 400), 1);
        assert_eq!(held(&reg, "0-1-2", 300), 0);
        assert_eq!(reg.holders(&g("1-1-2"), None).by_connect_state, 1);
    }

    #[test]
    fn a_reconnect_replaces_the_old_registration_and_departed_replicas_are_kept() {
        let mut reg = Registry::default();
        let now = Instant::now();
        let old = reg.admit(2, "a".into(), true, state("0-1-4"), None);
        let new = reg.admit(2, "a".into(), true, state("0-1-9"), None);
        assert!(
            reg.get_mut(2, old).is_none(),
            "the old dump no longer counts"
        );
        assert!(!reg.leave(2, old, now), "its leaving changes nothing");
        assert_eq!(reg.connected().count(), 1);
        assert!(reg.leave(2, new, now));
        let (_, gone) = reg.departed().next().unwrap();
        assert_eq!(gone.replica.held.to_string(), "0-1-9");
        reg.admit(2, "a".into(), true, GtidPosition::default(), None);
        assert_eq!(reg.departed().count(), 0, "back: no longer departed");
    }

    #[test]
    fn held_gtids_follow_what_is_covered_and_stay_bounded() {
        let mut reg = Registry::default();
        let pipe = reg.admit(2, "a".into(), true, state("1-1-9"), None);
        let r = reg.get_mut(2, pipe).unwrap();
        for seq in 1..=6u64 {
            r.relayed(p(seq * 100), g(&format!("0-1-{seq}")), 4);
        }
        assert_eq!(r.unacked.len(), 4, "bounded by the capacity");
        r.covered(p(450));
        assert_eq!(r.held.to_string(), "0-1-4,1-1-9");
        r.acked(p(600), Instant::now());
        assert_eq!(r.held.to_string(), "0-1-6,1-1-9");
    }
}
