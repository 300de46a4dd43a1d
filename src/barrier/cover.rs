//! One bound per snapshot (`visibility = "quorum"`).

use std::collections::HashSet;
use std::sync::Arc;

use strongsync_proto::command::{
    COM_CHANGE_USER, COM_QUERY, COM_RESET_CONNECTION, COM_STMT_CLOSE, COM_STMT_EXECUTE,
    COM_STMT_PREPARE,
};
use strongsync_proto::gtid::GtidPosition;
use strongsync_proto::stmt::statement_id;

use super::snapshot::{self, Start};
use crate::durability::{Door, QuorumRule};

/// Prepared statements remembered as single `SELECT`s per session; past this, a new one is
/// bounded like any other statement.
const MAX_PREPARED_READS: usize = 1024;

/// Per-session state of the snapshot cover.
///
/// A session running `REPEATABLE READ` with `innodb_snapshot_isolation = ON` has its plain `BEGIN`
/// sent as `START TRANSACTION WITH CONSISTENT SNAPSHOT`, whose OK the read barrier bounds as usual.
/// From then on, while the transaction's tracked state says it has only read transactional tables
/// (no write, no non-transactional read, no unsafe function, no table lock) and the quorum holds
/// that bound, the answers to single `SELECT`s go without a bound of their own: everything they can
/// show is in the snapshot, and a locking read that meets a newer row fails instead of showing it.
/// Anything else — an error, another state, a check, a statement of another kind — is bounded as
/// before, and most of them end the snapshot's cover (see [`strongsync_proto::snapshot`]).
#[derive(Debug, Default)]
pub(crate) struct SnapshotCover {
    /// The transaction in progress started with a consistent snapshot taken before the
    /// primary's binlog was at this position (its `BEGIN` was bounded by it).
    bound: Option<Arc<GtidPosition>>,
    /// The quorum rule under which `bound` was seen held (`None`: not yet).
    held_under: Option<QuorumRule>,
    /// The command in flight starts such a transaction.
    starting: bool,
    /// The command in flight is a single `SELECT`.
    reading: bool,
    /// The command in flight prepares a single `SELECT`.
    preparing_read: bool,
    /// Prepared statements (by id) that are single `SELECT`s.
    prepared_reads: HashSet<u32>,
}

/// What the session sends in place of a command.
pub(crate) enum Replacement {
    /// The command as the client sent it.
    None,
    /// A plain `BEGIN`, sent as [`snapshot::START_WITH_SNAPSHOT`].
    StartWithSnapshot,
}

// === impl SnapshotCover ===

impl SnapshotCover {
    /// The bound of the snapshot the response to the command in flight reads from, if it
    /// reads only from it.
    pub(crate) fn for_response(&self) -> Option<Arc<GtidPosition>> {
        self.bound.clone().filter(|_| self.reading)
    }

    /// Remembers the statement a `PREPARE_OK` announced (as the client knows it) if the
    /// command in flight prepared a single `SELECT`.
    pub(crate) fn prepared(&mut self, id: u32) {
        if self.preparing_read && self.prepared_reads.len() < MAX_PREPARED_READS {
            self.prepared_reads.insert(id);
        } else {
            // A reused id that now names something else.
            self.prepared_reads.remove(&id);
        }
    }

    /// Takes in what a response said about its transaction: the bound of the snapshot it
    /// `took`, if it started one the read barrier bounded, and whether it `left` its snapshot.
    pub(crate) fn after_response(&mut self, took: Option<&Arc<GtidPosition>>, left: bool) {
        if std::mem::take(&mut self.starting) {
            self.cover(took.cloned());
        } else if left {
            self.cover(None);
        }
    }

    /// From now on the transaction reads from the snapshot `bound` bounds (or from none).
    fn cover(&mut self, bound: Option<Arc<GtidPosition>>) {
        self.bound = bound;
        self.held_under = None;
    }

    fn forget(&mut self) {
        self.cover(None);
        self.prepared_reads.clear();
    }

    /// Notes a command, and says what to send in its place. `whole`: `payload` is all of the
    /// command (a statement of 16 MiB or more comes in several packets, and is never taken for
    /// a single `SELECT`: its text is not all here). `may_start`: a transaction the command
    /// starts may be covered by its snapshot (see [`crate::config::Visibility::Snapshot`]).
    pub(crate) fn note_command(
        &mut self,
        payload: &[u8],
        whole: bool,
        may_start: bool,
    ) -> Replacement {
        self.starting = false;
        self.reading = false;
        self.preparing_read = false;
        let Some((&cmd, rest)) = payload.split_first() else {
            return Replacement::None;
        };
        match cmd {
            COM_RESET_CONNECTION | COM_CHANGE_USER => self.forget(),
            COM_STMT_CLOSE => {
                if let Some(id) = statement_id(payload) {
                    self.prepared_reads.remove(&id);
                }
            }
            // The text is only looked at where a snapshot may cover it.
            COM_STMT_PREPARE if may_start && whole => {
                self.preparing_read = snapshot::reads_snapshot_only(rest);
            }
            COM_STMT_EXECUTE if self.bound.is_some() => {
                self.reading =
                    statement_id(payload).is_some_and(|id| self.prepared_reads.contains(&id));
            }
            // Nothing to look at for a session that neither starts nor has a covered snapshot
            // (every session, under `visibility = "commit"` or `"quorum"`).
            COM_QUERY if may_start || self.bound.is_some() => {
                if let Some(start) = snapshot::transaction_start(rest) {
                    // A new transaction (the old one, if any, commits implicitly).
                    self.cover(None);
                    self.starting = may_start;
                    if self.starting && start == Start::Plain {
                        return Replacement::StartWithSnapshot;
                    }
                } else if self.bound.is_some() && whole {
                    self.reading = snapshot::reads_snapshot_only(rest);
                }
            }
            _ => {}
        }
        Replacement::None
    }

    /// Whether what is queued may go without a bound of its own: the whole response is in,
    /// it read only its transaction's snapshot (whose bound is `read_only`), and the quorum
    /// holds that snapshot.
    pub(crate) fn answers(&mut self, read_only: Option<&GtidPosition>, door: &Door) -> bool {
        let Some(bound) = read_only else {
            return false;
        };
        match door.read_in_snapshot(bound, self.held_under) {
            Some(rule) => {
                self.held_under = Some(rule);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests;
