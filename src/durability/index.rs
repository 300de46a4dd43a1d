//! GTID → binlog position, learnt from the events relayed to replicas: where each transaction ends.

use std::collections::{HashMap, VecDeque};

use strongsync_proto::gtid::{Domain, Gtid, SeqSet};
use strongsync_proto::position::Position;

/// The index.
///
/// Bounded: entries the quorum has passed are dropped (and handed to the watermark: the quorum
/// holds them), and past the capacity the oldest go; what is dropped is remembered per domain and
/// server as a floor (every GTID whose number the floor holds ends at or before its position),
/// which is all a waiter needs.
///
/// A floor holds the numbers of the entries it took, as intervals, not everything below the
/// highest: a primary hands numbers out in binlog order within a domain, but a MySQL client that
/// gives `gtid_next` by hand (or MariaDB without `gtid_strict_mode`) can commit a number beyond the
/// next free one, and the numbers skipped come later in the binlog. Those are then not mistaken for
/// relayed. In the usual case a floor is one interval.
#[derive(Debug)]
pub struct GtidIndex {
    exact: HashMap<Gtid, Position>,
    /// Entries in the order they were learnt (binlog order), for pruning.
    order: VecDeque<(Gtid, Position)>,
    /// Per domain and (MariaDB) server: every GTID with a number in `seqs` and not in `exact`
    /// ends at or before `position`.
    floors: HashMap<(Domain, u32), Floor>,
    capacity: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Floor {
    seqs: SeqSet,
    position: Position,
    /// The quorum was seen holding every GTID of it (since it last grew).
    held: bool,
}

/// What the quorum holds, handed over as the index drops it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// One transaction.
    One(Gtid),
    /// Every number from `start` to `end` of `domain` and (MariaDB) `server_id`.
    Range {
        domain: Domain,
        server_id: u32,
        start: u64,
        end: u64,
    },
}

/// What the index knows about a GTID's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The transaction ends exactly here.
    Exact(Position),
    /// The transaction ends here or earlier (its entry was dropped).
    AtMost(Position),
    /// Not relayed to any replica yet.
    Unknown,
}

// === impl GtidIndex ===

