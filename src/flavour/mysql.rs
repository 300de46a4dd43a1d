//! MySQL: GTID tracking on the primary leg, kept on whatever the client does.

use smallvec::SmallVec;
use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::gtid::{tracked_gtids, Gtid, GtidPosition, TrackedGtid};
use strongsync_proto::ok::{
    OkPacket, SESSION_TRACK_GTIDS_VAR, SESSION_TRACK_STATE_CHANGE_VAR,
    SESSION_TRACK_SYSTEM_VARIABLES_VAR,
};
use strongsync_proto::position::Position;
use strongsync_proto::ProtoError;
use tracing::{debug, warn};

use super::{
    tracks, variable_set, Answer, CheckReason, Checked, Common, OkNews, OwnQueries, TrackerContext,
    Unlearnt,
};
use crate::asked::{names_session_quorum, AskedQuorum};
use crate::commit::{Unresolved, Unsaid};
use crate::error::Error;

mod dump;

pub(super) use dump::{dump_setup, DUMP_QUERY};

/// How the session tracks, and what it asks: the columns of [`Check`], in order, each as
/// binary so that the client's `character_set_results` does not respell them.
const CHECK: &str = "SELECT CAST(@@session.session_track_gtids AS BINARY), \
     CAST(@@session.session_track_system_variables AS BINARY), \
     CAST(@@session.session_track_state_change AS BINARY), CAST(@strongsync_quorum AS BINARY)";
/// Add the three tracking variables to the tracked ones (unless the list has them, or is
/// `*`), report state changes, and report the session's own GTIDs unless it has GTIDs reported
/// already. Each value is computed from the session's values before the statement.
const ENABLE: &str = "SET SESSION session_track_system_variables = \
     IF(@@session.session_track_system_variables = '*', '*', CONCAT_WS(',', \
        NULLIF(@@session.session_track_system_variables, ''), \
        IF(FIND_IN_SET('session_track_gtids', REPLACE(@@session.session_track_system_variables, ' ', '')) > 0, NULL, 'session_track_gtids'), \
        IF(FIND_IN_SET('session_track_state_change', REPLACE(@@session.session_track_system_variables, ' ', '')) > 0, NULL, 'session_track_state_change'), \
        IF(FIND_IN_SET('session_track_system_variables', REPLACE(@@session.session_track_system_variables, ' ', '')) > 0, NULL, 'session_track_system_variables'))), \
     session_track_state_change = ON, \
     session_track_gtids = IF(@@session.session_track_gtids = 'OFF', 'OWN_GTID', @@session.session_track_gtids)";

/// How far the primary's binlog reaches: its file and the end of the last group written to
/// it. MySQL writes a transaction to its binlog before the engine commits it (and before its
/// GTID is in `gtid_executed`, which other sessions can read behind what they see), so this
/// position, read after a response arrived, bounds everything the response may have
/// committed or revealed. `SHOW BINARY LOG STATUS` is MySQL 8.2's name for what 8.0 calls
/// `SHOW MASTER STATUS` (8.4 has only the new name); both answer the same columns.
pub(super) const BOUND_QUERIES: &[&str] = &["SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"];

/// The bound [`BOUND_QUERIES`]' row (`File`, `Position`, …) says.
pub(super) fn parse_bound(row: &[Option<Vec<u8>>]) -> Result<GtidPosition, ProtoError> {
    let bad = ProtoError::Malformed {
        what: "binary log status",
    };
    let (Some(Some(file)), Some(Some(offset))) = (row.first(), row.get(1)) else {
        return Err(bad);
    };
    let offset = std::str::from_utf8(offset)
        .ok()
        .and_then(|o| o.parse().ok())
        .ok_or(bad)?;
    Position::in_file(file, offset).map(GtidPosition::binlog_end)
}

