//! A session set up from the primary's defaults, on either flavour, which learns its commits and
//! its trackers' changes from its responses alone.

use strongsync_proto::command::{
    COM_FIELD_LIST, COM_INIT_DB, COM_PING, COM_QUERY, COM_RESET_CONNECTION, COM_SET_OPTION,
    COM_STATISTICS, COM_STMT_CLOSE, COM_STMT_PREPARE, COM_STMT_RESET,
};
use strongsync_proto::ok::OkPacket;
use strongsync_proto::ok::{SESSION_TRACK_STATE_CHANGE_VAR, SESSION_TRACK_SYSTEM_VARIABLES_VAR};
use tracing::{debug, warn};

use super::defaults::{lacks, on};
use super::{plain, variable_set, Answer, CheckReason, Checked, Common, Flavour, OwnQueries};
use super::{OkNews, Unlearnt};
use crate::asked::AskedQuorum;
use crate::commit::Unresolved;
use crate::error::Error;

/// The one statement a session set up from the defaults may get (right after a statement naming
/// `@strongsync_quorum`): what it asked for itself.
const QUORUM_QUERY: &str = "SELECT CAST(@strongsync_quorum AS BINARY)";

/// What a session set up from the primary's defaults knows beyond [`Common`]. A response that
/// may have changed its tracking unseen (stored code that changed its state) is bounded by the
/// primary's binlog position, and so is every response after it until the session is reset.
#[derive(Debug, Default)]
pub(super) struct FromDefaults {
    /// The count of good looks at the defaults when it was set up (see
    /// [`crate::tracking_defaults::SessionDefaults::suspect`]).
    looks: u64,
    /// Why its responses can no longer be taken to report its commits, if so.
    untrusted: Option<&'static str>,
    /// Why the response in progress must be bounded, if so.
    unreported: Option<&'static str>,
    /// The command in progress cannot change the session's tracking unseen.
    plain: bool,
    /// The command in progress runs no stored code, so it commits nothing unseen.
    no_code: bool,
}

impl Common {
    /// Sets the session up from the primary's defaults if they hold what is needed: no
    /// statement, and every tracker item the server sends is the client's own. False if they
    /// do not (or are not known): the flavour sets the session up with statements.
    pub(super) fn set_up_from_defaults(&mut self) -> bool {
        let looks = self.context.proxy.session_defaults().configured();
        // Under `visibility = "snapshot"` a transaction's snapshot is followed through the
        // session's isolation settings, which only the session itself can be asked.
        let snapshot = self.context.snapshot_vars && self.context.proxy.snapshot_reads();
        self.defaults = match looks {
            Some(looks) if self.context.primary_tracks && !snapshot => Some(FromDefaults {
                looks,
                ..FromDefaults::default()
            }),
            _ => None,
        };
        if self.defaults.is_none() {
            return false;
        }
        self.reset = false;
        self.active = true;
        self.quorum = None;
        self.filter.keep_transaction_state = true;
        self.filter.keep_transaction_characteristics = true;
        self.filter.keep_state_change = true;
        true
    }

    /// Notes whether the command about to go can change the session's tracking unseen.
    pub(super) fn note_plain(&mut self, payload: &[u8]) {
        let untrusted = self.untrusted();
        if let Some(defaults) = &mut self.defaults {
            // A session no longer trusted has every response bounded.
            defaults.unreported = untrusted;
            (defaults.plain, defaults.no_code) = match payload.split_first() {
                Some((&COM_QUERY, text)) => (
                    plain::is_plain(text, plain::IN_SESSION),
                    plain::is_plain(text, &[]),
                ),
                // None of these runs stored code or touches the trackers; a reset's OK
                // reports the state it put back, and the session is set up again after it.
                Some((
                    &(COM_INIT_DB | COM_PING | COM_STATISTICS | COM_STMT_PREPARE | COM_STMT_CLOSE
                    | COM_STMT_RESET | COM_RESET_CONNECTION | COM_SET_OPTION | COM_FIELD_LIST),
                    _,
                )) => (true, true),
                _ => (false, false),
            };
        }
    }

