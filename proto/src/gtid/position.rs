//! A GTID position: what a server's history holds, per domain.

use std::collections::BTreeMap;
use std::fmt;

use super::{intern, number, Domain, Gtid, SeqSet, Source, SourceId};
use crate::ProtoError;

/// What a history holds per domain; shown as the primary's flavour writes it (the alternate
/// form, `{:#}`, names every MariaDB server's newest GTID, as `gtid_binlog_state` does).
///
/// On MariaDB a position names, per replication domain, the newest GTID of each server that
/// committed in it (`gtid_binlog_state`; `gtid_slave_pos`, `gtid_binlog_pos` and a replica's
/// connect state name only the newest of the domain); on MySQL it is a GTID set, intervals per
/// source (`gtid_executed`, the set a replica's `COM_BINLOG_DUMP_GTID` carries). What a replica
/// holds, what the primary's binlog reaches, and the watermark are all positions; a
/// failover tool compares them to pick a new primary that holds the whole watermark. Pure
/// arithmetic: no I/O.
///
/// GTIDs are compared by identity. A MariaDB sequence number alone says nothing across histories
/// that diverged: `0-3-1000000` (a replica made writable and numbered far ahead) does not hold
/// `0-1-12`, and a fenced primary's tail `0-1-101..105` does not hold the next primary's `0-2-103`.
/// A history holds `d-s-n` when it holds a GTID of server `s` in domain `d` numbered `n` or later:
/// a server numbers its own GTIDs in order, and a history that has one of them has the server's
/// history up to it. Where a history names only the newest GTID of a domain, its other servers are
/// not known, so less is held: never more. A position covers another when it holds the newest GTID
/// of each of the other's domains, which stands for the history up to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidPosition(BTreeMap<Domain, Held>);

