//! The wait queue: parked commits, each with its own wake-up, keyed by what they wait for —
//! the quorum position reaching a binlog position, a transaction's end becoming known, or (for
//! the rare commit counted partly by what reconnected replicas said they had) any replica
//! moving on. Waking is a hint: the woken commit looks at the state again.

use std::collections::{BTreeMap, HashMap};

use strongsync_proto::gtid::MariaGtid;
use strongsync_proto::position::Position;
use tokio::sync::oneshot;

/// A parked commit's own wake-up.
pub(super) type Wake = oneshot::Sender<()>;

/// What a parked commit is registered under (to take it out again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    /// Until the quorum position reaches the position.
    Position(Position, u64),
    /// Until the transaction's end is relayed.
    Gtid(MariaGtid, u64),
    /// Until any replica's position moves.
    AnyMove(u64),
}

/// Every parked commit.
#[derive(Debug, Default)]
pub(super) struct Waiters {
    next_id: u64,
    by_position: BTreeMap<(Position, u64), Wake>,
    by_gtid: HashMap<MariaGtid, Vec<(u64, Wake)>>,
    any_move: Vec<(u64, Wake)>,
}

// === impl Waiters ===

impl Waiters {
    /// Parks until the quorum position reaches `position`.
    pub(super) fn at_position(&mut self, position: Position) -> (Key, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id();
        self.by_position.insert((position, id), tx);
        (Key::Position(position, id), rx)
    }

    /// Parks until `gtid`'s end position is learnt.
    pub(super) fn on_gtid(&mut self, gtid: MariaGtid) -> (Key, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id();
        self.by_gtid.entry(gtid).or_default().push((id, tx));
        (Key::Gtid(gtid, id), rx)
    }

    /// Parks until any replica's position moves.
    pub(super) fn on_any_move(&mut self) -> (Key, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id();
        self.any_move.push((id, tx));
        (Key::AnyMove(id), rx)
    }

    /// Takes a parked commit out (released, or its client gone).
    pub(super) fn remove(&mut self, key: Key) {
        match key {
            Key::Position(position, id) => {
                self.by_position.remove(&(position, id));
            }
            Key::Gtid(gtid, id) => {
                if let Some(list) = self.by_gtid.get_mut(&gtid) {
                    list.retain(|(i, _)| *i != id);
                    if list.is_empty() {
                        self.by_gtid.remove(&gtid);
                    }
                }
            }
            Key::AnyMove(id) => self.any_move.retain(|(i, _)| *i != id),
        }
    }

    /// The quorum position is now `quorum` (and some replica moved): takes every commit
    /// parked at or before it, and every one waiting for any move.
    pub(super) fn moved(&mut self, quorum: Option<Position>, woken: &mut Vec<Wake>) {
        woken.extend(self.any_move.drain(..).map(|(_, tx)| tx));
        let Some(quorum) = quorum else { return };
        let later = self.by_position.split_off(&(quorum, u64::MAX));
        let reached = std::mem::replace(&mut self.by_position, later);
        woken.extend(reached.into_values());
    }

    /// `gtid`'s end was relayed: takes the commits waiting to learn it.
    pub(super) fn relayed(&mut self, gtid: &MariaGtid, woken: &mut Vec<Wake>) {
        if let Some(list) = self.by_gtid.remove(gtid) {
            woken.extend(list.into_iter().map(|(_, tx)| tx));
        }
    }

    /// Takes every parked commit: the state changed under all of them.
    pub(super) fn all(&mut self, woken: &mut Vec<Wake>) {
        woken.extend(std::mem::take(&mut self.by_position).into_values());
        for (_, list) in self.by_gtid.drain() {
            woken.extend(list.into_iter().map(|(_, tx)| tx));
        }
        woken.extend(self.any_move.drain(..).map(|(_, tx)| tx));
    }

    /// Parked commits.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_position.len()
            + self.by_gtid.values().map(Vec::len).sum::<usize>()
            + self.any_move.len()
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

/// Wakes parked commits (outside the lock).
pub(super) fn wake(woken: Vec<Wake>) {
    for tx in woken {
        let _ = tx.send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durability::testing::at as p;

    fn g(seq_no: u64) -> MariaGtid {
        MariaGtid {
            domain: 0,
            server_id: 1,
            seq_no,
        }
    }

    fn woken_by(f: impl FnOnce(&mut Vec<Wake>)) -> usize {
        let mut woken = Vec::new();
        f(&mut woken);
        woken.len()
    }

    #[test]
    fn a_move_wakes_the_positions_it_reaches_and_everyone_waiting_for_any_move() {
        let mut w = Waiters::default();
        let (_, mut early) = w.at_position(p(100));
        let (_, mut late) = w.at_position(p(300));
        let (_, mut any) = w.on_any_move();
        let (_, mut gtid) = w.on_gtid(g(4));
        assert_eq!(w.len(), 4);
        let mut woken = Vec::new();
        w.moved(Some(p(100)), &mut woken);
        assert_eq!(woken.len(), 2);
        wake(woken);
        assert!(early.try_recv().is_ok() && any.try_recv().is_ok());
        assert!(late.try_recv().is_err() && gtid.try_recv().is_err());
        assert_eq!(
            woken_by(|v| w.moved(None, v)),
            0,
            "no quorum, nobody at a position"
        );
        assert_eq!(woken_by(|v| w.relayed(&g(5), v)), 0);
        assert_eq!(woken_by(|v| w.relayed(&g(4), v)), 1);
        assert_eq!(woken_by(|v| w.moved(Some(p(299)), v)), 0);
        assert_eq!(woken_by(|v| w.moved(Some(p(300)), v)), 1);
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn removed_commits_are_never_woken_and_all_takes_everyone() {
        let mut w = Waiters::default();
        let (a, _) = w.at_position(p(100));
        let (b, _) = w.on_gtid(g(1));
        let (_, _keep) = w.on_gtid(g(1));
        let (c, _) = w.on_any_move();
        for key in [a, b, c] {
            w.remove(key);
        }
        assert_eq!(w.len(), 1);
        w.at_position(p(5));
        w.on_any_move();
        assert_eq!(woken_by(|v| w.all(v)), 3);
        assert_eq!(w.len(), 0);
    }
}
