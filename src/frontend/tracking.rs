//! GTID tracking on the primary leg, kept on whatever the client does. The proxy makes the
//! primary report the session's `last_gtid` and a state-change item whenever the session's
//! state changes (`session_track_state_change`, with that variable itself tracked): any
//! statement that touches the trackers — directly, in a procedure, a function, a trigger, a
//! prepared statement — sets `SERVER_SESSION_STATE_CHANGED` on its response with something
//! other than a bare `last_gtid` report. After such a response (and after a legacy EOF that
//! flagged a change, or a state block that does not parse) the proxy holds the response,
//! reads back what the session committed last and how its trackers stand, puts its own
//! tracking back if the client took it away, and only then releases the response, waiting
//! for anything committed that it had not been told of. The client keeps seeing exactly the
//! tracker data it asked for.

use strongsync_proto::command::{COM_QUERY, COM_RESET_CONNECTION, COM_STMT_PREPARE};
use strongsync_proto::gtid::{Gtid, MariaGtid, TrackedGtid};
use strongsync_proto::ok::{
    TrackingFilter, LAST_GTID, SESSION_TRACK_STATE_CHANGE_VAR, SESSION_TRACK_TRANSACTION_INFO_VAR,
};
use tracing::{debug, warn};

use super::commits::ResponseCommits;
use super::own_query::Swallowed;
use super::session::{Phase, Session};
use crate::commit::Unresolved;
use crate::durability::SessionQuorum;
use crate::error::Error;

/// MariaDB: what the session committed last and how its tracking stands. Its columns are
/// [`Checked`]'s fields, in order.
macro_rules! mariadb_check {
    () => {
        "SELECT @@last_gtid, @@session.session_track_system_variables, \
         @@session.session_track_state_change, @@session.gtid_domain_id, @@session.server_id, \
         @@session.gtid_seq_no, @strongsync_quorum"
    };
}
const MARIADB_CHECK: &str = mariadb_check!();
/// The same, and what decides whether the session's next transaction reads only its snapshot
/// (see [`super::snapshot`]); on servers with `innodb_snapshot_isolation` (10.6.18, 10.11.8).
const MARIADB_CHECK_SNAPSHOT: &str = concat!(
    mariadb_check!(),
    ", @@session.session_track_transaction_info, @@session.tx_isolation, \
     @@session.innodb_snapshot_isolation"
);
/// MariaDB: add `last_gtid`, `session_track_state_change` and any other variables named to
/// the tracked variables (unless the list has them, or is `*`), report state changes, and make
/// any further assignment. The list is read before any assignment takes effect.
macro_rules! mariadb_enable {
    ($($var:literal),* ; $assign:literal) => {
        concat!(
            "SET SESSION session_track_system_variables = \
             IF(@@session.session_track_system_variables = '*', '*', CONCAT_WS(',', \
                NULLIF(@@session.session_track_system_variables, '')",
            $(", IF(FIND_IN_SET('", $var,
              "', REPLACE(@@session.session_track_system_variables, ' ', '')) > 0, NULL, '",
              $var, "')",)*
            ")), session_track_state_change = ON",
            $assign
        )
    };
}
const MARIADB_ENABLE: &str = mariadb_enable!("last_gtid", "session_track_state_change"; "");
/// The same, and report what each transaction does, and when the client switches that itself.
const MARIADB_ENABLE_SNAPSHOT: &str = mariadb_enable!(
    "last_gtid", "session_track_state_change", "session_track_transaction_info";
    ", session_track_transaction_info = CHARACTERISTICS"
);
/// MariaDB: the trackers as the server's defaults set them for a new session.
const MARIADB_DEFAULTS: &str = "SET SESSION session_track_system_variables = DEFAULT, \
     session_track_state_change = DEFAULT, session_track_transaction_info = DEFAULT";