/// What a position holds of one domain.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    /// MySQL: the set's intervals. A binlog bound: `0..=offset`. MariaDB: unused.
    seqs: SeqSet,
    /// The GTID with the highest number (MariaDB shows a domain by it).
    newest: Gtid,
    /// MariaDB: the highest number held of each server id, by server id.
    servers: Vec<(u32, u64)>,
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
    /// `@@gtid_binlog_pos`, and `@@gtid_binlog_state`, which names the newest GTID of every
    /// server of a domain): GTIDs separated by commas, blanks around them ignored, empty for
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

    /// Takes `gtid` in. On MariaDB the history then holds its server's GTIDs of its domain up
    /// to it, and it is the domain's newest if no number of the domain is larger; on MySQL a
    /// set holds exactly the numbers put in it.
    pub fn advance(&mut self, gtid: Gtid) {
        match gtid.domain {
            Domain::Maria(_) => {
                let held = self.0.entry(gtid.domain).or_insert_with(|| Held {
                    seqs: SeqSet::default(),
                    newest: gtid,
                    servers: Vec::new(),
                });
                match held
                    .servers
                    .binary_search_by_key(&gtid.server_id, |&(s, _)| s)
                {
                    Ok(at) => held.servers[at].1 = held.servers[at].1.max(gtid.seq_no),
                    Err(at) => held.servers.insert(at, (gtid.server_id, gtid.seq_no)),
                }
                if gtid.seq_no > held.newest.seq_no {
                    held.newest = gtid;
                }
            }
            Domain::MySql(_) => self.add_mysql(gtid.domain, gtid.seq_no, gtid.seq_no),
            // A place in the binlog is not a transaction a position holds.
            Domain::Binlog(_) => {}
        }
    }

    /// The bound of a binlog position (see [`Domain::Binlog`]): waiting for it waits for the
    /// replicas to hold that far.
    pub fn binlog_end(position: crate::position::Position) -> Self {
        let end = Gtid::binlog_end(position);
        GtidPosition(BTreeMap::from([(
            end.domain,
            Held {
                seqs: SeqSet::through(end.seq_no),
                newest: end,
                servers: Vec::new(),
            },
        )]))
    }

    /// Takes in every GTID `other` holds.
    pub fn extend(&mut self, other: &GtidPosition) {
        for (domain, theirs) in &other.0 {
            match domain {
                Domain::Maria(d) => {
                    for &(server_id, seq_no) in &theirs.servers {
                        self.advance(Gtid::maria(*d, server_id, seq_no));
                    }
                }
                Domain::Binlog(_) => self.advance(theirs.newest),
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

    /// Takes in every number from `start` to `end` of `domain` (MariaDB: of `server_id`, up to
    /// `end`), keeping a MySQL source's set exact while it has at most `max` intervals (see
    /// [`SeqSet::insert_range_within`]); returns whether it stayed exact.
    pub fn add_range_within(
        &mut self,
        domain: Domain,
        server_id: u32,
        start: u64,
        end: u64,
        max: usize,
    ) -> bool {
        match domain {
            Domain::Maria(d) => {
                self.advance(Gtid::maria(d, server_id, end));
                true
            }
            Domain::MySql(_) => {
                let held = self.0.entry(domain).or_insert_with(|| Held {
                    seqs: SeqSet::default(),
                    newest: Gtid {
                        domain,
                        server_id: 0,
                        seq_no: end,
                    },
                    servers: Vec::new(),
                });
                let exact = held.seqs.insert_range_within(start, end, max);
                held.newest.seq_no = held.seqs.last().unwrap_or(end);
                exact
            }
            Domain::Binlog(_) => true,
        }
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
            servers: Vec::new(),
        });
        held.seqs.insert_range(start, end);
        held.newest.seq_no = held.seqs.last().unwrap_or(end);
    }

    /// How many transactions it holds, all domains together (saturating): of two positions
    /// of one history, the larger has received more.
    pub fn count(&self) -> u64 {
        self.0.iter().fold(0u64, |n, (domain, held)| match domain {
            // A MariaDB domain numbers its history from 1: the newest says how long it is.
            Domain::Maria(_) => n.saturating_add(held.newest.seq_no),
            Domain::MySql(_) | Domain::Binlog(_) => {
                held.seqs.intervals().iter().fold(n, |n, &(start, end)| {
                    n.saturating_add(end - start).saturating_add(1)
                })
            }
        })
    }

    /// No GTID in any domain.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether this holds `gtid`: on MariaDB, a GTID of its server in its domain numbered as
    /// far (see the module's documentation); on MySQL, that very number of its source.
    pub fn holds(&self, gtid: &Gtid) -> bool {
        self.0
            .get(&gtid.domain)
            .is_some_and(|held| match gtid.domain {
                Domain::Maria(_) => held
                    .servers
                    .binary_search_by_key(&gtid.server_id, |&(s, _)| s)
                    .is_ok_and(|at| held.servers[at].1 >= gtid.seq_no),
                Domain::MySql(_) | Domain::Binlog(_) => held.seqs.contains(gtid.seq_no),
            })
    }

    /// Whether this holds every transaction `other` does: on MariaDB the newest GTID of each
    /// of `other`'s domains (it stands for the history before it), on MySQL every interval.
    pub fn covers(&self, other: &GtidPosition) -> bool {
        self.missing(other).next().is_none()
    }

    /// The newest GTID of each of `other`'s domains that this does not cover.
    pub fn missing<'a>(&'a self, other: &'a GtidPosition) -> impl Iterator<Item = &'a Gtid> {
        other.0.iter().filter_map(|(domain, theirs)| {
            let covered = match domain {
                Domain::Maria(_) => self.holds(&theirs.newest),
                Domain::MySql(_) | Domain::Binlog(_) => self
                    .0
                    .get(domain)
                    .is_some_and(|ours| ours.seqs.covers(&theirs.seqs)),
            };
            (!covered).then_some(&theirs.newest)
        })
    }

    /// Heap bytes its MySQL intervals take (what a set of many gaps costs).
    pub fn heap_bytes(&self) -> usize {
        self.0.values().map(|held| held.seqs.heap_bytes()).sum()
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
    /// MariaDB domains as `0-1-5` (the newest of each; `{:#}`: the newest of each server, as
    /// `gtid_binlog_state` lists them), MySQL sources as `uuid:1-5:7` (sources by UUID, the
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
        let every_server = f.alternate();
        for (domain, held) in &self.0 {
            match domain {
                Domain::Maria(d) if every_server => {
                    for &(server_id, seq_no) in &held.servers {
                        sep(f)?;
                        write!(f, "{}", Gtid::maria(*d, server_id, seq_no))?;
                    }
                }
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
        assert!(p.holds(&g("0-1-5")) && p.holds(&g("0-1-3")) && p.holds(&g("1-1-9")));
        assert!(!p.holds(&g("0-1-6")) && !p.holds(&g("2-1-1")));
        // A lower number of another server is another transaction: not known to be held.
        assert!(!p.holds(&g("0-2-3")));
        // gtid_binlog_state names every server's newest; the domain shows by its newest.
        let state = GtidPosition::parse(b"0-1-105,0-2-103,1-1-9").unwrap();
        assert_eq!(state.to_string(), "0-1-105,1-1-9");
        assert_eq!(format!("{state:#}"), "0-1-105,0-2-103,1-1-9");
        assert!(state.holds(&g("0-2-103")) && !state.holds(&g("0-2-104")));
        assert_eq!(
            GtidPosition::parse(format!("{state:#}").as_bytes()),
            Ok(state)
        );
    }

    /// The histories of the failover issue: a sequence number alone never makes a server
    /// hold another server's GTID.
    #[test]
    fn diverged_histories_are_told_apart() {
        let p = |text: &str| GtidPosition::parse(text.as_bytes()).unwrap();
        type Case<'a> = (&'a str, &'a str, bool);
        let cases: &[Case] = &[
            // A replica that never received 0-1-12 of the watermark, made writable and
            // numbered far ahead.
            ("0-1-11,0-3-1000000", "0-1-12", false),
            // A replica holding a fenced primary's tail, against the next epoch's commits.
            ("0-1-105", "0-2-103", false),
            // The same replica once it has the next primary's history.
            ("0-1-105,0-2-103", "0-2-103", true),
            // A replica rebuilt from a copy of the new primary (RESET MASTER): it names only
            // the new primary's GTIDs, and holds the watermark of its time.
            ("0-2-950", "0-2-930", true),
            ("0-2-950", "0-2-951", false),
            // Two domains: each is looked at by its own newest.
            ("0-2-10,1-1-4", "0-2-10,1-1-5", false),
            ("0-2-10,1-1-5", "0-2-10,1-1-5", true),
        ];
        for (history, watermark, covered) in cases {
            let (history, watermark) = (p(history), p(watermark));
            assert_eq!(
                history.covers(&watermark),
                *covered,
                "{history:#} covers {watermark}"
            );
            let missing: Vec<String> = history
                .missing(&watermark)
                .map(ToString::to_string)
                .collect();
            assert_eq!(missing.is_empty(), *covered, "{missing:?}");
        }
    }

    #[test]
    fn covers_means_holding_the_newest_of_every_domain_of_the_other() {
        let p = |gtids: &[&str]| GtidPosition::of(&gtids.iter().map(|t| g(t)).collect::<Vec<_>>());
        let cases: &[(&[&str], &[&str], bool)] = &[
            (&[], &[], true),
            (&["0-1-5"], &[], true),
            (&[], &["0-1-5"], false),
            (&["0-1-5"], &["0-1-5"], true),
            (&["0-1-5"], &["0-1-4"], true),
            (&["0-1-5"], &["0-2-4"], false),
            (&["0-2-4", "0-1-5"], &["0-2-4"], true),
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
        /// What MariaDB would print reads back as the same position: every server's newest
        /// (`{:#}`, as `gtid_binlog_state`), or the newest of each domain.
        #[test]
        fn display_and_parse_round_trip(p in position()) {
            prop_assert_eq!(GtidPosition::parse(format!("{p:#}").as_bytes()), Ok(p.clone()));
            let newest: Vec<Gtid> = p.gtids().copied().collect();
            prop_assert_eq!(
                GtidPosition::parse(p.to_string().as_bytes()),
                Ok(GtidPosition::of(&newest))
            );
        }

        /// Against histories written out GTID by GTID: a lineage of primaries one after the
        /// other, and a branch off it (a fenced primary's tail, or a server of its own numbered
        /// ahead). Whatever a history's position names of it — every server's newest, or only
        /// the newest of the domain — it never holds a GTID the history lacks; naming every
        /// server, it holds each one the history has.
        #[test]
        fn a_position_holds_no_gtid_its_history_lacks(
            runs in prop::collection::vec(1u64..5, 1..5),
            cut in 0usize..20,
            fork in (any::<prop::sample::Index>(), 0u64..3, any::<bool>(), 1u64..4),
        ) {
            let mut lineage = Vec::new();
            let mut boundaries = vec![0usize];
            for (server, len) in (1u32..).zip(&runs) {
                for _ in 0..*len {
                    lineage.push(Gtid::maria(0, server, lineage.len() as u64 + 1));
                }
                boundaries.push(lineage.len());
            }
            // The branch: at a run's end its primary goes on alone (a tail), or anywhere a
            // server of its own writes, numbered ahead or not.
            let (at, jump, tail, len) = fork;
            let (start, server, first) = if tail {
                let end = boundaries[1..][at.index(boundaries.len() - 1)];
                (end, lineage[end - 1].server_id, end as u64 + 1)
            } else {
                let start = at.index(lineage.len() + 1);
                (start, 9, start as u64 + 1 + jump * 1_000_000)
            };
            let mut branch = lineage[..start].to_vec();
            branch.extend((0..len).map(|i| Gtid::maria(0, server, first + i)));
            let every: Vec<Gtid> = lineage.iter().chain(&branch).copied().collect();
            let histories = [lineage[..cut.min(lineage.len())].to_vec(), branch];
            for history in histories {
                let state = GtidPosition::of(&history);
                let newest = GtidPosition::of(history.last().copied().as_slice());
                for g in &every {
                    let had = history.contains(g);
                    prop_assert_eq!(state.holds(g), had, "{:#} holds {}", state, g);
                    prop_assert!(!newest.holds(g) || had, "{} holds {}", newest, g);
                    let one = GtidPosition::of(&[*g]);
                    prop_assert!(!newest.covers(&one) || had);
                }
            }
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

        /// `covers` is reflexive, agrees with `holds` for a single GTID, and is false exactly
        /// when something is `missing`. (It is not transitive: a history that names only a
        /// newer server's GTIDs may hold more than can be told.)
        #[test]
        fn covers_holds_and_missing_agree(a in position(), b in position(), g in gtid()) {
            prop_assert!(a.covers(&a));
            prop_assert_eq!(a.covers(&b), a.missing(&b).next().is_none());
            prop_assert_eq!(a.holds(&g), a.covers(&GtidPosition::of(&[g])));
            let newest: Vec<Gtid> = b.newest_gtids().collect();
            prop_assert_eq!(newest.len(), b.gtids().count());
        }
    }
}
