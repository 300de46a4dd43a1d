//! MariaDB: GTID tracking on the primary leg, kept on whatever the client does.

use strongsync_proto::command::{COM_QUERY, COM_STMT_PREPARE};
use strongsync_proto::gtid::{tracked_gtids, Gtid, GtidPosition, TrackedGtid};
use strongsync_proto::ok::{
    OkPacket, LAST_GTID, SESSION_TRACK_STATE_CHANGE_VAR, SESSION_TRACK_SYSTEM_VARIABLES_VAR,
    SESSION_TRACK_TRANSACTION_INFO_VAR,
};
use tracing::{debug, warn};

mod check;

use super::{tracks, variable_set};
use super::{
    Answer, CheckReason, Checked, Common, DumpSetup, OkNews, OwnQueries, TrackerContext, Unlearnt,
};
use crate::commit::{Unresolved, Unsaid};
use crate::error::{Error, ReplicaSetupError};
use check::{
    may_hide, Check, CHARACTERISTICS, CHECK, CHECK_SNAPSHOT, DEFAULTS, ENABLE, ENABLE_SNAPSHOT,
    READ_BACK,
};

/// The variables whose reported changes say whether a session's next commit may go
/// unreported (see [`Check::may_hide_next_commit`]).
const GTID_DOMAIN_ID: &[u8] = b"gtid_domain_id";
const SERVER_ID: &[u8] = b"server_id";
const GTID_SEQ_NO: &[u8] = b"gtid_seq_no";

/// MariaDB's error for a system variable it does not know.
const ER_UNKNOWN_SYSTEM_VARIABLE: u16 = 1193;

/// How far the primary's binlog reaches: MariaDB writes a transaction to its binlog before the
/// statement's response leaves, so this position, read after a response arrived, bounds
/// everything the response may have committed or revealed.
pub(super) const BOUND_QUERIES: &[&str] = &["SELECT @@global.gtid_binlog_pos"];

/// What the primary will start a dump from and whether it would add a semisync header of its
/// own, read on the replica's connection just before its dump: the replica may have set them
/// any way SQL allows, not only with the statements the proxy recognises.
pub(super) const DUMP_QUERY: &str =
    "SELECT @slave_connect_state, @rpl_semi_sync_slave, @rpl_semi_sync_replica";

/// A MariaDB session's tracking.
///
/// The proxy makes the primary report the session's `last_gtid` and a state-change item whenever
/// the session's state changes (`session_track_state_change`, with that variable itself tracked):
/// any statement that touches the trackers — directly, in a procedure, a function, a trigger, a
/// prepared statement — sets `SERVER_SESSION_STATE_CHANGED` on its response with something other
/// than a bare `last_gtid` report. After such a response (and after a legacy EOF that flagged a
/// change, or a state block that does not parse) the relay holds the response, and the tracker
/// reads back what the session committed last and how its trackers stand, puts its own tracking
/// back if the client took it away, and only then lets the response go, waiting for anything
/// committed that it had not been told of. The client keeps seeing exactly the tracker data it
/// asked for.
///
/// When the primary's defaults already track all that (see [`super::learnt`]), a session gets none
/// of this: its commits, and its changes of domain, server id and sequence number, come from its
/// responses.
#[derive(Debug)]
pub struct Tracker {
    /// `active`: the primary is known to report this session's commits and state changes.
    pub(super) common: Common,
    /// The GTID the session committed last, as far as the proxy knows: a report of the same
    /// value is a late repeat, not a new commit.
    last: Option<Gtid>,
    /// The tracked-variables list as the server stored it after the proxy's change; another
    /// value later means the client set a list of its own.
    set_list: Vec<u8>,
    /// Check after every response: the session's next commit may go unreported (see
    /// [`Check::may_hide_next_commit`]).
    check_each: bool,
    /// The session's transaction state is tracked and its snapshot settings read (asked for,
    /// and the server knows `innodb_snapshot_isolation`).
    snapshot_vars: bool,
    /// The session's next transaction started with a consistent snapshot reads only that
    /// snapshot: `REPEATABLE READ`, `innodb_snapshot_isolation = ON`, its state tracked.
    snapshot_ready: bool,
    /// Set up from the defaults: the session's `gtid_domain_id`, `server_id` and
    /// `gtid_seq_no` as its responses reported them (`None`: not changed since it began).
    domain: Option<u32>,
    server_id: Option<u32>,
    seq_no: u64,
}

