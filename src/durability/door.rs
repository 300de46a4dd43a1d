//! The one door from a client session into strong sync: the wait for a commit, the policy a
//! session reads, and the gate its writes to the primary pass.

use std::sync::Arc;

use futures::future::BoxFuture;
use strongsync_proto::gtid::GtidPosition;

use super::{Durability, Fence, QuorumRule, Release, SessionQuorum};
use crate::commit::Commit;
use crate::config::DurabilityConfig;
use crate::gate::Gate;
use crate::tracking_defaults::SessionDefaults;

/// Decides when a response that reported a commit may be released to the client.
pub trait CommitHook: Send + Sync + 'static {
    /// Called before the first packet that reported `commit` (and anything after it in the
    /// same response) is released; the packets are held until the future completes. Dropping
    /// the future (client gone, shutdown) must clean up after it.
    fn on_commit(&self, commit: Commit) -> BoxFuture<'static, Release>;
}

/// What a client session, its sharing and its read barrier may ask of strong sync, and
/// nothing more: sessions hold this, never [`Durability`] itself.
#[derive(Clone)]
pub struct Door {
    durability: Arc<Durability>,
    /// Whether new sessions start with the tracking strongsync needs, as the watch of the
    /// primary found its global defaults.
    defaults: Arc<SessionDefaults>,
    /// Decides when a response that reported a commit may be released (strong sync itself,
    /// unless a test watches commits on the way).
    hook: Arc<dyn CommitHook>,
}

// === impl Door ===

impl Door {
    /// The door into `durability`, whose commits `hook` decides, with the primary's session
    /// defaults as failover's watch of the primary finds them.
    pub fn new(
        durability: Arc<Durability>,
        hook: Arc<dyn CommitHook>,
        defaults: Arc<SessionDefaults>,
    ) -> Self {
        Door {
            durability,
            defaults,
            hook,
        }
    }

    /// The door into `durability`, which decides its commits itself, with defaults nothing has
    /// looked at yet.
    pub fn of(durability: Arc<Durability>) -> Self {
        let hook = Arc::new(Arc::clone(&durability));
        Door::new(durability, hook, Arc::default())
    }

    /// Waits until `commit` may be acknowledged to its client, as the policy says; the
    /// response that reported it is held until then.
    pub fn wait(&self, commit: Commit) -> BoxFuture<'static, Release> {
        self.hook.on_commit(commit)
    }

    /// The gate every write to the primary passes.
    pub fn gate(&self) -> &Arc<Gate> {
        self.durability.gate()
    }

    /// Whether responses wait for the quorum to hold what they may reveal (one atomic read).
    pub fn reads_wait(&self) -> bool {
        self.durability.reads_wait()
    }

    /// Whether a transaction's reads from its snapshot may be bounded once.
    pub fn snapshot_reads(&self) -> bool {
        self.durability.snapshot_reads()
    }

    /// Whether what sessions commit cannot be named (the primary records no GTIDs).
    pub fn commits_untracked(&self) -> bool {
        self.durability.commits_untracked()
    }

    /// The primary's session defaults, as strongsync last saw them.
    pub fn session_defaults(&self) -> &SessionDefaults {
        &self.defaults
    }

    /// The quorum a session that asked for `asked` gets under the settings in force.
    pub fn session_quorum(&self, asked: Option<usize>) -> SessionQuorum {
        self.durability.config().session_quorum(asked)
    }

    /// Strong sync's settings in force (the read barrier's timeout policy among them).
    pub fn settings(&self) -> DurabilityConfig {
        self.durability.config()
    }

    /// The rule under which the quorum holds every transaction `bound` holds, if it does (see
    /// [`Durability::read_in_snapshot`]).
    pub fn read_in_snapshot(
        &self,
        bound: &GtidPosition,
        held_under: Option<QuorumRule>,
    ) -> Option<QuorumRule> {
        self.durability.read_in_snapshot(bound, held_under)
    }

    /// The fence in force, if any, for the error a client is turned away with.
    pub fn fence_state(&self) -> Option<Fence> {
        self.durability.fence_state()
    }
}