/// A MySQL session's tracking.
///
/// The proxy makes the primary report each commit's own GTIDs (`session_track_gtids = OWN_GTID`,
/// unless the client tracks GTIDs itself) and a state-change item whenever the session's state
/// changes (`session_track_state_change`), with the three variables that switch tracking themselves
/// tracked (`session_track_gtids`, `session_track_state_change`, `session_track_system_variables`):
/// a statement that touches any of them — directly, in a procedure, in a prepared statement — names
/// it in its OK. After such a response (and after a legacy EOF that flagged a change, or a GTID
/// report that does not parse) the relay holds the response and the tracker reads back how its
/// tracking stands and puts it back if the client took it away. MySQL cannot say what a session
/// committed last (it has no `@@last_gtid`), so whatever such a response may have committed
/// unreported is bounded by the primary's binlog position, read after it (see [`BOUND_QUERIES`]).
#[derive(Debug)]
pub struct Tracker {
    /// `active`: the primary is known to report this session's commits and state changes.
    pub(super) common: Common,
    /// The response in progress switched tracking itself, or reported GTIDs that do not
    /// read: what it committed may have gone unreported.
    unreported: Option<&'static str>,
}

/// The session's tracking as [`CHECK`] read it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Check {
    gtids: Vec<u8>,
    list: Vec<u8>,
    state_change: bool,
    quorum: AskedQuorum,
}

// === impl Tracker ===

impl Tracker {
    pub(super) fn new(context: TrackerContext) -> Self {
        Tracker {
            common: Common::new(context),
            unreported: None,
        }
    }

    /// Makes the primary report this session's commits and state changes: read how the
    /// client's session tracks (so the proxy knows what to strip), add the proxy's tracking,
    /// read the result. One round trip.
    pub(super) async fn set_up(&mut self, primary: &mut impl OwnQueries) -> Result<(), Error> {
        self.unreported = None;
        if self.common.set_up_from_defaults() {
            self.client_gtids(b"OWN_GTID");
            self.client_list(b"*");
            return Ok(());
        }
        if !self.common.begin_set_up() {
            return Ok(());
        }
        let [probed, enabled, read_back] = Answer::each(
            self.common
                .ask(primary, "setup", &[CHECK, ENABLE, CHECK])
                .await?,
        );
        let client = Check::from_row(&probed.row);
        self.common.take_quorum(&client.quorum);
        self.client_gtids(&client.gtids);
        self.client_list(&client.list);
        self.common.filter.keep_state_change = client.state_change;
        self.unreported = None;
        if let Some(error) = probed.error.or(self.enabled(enabled, read_back)) {
            warn!(%error, "could not set up GTID tracking on the primary connection: every response is bounded by the primary's position");
        }
        Ok(())
    }

    /// Notes a command that resets the session's trackers behind the proxy's back, or that
    /// names `@strongsync_quorum`.
    pub(super) fn note_command(&mut self, payload: &[u8]) -> Option<CheckReason> {
        self.common.note_reset(payload);
        self.common.note_plain(payload);
        self.unreported = None;
        match payload.split_first() {
            Some((
                &(strongsync_proto::command::COM_QUERY
                | strongsync_proto::command::COM_STMT_PREPARE),
                text,
            )) => names_session_quorum(text).then_some(CheckReason::SessionQuorum),
            _ => None,
        }
    }

    pub(super) fn checks_every_response(&self) -> Option<CheckReason> {
        if self.common.context.proxy.commits_untracked() {
            Some(CheckReason::GtidModeOff)
        } else {
            (self.common.untrusted().is_some() || !self.common.active)
                .then_some(CheckReason::Untracked)
        }
    }