/// What the answer to [`DUMP_QUERY`] says the dump will start from.
pub(super) fn dump_setup(answer: &Answer) -> Result<DumpSetup, ReplicaSetupError> {
    if let Some(error) = &answer.error {
        return Err(ReplicaSetupError::Probe {
            code: answer.code,
            error: error.clone(),
        });
    }
    if answer.value(1).or(answer.value(2)).is_some() {
        // The primary would add a semisync header of its own that the proxy does not expect.
        return Err(ReplicaSetupError::SemisyncOnPrimary);
    }
    let text = answer.value(0).unwrap_or_default();
    let connect_state = GtidPosition::parse(text).unwrap_or_else(|error| {
        debug!(%error, state = %String::from_utf8_lossy(text), "connect state not read: the replica is credited only with what it ACKs");
        GtidPosition::default()
    });
    Ok(DumpSetup { connect_state })
}

// === impl Tracker ===

impl Tracker {
    pub(super) fn new(context: TrackerContext) -> Self {
        Tracker {
            common: Common::new(context),
            last: None,
            set_list: Vec::new(),
            check_each: false,
            snapshot_vars: false,
            snapshot_ready: false,
            domain: None,
            server_id: None,
            seq_no: 0,
        }
    }

    /// Makes the primary report this session's commits and state changes. Three pipelined
    /// queries, one round trip: read how the client's session tracks (so the proxy knows what
    /// to strip) and what it committed last, add the proxy's tracking, read the result.
    pub(super) async fn set_up(&mut self, primary: &mut impl OwnQueries) -> Result<(), Error> {
        (self.last, self.domain, self.server_id, self.seq_no) = (None, None, None, 0);
        if self.common.set_up_from_defaults() {
            self.client_list(b"*");
            self.check_each = false;
            self.snapshot_vars = false;
            self.snapshot_ready = false;
            return Ok(());
        }
        if !self.common.begin_set_up() {
            return Ok(());
        }
        // Not for a client with legacy EOF packets: its result sets cannot carry the state,
        // and inside a transaction MariaDB then flags every one of them as a state change,
        // each of which would cost a check.
        self.snapshot_vars = self.common.context.snapshot_vars;
        let (check, enable) = self.queries();
        let answers = self
            .common
            .ask(primary, "setup", &[check, enable, READ_BACK])
            .await?;
        let [mut probed, mut enabled, mut read_back] = Answer::each(answers);
        if self.snapshot_vars && probed.code == Some(ER_UNKNOWN_SYSTEM_VARIABLE) {
            // A server before innodb_snapshot_isolation: every response is bounded one by one.
            // The setup runs before the client's first command (after a login, a reset or a
            // change of user), so its trackers were the server's defaults: put them back and
            // set up again without the transaction tracking.
            self.snapshot_vars = false;
            let answers = self
                .common
                .ask(primary, "setup", &[DEFAULTS, CHECK, ENABLE, READ_BACK])
                .await?;
            let defaults: Answer;
            [defaults, probed, enabled, read_back] = Answer::each(answers);
            if let Some(error) = defaults.error {
                probed.error.get_or_insert(error);
            }
        }
        let checked = Check::from_row(&probed.row);
        self.common.take_quorum(&checked.quorum);
        self.client_list(&checked.list);
        self.common.filter.keep_state_change = checked.state_change;
        if self.snapshot_vars {
            self.client_transaction_info(&checked.transaction_info);
        }
        self.last = Gtid::parse(&checked.last_gtid).ok();
        self.check_each = checked.may_hide_next_commit(self.last);
        if let Some(error) = probed.error.or(self.enabled(enabled, read_back)) {
            warn!(%error, "could not set up GTID tracking on the primary connection: every response is checked with a query of its own");
        }
        self.snapshot_settings(&checked, self.common.active);
        Ok(())
    }

    /// Notes a command that resets the session's trackers behind the proxy's back, or that
    /// names `@strongsync_quorum` (its response is checked, since MariaDB reports no state
    /// change for an assignment inside a `SELECT`).
    pub(super) fn note_command(&mut self, payload: &[u8]) -> Option<CheckReason> {
        self.common.note_reset(payload);
        self.common.note_plain(payload);
        match payload.split_first() {
            Some((&(COM_QUERY | COM_STMT_PREPARE), text)) => {
                crate::asked::names_session_quorum(text).then_some(CheckReason::SessionQuorum)
            }
            _ => None,
        }
    }

    pub(super) fn checks_every_response(&self) -> Option<CheckReason> {
        if self.common.untrusted().is_some() || !self.common.active {
            Some(CheckReason::Untracked)
        } else if self.check_each {
            Some(CheckReason::DomainSwitch)
        } else {
            None
        }
    }

