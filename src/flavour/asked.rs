//! What a session asks of strong sync itself, whatever the primary's flavour: its own quorum,
//! `@strongsync_quorum`, read with the check that follows any change of the session's state
//! (or any statement that names it).

use tracing::debug;

use super::Common;
use crate::durability::SessionQuorum;
use crate::metrics::Metrics;

/// The user variable a session sets to ask for its own quorum.
const SESSION_QUORUM_VAR: &[u8] = b"strongsync_quorum";

/// What a session's `@strongsync_quorum` says.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) enum AskedQuorum {
    /// NULL: never set (or set back to NULL).
    #[default]
    Unset,
    /// A count.
    Count(usize),
    /// Something else, as text.
    Invalid(String),
}

impl AskedQuorum {
    /// What the variable's value (`None` for NULL) asks.
    pub(super) fn of(value: Option<Vec<u8>>) -> Self {
        match value {
            None => AskedQuorum::Unset,
            Some(value) => std::str::from_utf8(&value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .map_or_else(
                    || AskedQuorum::Invalid(String::from_utf8_lossy(&value).into_owned()),
                    AskedQuorum::Count,
                ),
        }
    }
}

impl Common {
    /// Takes in the quorum the session asks for. A value that is not a count is taken as no
    /// ask (the configured quorum); one outside the configured bounds is bounded when its
    /// commits wait. Both are counted, so that an operator sees sessions asking for what they
    /// do not get.
    pub(super) fn take_quorum(&mut self, asked: &AskedQuorum) {
        let connection_id = self.context.connection_id;
        let metrics: &Metrics = &self.context.metrics;
        let quorum = match asked {
            AskedQuorum::Unset => None,
            AskedQuorum::Count(n) => Some(*n),
            AskedQuorum::Invalid(value) => {
                debug!(connection_id, %value, "@strongsync_quorum is not a count: the configured quorum applies");
                metrics.session_quorum_refused("not_a_count");
                None
            }
        };
        if quorum != self.quorum {
            let applies = self.context.durability.config().session_quorum(quorum);
            match applies {
                SessionQuorum::BelowFloor(_) => metrics.session_quorum_refused("below_floor"),
                SessionQuorum::AboveMax(_) => metrics.session_quorum_refused("above_max"),
                SessionQuorum::Taken(_) => {}
            }
            debug!(connection_id, asked = ?quorum, applies = applies.get(), "session quorum");
            self.quorum = quorum;
        }
    }
}

/// Whether SQL text names the session quorum variable (in any case, as MariaDB's variable
/// names go): a scan for its `_`, then a comparison around each.
pub(super) fn names_session_quorum(text: &[u8]) -> bool {
    const UNDERSCORE_AT: usize = 10;
    debug_assert_eq!(SESSION_QUORUM_VAR[UNDERSCORE_AT], b'_');
    memchr::memchr_iter(b'_', text).any(|at| {
        at.checked_sub(UNDERSCORE_AT)
            .and_then(|start| text.get(start..start + SESSION_QUORUM_VAR.len()))
            .is_some_and(|word| word.eq_ignore_ascii_case(SESSION_QUORUM_VAR))
    })
}
