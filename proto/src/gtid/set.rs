//! An exact set of GTIDs, each number standing only for itself: the commits released without
//! their quorum, the unacknowledged tail a fence leaves. A MariaDB position says "everything up
//! to"; this says "these", so an outcome can be told for one GTID. Pure arithmetic: no I/O.

use std::collections::BTreeMap;
use std::fmt;

use super::{Domain, Gtid, SeqSet};
use crate::ProtoError;

/// GTIDs by domain and (on MariaDB) originating server, as intervals of numbers: exact, however
/// many gaps it has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidSet(BTreeMap<(Domain, u32), SeqSet>);

impl GtidSet {
    /// Adds `gtid` (a bound by binlog position is not a transaction and is left out).
    pub fn insert(&mut self, gtid: Gtid) {
        if matches!(gtid.domain, Domain::Binlog(_)) {
            return;
        }
        self.0
            .entry((gtid.domain, gtid.server_id))
            .or_default()
            .insert(gtid.seq_no);
    }

    /// Adds every number from `start` to `end` of `domain` and (MariaDB) `server_id`, exactly
    /// while that key keeps at most `max` intervals (see [`SeqSet::insert_range_within`]);
    /// returns whether it stayed exact.
    pub fn insert_range_within(
        &mut self,
        domain: Domain,
        server_id: u32,
        start: u64,
        end: u64,
        max: usize,
    ) -> bool {
        if matches!(domain, Domain::Binlog(_)) {
            return true;
        }
        self.0
            .entry((domain, server_id))
            .or_default()
            .insert_range_within(start, end, max)
    }

    /// Heap bytes its intervals take.
    pub fn heap_bytes(&self) -> usize {
        self.0.values().map(SeqSet::heap_bytes).sum()
    }

    /// Adds every GTID of `other`.
    pub fn extend(&mut self, other: &GtidSet) {
        for (key, seqs) in &other.0 {
            self.0.entry(*key).or_default().extend(seqs);
        }
    }

    /// Whether `gtid` is in the set.
    pub fn contains(&self, gtid: &Gtid) -> bool {
        self.0
            .get(&(gtid.domain, gtid.server_id))
            .is_some_and(|seqs| seqs.contains(gtid.seq_no))
    }

    /// No GTID.
    pub fn is_empty(&self) -> bool {
        self.0.values().all(SeqSet::is_empty)
    }

    /// How many GTIDs (saturating).
    pub fn len(&self) -> u64 {
        self.0
            .values()
            .flat_map(SeqSet::intervals)
            .fold(0u64, |n, &(start, end)| {
                n.saturating_add(end - start).saturating_add(1)
            })
    }

    /// Reads what [`Display`](fmt::Display) writes: elements separated by commas, a MariaDB
    /// one `domain-server-first[..last]`, a MySQL one `uuid[:tag]:first[-last]`. Empty for
    /// none.
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] for an element that is neither; what a MySQL set may raise.
    pub fn parse(text: &str) -> Result<Self, ProtoError> {
        let bad = || ProtoError::Malformed { what: "GTID set" };
        let mut set = GtidSet::default();
        for element in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if element.contains(':') {
                let position = super::GtidPosition::parse_mysql(element)?;
                for (domain, start, end) in position.intervals() {
                    set.0
                        .entry((domain, 0))
                        .or_default()
                        .insert_range(start, end);
                }
                continue;
            }
            let (first, last) = match element.split_once("..") {
                Some((first, last)) => (first, Some(last)),
                None => (element, None),
            };
            let first = Gtid::parse(first.as_bytes())?;
            let last = match last {
                Some(last) => super::number(last).ok_or_else(bad)?,
                None => first.seq_no,
            };
            if last < first.seq_no {
                return Err(bad());
            }
            set.0
                .entry((first.domain, first.server_id))
                .or_default()
                .insert_range(first.seq_no, last);
        }
        Ok(set)
    }
}

impl fmt::Display for GtidSet {
    /// `0-1-5..9,0-1-12,3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut comma = |f: &mut fmt::Formatter<'_>| {
            let sep = if first { "" } else { "," };
            first = false;
            f.write_str(sep)
        };
        for ((domain, server_id), seqs) in self.0.iter().filter(|(_, s)| !s.is_empty()) {
            match domain {
                Domain::Maria(d) => {
                    for &(start, end) in seqs.intervals() {
                        comma(f)?;
                        if start == end {
                            write!(f, "{d}-{server_id}-{start}")?;
                        } else {
                            write!(f, "{d}-{server_id}-{start}..{end}")?;
                        }
                    }
                }
                Domain::MySql(source) => {
                    comma(f)?;
                    write!(f, "{source}:{seqs}")?;
                }
                Domain::Binlog(_) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn g(text: &str) -> Gtid {
        text.parse().unwrap()
    }

    #[test]
    fn holds_exactly_what_was_put_in() {
        let mut set = GtidSet::default();
        assert!(set.is_empty());
        for gtid in ["0-1-5", "0-1-6", "0-1-9", "0-2-7", "1-1-3"] {
            set.insert(g(gtid));
        }
        set.insert(Gtid::binlog_end(crate::position::Position {
            file_seq: 1,
            offset: 400,
        }));
        assert_eq!(set.to_string(), "0-1-5..6,0-1-9,0-2-7,1-1-3");
        assert_eq!(set.len(), 5);
        let cases = [
            ("0-1-5", true),
            ("0-1-7", false),
            ("0-1-9", true),
            // The same number from another server is another transaction.
            ("0-3-5", false),
            ("0-2-7", true),
            ("1-1-3", true),
            ("1-1-2", false),
            ("2-1-3", false),
        ];
        for (gtid, held) in cases {
            assert_eq!(set.contains(&g(gtid)), held, "{gtid}");
        }
    }

    #[test]
    fn mysql_sets_show_as_mysql_writes_them() {
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let mut set = GtidSet::default();
        for n in [1, 2, 3, 7] {
            set.insert(g(&format!("{uuid}:{n}")));
        }
        set.insert(g(&format!("{uuid}:blue:4")));
        assert_eq!(set.to_string(), format!("{uuid}:1-3:7,{uuid}:blue:4"));
        assert!(set.contains(&g(&format!("{uuid}:blue:4"))));
        assert!(!set.contains(&g(&format!("{uuid}:4"))));
        assert_eq!(GtidSet::parse(&set.to_string()).unwrap(), set);
    }

    #[test]
    fn refuses_what_is_not_a_set() {
        for text in ["0-1", "0-1-9..5", "0-1-5..x", "nonsense", "0-1-5,,x"] {
            assert!(GtidSet::parse(text).is_err(), "{text}");
        }
        assert!(GtidSet::parse("").unwrap().is_empty());
    }

    proptest! {
        #[test]
        fn reads_back_what_it_writes(gtids in prop::collection::vec((0u32..3, 1u32..4, 1u64..200), 0..60)) {
            let mut set = GtidSet::default();
            for &(d, s, n) in &gtids {
                set.insert(Gtid::maria(d, s, n));
            }
            let back = GtidSet::parse(&set.to_string()).unwrap();
            prop_assert_eq!(&back, &set);
            for d in 0..3 {
                for s in 1..4 {
                    for n in 1..200 {
                        let gtid = Gtid::maria(d, s, n);
                        prop_assert_eq!(set.contains(&gtid), gtids.contains(&(d, s, n)));
                    }
                }
            }
        }
    }
}