    /// Takes in an OK: the commits it reports (MariaDB reports `last_gtid` again when a later
    /// statement flushes a pending change, so only a value different from the last one known
    /// is a new commit), and anything else it says changed — including the client switching
    /// state-change or transaction items on or off itself, which it sees as it asked from this
    /// packet on.
    pub(super) fn on_ok(&mut self, ok: &OkPacket<'_>) -> OkNews {
        use strongsync_proto::capabilities::StatusFlags;
        let mut news = OkNews::default();
        if !ok
            .status
            .contains(StatusFlags::SERVER_SESSION_STATE_CHANGED)
        {
            return news;
        }
        for tracked in tracked_gtids(ok) {
            match tracked {
                TrackedGtid::LastGtid([]) => {}
                TrackedGtid::LastGtid(value) => match Gtid::parse(value) {
                    Ok(gtid) => news.committed.extend(self.learnt(gtid)),
                    Err(error) => {
                        warn!(%error, value = %String::from_utf8_lossy(value), "unreadable last_gtid: the response is checked");
                        self.common.unreported("its last_gtid report did not read");
                        news.check.get_or_insert(CheckReason::StateChange);
                    }
                },
                // MariaDB has no session_track_gtids.
                TrackedGtid::OwnGtids(_) => {}
            }
        }
        if self.common.defaults.is_some() {
            self.take_in_identity(ok);
            self.common
                .take_in_ok(super::Flavour::MariaDb, ok, &mut news);
            return news;
        }
        if !ok.reports_only_routine_state() {
            news.check.get_or_insert(CheckReason::StateChange);
            if let Some(on) = state_change_set(ok) {
                self.common.filter.keep_state_change = on;
            }
            let switched =
                variable_set(ok, SESSION_TRACK_TRANSACTION_INFO_VAR).filter(|_| self.snapshot_vars);
            if let Some(value) = switched {
                // Set back to the proxy's value by the check after this response.
                self.client_transaction_info(value);
            }
        }
        news
    }

    /// Checks the session: learns what it committed last (a commit the response did not
    /// report is waited for like one it did), takes in the client's own tracker changes and
    /// quorum, and puts the proxy's tracking back if it is gone.
    pub(super) async fn check(
        &mut self,
        reason: CheckReason,
        primary: &mut impl OwnQueries,
    ) -> Result<Checked, Error> {
        if self.common.defaults.is_some() {
            return self.common.check_from_defaults(reason, primary).await;
        }
        let connection_id = self.common.context.connection_id;
        self.common.context.metrics.tracking_checked(reason.label());
        let [answer] = Answer::each(
            self.common
                .ask(primary, reason.statement_label(), &[self.queries().0])
                .await?,
        );
        let mut checked = Checked::default();
        if let Some(error) = answer.error {
            warn!(connection_id, %error, "could not read what the session committed after a response that may have committed");
            self.common.active = false;
            checked.unlearnt = Some(Unlearnt::Bound(Unresolved::BoundUnreadable(
                Unsaid::Refused { err: error },
            )));
            return Ok(checked);
        }
        let check = Check::from_row(&answer.row);
        match Gtid::parse(&check.last_gtid) {
            Ok(gtid) => checked.committed = self.learnt(gtid),
            Err(_) if check.last_gtid.is_empty() => {}
            Err(source) => {
                let value = String::from_utf8_lossy(&check.last_gtid).into_owned();
                checked.unlearnt = Some(Unlearnt::Bound(Unresolved::BoundUnreadable(
                    Unsaid::NotAGtid { value, source },
                )));
            }
        }
        self.take_in(&check);
        self.common.take_quorum(&check.quorum);
        if check.intact(self.snapshot_vars) && self.common.context.primary_tracks {
            self.common.active = true;
            self.snapshot_settings(&check, true);
            self.set_list = check.list;
            return Ok(checked);
        }
        debug!(connection_id, list = %String::from_utf8_lossy(&check.list), state_change = check.state_change, "session tracking was changed: putting it back");
        self.common.context.metrics.tracking_restored.inc();
        self.restore(primary).await?;
        self.snapshot_settings(&check, self.common.active);
        Ok(checked)
    }

    pub(super) fn snapshot_ready(&self) -> bool {
        self.common.active && self.snapshot_ready
    }
}

impl Tracker {
    /// A `last_gtid` reported or read: a commit if it is not the last one known.
    fn learnt(&mut self, gtid: Gtid) -> Option<Gtid> {
        let new = (self.last != Some(gtid)).then(|| {
            self.last = Some(gtid);
            gtid
        });
        if self.common.defaults.is_some() {
            self.check_each = may_hide(self.domain, self.server_id, self.seq_no, self.last);
        }
        new
    }

