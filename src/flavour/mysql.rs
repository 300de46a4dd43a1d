//! MySQL, as far as strongsync goes with it so far: the primary reports each commit's own GTIDs
//! (`session_track_gtids = OWN_GTID`, unless the client tracks GTIDs itself), and they are
//! passed on to strong sync, which does not follow them yet (released as unresolved). What a
//! legacy EOF hides cannot be asked: MySQL has no `@@last_gtid`.

use strongsync_proto::command::COM_RESET_CONNECTION;
use strongsync_proto::gtid::{tracked_gtids, TrackedGtid};
use strongsync_proto::ok::{OkPacket, TrackingFilter};
use tracing::warn;

use super::{
    own_gtids, Answer, CheckReason, Checked, DumpSetup, OkNews, OwnQueries, TrackerContext,
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
    context: TrackerContext,
    filter: TrackingFilter,
    /// The proxy asked for the session's GTIDs (whether or not that worked).
    active: bool,
    /// `COM_RESET_CONNECTION` put every tracker back to the server's defaults.
    reset: bool,
}

// === impl Tracker ===

impl Tracker {
    pub(super) fn new(context: TrackerContext) -> Self {
        Tracker {
            filter: TrackingFilter {
                client_tracks: context.client_tracks,
                ..TrackingFilter::default()
            },
            context,
            active: false,
            reset: false,
        }
    }

    pub(super) async fn set_up(&mut self, primary: &mut impl OwnQueries) -> Result<(), Error> {
        self.reset = false;
        self.active = false;
        // Whatever the client asks for of its transactions is its own, and passes.
        self.filter.keep_transaction_state = true;
        self.filter.keep_transaction_characteristics = true;
        if !self.context.primary_tracks {
            warn!("primary does not offer session tracking: every response is checked with a query of its own");
            return Ok(());
        }
        let mut answers = primary.ask(&[PROBE, ENABLE]).await?.into_iter();
        let (probed, enabled) = (
            answers.next().unwrap_or_default(),
            answers.next().unwrap_or_default(),
        );
        let error = probed.error.clone().or(enabled.error);
        let tracked = probed.first_value();
        self.filter.keep_gtids = !tracked.eq_ignore_ascii_case(b"OFF");
        // Reported but not followed: nothing to check.
        self.active = true;
        if let Some(error) = error {
            warn!(%error, "could not enable GTID tracking on the primary connection");
        }
        Ok(())
    }

    pub(super) fn note_command(&mut self, payload: &[u8]) -> Option<CheckReason> {
        if payload.first() == Some(&COM_RESET_CONNECTION) {
            self.reset = true;
        }
        None
    }

    pub(super) fn take_reset(&mut self) -> bool {
        std::mem::take(&mut self.reset)
    }

    pub(super) fn checks_every_response(&self) -> Option<CheckReason> {
        (!self.active).then_some(CheckReason::Untracked)
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
        self.context.metrics.tracking_checked(reason.label());
        Ok(Checked {
            committed: None,
            unlearnt: (reason == CheckReason::LegacyEof)
                .then_some(Unlearnt::Unresolved(Unresolved::NotFollowed)),
        })
    }

    pub(super) fn filter(&self) -> TrackingFilter {
        self.filter
    }
}
