//! A GTID position: per domain, the sequence numbers held. On MariaDB a position is the newest
//! GTID of each replication domain and stands for every transaction of that domain up to it
//! (`gtid_slave_pos`, `gtid_binlog_pos`, a replica's connect state); on MySQL it is a GTID set,
//! intervals per source (`gtid_executed`, the set a replica's `COM_BINLOG_DUMP_GTID` carries).
//! What a replica holds, what the primary's binlog reaches, and what was acknowledged are all
//! positions; a failover tool compares them to pick a new primary that has every acknowledged
//! commit. Pure arithmetic: no I/O.

use std::collections::BTreeMap;
use std::fmt;

use super::{intern, number, Domain, Gtid, SeqSet, Source, SourceId};
use crate::ProtoError;

/// The sequence numbers held per domain; shown as the primary's flavour writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidPosition(BTreeMap<Domain, Held>);

/// What a position holds of one domain.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    /// MariaDB: `0..=newest`. MySQL: the set's intervals.
    seqs: SeqSet,
    /// The GTID with the highest number (MariaDB shows a domain by it).
    newest: Gtid,
}

impl GtidPosition {
    /// The position of `gtids`.
    pub fn of(gtids: &[Gtid]) -> Self {
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
            position.advance(Gtid::parse(element)?);
        }
        Ok(position)
    }

    /// Reads a GTID set as MySQL writes one (`@@gtid_executed`, `RECEIVED_TRANSACTION_SET`):
    /// `uuid:1-5:7,uuid2:tag:1-3:8` — elements separated by commas, blanks and newlines around
    /// them ignored; in an element, after the UUID, intervals of the untagged source and
    /// tags, each starting the intervals of its own source. Empty for none.
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] if it is not a GTID set; [`ProtoError::Unsupported`] if it
    /// names more new sources than the table of sources takes.
    pub fn parse_mysql(text: &str) -> Result<Self, ProtoError> {
        let bad = || ProtoError::Malformed {
            what: "MySQL GTID set",
        };
        let mut position = GtidPosition::default();
        if text.trim_ascii().is_empty() {
            return Ok(position);
        }
        for element in text.split(',') {
            let mut parts = element.trim_ascii().split(':');
            let uuid = parts.next().and_then(Source::parse_uuid).ok_or_else(bad)?;
            let mut source = None;
            let mut intervals = 0;
            for part in parts {
                let first = part.bytes().next().ok_or_else(bad)?;
                if !first.is_ascii_digit() {
                    if source.is_some() && intervals == 0 {
                        return Err(bad());
                    }
                    source = Some(intern(uuid, Some(part))?);
                    intervals = 0;
                    continue;
                }
                let (start, end) = match part.split_once('-') {
                    Some((start, end)) => (number(start), number(end)),
                    None => (number(part), number(part)),
                };
                let (Some(start), Some(end)) = (start, end) else {
                    return Err(bad());
                };
                if start == 0 || start > end {
                    return Err(bad());
                }
                let source = match source {
                    Some(source) => source,
                    None => *source.insert(intern(uuid, None)?),
                };
                position.add_mysql(Domain::MySql(source), start, end);
                intervals += 1;
            }
            if intervals == 0 {
                return Err(bad());
            }
        }
        Ok(position)
    }

    /// Takes `gtid` in. On MariaDB a domain holds every number up to its newest (sequence
    /// numbers grow in binlog order within a domain, so a larger one is newer); on MySQL a set
    /// holds exactly the numbers put in it.
    pub fn advance(&mut self, gtid: Gtid) {
        match gtid.domain {
            Domain::Maria(_) => {
                let held = self.0.entry(gtid.domain).or_insert_with(|| Held {
                    seqs: SeqSet::through(gtid.seq_no),
                    newest: gtid,
                });
                if gtid.seq_no > held.newest.seq_no {
                    *held = Held {
                        seqs: SeqSet::through(gtid.seq_no),
                        newest: gtid,
                    };
                }
            }
            Domain::MySql(_) => self.add_mysql(gtid.domain, gtid.seq_no, gtid.seq_no),
            // A place in the binlog is not a transaction a position holds.
            Domain::Binlog(_) => {}
        }
    }

    /// The bound of a binlog position (see [`Domain::Binlog`]): waiting for it waits for the
    /// replicas to acknowledge that far.
    pub fn binlog_end(position: crate::position::Position) -> Self {
        let end = Gtid::binlog_end(position);
        GtidPosition(BTreeMap::from([(
            end.domain,
            Held {
                seqs: SeqSet::through(end.seq_no),
                newest: end,
            },
        )]))
    }

    /// Takes in every GTID `other` holds.
    pub fn extend(&mut self, other: &GtidPosition) {
        for (domain, theirs) in &other.0 {
            match domain {
                Domain::Maria(_) | Domain::Binlog(_) => self.advance(theirs.newest),
                Domain::MySql(_) => {
                    for &(start, end) in theirs.seqs.intervals() {
                        self.add_mysql(*domain, start, end);
                    }
                }
            }
        }
    }

    /// Takes in every number from `start` to `end` of a MySQL source.
    pub fn add_interval(&mut self, source: SourceId, start: u64, end: u64) {
        self.add_mysql(Domain::MySql(source), start, end);
    }

    /// The intervals of the MySQL sources, `(source, first, last)`.
    pub fn intervals(&self) -> impl Iterator<Item = (Domain, u64, u64)> + '_ {
        self.0
            .iter()
            .filter(|(domain, _)| matches!(domain, Domain::MySql(_)))
            .flat_map(|(domain, held)| {
                held.seqs
                    .intervals()
                    .iter()
                    .map(|&(start, end)| (*domain, start, end))
            })
    }

    fn add_mysql(&mut self, domain: Domain, start: u64, end: u64) {
        let held = self.0.entry(domain).or_insert_with(|| Held {
            seqs: SeqSet::default(),
            newest: Gtid {
                domain,
                server_id: 0,
                seq_no: end,
            },
        });
        held.seqs.insert_range(start, end);
        held.newest.seq_no = held.seqs.last().unwrap_or(end);
    }

    /// How many transactions it holds, all domains together (saturating): of two positions
    /// of one history, the larger has received more.
    pub fn count(&self) -> u64 {
        self.0
            .values()
            .flat_map(|held| held.seqs.intervals())
            .fold(0u64, |n, &(start, end)| {
                n.saturating_add(end - start).saturating_add(1)
            })
    }

    /// No GTID in any domain.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether this holds `gtid`.
    pub fn holds(&self, gtid: &Gtid) -> bool {
        self.0
            .get(&gtid.domain)
            .is_some_and(|held| held.seqs.contains(gtid.seq_no))
    }

    /// Whether this holds every transaction `other` does.
    pub fn covers(&self, other: &GtidPosition) -> bool {
        other.0.iter().all(|(domain, theirs)| {
            self.0
                .get(domain)
                .is_some_and(|ours| ours.seqs.covers(&theirs.seqs))
        })
    }

    /// The newest GTID of each of `other`'s domains that this does not cover.
    pub fn missing<'a>(&'a self, other: &'a GtidPosition) -> impl Iterator<Item = &'a Gtid> {
        other.0.iter().filter_map(|(domain, theirs)| {
            let covered = self
                .0
                .get(domain)
                .is_some_and(|ours| ours.seqs.covers(&theirs.seqs));
            (!covered).then_some(&theirs.newest)
        })
    }

    /// The newest GTID of each domain, by domain.
    pub fn gtids(&self) -> impl Iterator<Item = &Gtid> {
        self.0.values().map(|held| &held.newest)
    }

    /// The GTIDs whose waiting waits for everything the position holds: the newest of each
    /// MariaDB domain; on MySQL the last of each interval (the numbers of a source are handed
    /// out in binlog order, except where some were given by hand).
    pub fn newest_gtids(&self) -> impl Iterator<Item = Gtid> + '_ {
        self.0.iter().flat_map(|(domain, held)| {
            let maria =
                matches!(domain, Domain::Maria(_) | Domain::Binlog(_)).then_some(held.newest);
            let mysql = match domain {
                Domain::MySql(_) => held.seqs.intervals(),
                Domain::Maria(_) | Domain::Binlog(_) => &[],
            };
            maria.into_iter().chain(mysql.iter().map(|&(_, end)| Gtid {
                domain: *domain,
                server_id: 0,
                seq_no: end,
            }))
        })
    }
}