/// The value of `session_track_transaction_info` the proxy sets.
const CHARACTERISTICS: &[u8] = b"CHARACTERISTICS";
/// MariaDB's error for a system variable it does not know.
const ER_UNKNOWN_SYSTEM_VARIABLE: u16 = 1193;
/// MariaDB: the tracked variables as the server stored them after the proxy's change.
const MARIADB_READ_BACK: &str = "SELECT @@session.session_track_system_variables";
/// MySQL: the client's own `session_track_gtids`.
const MYSQL_PROBE: &str = "SELECT @@session.session_track_gtids";
/// MySQL: report the session's own GTIDs unless the client already tracks GTIDs.
const MYSQL_ENABLE: &str = "SET SESSION session_track_gtids = \
     IF(@@session.session_track_gtids = 'OFF', 'OWN_GTID', @@session.session_track_gtids)";

/// Per-session tracking state.
#[derive(Debug, Default)]
pub(super) struct Tracking {
    /// What the client may see of the tracking data.
    pub filter: TrackingFilter,
    /// The primary is known to report this session's commits and state changes.
    pub active: bool,
    /// The GTID the session committed last, as far as the proxy knows: a report of the same
    /// value is a late repeat, not a new commit.
    pub last: Option<MariaGtid>,
    /// The tracked-variables list as the server stored it after the proxy's change; another
    /// value later means the client set a list of its own.
    set_list: Vec<u8>,
    /// Check after every response: the session's next commit may go unreported (see
    /// [`Checked::may_hide_next_commit`]).
    pub check_each: bool,
    /// `COM_RESET_CONNECTION` put every tracker back to the server's defaults.
    pub reset: bool,
    /// The session's transaction state is tracked and its snapshot settings read (a probe is
    /// configured, so the read barrier may be on, and the server knows
    /// `innodb_snapshot_isolation`).
    pub snapshot_vars: bool,
    /// The session's next transaction started with a consistent snapshot reads only that
    /// snapshot: `REPEATABLE READ`, `innodb_snapshot_isolation = ON`, its state tracked.
    pub snapshot_ready: bool,
    /// The quorum the session asked for (`@strongsync_quorum`), as last read; `None`: it did
    /// not ask (or asked for something that is not a count).
    pub quorum: Option<usize>,
    /// The command in flight names `@strongsync_quorum`: its response is checked, since
    /// MariaDB reports no state change for an assignment inside a `SELECT`.
    names_quorum: bool,
}

/// Why a response is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CheckReason {
    /// Its state block says more than a bare `last_gtid` report.
    StateChange,
    /// A legacy EOF flagged a change without saying what.
    LegacyEof,
    /// The proxy's tracking is not known to be on.
    Untracked,
    /// The session's next commit may not be reported (it switched domain or server id, or
    /// forced a sequence number).
    DomainSwitch,
    /// The statement names `@strongsync_quorum`.
    SessionQuorum,
}

/// What a session's `@strongsync_quorum` says.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
enum AskedQuorum {
    /// NULL: never set (or set back to NULL).
    #[default]
    Unset,
    /// A count.
    Count(usize),
    /// Something else, as text.
    Invalid(String),
}

/// The session's tracking as [`MARIADB_CHECK`] read it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Checked {
    last_gtid: Vec<u8>,
    list: Vec<u8>,
    state_change: bool,
    domain: Option<u32>,
    server_id: Option<u32>,
    seq_no: u64,
    /// The session's `@strongsync_quorum`.
    quorum: AskedQuorum,
    /// The rest only from [`MARIADB_CHECK_SNAPSHOT`].
    transaction_info: Vec<u8>,
    isolation: Vec<u8>,
    snapshot_isolation: bool,
}

// === impl Tracking ===

impl Tracking {
    pub(super) fn client_tracks(&mut self, tracks: bool) {
        self.filter.client_tracks = tracks;
    }

    /// Notes a command that resets the session's trackers behind the proxy's back, or that
    /// names `@strongsync_quorum`.
    pub(super) fn note_command(&mut self, payload: &[u8]) {
        match payload.split_first() {
            Some((&COM_RESET_CONNECTION, _)) => self.reset = true,
            Some((&(COM_QUERY | COM_STMT_PREPARE), text)) => {
                self.names_quorum = names_session_quorum(text);
            }
            _ => {}
        }
    }

    /// Whether the response in flight must be checked because its command named
    /// `@strongsync_quorum` (asked once per command).
    pub(super) fn take_names_quorum(&mut self) -> bool {
        std::mem::take(&mut self.names_quorum)
    }

