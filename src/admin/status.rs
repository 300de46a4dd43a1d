//! `GET /status`: this instance's [`Status`], gathered from strong sync, the control, the
//! cluster, the pools and the primary's health.

use axum::extract::State as AppState;
use axum::http::StatusCode;
use axum::response::Response;
use strongsync_proto::gtid::Domain;

use super::{json, Admin};
use crate::cluster::{Member, Standing};
use crate::durability::{DurabilityStatus, ReleasedWithoutQuorum, State};
use crate::health::Unreachable;
use crate::status::{
    ClusterStatus, DomainName, DomainReleases, LeaseStatus, PrimaryStatus, Replica, RetiredPrimary,
    SharingStatus, Status, UnresolvedRelease,
};

/// `GET /status`.
pub(super) async fn status(AppState(admin): AppState<Admin>) -> Response {
    let reachable = admin.primary.check().await;
    let members = match &admin.cluster {
        Some(cluster) => Some(cluster.members().await),
        None => None,
    };
    json(StatusCode::OK, &gather(&admin, reachable, members))
}

/// The status, from what the awaited calls found (the primary's reachability, the cluster's
/// members) and what the rest holds now.
fn gather(
    admin: &Admin,
    reachable: Result<(), Unreachable>,
    members: Option<Result<Vec<Member>, String>>,
) -> Status {
    let config = admin.durability.config();
    let s: DurabilityStatus = admin.durability.status();
    Status {
        state: match s.state {
            State::Strong => "strong",
            State::Degraded => "degraded",
        }
        .to_owned(),
        fenced: admin.durability.gate().fenced(),
        epoch: admin.control.epoch(),
        unacknowledged_tail: admin.durability.tail().to_string(),
        quorum: config.quorum,
        quorum_rule: s.rule.to_string(),
        quorum_zones: s.rule.zones,
        cross_zone: s.rule.cross_zone,
        primary_zone: s.primary_zone.as_deref().map(str::to_owned),
        quorum_unmet: s.quorum_unmet.as_ref().map(ToString::to_string),
        session_quorum_floor: s.session_quorum.0,
        session_quorum_max: s.session_quorum.1,
        async_replicas: s.async_replicas.to_string(),
        ack_timeout: humantime::format_duration(config.ack_timeout).to_string(),
        on_timeout: config.on_timeout.to_string(),
        without_quorum: config.without_quorum.to_string(),
        passthrough: config.passthrough,
        quorum_position: s.quorum_position.map(|p| p.to_string()),
        head: s.head.map(|p| p.to_string()),
        watermark_gtid_position: s.watermark.to_string(),
        watermark_gtid_state: format!("{:#}", s.watermark),
        watermark_inexact: s.watermark_inexact,
        acknowledged_gtid_position: s.watermark.to_string(),
        acknowledged_gtid_state: format!("{:#}", s.watermark),
        acknowledged_inexact: s.watermark_inexact,
        commits_untracked: s.commits_untracked.clone(),
        session_tracking: admin.control.session_defaults().describe(),
        persisted: admin.control.persists(),
        retired_primaries: retired_primaries(admin),
        failover_candidates: s.failover_candidates,
        not_failover_candidates: s.not_candidates,
        parked_sessions: s.parked,
        parked_overdue: s.parked_overdue,
        degraded_seconds_total: s.degraded_total.as_secs_f64(),
        released_without_quorum: domain_releases(&s.released_without_quorum),
        unresolved_releases: unresolved_releases(&s.unresolved),
        released: by_name(s.released),
        visibility: s.visibility.to_string(),
        reads_held: s.reads_parked,
        reads_released: by_name(s.reads_released),
        reads_waited: s.reads_queued,
        reads_in_snapshot: s.reads_in_snapshot,
        tls: admin.tls.clone(),
        cluster: (admin.cluster.as_ref().zip(members))
            .map(|(me, members)| cluster(admin, me.me(), members)),
        sharing: admin.pools.enabled().then(|| sharing(admin)),
        primary: primary(admin, reachable),
        replicas: s
            .replicas
            .into_iter()
            .chain(s.departed)
            .map(replica)
            .collect(),
    }
}

