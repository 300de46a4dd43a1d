//! A set of sequence numbers as inclusive intervals: what a MySQL GTID set holds of one source
//! (`uuid:1-5:7-9`), and what a MariaDB position holds of one domain (`0..=n`). Pure
//! arithmetic: no I/O.

use std::fmt;

/// Most intervals kept: a set that would need more keeps its lowest ones and forgets the rest
/// (it then holds less than it was told, never more). A primary's own history is one interval
/// per source unless GTIDs were given by hand; this bounds what a replica's request can cost.
pub const MAX_INTERVALS: usize = 1024;

/// Sorted, disjoint, non-adjacent inclusive intervals.
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
        self.0.splice(first..past, [(start, end)]);
        self.0.truncate(MAX_INTERVALS);
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

    #[test]
    fn keeps_at_most_the_lowest_intervals_it_may() {
        let mut s = SeqSet::default();
        for n in (0..2 * MAX_INTERVALS as u64).rev() {
            s.insert(n * 2);
        }
        assert_eq!(s.intervals().len(), MAX_INTERVALS);
        assert!(s.contains(0) && !s.contains(2 * MAX_INTERVALS as u64));
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
