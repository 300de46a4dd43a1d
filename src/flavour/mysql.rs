//! MySQL, as far as strongsync goes with it so far: the primary reports each commit's own GTIDs
//! (`session_track_gtids = OWN_GTID`, unless the client tracks GTIDs itself), and they are
//! passed on to strong sync, which does not follow them yet (released as unresolved). What a
//! legacy EOF hides cannot be asked: MySQL has no `@@last_gtid`.

use strongsync_proto::gtid::{tracked_gtids, TrackedGtid};
use strongsync_proto::ok::OkPacket;
use tracing::warn;

use super::{
    own_gtids, Answer, CheckReason, Checked, Common, DumpSetup, OkNews, OwnQueries, TrackerContext,
    Unlearnt,
};
use crate::commit::Unresolved;
use crate::error::{Error, ReplicaSetupError};

/// The client's own `session_track_gtids`.
const PROBE: &str = "SELECT @@session.session_track_gtids";
/// Report the session's own GTIDs unless the client already tracks GTIDs.
const ENABLE: &str = "SET SESSION session_track_gtids = \
     IF(@@session.session_track_gtids = 'OFF', 'OWN_GTID', @@session.session_track_gtids)";

/// The same query as MariaDB's: MySQL has no `gtid_binlog_pos`, so a bound fails and what it
/// would have bounded goes as unresolved, like every commit of a MySQL primary.
pub(super) const BOUND_QUERY: &str = super::mariadb::BOUND_QUERY;

/// What a MySQL replica's dump starts from. Its `COM_BINLOG_DUMP_GTID` carries the GTID set it
/// has, which strongsync does not read yet: the replica is credited only with what it
/// acknowledges. Whether the primary would add a semisync header of its own is read as on
/// MariaDB.
pub(super) fn dump_setup(_dump: &[u8], answer: &Answer) -> Result<DumpSetup, ReplicaSetupError> {
    super::mariadb::dump_setup(answer)
}

/// A MySQL session's tracking.
#[derive(Debug)]
pub struct Tracker {
    /// `active`: the proxy asked for the session's GTIDs (whether or not that worked).
    pub(super) common: Common,
}

// === impl Tracker ===

impl Tracker {
    pub(super) fn new(context: TrackerContext) -> Self {
        Tracker {
            common: Common::new(context),
        }
    }

    pub(super) async fn set_up(&mut self, primary: &mut impl OwnQueries) -> Result<(), Error> {
        if !self.common.begin_set_up() {
            return Ok(());
        }
        let [probed, enabled] = Answer::each(primary.ask(&[PROBE, ENABLE]).await?);
        let error = probed.error.clone().or(enabled.error);
        let tracked = probed.first_value();
        self.common.filter.keep_gtids = !tracked.eq_ignore_ascii_case(b"OFF");
        // Reported but not followed: nothing to check.
        self.common.active = true;
        if let Some(error) = error {
            warn!(%error, "could not enable GTID tracking on the primary connection");
        }
        Ok(())
    }

    pub(super) fn note_command(&mut self, payload: &[u8]) -> Option<CheckReason> {
        self.common.note_reset(payload);
        None
    }

    pub(super) fn checks_every_response(&self) -> Option<CheckReason> {
        (!self.common.active).then_some(CheckReason::Untracked)
    }

    pub(super) fn on_ok(&mut self, ok: &OkPacket<'_>) -> OkNews {
        use strongsync_proto::capabilities::StatusFlags;
        let mut news = OkNews::default();
        if ok
            .status
            .contains(StatusFlags::SERVER_SESSION_STATE_CHANGED)
        {
            for tracked in tracked_gtids(ok) {
                if let TrackedGtid::OwnGtids(text) = tracked {
                    news.committed.extend(own_gtids(text));
                }
            }
        }
        news
    }

    /// Nothing can be asked: whatever a legacy EOF hid stays unknown.
    pub(super) fn check(&mut self, reason: CheckReason) -> Result<Checked, Error> {
        self.common.context.metrics.tracking_checked(reason.label());
        Ok(Checked {
            committed: None,
            unlearnt: (reason == CheckReason::LegacyEof)
                .then_some(Unlearnt::Unresolved(Unresolved::NotFollowed)),
        })
    }
}
