//! A snapshot of strong sync for `/status`, metrics and tests: the state, every replica with
//! what it holds, the parked commits, and what a failover needs to know.

use std::collections::BTreeMap;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use strongsync_proto::gtid::GtidPosition;
use strongsync_proto::position::Position;
use tokio::time::Instant;

use super::counters::Counts;
use super::inner::{DurableState, Inner, UnresolvedRelease};
use super::quorum::{QuorumRule, Tally, Unmet};
use super::{ReleasedWithoutQuorum, State};
use crate::config::{AsyncReplicas, Visibility};

/// The snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurabilityStatus {
    /// Current state.
    pub state: State,
    /// Configured quorum.
    pub quorum: usize,
    /// The whole rule commits wait for (the quorum, and its zone parts).
    pub rule: QuorumRule,
    /// The primary's zone, as configured.
    pub primary_zone: Option<Arc<str>>,
    /// What of the rule the connected semisync replicas cannot meet, if anything: commits
    /// cannot reach their quorum until it changes.
    pub quorum_unmet: Option<Unmet>,
    /// The lowest and highest quorum a session may ask for.
    pub session_quorum: (usize, usize),
    /// When replicas without semisync receive a transaction.
    pub async_replicas: AsyncReplicas,
    /// Commits do not wait (relay only).
    pub passthrough: bool,
    /// The highest position held by `quorum` connected semisync replicas.
    pub quorum_position: Option<Position>,
    /// The end of the last transaction relayed to any replica.
    pub head: Option<Position>,
    /// Connected replicas, by server id.
    pub replicas: Vec<ReplicaStatus>,
    /// Commits waiting right now.
    pub parked: usize,
    /// Of those, the ones `block` keeps waiting past their `ack_timeout`.
    pub parked_overdue: usize,
    /// Transactions whose end position is remembered exactly.
    pub gtid_index_entries: usize,
    /// Time spent DEGRADED so far (the current spell included).
    pub degraded_total: Duration,
    /// Commits released so far, by how.
    pub released: BTreeMap<&'static str, u64>,
    /// What responses may reveal (`visibility`).
    pub visibility: Visibility,
    /// Responses the read barrier holds right now.
    pub reads_parked: usize,
    /// Responses the read barrier released so far, by how.
    pub reads_released: BTreeMap<&'static str, u64>,
    /// Of those, the ones that had to wait: the quorum did not hold their bound yet.
    pub reads_queued: u64,
    /// Responses that went without a bound of their own: their transaction read only its
    /// snapshot, which the quorum held.
    pub reads_in_snapshot: u64,
    /// Replicas that disconnected, as last known (the most recent ones), by `server_id`.
    pub departed: Vec<ReplicaStatus>,
    /// The watermark: every transaction the quorum has held (the commits acknowledged to their
    /// clients with their quorum, and the transactions relayed before them), as a position:
    /// what a new primary must cover.
    pub watermark: Arc<GtidPosition>,
    /// The watermark passed `durability.max_gtid_intervals` and holds more than the quorum
    /// held: follow and promote refuse.
    pub watermark_inexact: bool,
    /// Replicas, connected or departed, that hold every one of those and, once promoted, leave
    /// replicas that can still meet the rule's zone parts: safe to promote.
    pub failover_candidates: Vec<u32>,
    /// The other replicas, each with why it is not a candidate.
    pub not_candidates: Vec<NotCandidate>,
    /// Commits acknowledged to their clients without their quorum since strong sync was last
    /// STRONG, per domain: what a failover now may lose.
    pub released_without_quorum: ReleasedWithoutQuorum,
    /// The most recent commits released without their GTIDs being known.
    pub unresolved: Vec<Arc<UnresolvedRelease>>,
    /// Reports of replica pipes of an epoch that was over, ignored so far.
    pub stale_reports: u64,
    /// Why commits cannot be named by GTID now (every response is then bounded), if so.
    pub commits_untracked: Option<String>,
}

/// One connected replica (or one that was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// The replica's `server_id`.
    pub server_id: u32,
    /// Where it connected from.
    pub address: Arc<str>,
    /// Its zone, from the config file.
    pub zone: Option<Arc<str>>,
    /// Its labels, from the config file (empty if it has none).
    pub labels: std::collections::BTreeMap<String, String>,
    /// It asked for semisync (and so counts towards the quorum).
    pub semisync: bool,
    /// Its stream goes in compressed frames.
    pub compressed: bool,
    /// The highest position it ACKed.
    pub acked: Option<Position>,
    /// The position through which it holds every transaction: what it ACKed, or what
    /// its stream shows the primary skipped because it had it.
    pub holds_through: Option<Position>,
    /// Binlog bytes between `holds_through` and the newest transaction relayed (when known).
    pub lag_bytes: Option<u64>,
    /// Transactions relayed that it does not hold yet (when known).
    pub lag_transactions: Option<u64>,
    /// Time since its last ACK.
    pub last_ack_age: Option<Duration>,
    /// The GTIDs it holds: what the primary was told it had when it connected, then every
    /// transaction it ACKed.
    pub held: Arc<GtidPosition>,
    /// Time since it disconnected (`None` while connected).
    pub gone_for: Option<Duration>,
}

/// A replica that is not a failover candidate, and why (as `/status` shows it too).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NotCandidate {
    /// Its `server_id`.
    pub server_id: u32,
    /// Why: what of the watermark it lacks, or what of the rule the others would miss.
    pub reason: String,
}

