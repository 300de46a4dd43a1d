//! The wait queue: parked commits, each in one slot for as long as it waits, indexed by what it
//! waits for.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::task::Waker;

use slab::Slab;
use smallvec::SmallVec;
use strongsync_proto::gtid::Gtid;
use strongsync_proto::position::Position;

use super::quorum::QuorumRule;

/// The GTIDs of one commit (nearly always one).
pub(super) type Gtids = SmallVec<[Gtid; 2]>;

/// Commits waiting for one rule's quorum position to reach theirs, by position.
type ByPosition = BTreeSet<(Position, usize)>;

/// What a parked commit waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// The quorum position under its rule reaching this position (the end of its last
    /// transaction).
    Position(Position),
    /// This transaction's end being relayed.
    Relayed(Gtid),
    /// Any replica's position moving: the rare commit counted partly by what reconnected
    /// replicas said they had.
    AnyMove,
}

/// Why a parked commit was woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The quorum holds every transaction it reported.
    Held,
    /// The state or the settings changed: it must look again.
    LookAgain,
}

/// One parked commit.
#[derive(Debug)]
pub(super) struct Entry {
    pub gtids: Gtids,
    /// The rule it waits for (sessions may ask for their own quorum).
    rule: QuorumRule,
    until: Until,
    waker: Waker,
    verdict: Option<Verdict>,
}

/// Every parked commit, indexed by what it waits for ([`Until`]). A commit is moved between
/// indexes under the lock as what it waits for changes (its transaction relayed: to its end
/// position) and woken once, with a [`Verdict`]: held, or look again (the settings or the state
/// changed under it).
#[derive(Debug, Default)]
pub(super) struct Waiters {
    slots: Slab<Entry>,
    /// Per rule waited for (nearly always one: the configured one), by position.
    by_position: SmallVec<[(QuorumRule, ByPosition); 2]>,
    by_gtid: HashMap<Gtid, SmallVec<[usize; 1]>>,
    any_move: Vec<usize>,
}

// === impl Waiters ===

impl Waiters {
    /// Parks a commit until `until`; returns its slot.
    pub(super) fn park(
        &mut self,
        gtids: &[Gtid],
        rule: QuorumRule,
        until: Until,
        waker: &Waker,
    ) -> usize {
        let slot = self.slots.insert(Entry {
            gtids: Gtids::from_slice(gtids),
            rule,
            until,
            waker: waker.clone(),
            verdict: None,
        });
        self.index(slot, until);
        slot
    }

    /// The verdict on the commit in `slot`, if it was woken; else its waker is updated.
    pub(super) fn verdict(&mut self, slot: usize, waker: &Waker) -> Option<Verdict> {
        let entry = self.slots.get_mut(slot)?;
        if entry.verdict.is_none() && !entry.waker.will_wake(waker) {
            entry.waker = waker.clone();
        }
        entry.verdict
    }

    /// Takes a parked commit out (released, woken, or its client gone).
    pub(super) fn remove(&mut self, slot: usize) {
        if !self.slots.contains(slot) {
            return;
        }
        let entry = self.slots.remove(slot);
        if entry.verdict.is_none() {
            self.unindex(slot, entry.rule, entry.until);
        }
    }

    /// The commits waiting for `gtid` to be relayed, taken out of that index (each must be
    /// [`moved`](Self::wait_for) or [`woken`](Self::wake) by the caller).
    pub(super) fn take_relayed(&mut self, gtid: &Gtid) -> SmallVec<[usize; 1]> {
        self.by_gtid.remove(gtid).unwrap_or_default()
    }

