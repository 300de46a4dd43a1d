//! GTID tracking on the primary leg: switched on for every session without the client seeing
//! it, re-established when the client resets or re-configures its session, and read back with
//! `SELECT @@last_gtid` where a legacy EOF hid what a statement committed.

use bytes::BufMut;
use strongsync_proto::command::{
    COM_QUERY, COM_RESET_CONNECTION, COM_STMT_EXECUTE, COM_STMT_PREPARE,
};
use strongsync_proto::gtid::{Gtid, MariaGtid, TrackedGtid};
use strongsync_proto::ok::{ErrPacket, TrackingFilter};
use strongsync_proto::packet::Sequence;
use strongsync_proto::response::{PacketKind, ResponseReader};
use strongsync_proto::wire::Reader;
use tracing::warn;

use super::session::{Phase, Session};
use crate::commit::Commit;
use crate::error::Error;

/// MariaDB: the client's own tracker list, read before the proxy adds to it.
const MARIADB_PROBE: &str = "SELECT @@session.session_track_system_variables";
/// MariaDB: add `last_gtid` to the tracked variables unless the client already tracks it.
const MARIADB_ENABLE: &str = "SET SESSION session_track_system_variables = \
     IF(FIND_IN_SET('last_gtid', REPLACE(@@session.session_track_system_variables, ' ', '')) > 0 \
        OR @@session.session_track_system_variables = '*', \
        @@session.session_track_system_variables, \
        IF(@@session.session_track_system_variables = '', 'last_gtid', \
           CONCAT(@@session.session_track_system_variables, ',last_gtid')))";
/// MySQL: the client's own `session_track_gtids`.
const MYSQL_PROBE: &str = "SELECT @@session.session_track_gtids";
/// MySQL: report the session's own GTIDs unless the client already tracks GTIDs.
const MYSQL_ENABLE: &str = "SET SESSION session_track_gtids = \
     IF(@@session.session_track_gtids = 'OFF', 'OWN_GTID', @@session.session_track_gtids)";
/// MariaDB: what the session committed last, when an OK did not say.
const LAST_GTID_QUERY: &str = "SELECT @@last_gtid";

/// Per-session tracking state.
#[derive(Debug, Default)]
pub(super) struct Tracking {
    /// What the client may see of the tracking data.
    pub filter: TrackingFilter,
    /// The primary reports GTIDs on this connection.
    pub active: bool,
    /// The GTID the primary last reported for this session: a report of the same value is a
    /// late repeat, not a new commit.
    pub last: Option<MariaGtid>,
    /// The current command may change the session's tracker settings: check them after it.
    pub recheck: bool,
    /// A statement prepared on this session mentions the tracker settings, so executing any
    /// prepared statement triggers a check.
    prepared_touches: bool,
}

/// What one response reported about commits, and which part of it is held for them.
#[derive(Debug, Default)]
pub(super) struct ResponseCommits {
    gtids: Vec<Gtid>,
    unresolved: bool,
    /// A legacy EOF flagged a session-state change without saying what changed; until an OK
    /// with a state block or a `SELECT @@last_gtid` says, the response is held.
    pub pending: bool,
    /// The packet the held part starts with (the first that reported news).
    hold: Option<Mark>,
    /// The last packet queued for the client.
    last: Option<Mark>,
    /// The client was told the commit failed: the rest of the response is not relayed.
    pub discard: bool,
}

/// Where a packet starts in the client's write queue, and its sequence id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mark {
    pub offset: usize,
    pub seq: u8,
}

/// The answer to a query the proxy sent on its own behalf.
#[derive(Debug, Default)]
struct Swallowed {
    /// First column of the first row (`None` for NULL or no rows).
    value: Option<Vec<u8>>,
    /// The ERR the query got, if it failed.
    error: Option<String>,
}

// === impl Tracking ===

impl Tracking {
    pub(super) fn client_tracks(&mut self, tracks: bool) {
        self.filter.client_tracks = tracks;
    }

    /// Notes commands that may change the tracker settings behind the proxy's back: a
    /// `SET session_track_…` (or anything mentioning it), executing such a prepared
    /// statement, and `COM_RESET_CONNECTION`.
    pub(super) fn note_command(&mut self, payload: &[u8]) {
        match payload.first() {
            Some(&COM_QUERY) => self.recheck |= mentions_session_track(&payload[1..]),
            Some(&COM_STMT_PREPARE) => {
                self.prepared_touches |= mentions_session_track(&payload[1..])
            }
            Some(&COM_STMT_EXECUTE) => self.recheck |= self.prepared_touches,
            Some(&COM_RESET_CONNECTION) => self.recheck = true,
            _ => {}
        }
    }
}