/// A snapshot of `inner`, whose lock it takes over and gives up as soon as it has copied what
/// it needs, with `counts` (see [`Durability::status`](super::Durability::status)).
pub(super) fn snapshot(inner: MutexGuard<'_, Inner>, counts: Counts) -> DurabilityStatus {
    let now = Instant::now();
    // Under the lock, only copies: what a replica holds is shared (copied on write), and
    // sorting and the failover candidates are worked out after it.
    let config = Arc::clone(&inner.config);
    let (mut replicas, mut departed) = replicas(&inner, now);
    let (degraded_now, released_without_quorum) = match &inner.state {
        DurableState::Degraded {
            since, released, ..
        } => (now - *since, released.clone()),
        DurableState::Strong => (Duration::ZERO, ReleasedWithoutQuorum::default()),
    };
    let state = inner.state.public();
    let quorum_unmet = inner.registry.unmet(&config.rule());
    let topology = Arc::clone(&inner.topology);
    let quorum_position = inner.registry.quorum();
    let head = inner.head;
    let gtid_index_entries = inner.index.len();
    let degraded_total = inner.degraded_before + degraded_now;
    let watermark = Arc::clone(inner.watermark.position());
    let watermark_inexact = inner.watermark.inexact();
    let unresolved = inner.unresolved.iter().cloned().collect();
    let commits_untracked = inner.untracked_why.clone();
    drop(inner);

    replicas.sort_by_key(|r| r.server_id);
    departed.sort_by_key(|r| r.server_id);
    for r in replicas.iter_mut().chain(&mut departed) {
        if let Some(labels) = topology.replicas.get(&r.server_id) {
            r.labels = labels.labels.clone();
        }
    }
    let (failover_candidates, not_candidates) =
        candidates(&replicas, &departed, &watermark, &config.rule());
    DurabilityStatus {
        state,
        quorum: config.quorum,
        rule: config.rule(),
        primary_zone: topology.primary_zone.clone(),
        quorum_unmet,
        session_quorum: (config.session_floor(), config.session_quorum_max),
        async_replicas: config.async_replicas,
        passthrough: config.passthrough,
        quorum_position,
        head,
        replicas,
        parked: counts.parked,
        parked_overdue: counts.parked_overdue,
        gtid_index_entries,
        degraded_total,
        released: counts.released,
        visibility: config.visibility,
        reads_parked: counts.reads_parked,
        reads_queued: counts.reads_queued,
        reads_in_snapshot: counts.reads_in_snapshot,
        reads_released: counts.reads_released,
        departed,
        watermark,
        watermark_inexact,
        failover_candidates,
        not_candidates,
        released_without_quorum,
        unresolved,
        stale_reports: counts.stale_reports,
        commits_untracked,
    }
}

/// The connected replicas, with their lag, and the departed ones, as `inner` has them `now`
/// (unsorted, without their labels: copies only, under the lock).
fn replicas(inner: &Inner, now: Instant) -> (Vec<ReplicaStatus>, Vec<ReplicaStatus>) {
    let connected = inner
        .registry
        .connected()
        .map(|(server_id, r)| {
            let through = r.holds_through();
            ReplicaStatus {
                lag_bytes: through
                    .zip(inner.head)
                    .and_then(|(a, h)| inner.lag.bytes_behind(a, h)),
                lag_transactions: through.and_then(|a| inner.lag.transactions_behind(a)),
                ..r.status(server_id, now)
            }
        })
        .collect();
    let departed = inner
        .registry
        .departed()
        .map(|(server_id, d)| ReplicaStatus {
            gone_for: Some(now - d.left),
            ..d.replica.status(server_id, now)
        })
        .collect();
    (connected, departed)
}

/// Which replicas (connected or departed) are safe to promote: each holds the whole
/// `watermark`, and, if the rule has zone parts, the other replicas would
/// still meet them with it as the primary (with its zone as the primary's). The rest, with why.
fn candidates(
    replicas: &[ReplicaStatus],
    departed: &[ReplicaStatus],
    watermark: &GtidPosition,
    rule: &QuorumRule,
) -> (Vec<u32>, Vec<NotCandidate>) {
    let all: Vec<&ReplicaStatus> = replicas.iter().chain(departed).collect();
    let zone_parts = QuorumRule { count: 0, ..*rule };
    let mut candidates = Vec::new();
    let mut not = Vec::new();
    for r in &all {
        let missing: Vec<String> = r.held.missing(watermark).map(ToString::to_string).collect();
        let reason = if !missing.is_empty() {
            Some(format!(
                "lacks {} of the watermark (holds {})",
                missing.join(","),
                r.held
            ))
        } else if rule.zones > 1 || rule.cross_zone {
            let new_primary = r.zone.as_deref();
            let mut others = Tally::default();
            for other in all.iter().filter(|o| o.server_id != r.server_id) {
                others.add(other.zone.as_deref(), new_primary);
            }
            others.unmet(&zone_parts, new_primary).map(|unmet| {
                format!("once it is the primary, the other replicas leave the rule unmet: {unmet}")
            })
        } else {
            None
        };
        match reason {
            None => candidates.push(r.server_id),
            Some(reason) => not.push(NotCandidate {
                server_id: r.server_id,
                reason,
            }),
        }
    }
    candidates.sort_unstable();
    not.sort_by_key(|n| n.server_id);
    (candidates, not)
}