    /// Takes in the answers to [`MARIADB_ENABLE`] and [`MARIADB_READ_BACK`]: tracking is on if
    /// both worked. Returns the error otherwise.
    fn enabled(&mut self, enabled: Swallowed, read_back: Swallowed) -> Option<String> {
        let error = enabled.error.or(read_back.error.clone());
        self.active = error.is_none();
        if self.active {
            self.set_list = read_back.first_value();
        }
        error
    }

    /// Takes in the session's isolation settings; `tracked`: its transaction state is
    /// reported (the proxy's tracking is on).
    fn snapshot_settings(&mut self, checked: &Checked, tracked: bool) {
        self.snapshot_ready = self.snapshot_vars
            && tracked
            && checked.isolation.eq_ignore_ascii_case(b"REPEATABLE-READ")
            && checked.snapshot_isolation;
    }

    /// The check and the enabling statement this session uses.
    fn queries(&self) -> (&'static str, &'static str) {
        if self.snapshot_vars {
            (MARIADB_CHECK_SNAPSHOT, MARIADB_ENABLE_SNAPSHOT)
        } else {
            (MARIADB_CHECK, MARIADB_ENABLE)
        }
    }

    /// Why every response must be checked now, if it must.
    pub(super) fn checks_every_response(&self) -> Option<CheckReason> {
        if !self.active {
            Some(CheckReason::Untracked)
        } else if self.check_each {
            Some(CheckReason::DomainSwitch)
        } else {
            None
        }
    }

    /// Takes in what a check read: the client's own view of its trackers where it changed
    /// them (a client that switched state-change items on was already seen doing so, by
    /// [`Session::relay_ok`]), and whether the next commit may go unreported.
    fn take_in(&mut self, checked: &Checked) {
        if checked.list != self.set_list {
            self.client_list(&checked.list);
        }
        if self.snapshot_vars
            && !checked
                .transaction_info
                .eq_ignore_ascii_case(CHARACTERISTICS)
        {
            self.client_transaction_info(&checked.transaction_info);
        }
        if !checked.state_change {
            self.filter.keep_state_change = false;
        }
        self.check_each = checked.may_hide_next_commit(self.last);
    }
}

impl Tracking {
    /// The client's own `session_track_system_variables` is `list`: it sees the variables in
    /// it.
    fn client_list(&mut self, list: &[u8]) {
        self.filter.keep_last_gtid = tracks(list, LAST_GTID);
        self.filter.keep_state_change_var = tracks(list, SESSION_TRACK_STATE_CHANGE_VAR);
        self.filter.keep_transaction_info_var = tracks(list, SESSION_TRACK_TRANSACTION_INFO_VAR);
    }

    /// The client's own `session_track_transaction_info` is `value`: it sees the items that
    /// value asks for.
    pub(super) fn client_transaction_info(&mut self, value: &[u8]) {
        let characteristics = value.eq_ignore_ascii_case(CHARACTERISTICS);
        self.filter.keep_transaction_characteristics = characteristics;
        self.filter.keep_transaction_state =
            characteristics || value.eq_ignore_ascii_case(b"STATE");
    }
}

/// The user variable a session sets to ask for its own quorum.
const SESSION_QUORUM_VAR: &[u8] = b"strongsync_quorum";

/// Whether SQL text names the variable (in any case, as MariaDB's variable names go): a scan
/// for its `_`, then a comparison around each.
fn names_session_quorum(text: &[u8]) -> bool {
    const UNDERSCORE_AT: usize = 10;
    debug_assert_eq!(SESSION_QUORUM_VAR[UNDERSCORE_AT], b'_');
    memchr::memchr_iter(b'_', text).any(|at| {
        at.checked_sub(UNDERSCORE_AT)
            .and_then(|start| text.get(start..start + SESSION_QUORUM_VAR.len()))
            .is_some_and(|word| word.eq_ignore_ascii_case(SESSION_QUORUM_VAR))
    })
}

/// True if a `session_track_system_variables` value includes `name` (or everything).
fn tracks(list: &[u8], name: &[u8]) -> bool {
    list.split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .any(|v| v == b"*" || v.eq_ignore_ascii_case(name))
}