    /// Why every response of a session set up from the defaults must be bounded, if so.
    pub(super) fn untrusted(&self) -> Option<&'static str> {
        let defaults = self.defaults.as_ref()?;
        defaults.untrusted.or_else(|| {
            self.context
                .proxy
                .session_defaults()
                .suspect(defaults.looks)
                .then_some("the primary's session-tracking defaults changed after it logged in")
        })
    }

    /// From the next command on until a reset, the session's responses are bounded; this one
    /// too if its command may have run stored code (which may have committed unseen).
    pub(super) fn distrust(&mut self, why: &'static str) {
        if let Some(defaults) = &mut self.defaults {
            if !defaults.no_code {
                defaults.unreported.get_or_insert(why);
            }
            if defaults.untrusted.is_none() {
                debug!(
                    connection_id = self.context.connection_id,
                    why, "the session's responses are bounded from now on until it is reset"
                );
                self.context.metrics.sessions_untrusted.inc();
            }
            defaults.untrusted.get_or_insert(why);
        }
    }

    /// The response in progress is bounded, for `why`.
    pub(super) fn unreported(&mut self, why: &'static str) {
        if let Some(defaults) = &mut self.defaults {
            defaults.unreported.get_or_insert(why);
        }
    }

    /// Takes in the trackers' own changes an OK reports, as a session of `flavour` set up from
    /// the defaults: sets the client's view, distrusts a session whose tracking now lacks
    /// what is needed or whose statement may have changed it unseen, and asks for the check
    /// (a bound) if the response must be bounded.
    pub(super) fn take_in_ok(&mut self, flavour: Flavour, ok: &OkPacket<'_>, news: &mut OkNews) {
        let Some(plain) = self.defaults.as_ref().map(|d| d.plain) else {
            return;
        };
        let list = variable_set(ok, SESSION_TRACK_SYSTEM_VARIABLES_VAR);
        if let Some(list) = list {
            if lacks(flavour, list).is_some() {
                self.distrust(
                    "the session's session_track_system_variables lacks what strongsync needs",
                );
            }
        }
        if let Some(value) = variable_set(ok, SESSION_TRACK_STATE_CHANGE_VAR) {
            self.filter.keep_state_change = on(value);
            if !on(value) {
                self.distrust("the session switched session_track_state_change off");
            }
        }
        if !plain && list.is_none() && !ok.reports_only_routine_state() {
            self.distrust("a statement that may run stored code or switch tracking changed the session's state");
        }
        if self
            .defaults
            .as_ref()
            .is_some_and(|d| d.unreported.is_some())
        {
            news.check.get_or_insert(CheckReason::StateChange);
        }
    }

    /// The check of a session set up from the defaults: no statement but the read of the
    /// quorum it asked for; what it cannot learn from its responses is bounded.
    pub(super) async fn check_from_defaults(
        &mut self,
        reason: CheckReason,
        primary: &mut impl OwnQueries,
    ) -> Result<Checked, Error> {
        self.context.metrics.tracking_checked(reason.label());
        if reason == CheckReason::SessionQuorum {
            let [answer] =
                Answer::each(self.ask(primary, "session_quorum", &[QUORUM_QUERY]).await?);
            match answer.error {
                Some(error) => {
                    warn!(connection_id = self.context.connection_id, %error, "could not read the session's @strongsync_quorum")
                }
                None => self.take_quorum(&AskedQuorum::of(answer.row.first().cloned().flatten())),
            }
        }
        if reason == CheckReason::LegacyEof && !self.defaults.as_ref().is_some_and(|d| d.plain) {
            self.distrust("a legacy EOF flagged a change of state without saying what");
        }
        if reason == CheckReason::DomainSwitch {
            self.unreported("the session may commit unreported (it switched domain or server id, or forced a sequence number)");
        }
        let why = self.defaults.as_mut().and_then(|d| d.unreported.take());
        Ok(Checked {
            committed: None,
            unlearnt: why.map(|why| Unlearnt::Bound(Unresolved::Unreported { why })),
        })
    }
}