impl fmt::Display for GtidPosition {
    /// MariaDB domains as `0-1-5`, MySQL sources as `uuid:1-5:7` (sources by UUID, the
    /// untagged one first), comma-separated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            let was = std::mem::replace(&mut first, false);
            if was {
                Ok(())
            } else {
                f.write_str(",")
            }
        };
        let mut sources = Vec::new();
        for (domain, held) in &self.0 {
            match domain {
                Domain::Maria(_) | Domain::Binlog(_) => {
                    sep(f)?;
                    write!(f, "{}", held.newest)?;
                }
                Domain::MySql(source) => sources.push((source.source(), &held.seqs)),
            }
        }
        sources.sort_by(|a, b| a.0.cmp(&b.0));
        for (source, seqs) in sources {
            sep(f)?;
            write!(f, "{source}:{seqs}")?;
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
    fn keeps_the_newest_gtid_of_each_domain_in_domain_order() {
        let cases: &[(&[&str], &str)] = &[
            (&[], ""),
            (&["0-1-5"], "0-1-5"),
            (&["0-1-5", "0-1-3"], "0-1-5"),
            (&["0-1-5", "0-2-6"], "0-2-6"),
            (&["1-1-9", "0-1-5", "1-1-10", "0-1-4"], "0-1-5,1-1-10"),
        ];
        for (gtids, want) in cases {
            let gtids: Vec<Gtid> = gtids.iter().map(|t| g(t)).collect();
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

    const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const B: &str = "0a8c5e2f-0000-11ef-8000-0242ac120002";

    #[test]
    fn reads_gtid_sets_as_mysql_writes_them() {
        let table: Vec<(String, Option<String>)> = vec![
            (String::new(), Some(String::new())),
            (" \n".into(), Some(String::new())),
            (format!("{A}:1-5"), Some(format!("{A}:1-5"))),
            (format!("{A}:1-5:7:8-9"), Some(format!("{A}:1-5:7-9"))),
            (format!("{A}:1-5,\n{B}:3"), Some(format!("{B}:3,{A}:1-5"))),
            (
                format!("{A}:1-3:blue:1-2:4:red:7"),
                Some(format!("{A}:1-3,{A}:blue:1-2:4,{A}:red:7")),
            ),
            (
                format!("{A}:blue:5,{A}:2"),
                Some(format!("{A}:2,{A}:blue:5")),
            ),
            (
                format!("{}:1-2", A.to_uppercase()),
                Some(format!("{A}:1-2")),
            ),
            (A.to_string(), None),
            (format!("{A}:"), None),
            (format!("{A}:0-5"), None),
            (format!("{A}:5-3"), None),
            (format!("{A}:blue"), None),
            (format!("{A}:blue:red:1"), None),
            (format!("{A}:1-x"), None),
            (format!("{A}:1,,{B}:1"), None),
            ("0-1-5".into(), None),
        ];
        for (text, want) in table {
            let got = GtidPosition::parse_mysql(&text).ok().map(|p| p.to_string());
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn a_mysql_set_holds_exactly_its_intervals() {
        let p = GtidPosition::parse_mysql(&format!("{A}:1-5:9,{B}:2")).unwrap();
        let m = |t: String| Gtid::parse_mysql(&t).unwrap();
        assert!(p.holds(&m(format!("{A}:5"))) && p.holds(&m(format!("{A}:9"))));
        assert!(!p.holds(&m(format!("{A}:6"))) && !p.holds(&m(format!("{B}:1"))));
        assert!(!p.holds(&m(format!("{A}:t:1"))), "a tag is another source");
        let wider = GtidPosition::parse_mysql(&format!("{A}:1-9,{B}:1-2")).unwrap();
        assert!(wider.covers(&p) && !p.covers(&wider));
        let missing: Vec<String> = p.missing(&wider).map(ToString::to_string).collect();
        assert_eq!(missing, [format!("{A}:9"), format!("{B}:2")]);
        let waited: Vec<String> = p.newest_gtids().map(|g| g.to_string()).collect();
        assert_eq!(waited.len(), 3, "{waited:?}");
        let mut both = p.clone();
        both.extend(&wider);
        assert_eq!(both, wider);
    }

    fn mysql_gtid() -> impl Strategy<Value = Gtid> {
        (0usize..3, 1u64..40).prop_map(|(source, gno)| {
            let (uuid, tag) = [(A, None), (B, None), (A, Some("t"))][source];
            Gtid::mysql(source_of(uuid, tag), gno)
        })
    }

    fn source_of(uuid: &str, tag: Option<&str>) -> crate::gtid::SourceId {
        crate::gtid::SourceId::intern(Source::parse_uuid(uuid).unwrap(), tag).unwrap()
    }

    fn mysql_position() -> impl Strategy<Value = GtidPosition> {
        prop::collection::vec(mysql_gtid(), 0..12).prop_map(|gtids| GtidPosition::of(&gtids))
    }

    /// GTIDs as one primary's binlog has them: under `gtid_strict_mode` a sequence number
    /// is given once per domain, so its server id follows from it (which one is arbitrary).
    fn gtid() -> impl Strategy<Value = Gtid> {
        (0u32..4, 0u64..50)
            .prop_map(|(domain, seq_no)| Gtid::maria(domain, 1 + (seq_no % 3) as u32, seq_no))
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

        /// What MySQL would print reads back as the same set, and a set holds exactly what
        /// was put in it.
        #[test]
        fn mysql_sets_round_trip_and_hold_what_they_got(
            gtids in prop::collection::vec(mysql_gtid(), 0..12),
            probe in mysql_gtid(),
        ) {
            let p = GtidPosition::of(&gtids);
            prop_assert_eq!(GtidPosition::parse_mysql(&p.to_string()), Ok(p.clone()));
            prop_assert_eq!(p.holds(&probe), gtids.contains(&probe));
            prop_assert_eq!(p.covers(&GtidPosition::of(&[probe])), gtids.contains(&probe));
        }

        /// The same laws hold for MySQL sets.
        #[test]
        fn mysql_covers_holds_and_missing_agree(a in mysql_position(), b in mysql_position(), g in mysql_gtid()) {
            prop_assert!(a.covers(&a));
            prop_assert_eq!(a.covers(&b), a.missing(&b).next().is_none());
            let mut union = a.clone();
            union.extend(&b);
            prop_assert!(union.covers(&a) && union.covers(&b));
            let mut next = a.clone();
            next.advance(g);
            prop_assert!(next.holds(&g) && next.covers(&a));
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