// === impl Checked ===

impl Checked {
    fn from_row(row: &[Option<Vec<u8>>]) -> Self {
        let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let number = |i: usize| std::str::from_utf8(&text(i)).ok()?.parse().ok();
        Checked {
            last_gtid: text(0),
            list: text(1),
            state_change: text(2) == b"1",
            domain: number(3),
            server_id: number(4),
            seq_no: number(5).map_or(0, u64::from),
            quorum: match row.get(6).cloned().flatten() {
                None => AskedQuorum::Unset,
                Some(value) => std::str::from_utf8(&value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .map_or_else(
                        || AskedQuorum::Invalid(String::from_utf8_lossy(&value).into_owned()),
                        AskedQuorum::Count,
                    ),
            },
            transaction_info: text(7),
            isolation: text(8),
            snapshot_isolation: text(9) == b"1",
        }
    }

    /// Whether the proxy's tracking is in place; `transactions`: transaction tracking is part
    /// of it.
    fn intact(&self, transactions: bool) -> bool {
        self.state_change
            && tracks(&self.list, LAST_GTID)
            && tracks(&self.list, SESSION_TRACK_STATE_CHANGE_VAR)
            && (!transactions
                || (self.transaction_info.eq_ignore_ascii_case(CHARACTERISTICS)
                    && tracks(&self.list, SESSION_TRACK_TRANSACTION_INFO_VAR)))
    }

    /// MariaDB reports `last_gtid` only when its sequence number changes: a session whose
    /// next commit goes to another domain (or under another server id), or that forced the
    /// next sequence number, may commit with the same number as `last` and not be told.
    fn may_hide_next_commit(&self, last: Option<MariaGtid>) -> bool {
        self.seq_no != 0
            || last.is_some_and(|last| {
                self.domain.is_some_and(|d| d != last.domain)
                    || self.server_id.is_some_and(|s| s != last.server_id)
            })
    }
}

// === impl CheckReason ===

impl CheckReason {
    /// Label for the metric.
    pub(super) fn label(self) -> &'static str {
        match self {
            CheckReason::StateChange => "state_change",
            CheckReason::LegacyEof => "legacy_eof",
            CheckReason::Untracked => "untracked",
            CheckReason::DomainSwitch => "domain_switch",
            CheckReason::SessionQuorum => "session_quorum",
        }
    }
}

// === impl Session (tracking) ===

impl Session {
    /// Makes the primary report this session's commits and state changes. Three pipelined
    /// queries, one round trip: read how the client's session tracks (so the proxy knows
    /// what to strip) and what it committed last, add the proxy's tracking, read the result.
    pub(super) async fn setup_tracking(&mut self) -> Result<Phase, Error> {
        self.tracking.reset = false;
        self.tracking.active = false;
        // Unless the proxy tracks transactions itself (below), whatever the client asks for of
        // them is its own, and passes.
        self.tracking.filter.keep_transaction_state = true;
        self.tracking.filter.keep_transaction_characteristics = true;
        if !self.primary_tracks {
            warn!("primary does not offer session tracking: every response is checked with a query of its own");
            return Ok(Phase::Idle);
        }
        if !self.mariadb {
            return self.setup_mysql_tracking().await;
        }
        // With a probe the read barrier may come on: transactions are tracked so that it can
        // bound one per snapshot. Not for a client with legacy EOF packets: its result sets
        // cannot carry the state, and inside a transaction MariaDB then flags every one of them
        // as a state change, each of which would cost a check.
        self.tracking.snapshot_vars = self.shared.probe.is_some() && self.deprecate_eof();
        let (check, enable) = self.tracking.queries();
        self.send_query(check);
        self.send_query(enable);
        self.send_query(MARIADB_READ_BACK);
        self.flush_primary().await?;
        let mut probed = self.swallow_response().await?;
        let mut enabled = self.swallow_response().await?;
        let mut read_back = self.swallow_response().await?;
        if self.tracking.snapshot_vars && probed.code == Some(ER_UNKNOWN_SYSTEM_VARIABLE) {
            // A server before innodb_snapshot_isolation: every response is bounded one by one.
            // The setup runs before the client's first command (after a login, a reset or a
            // change of user), so its trackers were the server's defaults: put them back and
            // set up again without the transaction tracking.
            self.tracking.snapshot_vars = false;
            self.send_query(MARIADB_DEFAULTS);
            self.send_query(MARIADB_CHECK);
            self.send_query(MARIADB_ENABLE);
            self.send_query(MARIADB_READ_BACK);
            self.flush_primary().await?;
            let defaults = self.swallow_response().await?;
            probed = self.swallow_response().await?;
            enabled = self.swallow_response().await?;
            read_back = self.swallow_response().await?;
            if let Some(error) = defaults.error {
                probed.error.get_or_insert(error);
            }
        }
        let checked = Checked::from_row(&probed.row);
        self.take_quorum(&checked.quorum);
        self.tracking.client_list(&checked.list);
        self.tracking.filter.keep_state_change = checked.state_change;
        if self.tracking.snapshot_vars {
            self.tracking
                .client_transaction_info(&checked.transaction_info);
        }
        self.tracking.last = MariaGtid::parse(&checked.last_gtid).ok();
        self.tracking.check_each = checked.may_hide_next_commit(self.tracking.last);
        if let Some(error) = probed.error.or(self.tracking.enabled(enabled, read_back)) {
            warn!(%error, "could not set up GTID tracking on the primary connection: every response is checked with a query of its own");
        }
        let tracked = self.tracking.active;
        self.tracking.snapshot_settings(&checked, tracked);
        Ok(Phase::Idle)
    }