    /// Set up from the defaults: takes in the session's changes of domain, server id and
    /// forced sequence number its OK reports, and whether its next commit may go unreported.
    fn take_in_identity(&mut self, ok: &OkPacket<'_>) {
        let mut unreadable = false;
        if let Some(domain) = number_set(ok, GTID_DOMAIN_ID) {
            unreadable |= domain.is_none();
            self.domain = domain;
        }
        if let Some(server_id) = number_set(ok, SERVER_ID) {
            unreadable |= server_id.is_none();
            self.server_id = server_id;
        }
        if let Some(seq_no) = number_set(ok, GTID_SEQ_NO) {
            unreadable |= seq_no.is_none();
            self.seq_no = seq_no.unwrap_or(u64::MAX);
        }
        if unreadable {
            self.common
                .distrust("the session's gtid_domain_id, server_id or gtid_seq_no did not read");
        }
        self.check_each = may_hide(self.domain, self.server_id, self.seq_no, self.last);
    }

    /// Adds the proxy's tracking back to what the client's session has now.
    async fn restore(&mut self, primary: &mut impl OwnQueries) -> Result<(), Error> {
        if !self.common.context.primary_tracks {
            return Ok(());
        }
        let [enabled, read_back] = Answer::each(
            self.common
                .ask(primary, "restore", &[self.queries().1, READ_BACK])
                .await?,
        );
        if let Some(error) = self.enabled(enabled, read_back) {
            warn!(%error, "could not put GTID tracking back on the primary connection");
        }
        Ok(())
    }

    /// Takes in the answers to [`ENABLE`] and [`READ_BACK`]: tracking is on if both worked.
    /// Returns the error otherwise.
    fn enabled(&mut self, enabled: Answer, read_back: Answer) -> Option<String> {
        let error = enabled.error.or(read_back.error.clone());
        self.common.active = error.is_none();
        if self.common.active {
            self.set_list = read_back.first_value();
        }
        error
    }

    /// Takes in the session's isolation settings; `tracked`: its transaction state is
    /// reported (the proxy's tracking is on).
    fn snapshot_settings(&mut self, checked: &Check, tracked: bool) {
        self.snapshot_ready = self.snapshot_vars
            && tracked
            && checked.isolation.eq_ignore_ascii_case(b"REPEATABLE-READ")
            && checked.snapshot_isolation;
    }

    /// The check and the enabling statement this session uses.
    fn queries(&self) -> (&'static str, &'static str) {
        if self.snapshot_vars {
            (CHECK_SNAPSHOT, ENABLE_SNAPSHOT)
        } else {
            (CHECK, ENABLE)
        }
    }

    /// Takes in what a check read: the client's own view of its trackers where it changed
    /// them (a client that switched state-change items on was already seen doing so, in its
    /// OK), and whether the next commit may go unreported.
    fn take_in(&mut self, checked: &Check) {
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
            self.common.filter.keep_state_change = false;
        }
        self.check_each = checked.may_hide_next_commit(self.last);
    }

    /// The client's own `session_track_system_variables` is `list`: it sees the variables in
    /// it.
    fn client_list(&mut self, list: &[u8]) {
        self.common.filter.keep_last_gtid = tracks(list, LAST_GTID);
        self.common.filter.keep_state_change_var = tracks(list, SESSION_TRACK_STATE_CHANGE_VAR);
        self.common.filter.keep_transaction_info_var =
            tracks(list, SESSION_TRACK_TRANSACTION_INFO_VAR);
        self.common.filter.keep_list_var = tracks(list, SESSION_TRACK_SYSTEM_VARIABLES_VAR);
    }

    /// The client's own `session_track_transaction_info` is `value`: it sees the items that
    /// value asks for.
    fn client_transaction_info(&mut self, value: &[u8]) {
        let characteristics = value.eq_ignore_ascii_case(CHARACTERISTICS);
        self.common.filter.keep_transaction_characteristics = characteristics;
        self.common.filter.keep_transaction_state =
            characteristics || value.eq_ignore_ascii_case(b"STATE");
    }
}

/// What an OK says the session's numeric variable `name` was set to, if it says (`Some(None)`:
/// it says something that is not a number).
fn number_set<T: std::str::FromStr>(ok: &OkPacket<'_>, name: &[u8]) -> Option<Option<T>> {
    variable_set(ok, name).map(|v| std::str::from_utf8(v).ok().and_then(|v| v.parse().ok()))
}

/// What an OK says the session's `session_track_state_change` was set to, if it says.
fn state_change_set(ok: &OkPacket<'_>) -> Option<bool> {
    variable_set(ok, SESSION_TRACK_STATE_CHANGE_VAR)
        .map(|value| value.eq_ignore_ascii_case(b"ON") || value == b"1")
}

#[cfg(test)]
mod tests;