/// Counts keyed by their labels, as the status names them.
fn by_name<V>(
    counts: std::collections::BTreeMap<&'static str, V>,
) -> std::collections::BTreeMap<String, V> {
    counts
        .into_iter()
        .map(|(name, count)| (name.to_owned(), count))
        .collect()
}

fn retired_primaries(admin: &Admin) -> Vec<RetiredPrimary> {
    admin
        .control
        .retired()
        .into_iter()
        .map(|r| RetiredPrimary {
            address: r.address,
            identity: r.identity.map(|i| i.to_string()),
        })
        .collect()
}

fn domain_releases(released: &ReleasedWithoutQuorum) -> Vec<DomainReleases> {
    released
        .ranges()
        .map(|range| DomainReleases {
            domain: match range.last.domain {
                Domain::Maria(domain) => DomainName::Maria(domain),
                Domain::MySql(_) | Domain::Binlog(_) => {
                    DomainName::Named(range.last.domain.to_string())
                }
            },
            first: range.first.to_string(),
            last: range.last.to_string(),
            count: range.count,
        })
        .collect()
}

fn unresolved_releases(
    unresolved: &[std::sync::Arc<crate::durability::UnresolvedRelease>],
) -> Vec<UnresolvedRelease> {
    unresolved
        .iter()
        .map(|u| UnresolvedRelease {
            connection_id: u.connection_id,
            reason: u.reason.clone(),
            gtids: u.gtids.clone(),
            seconds_ago: u.at.elapsed().as_secs_f64(),
        })
        .collect()
}

/// This instance (`me`) in its cluster, with the `members` it found (or why it found none).
fn cluster(admin: &Admin, me: &Member, members: Result<Vec<Member>, String>) -> ClusterStatus {
    let standing = admin.standing.borrow().clone();
    let (members, members_problem) = match members {
        Ok(members) => (members, None),
        Err(problem) => (Vec::new(), Some(problem)),
    };
    ClusterStatus {
        name: me.name.clone(),
        members,
        members_problem,
        standing: standing.label().to_owned(),
        leader: match &standing {
            Standing::Leading { .. } => Some(me.clone()),
            other => other.leader().cloned(),
        },
        lease: match &standing {
            Standing::Leading { lease, ttl } => Some(LeaseStatus {
                id: format!("{lease:x}"),
                ttl_seconds: ttl.as_secs(),
                acting: admin.durability.gate().lease().may_act(),
            }),
            _ => None,
        },
        problem: match standing {
            Standing::Unreachable { problem } => Some(problem),
            _ => None,
        },
    }
}

fn sharing(admin: &Admin) -> SharingStatus {
    SharingStatus {
        pool_size: admin.pools.pool_size(),
        free_connections: admin.pools.free(),
        pools: admin.pools.count(),
        pinned_sessions: crate::metrics::PIN_REASONS
            .iter()
            .map(|why| {
                let pinned = admin.metrics.sessions_pinned.with_label_values(&[why]);
                ((*why).to_owned(), pinned.get())
            })
            .collect(),
        set_names: admin.control.session_defaults().names_known(),
    }
}

fn primary(admin: &Admin, reachable: Result<(), Unreachable>) -> PrimaryStatus {
    PrimaryStatus {
        address: admin.control.primary(),
        identity: admin.control.followed().identity.map(|i| i.to_string()),
        reachable: reachable.is_ok(),
        problem: reachable.err().map(|e| e.to_string()),
    }
}

fn replica(r: crate::durability::ReplicaStatus) -> Replica {
    Replica {
        server_id: r.server_id,
        address: r.address.to_string(),
        zone: r.zone.as_deref().map(str::to_owned),
        labels: r.labels,
        connected: r.gone_for.is_none(),
        disconnected_seconds: r.gone_for.map(|d| d.as_secs_f64()),
        semisync: r.semisync,
        compressed: r.compressed,
        acked_gtid_position: r.held.to_string(),
        acked_position: r.acked.map(|p| p.to_string()),
        holds_through: r.holds_through.map(|p| p.to_string()),
        acked_file: r.acked.map(|p| p.file_seq),
        acked_offset: r.acked.map(|p| p.offset),
        lag_bytes: r.lag_bytes,
        lag_transactions: r.lag_transactions,
        last_ack_age_seconds: r.last_ack_age.map(|d| d.as_secs_f64()),
    }
}