    async fn setup_mysql_tracking(&mut self) -> Result<Phase, Error> {
        self.send_query(MYSQL_PROBE);
        self.send_query(MYSQL_ENABLE);
        self.flush_primary().await?;
        let probed = self.swallow_response().await?;
        let enabled = self.swallow_response().await?;
        let error = probed.error.clone().or(enabled.error);
        let tracked = probed.first_value();
        self.tracking.filter.keep_gtids = !tracked.eq_ignore_ascii_case(b"OFF");
        // GTIDs of a MySQL primary are reported but not followed: nothing to check.
        self.tracking.active = true;
        if let Some(error) = error {
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
                Ok(gtid) => self.note_last_gtid(gtid, commits),
                Err(error) => {
                    warn!(%error, value = %String::from_utf8_lossy(value), "unreadable last_gtid: the response is checked");
                    commits.need_check(CheckReason::StateChange);
                }
            },
            TrackedGtid::OwnGtids(text) => {
                commits.reported(Gtid::MySql(String::from_utf8_lossy(text).into()));
            }
        }
    }

    fn note_last_gtid(&mut self, gtid: MariaGtid, commits: &mut ResponseCommits) {
        if self.tracking.last != Some(gtid) {
            self.tracking.last = Some(gtid);
            commits.reported(Gtid::Maria(gtid));
        }
    }

    /// Checks the session after a response that may have changed its tracking or committed
    /// unreported: learns what it committed last (a commit the response did not report is
    /// waited for like one it did), takes in the client's own tracker changes, and puts the
    /// proxy's tracking back if it is gone.
    pub(super) async fn check_tracking(
        &mut self,
        commits: &mut ResponseCommits,
    ) -> Result<(), Error> {
        let reason = commits.check.take().unwrap_or(CheckReason::Untracked);
        commits.holding = false;
        self.shared.metrics.tracking_checked(reason.label());
        if !self.mariadb {
            // MySQL has no @@last_gtid: whatever a legacy EOF hid stays unknown.
            if reason == CheckReason::LegacyEof {
                commits.give_up(Unresolved::NotFollowed);
            }
            return Ok(());
        }
        self.send_query(self.tracking.queries().0);
        self.flush_primary().await?;
        let answer = self.swallow_response().await?;
        if let Some(error) = answer.error {
            warn!(connection_id = self.connection_id, %error, "could not read what the session committed after a response that may have committed");
            self.tracking.active = false;
            return self
                .bound_or_give_up(commits, Unresolved::BoundUnreadable { error })
                .await;
        }
        let checked = Checked::from_row(&answer.row);
        match MariaGtid::parse(&checked.last_gtid) {
            Ok(gtid) => self.note_last_gtid(gtid, commits),
            Err(_) if checked.last_gtid.is_empty() => {}
            Err(error) => {
                let error = format!(
                    "@@last_gtid {:?}: {error}",
                    String::from_utf8_lossy(&checked.last_gtid)
                );
                self.bound_or_give_up(commits, Unresolved::BoundUnreadable { error })
                    .await?;
            }
        }
        self.tracking.take_in(&checked);
        self.take_quorum(&checked.quorum);
        if checked.intact(self.tracking.snapshot_vars) && self.primary_tracks {
            self.tracking.active = true;
            self.tracking.snapshot_settings(&checked, true);
            self.tracking.set_list = checked.list;
            return Ok(());
        }
        debug!(connection_id = self.connection_id, list = %String::from_utf8_lossy(&checked.list), state_change = checked.state_change, "session tracking was changed: putting it back");
        self.shared.metrics.tracking_restored.inc();
        self.restore_tracking().await?;
        let tracked = self.tracking.active;
        self.tracking.snapshot_settings(&checked, tracked);
        Ok(())
    }

    /// Takes in the quorum the session asks for. A value that is not a count is taken as no
    /// ask (the configured quorum); one outside the configured bounds is bounded when its
    /// commits wait. Both are counted, so that an operator sees sessions asking for what they
    /// do not get.
    fn take_quorum(&mut self, asked: &AskedQuorum) {
        let quorum = match asked {
            AskedQuorum::Unset => None,
            AskedQuorum::Count(n) => Some(*n),
            AskedQuorum::Invalid(value) => {
                debug!(connection_id = self.connection_id, %value, "@strongsync_quorum is not a count: the configured quorum applies");
                self.shared.metrics.session_quorum_refused("not_a_count");
                None
            }
        };
        if quorum != self.tracking.quorum {
            let applies = self.shared.durability.config().session_quorum(quorum);
            match applies {
                SessionQuorum::BelowFloor(_) => {
                    self.shared.metrics.session_quorum_refused("below_floor");
                }
                SessionQuorum::AboveMax(_) => {
                    self.shared.metrics.session_quorum_refused("above_max");
                }
                SessionQuorum::Taken(_) => {}
            }
            debug!(connection_id = self.connection_id, asked = ?quorum, applies = applies.get(), "session quorum");
            self.tracking.quorum = quorum;
        }
    }

    /// What is held must go before the session can say what it committed (or the session
    /// cannot say): bounds it by the primary's binlog position, read on strongsync's own
    /// connection, or — without one, or if it fails — releases it as unresolved for `reason`.
    pub(super) async fn bound_or_give_up(
        &mut self,
        commits: &mut ResponseCommits,
        reason: Unresolved,
    ) -> Result<(), Error> {
        if let Some(probe) = self.shared.probe.clone() {
            let bound = self.while_watching_client(probe.binlog_position()).await?;
            match bound {
                Ok(bound) => {
                    self.shared
                        .metrics
                        .probe_bounds
                        .with_label_values(&["ok"])
                        .inc();
                    debug!(connection_id = self.connection_id, %bound, %reason, "response bounded by the primary's binlog position");
                    commits.bounded(&bound);
                    return Ok(());
                }
                Err(error) => {
                    self.shared
                        .metrics
                        .probe_bounds
                        .with_label_values(&["failed"])
                        .inc();
                    warn!(connection_id = self.connection_id, %error, "the probe could not read the primary's binlog position");
                }
            }
        }
        commits.give_up(reason);
        Ok(())
    }

    /// Adds the proxy's tracking back to what the client's session has now.
    async fn restore_tracking(&mut self) -> Result<(), Error> {
        if !self.primary_tracks {
            return Ok(());
        }
        self.send_query(self.tracking.queries().1);
        self.send_query(MARIADB_READ_BACK);
        self.flush_primary().await?;
        let enabled = self.swallow_response().await?;
        let read_back = self.swallow_response().await?;
        if let Some(error) = self.tracking.enabled(enabled, read_back) {
            warn!(%error, "could not put GTID tracking back on the primary connection");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