impl GtidIndex {
    /// An empty index holding at most `capacity` exact entries.
    pub fn new(capacity: usize) -> Self {
        GtidIndex {
            exact: HashMap::new(),
            order: VecDeque::new(),
            floors: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// Exact entries held.
    pub fn len(&self) -> usize {
        self.exact.len()
    }

    /// Most exact entries held.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records where `gtid` ends. The first replica to relay a transaction decides; a GTID
    /// already covered by a floor is ignored.
    pub fn insert(&mut self, gtid: Gtid, position: Position) {
        if self.floor_covers(&gtid) || self.exact.contains_key(&gtid) {
            return;
        }
        self.exact.insert(gtid, position);
        self.order.push_back((gtid, position));
        while self.exact.len() > self.capacity {
            self.drop_oldest(false);
        }
    }

    /// Where `gtid` ends, as far as the index knows.
    pub fn lookup(&self, gtid: &Gtid) -> Lookup {
        if let Some(position) = self.exact.get(gtid) {
            return Lookup::Exact(*position);
        }
        match self.floors.get(&(gtid.domain, gtid.server_id)) {
            Some(floor) if floor.seqs.contains(gtid.seq_no) => Lookup::AtMost(floor.position),
            _ => Lookup::Unknown,
        }
    }

    /// Drops the entries at or before `quorum` (the quorum holds them; nobody needs their exact
    /// position again), handing each to `held`, with the floors the quorum now holds whole.
    pub fn prune_through(&mut self, quorum: Position, mut held: impl FnMut(Held)) {
        while let Some(&(gtid, position)) = self.order.front() {
            if position > quorum {
                break;
            }
            held(Held::One(gtid));
            self.drop_oldest(true);
        }
        for (&(domain, server_id), floor) in &mut self.floors {
            if floor.held || floor.position > quorum {
                continue;
            }
            floor.held = true;
            for &(start, end) in floor.seqs.intervals() {
                held(Held::Range {
                    domain,
                    server_id,
                    start,
                    end,
                });
            }
        }
    }

    /// The GTIDs of the exact entries, in binlog order: what was relayed and not yet passed by
    /// the quorum (nor dropped for capacity).
    pub fn relayed(&self) -> impl Iterator<Item = &Gtid> {
        self.order.iter().map(|(gtid, _)| gtid)
    }

    /// Moves the oldest entry into its floor; `held`: the quorum holds it (and it was handed
    /// over already).
    fn drop_oldest(&mut self, held: bool) {
        let Some((gtid, position)) = self.order.pop_front() else {
            return;
        };
        self.exact.remove(&gtid);
        let floor = self
            .floors
            .entry((gtid.domain, gtid.server_id))
            .or_insert(Floor {
                seqs: SeqSet::default(),
                position,
                held,
            });
        floor.seqs.insert(gtid.seq_no);
        floor.position = floor.position.max(position);
        floor.held &= held;
    }

    fn floor_covers(&self, gtid: &Gtid) -> bool {
        self.floors
            .get(&(gtid.domain, gtid.server_id))
            .is_some_and(|floor| floor.seqs.contains(gtid.seq_no))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn g(domain: u32, seq_no: u64) -> Gtid {
        Gtid::maria(domain, 1, seq_no)
    }

    fn p(offset: u64) -> Position {
        Position {
            file_seq: 1,
            offset,
        }
    }

    #[test]
    fn learns_prunes_and_bounds() {
        let mut index = GtidIndex::new(100);
        assert_eq!(index.lookup(&g(0, 1)), Lookup::Unknown);
        index.insert(g(0, 1), p(100));
        index.insert(g(0, 2), p(200));
        index.insert(g(1, 1), p(300));
        index.insert(g(0, 2), p(999)); // a second replica relaying the same transaction
        assert_eq!(index.lookup(&g(0, 2)), Lookup::Exact(p(200)));

        let mut held = Vec::new();
        index.prune_through(p(200), |h| held.push(h));
        assert_eq!(held, [Held::One(g(0, 1)), Held::One(g(0, 2))]);
        assert_eq!(index.len(), 1);
        assert_eq!(index.lookup(&g(0, 1)), Lookup::AtMost(p(200)));
        assert_eq!(index.lookup(&g(0, 2)), Lookup::AtMost(p(200)));
        assert_eq!(index.lookup(&g(0, 3)), Lookup::Unknown);
        assert_eq!(index.lookup(&g(1, 1)), Lookup::Exact(p(300)));

        // A lagging replica relaying old transactions changes nothing.
        index.insert(g(0, 1), p(100));
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn capacity_drops_the_oldest_into_the_floor() {
        let mut index = GtidIndex::new(2);
        for seq in 1..=5 {
            index.insert(g(0, seq), p(seq * 100));
        }
        assert_eq!(index.len(), 2);
        assert_eq!(index.lookup(&g(0, 2)), Lookup::AtMost(p(300)));
        assert_eq!(index.lookup(&g(0, 4)), Lookup::Exact(p(400)));
        // Another server's GTID of the same number is another transaction.
        assert_eq!(index.lookup(&Gtid::maria(0, 2, 2)), Lookup::Unknown);
        // The floor is handed over once the quorum holds it whole, and once only.
        let mut held = Vec::new();
        index.prune_through(p(250), |h| held.push(h));
        assert!(held.is_empty(), "{held:?}");
        index.prune_through(p(400), |h| held.push(h));
        let range = Held::Range {
            domain: Domain::Maria(0),
            server_id: 1,
            start: 1,
            end: 4,
        };
        assert_eq!(held, [Held::One(g(0, 4)), range]);
        held.clear();
        index.prune_through(p(400), |h| held.push(h));
        assert!(held.is_empty(), "{held:?}");
    }

    /// A number given by hand beyond the next free one: the numbers it skipped are relayed
    /// later, and until then they are not taken as relayed.
    #[test]
    fn numbers_skipped_are_not_taken_for_relayed() {
        let mut index = GtidIndex::new(100);
        index.insert(g(0, 1), p(100));
        index.insert(g(0, 5000), p(200));
        index.prune_through(p(200), drop);
        assert_eq!(index.lookup(&g(0, 5000)), Lookup::AtMost(p(200)));
        assert_eq!(index.lookup(&g(0, 2)), Lookup::Unknown);
        index.insert(g(0, 2), p(300));
        assert_eq!(index.lookup(&g(0, 2)), Lookup::Exact(p(300)));
        index.prune_through(p(300), drop);
        assert_eq!(index.lookup(&g(0, 2)), Lookup::AtMost(p(300)));
        assert_eq!(index.lookup(&g(0, 3)), Lookup::Unknown);
    }

    proptest! {
        /// Whatever is dropped, a lookup never answers a position before the true one.
        #[test]
        fn lookups_never_underestimate(
            count in 1u64..200,
            capacity in 1usize..50,
            prunes in prop::collection::vec(0u64..200, 0..10),
        ) {
            let mut index = GtidIndex::new(capacity);
            let truth = |seq: u64| p(seq * 10 + 5);
            for (i, seq) in (1..=count).enumerate() {
                index.insert(g(0, seq), truth(seq));
                if let Some(&at) = prunes.get(i % 10) {
                    index.prune_through(p(at * 10), drop);
                }
            }
            prop_assert!(index.len() <= capacity);
            for seq in 1..=count {
                match index.lookup(&g(0, seq)) {
                    Lookup::Exact(pos) => prop_assert_eq!(pos, truth(seq)),
                    Lookup::AtMost(pos) => prop_assert!(pos >= truth(seq)),
                    Lookup::Unknown => prop_assert!(false, "{seq} was relayed"),
                }
            }
        }
    }
}