    /// Takes in an OK: the GTIDs it reports, and anything else it says changed — the client
    /// switching tracking itself, which it sees as it asked from this packet on.
    pub(super) fn on_ok(&mut self, ok: &OkPacket<'_>) -> OkNews {
        let mut news = OkNews::default();
        if !ok
            .status
            .contains(StatusFlags::SERVER_SESSION_STATE_CHANGED)
        {
            return news;
        }
        if self.common.defaults.is_some() {
            self.take_in_from_defaults(ok, &mut news);
            return news;
        }
        if let Some(value) = variable_set(ok, SESSION_TRACK_GTIDS_VAR) {
            self.client_gtids(value);
            self.touched("the session switched session_track_gtids");
        }
        if let Some(value) = variable_set(ok, SESSION_TRACK_SYSTEM_VARIABLES_VAR) {
            self.client_list(value);
            self.touched("the session changed session_track_system_variables");
        }
        if let Some(value) = variable_set(ok, SESSION_TRACK_STATE_CHANGE_VAR) {
            self.common.filter.keep_state_change =
                value.eq_ignore_ascii_case(b"ON") || value == b"1";
            self.touched("the session switched session_track_state_change");
        }
        for tracked in tracked_gtids(ok) {
            let TrackedGtid::OwnGtids(text) = tracked else {
                continue;
            };
            match Self::reported(text) {
                Some(gtids) => news.committed.extend(gtids),
                None => {
                    warn!(value = %String::from_utf8_lossy(text), "unreadable GTID report: the response is bounded by the primary's position");
                    self.touched("its GTID report did not read");
                }
            }
        }
        if self.unreported.is_some() || !ok.reports_only_routine_state() {
            news.check.get_or_insert(CheckReason::StateChange);
        }
        news
    }

    /// Checks the session: takes in the client's own tracker changes and quorum, and puts the
    /// proxy's tracking back if it is gone. What the response may have committed without a
    /// report is bounded by the primary's position.
    pub(super) async fn check(
        &mut self,
        reason: CheckReason,
        primary: &mut impl OwnQueries,
    ) -> Result<Checked, Error> {
        let connection_id = self.common.context.connection_id;
        self.common.context.metrics.tracking_checked(reason.label());
        if self.common.defaults.is_some() && reason != CheckReason::GtidModeOff {
            return self.common.check_from_defaults(reason, primary).await;
        }
        let mut checked = Checked::default();
        if reason == CheckReason::GtidModeOff {
            // Nothing to ask: a transaction without a GTID is named by no report and no query.
            checked.unlearnt = Some(Unlearnt::Bound(Unresolved::Unreported {
                why: "the primary records transactions without a GTID (gtid_mode is not ON)",
            }));
            return Ok(checked);
        }
        let why = match reason {
            CheckReason::LegacyEof => Some("a legacy EOF flagged a change without saying what"),
            CheckReason::Untracked => Some("GTID tracking is not on for the session"),
            _ => self.unreported.take(),
        };
        let [answer] = Answer::each(
            self.common
                .ask(primary, reason.statement_label(), &[CHECK])
                .await?,
        );
        if let Some(error) = answer.error {
            warn!(connection_id, %error, "could not read the session's tracking after a response that may have committed");
            self.common.active = false;
            checked.unlearnt = Some(Unlearnt::Bound(Unresolved::BoundUnreadable(
                Unsaid::Refused { err: error },
            )));
            return Ok(checked);
        }
        if let Some(why) = why {
            checked.unlearnt = Some(Unlearnt::Bound(Unresolved::Unreported { why }));
        }
        let check = Check::from_row(&answer.row);
        self.common.take_quorum(&check.quorum);
        if check.intact() && self.common.context.primary_tracks {
            self.common.active = true;
            return Ok(checked);
        }
        debug!(connection_id, gtids = %String::from_utf8_lossy(&check.gtids), list = %String::from_utf8_lossy(&check.list), state_change = check.state_change, "session tracking was changed: putting it back");
        self.common.context.metrics.tracking_restored.inc();
        if self.common.context.primary_tracks {
            let [enabled, read_back] = Answer::each(
                self.common
                    .ask(primary, "restore", &[ENABLE, CHECK])
                    .await?,
            );
            if let Some(error) = self.enabled(enabled, read_back) {
                warn!(connection_id, %error, "could not put GTID tracking back on the primary connection");
            }
        }
        Ok(checked)
    }
}

impl Tracker {
    /// The GTIDs whose waiting waits for all a `session_track_gtids` report names: the last
    /// of each interval (a source numbers its transactions in binlog order, so a replica that
    /// holds the last holds the rest; a `CALL` that committed thousands reports one range).
    /// `None` if it does not read. `ALL_GTIDS` reports everything executed: waiting for it is
    /// waiting for a bound, which the same GTIDs are.
    fn reported(text: &[u8]) -> Option<SmallVec<[Gtid; 1]>> {
        let set = GtidPosition::parse_mysql(std::str::from_utf8(text).ok()?).ok()?;
        Some(set.newest_gtids().collect())
    }

