//! A set of sequence numbers as inclusive intervals, exact whatever its number of gaps.

use std::fmt;

/// Sorted, disjoint, non-adjacent inclusive intervals: what a MySQL GTID set holds of one source
/// (`uuid:1-5:7-9`), and what an exact set holds of one MariaDB domain and server. It never
/// forgets a number it was given; where its input comes from a peer, the reader bounds how many
/// intervals it takes (see [`crate::dump_gtid::MAX_PEER_INTERVALS`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SeqSet(Vec<(u64, u64)>);

impl SeqSet {
    /// Every number from `0` to `last`.
    pub fn through(last: u64) -> Self {
        SeqSet(vec![(0, last)])
    }

    /// No number.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The intervals, lowest first.
    pub fn intervals(&self) -> &[(u64, u64)] {
        &self.0
    }

    /// The highest number held.
    pub fn last(&self) -> Option<u64> {
        self.0.last().map(|&(_, end)| end)
    }

    /// Whether `n` is held.
    pub fn contains(&self, n: u64) -> bool {
        let at = self.0.partition_point(|&(_, end)| end < n);
        self.0.get(at).is_some_and(|&(start, _)| start <= n)
    }

    /// Whether every number `other` holds is held.
    pub fn covers(&self, other: &SeqSet) -> bool {
        other.0.iter().all(|&(start, end)| {
            let at = self.0.partition_point(|&(_, e)| e < start);
            self.0.get(at).is_some_and(|&(s, e)| s <= start && end <= e)
        })
    }

    /// Adds `n`.
    pub fn insert(&mut self, n: u64) {
        self.insert_range(n, n);
    }

    /// Adds every number from `start` to `end` (nothing if `start > end`).
    pub fn insert_range(&mut self, start: u64, end: u64) {
        if start > end {
            return;
        }
        // The intervals that overlap or touch [start, end] are merged into one.
        let first = self
            .0
            .partition_point(|&(_, e)| e.saturating_add(1) < start);
        let past = self.0.partition_point(|&(s, _)| s <= end.saturating_add(1));
        let (mut start, mut end) = (start, end);
        if first < past {
            start = start.min(self.0[first].0);
            end = end.max(self.0[past - 1].1);
        }
        if first == self.0.len() {
            // The usual case: numbers handed out in order land past the last interval.
            self.0.push((start, end));
        } else {
            self.0.splice(first..past, [(start, end)]);
        }
    }

    /// Heap bytes the intervals take (for the memory a set of many gaps costs).
    pub fn heap_bytes(&self) -> usize {
        self.0.capacity() * std::mem::size_of::<(u64, u64)>()
    }

    /// Adds every number from `start` to `end`, exactly if that leaves at most `max`
    /// intervals; otherwise the interval nearest below (or, if none, above) grows to take them
    /// in, so the set then holds more than it was given, never less. Returns whether it stayed
    /// exact.
    pub fn insert_range_within(&mut self, start: u64, end: u64, max: usize) -> bool {
        if start > end {
            return true;
        }
        let before = self.0.len();
        let at = self
            .0
            .partition_point(|&(_, e)| e.saturating_add(1) < start);
        let joins = self
            .0
            .get(at)
            .is_some_and(|&(s, _)| s <= end.saturating_add(1));
        if joins || before < max.max(1) {
            self.insert_range(start, end);
            return true;
        }
        // A new interval would pass the bound: stretch a neighbour over the gap instead.
        match at.checked_sub(1) {
            Some(below) => {
                let from = self.0[below].1.saturating_add(1);
                self.insert_range(from, end);
            }
            None => {
                let to = self.0[0].0.saturating_sub(1);
                self.insert_range(start, to);
            }
        }
        false
    }

    /// Adds every number `other` holds.
    pub fn extend(&mut self, other: &SeqSet) {
        for &(start, end) in &other.0 {
            self.insert_range(start, end);
        }
    }
}