    /// The commits waiting for any replica to move, taken out of that index (as for
    /// [`take_relayed`](Self::take_relayed)).
    pub(super) fn take_any_move(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.any_move)
    }

    /// The GTIDs of the commit in `slot`.
    pub(super) fn gtids(&self, slot: usize) -> &[Gtid] {
        self.slots.get(slot).map_or(&[], |e| &e.gtids)
    }

    /// The GTIDs of every parked commit.
    pub(super) fn all_gtids(&self) -> impl Iterator<Item = &Gtid> {
        self.slots.iter().flat_map(|(_, entry)| entry.gtids.iter())
    }

    /// The rule the commit in `slot` waits for.
    pub(super) fn rule(&self, slot: usize) -> QuorumRule {
        self.slots
            .get(slot)
            .map_or_else(QuorumRule::default, |e| e.rule)
    }

    /// The rules commits wait for by position now.
    pub(super) fn rules(&self) -> impl Iterator<Item = QuorumRule> + '_ {
        self.by_position
            .iter()
            .filter(|(_, parked)| !parked.is_empty())
            .map(|(rule, _)| *rule)
    }

    /// Puts a commit taken out of its index back under what it now waits for, without waking
    /// it.
    pub(super) fn wait_for(&mut self, slot: usize, until: Until) {
        if let Some(entry) = self.slots.get_mut(slot) {
            entry.until = until;
            self.index(slot, until);
        }
    }

    /// The quorum position under `rule` is now `quorum`: wakes every commit of that rule
    /// parked at or before it as held, and hands each woken commit's GTIDs to `held`.
    pub(super) fn reached(
        &mut self,
        rule: &QuorumRule,
        quorum: Position,
        woken: &mut Vec<Waker>,
        mut held: impl FnMut(&[Gtid]),
    ) {
        let Waiters {
            slots, by_position, ..
        } = self;
        let Some((_, parked)) = by_position.iter_mut().find(|(r, _)| r == rule) else {
            return;
        };
        while let Some(&(position, slot)) = parked.first() {
            if position > quorum {
                break;
            }
            parked.pop_first();
            if let Some(entry) = slots.get_mut(slot) {
                held(&entry.gtids);
                entry.wake(Verdict::Held, woken);
            }
        }
    }

    /// Wakes a commit taken out of its index with `verdict`.
    pub(super) fn wake(&mut self, slot: usize, verdict: Verdict, woken: &mut Vec<Waker>) {
        if let Some(entry) = self.slots.get_mut(slot) {
            entry.wake(verdict, woken);
        }
    }

    /// Wakes every parked commit to look again: the state changed under all of them.
    pub(super) fn all(&mut self, woken: &mut Vec<Waker>) {
        self.by_position.clear();
        self.by_gtid.clear();
        self.any_move.clear();
        for (_, entry) in self.slots.iter_mut() {
            if entry.verdict.is_none() {
                entry.verdict = Some(Verdict::LookAgain);
                woken.push(entry.waker.clone());
            }
        }
    }

    /// Parked commits not yet woken.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.slots
            .iter()
            .filter(|(_, e)| e.verdict.is_none())
            .count()
    }

    fn index(&mut self, slot: usize, until: Until) {
        match until {
            Until::Position(position) => {
                let rule = self.rule(slot);
                let at = match self.by_position.iter().position(|(r, _)| *r == rule) {
                    Some(at) => at,
                    None => {
                        self.by_position.push((rule, ByPosition::new()));
                        self.by_position.len() - 1
                    }
                };
                self.by_position[at].1.insert((position, slot));
            }
            Until::Relayed(gtid) => self.by_gtid.entry(gtid).or_default().push(slot),
            Until::AnyMove => self.any_move.push(slot),
        }
    }

    fn unindex(&mut self, slot: usize, rule: QuorumRule, until: Until) {
        match until {
            Until::Position(position) => {
                if let Some((_, parked)) = self.by_position.iter_mut().find(|(r, _)| *r == rule) {
                    parked.remove(&(position, slot));
                }
            }
            Until::Relayed(gtid) => {
                if let Some(list) = self.by_gtid.get_mut(&gtid) {
                    list.retain(|s| *s != slot);
                    if list.is_empty() {
                        self.by_gtid.remove(&gtid);
                    }
                }
            }
            Until::AnyMove => self.any_move.retain(|s| *s != slot),
        }
    }
}

// === impl Entry ===

impl Entry {
    fn wake(&mut self, verdict: Verdict, woken: &mut Vec<Waker>) {
        if self.verdict.is_none() {
            self.verdict = Some(verdict);
            woken.push(self.waker.clone());
        }
    }
}

