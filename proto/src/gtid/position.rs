//! A GTID position: per replication domain, the newest GTID, standing for every transaction of
//! that domain up to it (MariaDB's `gtid_slave_pos`, `gtid_binlog_pos`, a replica's connect
//! state). What a replica holds, what the primary's binlog reaches, and what was acknowledged
//! are all positions; a failover tool compares them to pick a new primary that has every
//! acknowledged commit. Pure arithmetic: no I/O.

use std::collections::BTreeMap;
use std::fmt;

use super::{Gtid, MariaGtid};
use crate::ProtoError;

/// One GTID per replication domain, the newest seen; shown like MariaDB's `gtid_slave_pos`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidPosition(BTreeMap<u32, MariaGtid>);

impl GtidPosition {
    /// The position of `gtids` (the newest of each domain).
    pub fn of(gtids: &[MariaGtid]) -> Self {
        let mut position = GtidPosition::default();
        for gtid in gtids {
            position.advance(*gtid);
        }
        position
    }

    /// Reads a GTID position as MariaDB writes one (`@@gtid_slave_pos`, `@slave_connect_state`,
    /// `@@gtid_binlog_pos`): GTIDs separated by commas, blanks around them ignored, empty for
    /// none.
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] if an element is not a GTID.
    pub fn parse(text: &[u8]) -> Result<Self, ProtoError> {
        let mut position = GtidPosition::default();
        for element in text.split(|&b| b == b',') {
            let element = element.trim_ascii();
            if element.is_empty() && text.trim_ascii().is_empty() {
                continue;
            }
            position.advance(MariaGtid::parse(element)?);
        }
        Ok(position)
    }

    /// Takes `gtid` in if it is newer than what its domain has. Sequence numbers grow in
    /// binlog order within a domain, so the larger one is the newer.
    pub fn advance(&mut self, gtid: MariaGtid) {
        self.0
            .entry(gtid.domain)
            .and_modify(|held| {
                if gtid.seq_no > held.seq_no {
                    *held = gtid;
                }
            })
            .or_insert(gtid);
    }

    /// No GTID in any domain.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether this holds `gtid`: its domain is at least that far. Within a domain a primary
    /// hands out sequence numbers in binlog order, so holding a GTID means holding every
    /// earlier one of its domain.
    pub fn holds(&self, gtid: &MariaGtid) -> bool {
        self.0
            .get(&gtid.domain)
            .is_some_and(|held| held.seq_no >= gtid.seq_no)
    }

    /// Whether this holds every transaction `other` does: in each of `other`'s domains, a GTID
    /// at least as new.
    pub fn covers(&self, other: &GtidPosition) -> bool {
        other.0.iter().all(|(domain, theirs)| {
            self.0
                .get(domain)
                .is_some_and(|ours| ours.seq_no >= theirs.seq_no)
        })
    }

    /// The newest GTID of each of `other`'s domains that this does not hold.
    pub fn missing<'a>(&'a self, other: &'a GtidPosition) -> impl Iterator<Item = &'a MariaGtid> {
        other.0.values().filter(|theirs| !self.holds(theirs))
    }

    /// The newest GTID of each domain, by domain.
    pub fn gtids(&self) -> impl Iterator<Item = &MariaGtid> {
        self.0.values()
    }

    /// The same, as the GTIDs a commit reports: waiting for each of them waits for everything
    /// the position holds.
    pub fn newest_gtids(&self) -> impl Iterator<Item = Gtid> + '_ {
        self.0.values().map(|g| Gtid::Maria(*g))
    }
}