/// ASCII-case-insensitive search for `session_track` (a `SET` of either tracker variable).
fn mentions_session_track(text: &[u8]) -> bool {
    const BEFORE: &[u8] = b"session";
    const AFTER: &[u8] = b"track";
    memchr::memchr_iter(b'_', text).any(|i| {
        i >= BEFORE.len()
            && text[i - BEFORE.len()..i].eq_ignore_ascii_case(BEFORE)
            && text
                .get(i + 1..i + 1 + AFTER.len())
                .is_some_and(|t| t.eq_ignore_ascii_case(AFTER))
    })
}

// === impl ResponseCommits ===

impl ResponseCommits {
    /// Stops waiting to learn what a flagged legacy EOF hid: if something may have been
    /// committed, it is reported as unknown.
    pub(super) fn give_up_resolving(&mut self) {
        if std::mem::take(&mut self.pending) {
            self.unresolved = true;
        }
    }

    /// True if something must be reported before the held packets are released.
    pub(super) fn has_news(&self) -> bool {
        !self.gtids.is_empty() || self.unresolved
    }

    /// Notes the packet about to be queued.
    pub(super) fn queued(&mut self, mark: Mark) {
        self.last = Some(mark);
    }

    /// If there is news (or a pending question) and nothing is held yet, holds from the last
    /// packet queued: the one that brought the news.
    pub(super) fn hold_if_news(&mut self) {
        if self.hold.is_none() && (self.has_news() || self.pending) {
            self.hold = self.last;
        }
    }

    /// Takes what has been reported so far, with the packet the held part starts at.
    pub(super) fn take(&mut self, connection_id: u32) -> (Commit, Option<Mark>) {
        let commit = Commit {
            connection_id,
            gtids: std::mem::take(&mut self.gtids),
            unresolved: std::mem::take(&mut self.unresolved),
        };
        (commit, self.hold.take())
    }
}

// === impl Session (tracking) ===

impl Session {
    /// Makes the primary report this session's GTIDs. Two pipelined queries, one round trip:
    /// the first reads what the client itself tracks (so the proxy knows what to strip), the
    /// second adds the proxy's tracker.
    pub(super) async fn setup_tracking(&mut self) -> Result<Phase, Error> {
        self.tracking.recheck = false;
        if !self.primary_tracks {
            warn!("primary does not offer session tracking: commits cannot be followed on this connection");
            self.tracking.active = false;
            return Ok(Phase::Idle);
        }
        let (probe, enable) = if self.mariadb {
            (MARIADB_PROBE, MARIADB_ENABLE)
        } else {
            (MYSQL_PROBE, MYSQL_ENABLE)
        };
        self.send_query(probe);
        self.send_query(enable);
        self.flush_primary().await?;
        let probed = self.swallow_response().await?;
        let enabled = self.swallow_response().await?;
        let tracked = probed.value.unwrap_or_default();
        if self.mariadb {
            self.tracking.filter.keep_last_gtid = tracks_last_gtid(&tracked);
        } else {
            self.tracking.filter.keep_gtids = !tracked.eq_ignore_ascii_case(b"OFF");
        }
        self.tracking.active = enabled.error.is_none();
        if let Some(error) = probed.error.or(enabled.error) {
            warn!(%error, "could not enable GTID tracking on the primary connection");
        }
        Ok(Phase::Idle)
    }

    /// Records a GTID report from an OK packet. MariaDB reports `last_gtid` again when a later
    /// statement flushes a pending change, so only a value different from the last one known
    /// is a new commit.
    pub(super) fn note_tracked(&mut self, tracked: TrackedGtid<'_>, commits: &mut ResponseCommits) {
        match tracked {
            TrackedGtid::LastGtid([]) | TrackedGtid::OwnGtids([]) => {}
            TrackedGtid::LastGtid(value) => match MariaGtid::parse(value) {
                Ok(gtid) if self.tracking.last == Some(gtid) => {}
                Ok(gtid) => {
                    self.tracking.last = Some(gtid);
                    commits.gtids.push(Gtid::Maria(gtid));
                }
                Err(error) => {
                    warn!(%error, value = %String::from_utf8_lossy(value), "unreadable last_gtid");
                    commits.unresolved = true;
                }
            },
            TrackedGtid::OwnGtids(text) => {
                commits
                    .gtids
                    .push(Gtid::MySql(String::from_utf8_lossy(text).into()));
            }
        }
    }