    /// Set up from the defaults: takes in an OK's GTID reports and the trackers' own changes
    /// (see [`Common::take_in_ok`]).
    fn take_in_from_defaults(&mut self, ok: &OkPacket<'_>, news: &mut OkNews) {
        if let Some(value) = variable_set(ok, SESSION_TRACK_GTIDS_VAR) {
            self.client_gtids(value);
            if !super::defaults::reports_gtids(value) {
                self.common
                    .distrust("the session switched session_track_gtids off");
            }
        }
        if let Some(value) = variable_set(ok, SESSION_TRACK_SYSTEM_VARIABLES_VAR) {
            self.client_list(value);
        }
        for tracked in tracked_gtids(ok) {
            if let TrackedGtid::OwnGtids(text) = tracked {
                match Self::reported(text) {
                    Some(gtids) => news.committed.extend(gtids),
                    None => {
                        warn!(value = %String::from_utf8_lossy(text), "unreadable GTID report: the response is bounded by the primary's position");
                        self.common.unreported("its GTID report did not read");
                    }
                }
            }
        }
        self.common.take_in_ok(super::Flavour::MySql, ok, news);
    }

    /// The response in progress switched tracking, or reported what does not read.
    fn touched(&mut self, why: &'static str) {
        self.unreported.get_or_insert(why);
    }

    /// Takes in the answers to [`ENABLE`] and the [`CHECK`] after it: tracking is on if both
    /// worked and the check finds it in place. Returns the error otherwise.
    fn enabled(&mut self, enabled: Answer, read_back: Answer) -> Option<String> {
        let error = enabled.error.or(read_back.error);
        let check = Check::from_row(&read_back.row);
        self.common.active = error.is_none() && check.intact();
        match error {
            Some(error) => Some(error),
            None if !self.common.active => Some(format!(
                "tracking did not take: session_track_gtids {}, session_track_system_variables {:?}, session_track_state_change {}",
                String::from_utf8_lossy(&check.gtids),
                String::from_utf8_lossy(&check.list),
                check.state_change
            )),
            None => None,
        }
    }

    /// The client's own `session_track_gtids` is `value`: it sees GTID reports unless it is
    /// `OFF`.
    fn client_gtids(&mut self, value: &[u8]) {
        self.common.filter.keep_gtids = !value.eq_ignore_ascii_case(b"OFF") && value != b"0";
    }

    /// The client's own `session_track_system_variables` is `list`: it sees the variables in
    /// it.
    fn client_list(&mut self, list: &[u8]) {
        let filter = &mut self.common.filter;
        filter.keep_gtids_var = tracks(list, SESSION_TRACK_GTIDS_VAR);
        filter.keep_state_change_var = tracks(list, SESSION_TRACK_STATE_CHANGE_VAR);
        filter.keep_list_var = tracks(list, SESSION_TRACK_SYSTEM_VARIABLES_VAR);
    }
}

// === impl Check ===

impl Check {
    fn from_row(row: &[Option<Vec<u8>>]) -> Self {
        let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        Check {
            gtids: text(0),
            list: text(1),
            // A boolean read as binary is `ON` on MariaDB, `1` on MySQL.
            state_change: super::defaults::on(&text(2)),
            quorum: AskedQuorum::of(row.get(3).cloned().flatten()),
        }
    }

    /// Whether the proxy's tracking is in place.
    fn intact(&self) -> bool {
        !self.gtids.eq_ignore_ascii_case(b"OFF")
            && !self.gtids.is_empty()
            && self.state_change
            && tracks(&self.list, SESSION_TRACK_GTIDS_VAR)
            && tracks(&self.list, SESSION_TRACK_STATE_CHANGE_VAR)
            && tracks(&self.list, SESSION_TRACK_SYSTEM_VARIABLES_VAR)
    }
}

#[cfg(test)]
mod tests;
