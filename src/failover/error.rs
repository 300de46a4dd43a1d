//! Why a failover call did not go through, and why failover could not start: one enum each,
//! with what each case is about. The admin port turns them into answers in one place.

use std::path::PathBuf;

use thiserror::Error;

use super::candidate::CandidateError;
use super::promote::{LookedAt, PromoteError};
use super::state::{StateError, Unreadable};
use crate::cluster::{ClusterError, StoreError};
use crate::config::ConfigError;
use crate::flavour::{Flavour, GtidModeProblem, ServerIdentity};

/// Why a control call failed.
#[derive(Debug, Error)]
pub enum ControlError {
    /// The change was made in memory but could not be written: it would not survive a
    /// restart.
    #[error("{0}; the change is in force but would not survive a restart of strongsync")]
    NotSaved(#[source] StateError),
    /// This instance does not lead its cluster: the leader makes every change.
    #[error("refused: this instance does not lead its cluster; call the leader (strongsync status names it)")]
    NotLeading,
    /// A cluster without state in etcd: a new deployment creates it.
    #[error("the cluster has no state in etcd: create it once with `strongsync init-state --config FILE` (a fresh state could forget a fence, an epoch or a retired primary)")]
    NoClusterState,
    /// The cluster's state in etcd does not read.
    #[error("the cluster's state in etcd is unreadable: {0}")]
    ClusterStateCorrupt(#[source] Unreadable),
    /// No account to check a primary with.
    #[error("refused: following a primary needs the [probe] account, to check it first")]
    NoAccount,
    /// It was followed before.
    #[error("refused: {addr} was followed before, as {retired} (a retired primary is never followed again unless allow_retired is given)")]
    Retired {
        /// The primary named.
        addr: String,
        /// How it was followed then: its address, and its identity if known.
        retired: String,
    },
    /// It is the primary strongsync fenced, under another name.
    #[error("refused: {addr} is {identity}, the primary strongsync fenced ({fenced}); follow another server, or give allow_retired")]
    FencedPrimary {
        /// The primary named.
        addr: String,
        /// Who it is.
        identity: ServerIdentity,
        /// The fenced primary's address.
        fenced: String,
    },
    /// It could not be checked.
    #[error("refused: cannot check {addr}: {problem}")]
    Unreachable {
        /// The primary named.
        addr: String,
        /// Why.
        #[source]
        problem: Box<CandidateError>,
    },
    /// Its address reached another server after the fence than before it.
    #[error(
        "refused: {addr} was {before} before the fence and {after} after it (the fence stays)"
    )]
    Changed {
        /// The primary named.
        addr: String,
        /// Who it was.
        before: ServerIdentity,
        /// Who it is.
        after: ServerIdentity,
    },
    /// It is read-only.
    #[error("refused: {addr} is read-only (read_only or super_read_only is on)")]
    ReadOnly {
        /// The primary named.
        addr: String,
    },
    /// It still replicates.
    #[error("refused: {addr} still replicates (channels {channels:?}); stop and reset its replication first")]
    Replicating {
        /// The primary named.
        addr: String,
        /// Its running channels.
        channels: Vec<String>,
    },
    /// It lacks transactions of the watermark.
    #[error("refused: {addr} lacks {lacking} of the watermark, which a new primary must hold (it holds {holds}; follow with force to accept losing them)")]
    Lacks {
        /// The primary named.
        addr: String,
        /// What it lacks, newest per domain.
        lacking: String,
        /// What it holds, every server's newest.
        holds: String,
    },
    /// The watermark can no longer be compared exactly.
    #[error("refused: the watermark passed durability.max_gtid_intervals and holds more than the quorum held, so no server can be checked exactly against it (raise the bound and restart strongsync, or follow with force)")]
    WatermarkInexact,
    /// MySQL without a GTID for every transaction.
    #[error("refused: {addr}: {problem}")]
    GtidMode {
        /// The primary named.
        addr: String,
        /// What is off.
        problem: GtidModeProblem,
    },
    /// Reinstate names a primary that is not retired.
    #[error("refused: {addr} is not a retired primary")]
    NotRetired {
        /// The address named.
        addr: String,
    },
    /// Promote has nothing to log in with.
    #[error(
        "refused: promote needs the [failover] account (user, password) and [[replica]] addresses"
    )]
    NoPromoteSetup,
    /// No replica holds the whole watermark.
    #[error("no replica holds the whole watermark ({watermark}); nothing promoted (the fence stays): {looked}")]
    NoCandidate {
        /// The watermark.
        watermark: String,
        /// What each replica had.
        looked: LookedAt,
    },
    /// A step of promote failed; rerunning promote picks up from there.
    #[error("promote stopped at server {server_id}: {problem} (the fence stays; rerun promote)")]
    PromoteStep {
        /// The replica being promoted.
        server_id: u32,
        /// The step and why.
        #[source]
        problem: Box<PromoteError>,
    },
    /// strongsync stopped before the call ended.
    #[error(
        "interrupted: strongsync is stopping; what the call changed so far is in the state file"
    )]
    Interrupted,
    /// It is a server of the other flavour.
    #[error("refused: {addr} is {found:?}, the replicas are {expected:?}")]
    OtherFlavour {
        /// The primary named.
        addr: String,
        /// What it is.
        found: Flavour,
        /// What the watermark is of.
        expected: Flavour,
    },
}

/// Why failover control could not start.
#[derive(Debug, Error)]
pub enum ControlStartError {
    /// The token file.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The state file.
    #[error(transparent)]
    State(#[from] StateError),
    /// The primary is MySQL without a GTID for every transaction.
    #[error("primary {addr}: {problem}")]
    GtidMode {
        /// The primary.
        addr: String,
        /// What is off.
        problem: GtidModeProblem,
    },
    /// The state file to create exists already.
    #[error("state file {0} exists already: strongsync init-state creates only a new one")]
    Exists(PathBuf),
    /// The cluster's settings do not make an etcd connection.
    #[error(transparent)]
    ClusterSettings(ClusterError),
    /// The cluster's state could not be created in etcd.
    #[error("cluster: {0}")]
    ClusterStore(#[source] StoreError),
    /// No runtime to reach etcd with.
    #[error("cluster: cannot start a runtime to reach etcd: {0}")]
    Runtime(#[source] std::io::Error),
}

impl ControlError {
    /// Whether the call was refused (the admin port answers 409), rather than failed to save
    /// a change (500).
    pub fn is_refusal(&self) -> bool {
        !matches!(self, ControlError::NotSaved(_))
    }
}