    /// Asks the primary what this session committed last, when the response did not say
    /// (legacy EOF) or may have switched tracking off. Only MariaDB has `@@last_gtid`.
    pub(super) async fn recover_last_gtid(
        &mut self,
        commits: &mut ResponseCommits,
    ) -> Result<(), Error> {
        commits.pending = false;
        if !self.mariadb || !self.primary_tracks {
            commits.unresolved = true;
            return Ok(());
        }
        self.send_query(LAST_GTID_QUERY);
        self.flush_primary().await?;
        let answer = self.swallow_response().await?;
        match (answer.error, answer.value) {
            (None, value) => {
                self.note_tracked(TrackedGtid::LastGtid(&value.unwrap_or_default()), commits)
            }
            (Some(error), _) => {
                warn!(%error, "could not read @@last_gtid after a response that may have committed");
                commits.unresolved = true;
            }
        }
        Ok(())
    }

    /// Queues a `COM_QUERY` of the proxy's own.
    fn send_query(&mut self, sql: &str) {
        self.primary.write_packet_with(0, |buf| {
            buf.put_u8(COM_QUERY);
            buf.put_slice(sql.as_bytes());
        });
    }

    /// Reads the whole response to a query the proxy sent, keeping only the first value (or
    /// the error). Nothing of it reaches the client.
    async fn swallow_response(&mut self) -> Result<Swallowed, Error> {
        let mut reader = ResponseReader::for_command(&[COM_QUERY], self.deprecate_eof())
            .expect("COM_QUERY has a response");
        let mut seq = Sequence::expecting(1);
        let mut answer = Swallowed::default();
        let mut first_row = true;
        loop {
            let packet = self
                .primary
                .read_packet()
                .await
                .map_err(Error::from_primary)?;
            seq.check(packet.seq()).map_err(Error::PrimaryProtocol)?;
            let step = reader.on_packet(&packet).map_err(Error::PrimaryProtocol)?;
            match step.kind {
                PacketKind::Row if first_row => {
                    first_row = false;
                    // Text row: the first value is a length-encoded string, or 0xFB for NULL.
                    answer.value = Reader::new(packet.payload())
                        .lenenc_str("row value")
                        .ok()
                        .map(<[u8]>::to_vec);
                }
                PacketKind::Err => {
                    let err = ErrPacket::parse(packet.payload()).map_err(Error::PrimaryProtocol)?;
                    answer.error = Some(format!(
                        "{} {}",
                        err.code,
                        String::from_utf8_lossy(err.message)
                    ));
                }
                PacketKind::LocalInfileRequest => {
                    // Cannot happen for the proxy's own queries; refuse the file all the same.
                    self.primary.write_packet(seq.advance(), &[]);
                    self.flush_primary().await?;
                    reader.infile_sent();
                }
                _ => {}
            }
            if step.done {
                return Ok(answer);
            }
        }
    }
}

/// True if a `session_track_system_variables` value includes `last_gtid` (or everything).
fn tracks_last_gtid(list: &[u8]) -> bool {
    list.split(|&b| b == b',')
        .map(|v| v.trim_ascii())
        .any(|v| v == b"*" || v.eq_ignore_ascii_case(b"last_gtid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_tracker_settings_in_statements() {
        let table: [(&[u8], bool); 7] = [
            (b"SET session_track_system_variables='last_gtid'", true),
            (b"set @@SESSION_TRACK_GTIDS = OWN_GTID", true),
            (b"SET SESSION session_track_schema=OFF", true),
            (b"INSERT INTO t VALUES ('session')", false),
            (b"SELECT track_session FROM t", false),
            (b"_track", false),
            (b"session_", false),
        ];
        for (text, want) in table {
            assert_eq!(
                mentions_session_track(text),
                want,
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn recognises_a_tracker_list_that_includes_last_gtid() {
        let table: [(&[u8], bool); 6] = [
            (b"autocommit,character_set_client,time_zone", false),
            (b"last_gtid", true),
            (b"autocommit, LAST_GTID", true),
            (b"*", true),
            (b"", false),
            (b"last_gtid_x", false),
        ];
        for (list, want) in table {
            assert_eq!(
                tracks_last_gtid(list),
                want,
                "{}",
                String::from_utf8_lossy(list)
            );
        }
    }

    #[test]
    fn commands_that_may_change_tracking_trigger_a_recheck() {
        let mut t = Tracking::default();
        t.note_command(b"\x03SELECT 1");
        assert!(!t.recheck);
        t.note_command(b"\x16SET session_track_system_variables = ?");
        t.note_command(b"\x17\x01\x00\x00\x00");
        assert!(t.recheck, "executing a statement prepared from such text");
        t.recheck = false;
        t.note_command(b"\x1f");
        assert!(t.recheck, "COM_RESET_CONNECTION");
    }
}
