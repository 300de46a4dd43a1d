//! What a check of a MariaDB session asks and reads: the queries that set up, read back and
//! put back its tracking, and their answers taken apart.

use strongsync_proto::gtid::{Domain, Gtid};

use super::super::tracks;
use crate::asked::AskedQuorum;
use strongsync_proto::ok::{
    LAST_GTID, SESSION_TRACK_STATE_CHANGE_VAR, SESSION_TRACK_TRANSACTION_INFO_VAR,
};

/// What the session committed last and how its tracking stands. Its columns are [`Check`]'s
/// fields, in order, each as binary: the answer comes back in the client's own
/// `character_set_results` (`filename` spells `-` as `@002d`, `utf16` gives every digit two
/// bytes, numbers included), and a binary string is sent as it is.
macro_rules! check {
    () => {
        "SELECT CAST(@@last_gtid AS BINARY), \
         CAST(@@session.session_track_system_variables AS BINARY), \
         CAST(@@session.session_track_state_change AS BINARY), \
         CAST(@@session.gtid_domain_id AS BINARY), CAST(@@session.server_id AS BINARY), \
         CAST(@@session.gtid_seq_no AS BINARY), CAST(@strongsync_quorum AS BINARY)"
    };
}
pub(super) const CHECK: &str = check!();
/// The same, and what decides whether the session's next transaction reads only its snapshot
/// (see [`crate::config::Visibility::Snapshot`]); on servers with
/// `innodb_snapshot_isolation` (10.6.18, 10.11.8).
pub(super) const CHECK_SNAPSHOT: &str = concat!(
    check!(),
    ", CAST(@@session.session_track_transaction_info AS BINARY), \
     CAST(@@session.tx_isolation AS BINARY), CAST(@@session.innodb_snapshot_isolation AS BINARY)"
);
/// Add `last_gtid`, `session_track_state_change` and any other variables named to the tracked
/// variables (unless the list has them, or is `*`), report state changes, and make any further
/// assignment. The list is read before any assignment takes effect.
macro_rules! enable {
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
pub(super) const ENABLE: &str = enable!("last_gtid", "session_track_state_change"; "");
/// The same, and report what each transaction does, and when the client switches that itself.
pub(super) const ENABLE_SNAPSHOT: &str = enable!(
    "last_gtid", "session_track_state_change", "session_track_transaction_info";
    ", session_track_transaction_info = CHARACTERISTICS"
);
/// The trackers as the server's defaults set them for a new session.
pub(super) const DEFAULTS: &str = "SET SESSION session_track_system_variables = DEFAULT, \
     session_track_state_change = DEFAULT, session_track_transaction_info = DEFAULT";
/// The tracked variables as the server stored them after the proxy's change.
pub(super) const READ_BACK: &str =
    "SELECT CAST(@@session.session_track_system_variables AS BINARY)";
/// The value of `session_track_transaction_info` the proxy sets.
pub(super) const CHARACTERISTICS: &[u8] = b"CHARACTERISTICS";

/// The session's tracking as [`CHECK`] read it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Check {
    pub(super) last_gtid: Vec<u8>,
    pub(super) list: Vec<u8>,
    pub(super) state_change: bool,
    pub(super) domain: Option<u32>,
    pub(super) server_id: Option<u32>,
    pub(super) seq_no: u64,
    /// The session's `@strongsync_quorum`.
    pub(super) quorum: AskedQuorum,
    /// The rest only from [`CHECK_SNAPSHOT`].
    pub(super) transaction_info: Vec<u8>,
    pub(super) isolation: Vec<u8>,
    pub(super) snapshot_isolation: bool,
}

// === impl Check ===

impl Check {
    pub(super) fn from_row(row: &[Option<Vec<u8>>]) -> Self {
        let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let number = |i: usize| std::str::from_utf8(&text(i)).ok()?.parse().ok();
        Check {
            last_gtid: text(0),
            list: text(1),
            // A boolean read as binary is `ON` on MariaDB, `1` on MySQL.
            state_change: super::super::defaults::on(&text(2)),
            domain: number(3),
            server_id: number(4),
            seq_no: number(5).map_or(0, u64::from),
            quorum: AskedQuorum::of(row.get(6).cloned().flatten()),
            transaction_info: text(7),
            isolation: text(8),
            snapshot_isolation: super::super::defaults::on(&text(9)),
        }
    }

    /// Whether the proxy's tracking is in place; `transactions`: transaction tracking is part
    /// of it.
    pub(super) fn intact(&self, transactions: bool) -> bool {
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
    pub(super) fn may_hide_next_commit(&self, last: Option<Gtid>) -> bool {
        may_hide(self.domain, self.server_id, self.seq_no, last)
    }
}

/// Whether a session with this `gtid_domain_id`, `server_id` and `gtid_seq_no` may commit
/// unreported after `last` (see [`Check::may_hide_next_commit`]).
pub(super) fn may_hide(
    domain: Option<u32>,
    server_id: Option<u32>,
    seq_no: u64,
    last: Option<Gtid>,
) -> bool {
    seq_no != 0
        || last.is_some_and(|last| {
            domain.is_some_and(|d| Domain::Maria(d) != last.domain)
                || server_id.is_some_and(|s| s != last.server_id)
        })
}