thread_local! {
    /// Wakers collected under the lock, woken after it: one buffer per thread, so a relayed
    /// batch or an ACK allocates nothing once the buffer has grown.
    static WOKEN: RefCell<Vec<Waker>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` (which takes the lock and collects the commits to wake), then wakes them, outside
/// the lock.
pub(super) fn waking<T>(f: impl FnOnce(&mut Vec<Waker>) -> T) -> T {
    let mut woken = WOKEN.with(|w| std::mem::take(&mut *w.borrow_mut()));
    let out = f(&mut woken);
    for waker in woken.drain(..) {
        waker.wake();
    }
    WOKEN.with(|w| {
        let mut kept = w.borrow_mut();
        if kept.capacity() < woken.capacity() {
            *kept = woken;
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;
    use crate::durability::testing::at as p;

    const R: QuorumRule = QuorumRule {
        count: 1,
        zones: 0,
        cross_zone: false,
    };

    fn g(seq_no: u64) -> Gtid {
        Gtid::maria(0, 1, seq_no)
    }

    /// A waker that counts how often it was woken.
    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn counter() -> (Arc<Counter>, Waker) {
        let c = Arc::new(Counter::default());
        (Arc::clone(&c), Waker::from(c))
    }

    #[test]
    fn the_quorum_wakes_the_positions_it_reaches_once_as_held() {
        let mut w = Waiters::default();
        let (early_count, early_waker) = counter();
        let (_, late_waker) = counter();
        let early = w.park(&[g(1)], R, Until::Position(p(100)), &early_waker);
        let late = w.park(&[g(2)], R, Until::Position(p(300)), &late_waker);
        let mut woken = Vec::new();
        let mut acked = Vec::new();
        w.reached(&R, p(100), &mut woken, |gtids| {
            acked.extend_from_slice(gtids)
        });
        assert_eq!((woken.len(), acked.as_slice()), (1, &[g(1)][..]));
        woken.drain(..).for_each(Waker::wake);
        assert_eq!(early_count.0.load(Ordering::Relaxed), 1);
        assert_eq!(w.verdict(early, &early_waker), Some(Verdict::Held));
        assert_eq!(w.verdict(late, &late_waker), None);
        w.reached(&R, p(299), &mut woken, |_| {});
        assert!(woken.is_empty());
        w.reached(&R, p(300), &mut woken, |_| {});
        assert_eq!(woken.len(), 1);
        w.remove(early);
        w.remove(late);
        assert_eq!(w.slots.len(), 0);
    }

    #[test]
    fn a_relayed_commit_moves_to_its_position_without_being_woken() {
        let mut w = Waiters::default();
        let (count, waker) = counter();
        let slot = w.park(&[g(4)], R, Until::Relayed(g(4)), &waker);
        assert!(w.take_relayed(&g(5)).is_empty());
        let taken = w.take_relayed(&g(4));
        assert_eq!(taken.as_slice(), &[slot]);
        w.wait_for(slot, Until::Position(p(400)));
        let mut woken = Vec::new();
        w.reached(&R, p(400), &mut woken, |_| {});
        assert_eq!(woken.len(), 1, "woken once, by the quorum");
        woken.drain(..).for_each(Waker::wake);
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn each_rule_is_woken_by_its_own_quorum_position() {
        let mut w = Waiters::default();
        let (_, waker) = counter();
        let two = QuorumRule { count: 2, ..R };
        let one = w.park(&[g(1)], R, Until::Position(p(100)), &waker);
        let both = w.park(&[g(1)], two, Until::Position(p(100)), &waker);
        assert_eq!(w.rules().collect::<Vec<_>>(), vec![R, two]);
        let mut woken = Vec::new();
        w.reached(&R, p(100), &mut woken, |_| {});
        assert_eq!(w.verdict(one, &waker), Some(Verdict::Held));
        assert_eq!(
            w.verdict(both, &waker),
            None,
            "two replicas are not there yet"
        );
        w.reached(&two, p(100), &mut woken, |_| {});
        assert_eq!(w.verdict(both, &waker), Some(Verdict::Held));
        w.remove(one);
        w.remove(both);
        assert_eq!(w.rules().count(), 0);
    }

    #[test]
    fn removed_commits_are_never_woken_and_all_wakes_everyone_to_look_again() {
        let mut w = Waiters::default();
        let (_, waker) = counter();
        let a = w.park(&[g(1)], R, Until::Position(p(100)), &waker);
        let b = w.park(&[g(1)], R, Until::Relayed(g(1)), &waker);
        let keep = w.park(&[g(1)], R, Until::Relayed(g(1)), &waker);
        let c = w.park(&[g(2)], R, Until::AnyMove, &waker);
        for slot in [a, b, c] {
            w.remove(slot);
        }
        assert_eq!(w.len(), 1);
        assert_eq!(w.take_relayed(&g(1)).as_slice(), &[keep]);
        w.wait_for(keep, Until::Relayed(g(1)));
        let other = w.park(&[g(3)], R, Until::Position(p(5)), &waker);
        let mut woken = Vec::new();
        w.all(&mut woken);
        assert_eq!(woken.len(), 2);
        assert_eq!(w.verdict(other, &waker), Some(Verdict::LookAgain));
        w.reached(&R, p(10), &mut woken, |_| {
            panic!("nobody is indexed any more")
        });
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn waking_wakes_after_the_closure_and_keeps_its_buffer() {
        let (count, waker) = counter();
        let seen = waking(|woken| {
            woken.push(waker.clone());
            woken.push(waker.clone());
            count.0.load(Ordering::Relaxed)
        });
        assert_eq!(seen, 0, "nothing is woken while the closure runs");
        assert_eq!(count.0.load(Ordering::Relaxed), 2);
        assert!(WOKEN.with(|w| w.borrow().capacity()) >= 2);
    }
}