impl fmt::Display for SeqSet {
    /// As MySQL writes the intervals of one source: `1-5:7:9-12`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(start, end)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn set(intervals: &[(u64, u64)]) -> SeqSet {
        let mut s = SeqSet::default();
        for &(a, b) in intervals {
            s.insert_range(a, b);
        }
        s
    }

    #[test]
    fn merges_what_overlaps_or_touches() {
        let cases: &[(&[(u64, u64)], &str)] = &[
            (&[], ""),
            (&[(1, 5)], "1-5"),
            (&[(1, 5), (6, 9)], "1-9"),
            (&[(1, 5), (7, 9)], "1-5:7-9"),
            (&[(7, 9), (1, 5), (6, 6)], "1-9"),
            (&[(1, 1), (3, 3), (5, 5), (2, 4)], "1-5"),
            (&[(10, 20), (1, 2), (30, 30), (15, 31)], "1-2:10-31"),
            (&[(5, 3)], ""),
            (&[(0, u64::MAX), (4, 4)], "0-18446744073709551615"),
        ];
        for (intervals, want) in cases {
            assert_eq!(set(intervals).to_string(), *want, "{intervals:?}");
        }
    }

    #[test]
    fn contains_and_covers() {
        let s = set(&[(1, 5), (7, 9)]);
        let held: Vec<u64> = (0..11).filter(|&n| s.contains(n)).collect();
        assert_eq!(held, [1, 2, 3, 4, 5, 7, 8, 9]);
        assert!(s.covers(&set(&[(2, 4), (8, 9)])));
        assert!(!s.covers(&set(&[(4, 7)])));
        assert!(!s.covers(&set(&[(10, 10)])));
        assert!(s.covers(&SeqSet::default()));
        assert!(SeqSet::through(9).covers(&s));
    }

    /// A set with 100,000 gaps stays exact (no interval is forgotten) and small: measured
    /// here, the figure docs/failover.md gives.
    #[test]
    fn a_hundred_thousand_gaps_stay_exact() {
        const GAPS: u64 = 100_000;
        let mut s = SeqSet::default();
        for n in 1..=GAPS {
            s.insert(n * 2);
        }
        assert_eq!(s.intervals().len(), GAPS as usize);
        assert!(s.contains(2) && s.contains(2 * GAPS) && !s.contains(2 * GAPS - 1));
        let bytes = s.heap_bytes();
        eprintln!(
            "{GAPS} gaps: {} intervals, {bytes} heap bytes",
            s.intervals().len()
        );
        assert!(bytes <= 4 << 20, "{bytes} bytes for {GAPS} gaps");
        // Filling one gap joins its neighbours; filling them all leaves one interval.
        s.insert(3);
        assert_eq!(s.intervals().len(), GAPS as usize - 1);
        for n in 1..GAPS {
            s.insert(n * 2 + 1);
        }
        assert_eq!(s.intervals(), &[(2, 2 * GAPS)]);
    }

    #[test]
    fn past_its_bound_a_set_holds_more_never_less() {
        let mut s = set(&[(1, 1), (5, 5)]);
        assert!(s.insert_range_within(3, 3, 3), "room for a third");
        assert_eq!(s.to_string(), "1:3:5");
        assert!(s.insert_range_within(6, 7, 3), "joins an interval");
        assert!(
            !s.insert_range_within(9, 9, 3),
            "a fourth would pass the bound"
        );
        assert_eq!(s.to_string(), "1:3:5-9", "the gap 8 is taken in");
        let mut first = set(&[(10, 10)]);
        assert!(!first.insert_range_within(2, 3, 1));
        assert_eq!(first.to_string(), "2-10");
    }

    fn model() -> impl Strategy<Value = Vec<(u64, u64)>> {
        prop::collection::vec((0u64..60, 0u64..6).prop_map(|(a, len)| (a, a + len)), 0..10)
    }

    proptest! {
        /// The set holds exactly the numbers of the intervals put in, in canonical form.
        #[test]
        fn agrees_with_a_set_of_numbers(intervals in model(), probe in 0u64..70) {
            let s = set(&intervals);
            let numbers: BTreeSet<u64> = intervals.iter().flat_map(|&(a, b)| a..=b).collect();
            prop_assert_eq!(s.contains(probe), numbers.contains(&probe));
            let listed: BTreeSet<u64> = s.intervals().iter().flat_map(|&(a, b)| a..=b).collect();
            prop_assert_eq!(&listed, &numbers);
            for pair in s.intervals().windows(2) {
                prop_assert!(pair[0].1 + 1 < pair[1].0, "{:?}", s);
            }
        }

        /// Bounded, a set never loses a number it was given and never has more intervals
        /// than its bound (once it had room for them all).
        #[test]
        fn bounded_sets_hold_at_least_what_they_got(intervals in model(), max in 1usize..4) {
            let mut s = SeqSet::default();
            let mut exact = true;
            for &(a, b) in &intervals {
                exact &= s.insert_range_within(a, b, max);
            }
            prop_assert!(s.intervals().len() <= max);
            let numbers: BTreeSet<u64> = intervals.iter().flat_map(|&(a, b)| a..=b).collect();
            for n in &numbers {
                prop_assert!(s.contains(*n));
            }
            if exact {
                prop_assert_eq!(s, set(&intervals));
            }
        }

        /// `covers` is subset: it agrees with the sets of numbers.
        #[test]
        fn covers_is_subset(a in model(), b in model()) {
            let (sa, sb) = (set(&a), set(&b));
            let na: BTreeSet<u64> = a.iter().flat_map(|&(x, y)| x..=y).collect();
            let nb: BTreeSet<u64> = b.iter().flat_map(|&(x, y)| x..=y).collect();
            prop_assert_eq!(sa.covers(&sb), nb.is_subset(&na));
            let mut union = sa.clone();
            union.extend(&sb);
            prop_assert!(union.covers(&sa) && union.covers(&sb));
        }
    }
}