impl fmt::Display for GtidPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, gtid) in self.0.values().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{gtid}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn g(text: &str) -> MariaGtid {
        text.parse().unwrap()
    }

    #[test]
    fn keeps_the_newest_gtid_of_each_domain_in_domain_order() {
        let cases: &[(&[&str], &str)] = &[
            (&[], ""),
            (&["0-1-5"], "0-1-5"),
            (&["0-1-5", "0-1-3"], "0-1-5"),
            (&["0-1-5", "0-2-6"], "0-2-6"),
            (&["1-1-9", "0-1-5", "1-1-10", "0-1-4"], "0-1-5,1-1-10"),
        ];
        for (gtids, want) in cases {
            let gtids: Vec<MariaGtid> = gtids.iter().map(|t| g(t)).collect();
            let position = GtidPosition::of(&gtids);
            assert_eq!(position.to_string(), *want, "{gtids:?}");
            assert_eq!(position.is_empty(), want.is_empty());
        }
    }

    #[test]
    fn reads_positions_as_mariadb_writes_them() {
        let table: [(&[u8], Option<&str>); 7] = [
            (b"", Some("")),
            (b"  ", Some("")),
            (b"0-1-5", Some("0-1-5")),
            (b"1-1-1000,0-1-1029", Some("0-1-1029,1-1-1000")),
            (b"0-1-5, 1-2-7 ", Some("0-1-5,1-2-7")),
            (b"0-1-5,,1-2-7", None),
            (b"0-1-x", None),
        ];
        for (text, want) in table {
            let got = GtidPosition::parse(text).ok().map(|p| p.to_string());
            assert_eq!(got.as_deref(), want, "{}", String::from_utf8_lossy(text));
        }
        let p = GtidPosition::parse(b"0-1-5,1-1-9").unwrap();
        assert!(p.holds(&g("0-1-5")) && p.holds(&g("0-2-3")) && p.holds(&g("1-1-9")));
        assert!(!p.holds(&g("0-1-6")) && !p.holds(&g("2-1-1")));
    }

    #[test]
    fn covers_means_at_least_as_new_in_every_domain_of_the_other() {
        let p = |gtids: &[&str]| GtidPosition::of(&gtids.iter().map(|t| g(t)).collect::<Vec<_>>());
        let cases: &[(&[&str], &[&str], bool)] = &[
            (&[], &[], true),
            (&["0-1-5"], &[], true),
            (&[], &["0-1-5"], false),
            (&["0-1-5"], &["0-1-5"], true),
            (&["0-1-5"], &["0-2-4"], true),
            (&["0-1-4"], &["0-1-5"], false),
            (&["0-1-9"], &["0-1-5", "1-1-1"], false),
            (&["0-1-9", "1-1-1", "2-1-7"], &["0-1-5", "1-1-1"], true),
        ];
        for (ours, theirs, want) in cases {
            assert_eq!(
                p(ours).covers(&p(theirs)),
                *want,
                "{ours:?} covers {theirs:?}"
            );
        }
    }

    /// GTIDs as one primary's binlog has them: under `gtid_strict_mode` a sequence number
    /// is given once per domain, so its server id follows from it (which one is arbitrary).
    fn gtid() -> impl Strategy<Value = MariaGtid> {
        (0u32..4, 0u64..50).prop_map(|(domain, seq_no)| MariaGtid {
            domain,
            server_id: 1 + (seq_no % 3) as u32,
            seq_no,
        })
    }

    fn position() -> impl Strategy<Value = GtidPosition> {
        prop::collection::vec(gtid(), 0..8).prop_map(|gtids| GtidPosition::of(&gtids))
    }

    proptest! {
        /// What MariaDB would print reads back as the same position.
        #[test]
        fn display_and_parse_round_trip(p in position()) {
            prop_assert_eq!(GtidPosition::parse(p.to_string().as_bytes()), Ok(p));
        }

        /// A position is the newest GTID of each domain, whatever the order they came in.
        #[test]
        fn the_order_gtids_come_in_does_not_matter(
            gtids in prop::collection::vec(gtid(), 0..10),
        ) {
            let mut reversed = gtids.clone();
            reversed.reverse();
            prop_assert_eq!(GtidPosition::of(&gtids), GtidPosition::of(&reversed));
            let p = GtidPosition::of(&gtids);
            for g in &gtids {
                prop_assert!(p.holds(g));
            }
        }

        /// Taking a GTID in never loses one: the new position covers the old and holds it.
        #[test]
        fn advancing_only_adds(p in position(), g in gtid()) {
            let mut next = p.clone();
            next.advance(g);
            prop_assert!(next.holds(&g));
            prop_assert!(next.covers(&p));
        }

        /// `covers` is a partial order (reflexive, transitive), agrees with `holds` for a
        /// single GTID, and is false exactly when something is `missing`.
        #[test]
        fn covers_holds_and_missing_agree(a in position(), b in position(), c in position(), g in gtid()) {
            prop_assert!(a.covers(&a));
            if a.covers(&b) && b.covers(&c) {
                prop_assert!(a.covers(&c));
            }
            prop_assert_eq!(a.covers(&b), a.missing(&b).next().is_none());
            prop_assert_eq!(a.holds(&g), a.covers(&GtidPosition::of(&[g])));
            let newest: Vec<Gtid> = b.newest_gtids().collect();
            prop_assert_eq!(newest.len(), b.gtids().count());
        }
    }
}
