//! The admin HTTP port: what an operator, a load balancer and Prometheus ask of a running
//! strongsync ([`ENDPOINTS`]), separate from the SQL port.

mod listener;

pub use listener::Listening;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, RawQuery, State as AppState};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use serde::Serialize;
use strongsync_proto::gtid::Domain;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cluster::Standing;
use crate::config::OnTimeout;
use crate::durability::{Durability, DurabilityStatus, GtidOutcome, State};
use crate::failover::{AdminToken, Control, Refusal};
use crate::health::PrimaryHealth;
use crate::metrics::Metrics;

/// What the admin endpoints read.
#[derive(Clone)]
pub struct Admin {
    /// Strong sync.
    pub durability: Arc<Durability>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The primary's reachability.
    pub primary: Arc<PrimaryHealth>,
    /// The fence, the epoch and the primary followed.
    pub control: Arc<Control>,
    /// TLS on each leg, as `/status` reports it.
    pub tls: TlsStatus,
    /// Where this instance stands in its cluster.
    pub standing: tokio::sync::watch::Receiver<crate::cluster::Standing>,
    /// This instance's part in its cluster, if it is one of one.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// The shared connections to the primary (`[sharing]`).
    pub(crate) pools: Arc<crate::sharing::Pools>,
}

/// TLS on each leg, for `/status`.
#[derive(Debug, Clone, Serialize)]
pub struct TlsStatus {
    /// The client leg's certificate (`configured (…)`, `self-signed (…)`), or `off`.
    pub clients: String,
    /// SHA-256 of that certificate, in hex: what a client pins.
    pub clients_sha256: Option<String>,
    /// `primary_tls`.
    pub primary: String,
}

/// Largest body an admin call may carry.
const MAX_BODY: usize = 64 * 1024;

/// `/status`.
#[derive(Debug, Serialize)]
struct Status {
    state: &'static str,
    /// True while strongsync has fenced its primary (nothing relayed or acknowledged).
    fenced: bool,
    /// Raised by every follow of a new primary.
    epoch: u64,
    /// Committed on a fenced primary, known to strongsync, never acknowledged: errant on any
    /// replica that has it once another primary takes over (every fence so far).
    unacknowledged_tail: String,
    quorum: usize,
    /// The whole rule, in words (the quorum and its zone parts).
    quorum_rule: String,
    /// Zones the replicas holding a transaction must span (0 or 1: none).
    quorum_zones: usize,
    /// One replica holding a transaction must be outside the primary's zone.
    cross_zone: bool,
    primary_zone: Option<String>,
    /// What of the rule the connected semisync replicas cannot meet (null when they can).
    quorum_unmet: Option<String>,
    /// The lowest and highest quorum a session may ask for with `@strongsync_quorum`.
    session_quorum_floor: usize,
    session_quorum_max: usize,
    /// When replicas without semisync receive a transaction.
    async_replicas: String,
    ack_timeout: String,
    on_timeout: String,
    without_quorum: String,
    passthrough: bool,
    quorum_position: Option<String>,
    head: Option<String>,
    /// The watermark: every transaction the quorum has held (newest per domain, as
    /// `gtid_slave_pos` shows it on MariaDB; the whole set on MySQL): what a new primary must
    /// hold.
    watermark_gtid_position: String,
    /// The same, every MariaDB server's newest (as `gtid_binlog_state` lists them).
    watermark_gtid_state: String,
    /// The watermark passed `durability.max_gtid_intervals`: it holds more than the quorum
    /// held, and follow and promote refuse.
    watermark_inexact: bool,
    /// `watermark_gtid_position` under its old name, kept for one release.
    acknowledged_gtid_position: String,
    /// `watermark_gtid_state` under its old name, kept for one release.
    acknowledged_gtid_state: String,
    /// `watermark_inexact` under its old name, kept for one release.
    acknowledged_inexact: bool,
    /// Why commits cannot be named by GTID now (every response is then bounded by the
    /// primary's binlog position), if so.
    commits_untracked: Option<String>,
    /// Whether new sessions get no statement of strongsync's: `configured` when the primary's
    /// session-tracking defaults hold what strongsync needs; otherwise what they lack.
    session_tracking: String,
    /// Whether the fence, the epoch and the retired primaries are written to a state file.
    persisted: bool,
    /// The primaries strongsync followed before: never followed or promoted again until
    /// reinstated.
    retired_primaries: Vec<RetiredPrimary>,
    /// Replicas holding every transaction in `watermark_gtid_position` whose promotion
    /// leaves replicas that can meet the rule's zone parts.
    failover_candidates: Vec<u32>,
    /// Every other replica, with why it is not a candidate.
    not_failover_candidates: Vec<NotCandidate>,
    parked_sessions: usize,
    /// Parked commits past their `ack_timeout` that `on_timeout = block` keeps waiting.
    parked_overdue: usize,
    degraded_seconds_total: f64,
    /// Per replication domain, the commits acknowledged to clients without their quorum since
    /// strong sync was last STRONG: what a failover now may lose.
    released_without_quorum: Vec<DomainReleases>,
    /// The most recent commits released although what they committed could not be learnt.
    unresolved_releases: Vec<UnresolvedRelease>,
    released: std::collections::BTreeMap<&'static str, u64>,
    /// `commit` or `quorum` (the read barrier).
    visibility: String,
    /// Responses the read barrier holds right now, until the quorum holds what they may reveal.
    reads_held: usize,
    /// Responses the read barrier held and released, by how.
    reads_released: std::collections::BTreeMap<&'static str, u64>,
    /// Of those, the ones that had to wait for the quorum (the rest went at once).
    reads_waited: u64,
    /// Responses that went without a bound of their own: their transaction read only a
    /// snapshot the quorum held.
    reads_in_snapshot: u64,
    /// TLS on each leg.
    tls: TlsStatus,
    /// This instance in its cluster (absent alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<ClusterStatus>,
    /// The shared connections to the primary (absent with `[sharing]` off).
    #[serde(skip_serializing_if = "Option::is_none")]
    sharing: Option<SharingStatus>,
    primary: PrimaryStatus,
    replicas: Vec<Replica>,
}

#[derive(Debug, Serialize)]
struct NotCandidate {
    server_id: u32,
    reason: String,
}

#[derive(Debug, Serialize)]
struct DomainReleases {
    domain: DomainName,
    first: String,
    last: String,
    count: u64,
}

/// A MariaDB domain as its number, a MySQL source as its `uuid[:tag]`, a bound by binlog
/// position as `binlog <file>`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum DomainName {
    Maria(u32),
    Named(String),
}

#[derive(Debug, Serialize)]
struct UnresolvedRelease {
    connection_id: u32,
    reason: String,
    /// GTIDs learnt (and waited for), if any.
    gtids: String,
    seconds_ago: f64,
}

#[derive(Debug, Serialize)]
struct SharingStatus {
    /// `sharing.pool_size`: free connections kept per account and schema.
    pool_size: usize,
    /// Free connections in all pools now.
    free_connections: usize,
    /// Pools kept: one per account, schema, character set and capabilities in use.
    pools: usize,
    /// Sessions that keep their own connection, by why.
    pinned_sessions: std::collections::BTreeMap<&'static str, i64>,
    /// The collation `SET NAMES` gives each character set sessions named, as the watch of the
    /// primary last found (a `SET NAMES` that restates a login's own pins nothing).
    set_names: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
struct ClusterStatus {
    /// This instance's name.
    name: String,
    /// Every instance present in etcd now (each keeps a key on a lease of its own).
    members: Vec<crate::cluster::Member>,
    /// Why the members could not be read.
    members_problem: Option<String>,
    /// `leading`, `following` or `unreachable` (etcd does not answer).
    standing: &'static str,
    /// The leader as it advertises itself, if one is known.
    leader: Option<crate::cluster::Member>,
    /// The lease, while this instance leads.
    lease: Option<LeaseStatus>,
    /// Why etcd is unreachable.
    problem: Option<String>,
}

#[derive(Debug, Serialize)]
struct LeaseStatus {
    /// Its id in etcd, in hex as `etcdctl` shows it.
    id: String,
    ttl_seconds: u64,
    /// Whether the instance may act now (its deadline, on its own clock, is ahead).
    acting: bool,
}

#[derive(Debug, Serialize)]
struct PrimaryStatus {
    address: String,
    /// Who it is, once strongsync has asked it.
    identity: Option<String>,
    reachable: bool,
    problem: Option<String>,
}

#[derive(Debug, Serialize)]
struct RetiredPrimary {
    address: String,
    identity: Option<String>,
}

#[derive(Debug, Serialize)]
struct Replica {
    server_id: u32,
    address: String,
    /// Its zone and labels, from the config file.
    zone: Option<String>,
    labels: std::collections::BTreeMap<String, String>,
    /// False for a replica that has disconnected, shown as it was last known.
    connected: bool,
    disconnected_seconds: Option<f64>,
    semisync: bool,
    /// Its stream goes in compressed frames (`slave_compressed_protocol`).
    compressed: bool,
    /// The GTIDs it holds (newest per domain, like `gtid_slave_pos`): what it had when it
    /// connected, then every transaction it ACKed. What a failover tool compares.
    acked_gtid_position: String,
    /// `file:offset`, the file given by its numeric suffix.
    acked_position: Option<String>,
    /// `file:offset` through which it holds every transaction: what it ACKed, or what
    /// its stream shows the primary skipped because it had it.
    holds_through: Option<String>,
    acked_file: Option<u64>,
    acked_offset: Option<u64>,
    lag_bytes: Option<u64>,
    lag_transactions: Option<u64>,
    last_ack_age_seconds: Option<f64>,
}

/// One endpoint of the admin port, as docs/operations.md lists it (a test holds the page to
/// [`ENDPOINTS`]).
#[derive(Debug, Clone, Copy)]
pub struct Endpoint {
    /// `GET` or `POST`.
    pub method: &'static str,
    /// Its path (and query).
    pub path: &'static str,
    /// It changes state, so it needs the admin token.
    pub token: bool,
    /// What it answers, in words.
    pub what: &'static str,
    route: fn() -> MethodRouter<Admin>,
}

/// Every endpoint, in the order the docs list them; anything else gets 404 or 405.
pub const ENDPOINTS: [Endpoint; 10] = [
    Endpoint {
        method: "GET",
        path: "/metrics",
        token: false,
        what: "the metrics, in Prometheus' text format",
        route: || get(metrics),
    },
    Endpoint {
        method: "GET",
        path: "/healthz",
        token: false,
        what: "200 while the process runs: for a liveness probe",
        route: || get(|| async { "ok\n" }),
    },
    Endpoint {
        method: "GET",
        path: "/leader",
        token: false,
        what: "200 on the instance that acts (the leader of a cluster, or one alone), whatever its primary and replicas do; else 503 naming its standing: where a cluster's clients and replicas are routed",
        route: || get(leader),
    },
    Endpoint {
        method: "GET",
        path: "/readyz",
        token: false,
        what: "200 when this instance can acknowledge commits as its policy says: it acts, its primary answers, and its semisync replicas can meet the quorum rule, or `on_timeout = \"degrade\"` lets it serve without them (the body says `ready, degraded`); else 503 with the reason: a single instance's readiness",
        route: || get(readyz),
    },
    Endpoint {
        method: "GET",
        path: "/status",
        token: false,
        what: "the state as JSON (below)",
        route: || get(status),
    },
    Endpoint {
        method: "GET",
        path: "/outcome?gtid=GTID",
        token: false,
        what: "what became of one commit (`strongsync outcome`)",
        route: || get(outcome),
    },
    Endpoint {
        method: "POST",
        path: "/fence",
        token: true,
        what: "fences the primary (`strongsync fence`); body `{\"reason\": \"…\"}`",
        route: || post(fence),
    },
    Endpoint {
        method: "POST",
        path: "/follow",
        token: true,
        what: "follows a new primary (`strongsync follow`)",
        route: || post(follow),
    },
    Endpoint {
        method: "POST",
        path: "/promote",
        token: true,
        what: "promotes a replica (`strongsync promote`)",
        route: || post(promote),
    },
    Endpoint {
        method: "POST",
        path: "/reinstate",
        token: true,
        what: "lets a retired primary be followed again (`strongsync reinstate`)",
        route: || post(reinstate),
    },
];

/// The Markdown table of [`ENDPOINTS`], as docs/operations.md shows it.
pub fn endpoint_table() -> String {
    let mut table = String::from("| call | token | what it answers |\n|---|---|---|\n");
    for e in ENDPOINTS {
        let token = if e.token { "needed" } else { "" };
        table.push_str(&format!(
            "| `{} {}` | {token} | {} |\n",
            e.method, e.path, e.what
        ));
    }
    table
}

/// Serves the admin endpoints on `listener` until `cancel` fires.
pub async fn serve(listener: TcpListener, admin: Admin, how: Listening, cancel: CancellationToken) {
    let counted = Arc::clone(&admin.metrics);
    let app = ENDPOINTS
        .iter()
        .fold(Router::new(), |app, e| {
            let path = e.path.split_once('?').map_or(e.path, |(path, _)| path);
            app.route(path, (e.route)())
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(admin);
    listener::serve(listener, app, how, counted, cancel).await;
}

async fn metrics(AppState(admin): AppState<Admin>) -> Response {
    let _ = admin.primary.check().await;
    admin.metrics.refresh(&admin.durability.status());
    admin.control.refresh_metrics();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        admin.metrics.encode(),
    )
        .into_response()
}

/// 200 on the instance that acts (the leader, or one alone), whatever its primary and
/// replicas do: where replicas are routed, since the leader's `/readyz` waits for them.
async fn leader(AppState(admin): AppState<Admin>) -> Response {
    if admin.durability.gate().lease().may_act() {
        (StatusCode::OK, "leading\n").into_response()
    } else {
        let standing = admin.standing.borrow().label();
        (StatusCode::SERVICE_UNAVAILABLE, format!("{standing}\n")).into_response()
    }
}

async fn readyz(AppState(admin): AppState<Admin>) -> Response {
    // Only the leader serves: a load balancer, a Service or a VIP routes to it alone.
    if !admin.durability.gate().lease().may_act() {
        let standing = admin.standing.borrow().clone();
        let leader = standing
            .leader()
            .map(|l| format!(" (the leader is {} at {})", l.name, l.advertise))
            .unwrap_or_default();
        let reason = format!("not ready: {} in its cluster{leader}\n", standing.label());
        return (StatusCode::SERVICE_UNAVAILABLE, reason).into_response();
    }
    if let Err(problem) = admin.primary.check().await {
        let reason = format!(
            "not ready: primary {} unreachable: {problem}\n",
            admin.primary.addr()
        );
        return (StatusCode::SERVICE_UNAVAILABLE, reason).into_response();
    }
    let config = admin.durability.config();
    let status = admin.durability.status();
    if let Some(unmet) = status.quorum_unmet.filter(|_| !config.passthrough) {
        // Under `degrade` an instance without its quorum still serves, as the policy says it
        // should: routing clients away would end every session over what the policy exists to
        // ride out. DEGRADED shows in /status, a metric and an alert instead.
        if config.on_timeout == OnTimeout::Degrade {
            let reason = format!(
                "ready, degraded: {unmet}; a commit waits ack_timeout for its quorum, then is released (on_timeout = degrade)\n"
            );
            return (StatusCode::OK, reason).into_response();
        }
        let reason = format!(
            "not ready: {unmet}; commits cannot be acknowledged (on_timeout = {})\n",
            config.on_timeout
        );
        return (StatusCode::SERVICE_UNAVAILABLE, reason).into_response();
    }
    (StatusCode::OK, "ready\n").into_response()
}

/// The refusal (counted) of a call whose credential does not pass; `None` if it passes.
fn refused(admin: &Admin, headers: &HeaderMap) -> Option<Response> {
    let presented = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
    let refusal = AdminToken::check(admin.control.token(), presented).err()?;
    {
        admin
            .metrics
            .admin_refused
            .with_label_values(&[refusal.label()])
            .inc();
        tracing::warn!(why = refusal.label(), "admin call refused");
        let status = match refusal {
            Refusal::MissingToken => StatusCode::UNAUTHORIZED,
            Refusal::NoTokenConfigured | Refusal::WrongToken => StatusCode::FORBIDDEN,
        };
        Some((status, format!("{refusal}\n")).into_response())
    }
}

/// Refuses (and counts) a call whose body or query does not parse.
fn malformed(admin: &Admin, problem: &str) -> Response {
    admin
        .metrics
        .admin_refused
        .with_label_values(&["malformed"])
        .inc();
    tracing::warn!(%problem, "malformed admin call refused");
    (StatusCode::BAD_REQUEST, format!("refused: {problem}\n")).into_response()
}

/// `POST /fence`, with an optional body `{"reason": "…"}`.
async fn fence(AppState(admin): AppState<Admin>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(refusal) = refused(&admin, &headers) {
        return refusal;
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct FenceCall {
        reason: Option<String>,
    }
    let call = if body.iter().all(u8::is_ascii_whitespace) {
        FenceCall { reason: None }
    } else {
        match serde_json::from_slice::<FenceCall>(&body) {
            Ok(call) => call,
            Err(e) => return malformed(&admin, &format!("body is not {{\"reason\": \"…\"}}: {e}")),
        }
    };
    let reason = call.reason.unwrap_or_else(|| "admin call".to_owned());
    #[derive(Serialize)]
    struct Fenced {
        fenced: bool,
        epoch: u64,
        /// False if it was fenced already.
        newly: bool,
        unacknowledged_tail: String,
        persisted: bool,
        /// Set when nothing was written to a state file.
        warning: Option<&'static str>,
    }
    let control = Arc::clone(&admin.control);
    match carried_through(async move { control.fence(&reason).await }).await {
        Ok(report) => json(
            StatusCode::OK,
            &Fenced {
                fenced: true,
                epoch: report.epoch,
                newly: report.newly,
                unacknowledged_tail: report.tail.to_string(),
                persisted: report.persisted,
                warning: not_persisted(report.persisted),
            },
        ),
        Err(e) => control_error(&admin, "fence", &e),
    }
}

/// A control call that did not go through: 409 for a refusal, 500 for a change not saved;
/// the answer says whether the fence is up after it (a follow refused once it fenced, a
/// promote that stopped midway).
fn control_error(admin: &Admin, call: &str, e: &crate::failover::ControlError) -> Response {
    tracing::warn!(error = %e, call, "admin call did not go through");
    let status = if e.is_refusal() {
        StatusCode::CONFLICT
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    let fence = match admin.durability.fence_state() {
        Some(fence) => format!(
            "the primary of epoch {} is fenced: nothing more of it is relayed or acknowledged",
            fence.epoch
        ),
        None => "nothing is fenced".to_owned(),
    };
    (status, format!("{e}\n{fence}\n")).into_response()
}

/// Runs a call that changes state to its end on a task of its own: a caller that hangs up (a
/// hook that times out) must not leave a fence, a follow or a promote half done.
async fn carried_through<T: Send + 'static>(
    call: impl std::future::Future<Output = Result<T, crate::failover::ControlError>> + Send + 'static,
) -> Result<T, crate::failover::ControlError> {
    match tokio::spawn(call).await {
        Ok(result) => result,
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Err(_) => Err(crate::failover::ControlError::Interrupted),
    }
}

/// What an answer says when no state file is configured.
fn not_persisted(persisted: bool) -> Option<&'static str> {
    (!persisted).then_some(crate::failover::NOT_PERSISTED)
}

/// `POST /follow` with `{"primary": "HOST:PORT", "force": false, "allow_retired": false}`.
async fn follow(AppState(admin): AppState<Admin>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(refusal) = refused(&admin, &headers) {
        return refusal;
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct FollowCall {
        primary: String,
        #[serde(default)]
        force: bool,
        #[serde(default)]
        allow_retired: bool,
    }
    let call = match serde_json::from_slice::<FollowCall>(&body) {
        Ok(call) if !call.primary.trim().is_empty() => call,
        Ok(_) => return malformed(&admin, "primary is empty"),
        Err(e) => {
            return malformed(
                &admin,
                &format!("body is not {{\"primary\": \"HOST:PORT\", \"force\": false, \"allow_retired\": false}}: {e}"),
            )
        }
    };
    let call = crate::failover::Follow {
        primary: call.primary,
        force: call.force,
        allow_retired: call.allow_retired,
    };
    let control = Arc::clone(&admin.control);
    match carried_through(async move { control.follow(&call).await }).await {
        Ok(report) => json(StatusCode::OK, &Followed::of(report)),
        Err(e) => control_error(&admin, "follow", &e),
    }
}

/// `POST /promote` (an empty body, or `{}`).
async fn promote(AppState(admin): AppState<Admin>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(refusal) = refused(&admin, &headers) {
        return refusal;
    }
    let empty = body.iter().all(u8::is_ascii_whitespace)
        || serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&body)
            .is_ok_and(|m| m.is_empty());
    if !empty {
        return malformed(&admin, "promote takes no arguments (an empty body or {})");
    }
    #[derive(Serialize)]
    struct Looked {
        server_id: u32,
        received: Option<String>,
        problem: Option<String>,
    }
    #[derive(Serialize)]
    struct Promoted {
        server_id: u32,
        #[serde(flatten)]
        follow: Followed,
        looked: Vec<Looked>,
    }
    let control = Arc::clone(&admin.control);
    match carried_through(async move { control.promote().await }).await {
        Ok(report) => json(
            StatusCode::OK,
            &Promoted {
                server_id: report.server_id,
                follow: Followed::of(report.follow),
                looked: report
                    .looked
                    .0
                    .into_iter()
                    .map(|(server_id, seen)| match seen {
                        crate::failover::Seen::Received(received) => Looked {
                            server_id,
                            received: Some(received.to_string()),
                            problem: None,
                        },
                        other => Looked {
                            server_id,
                            received: None,
                            problem: Some(other.to_string()),
                        },
                    })
                    .collect(),
            },
        ),
        Err(e) => control_error(&admin, "promote", &e),
    }
}

/// What a follow did, as the admin port says it.
#[derive(Serialize)]
struct Followed {
    epoch: u64,
    primary: String,
    /// Who it is (`server_id 2`, `server_uuid …`).
    identity: Option<String>,
    retired: String,
    /// GTIDs of the watermark the new primary lacked (a forced follow).
    lacking: String,
    persisted: bool,
    warning: Option<&'static str>,
}

impl Followed {
    fn of(report: crate::failover::FollowReport) -> Self {
        Followed {
            epoch: report.epoch,
            primary: report.primary,
            identity: report.identity.map(|i| i.to_string()),
            retired: report.retired,
            lacking: report.lacking,
            persisted: report.persisted,
            warning: not_persisted(report.persisted),
        }
    }
}

/// `POST /reinstate` with `{"primary": "HOST:PORT"}`.
async fn reinstate(AppState(admin): AppState<Admin>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(refusal) = refused(&admin, &headers) {
        return refusal;
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct ReinstateCall {
        primary: String,
    }
    let call = match serde_json::from_slice::<ReinstateCall>(&body) {
        Ok(call) => call,
        Err(e) => {
            return malformed(
                &admin,
                &format!("body is not {{\"primary\": \"HOST:PORT\"}}: {e}"),
            )
        }
    };
    let control = Arc::clone(&admin.control);
    let primary = call.primary.clone();
    match carried_through(async move { control.reinstate(&primary).await }).await {
        Ok(persisted) => json(
            StatusCode::OK,
            &serde_json::json!({
                "reinstated": call.primary.trim(),
                "persisted": persisted,
                "warning": not_persisted(persisted),
            }),
        ),
        Err(e) => control_error(&admin, "reinstate", &e),
    }
}

/// `GET /outcome?gtid=…`.
async fn outcome(AppState(admin): AppState<Admin>, RawQuery(query): RawQuery) -> Response {
    let text = query.as_deref().and_then(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("gtid="))
            .map(|v| v.replace("%3A", ":").replace("%3a", ":"))
    });
    let Some(text) = text else {
        return malformed(&admin, "give the GTID as /outcome?gtid=<gtid>");
    };
    let gtid = match text.parse::<strongsync_proto::gtid::Gtid>() {
        Ok(gtid) if gtid.binlog_position().is_none() => gtid,
        _ => return malformed(&admin, &format!("{text:?} is not a GTID")),
    };
    #[derive(Serialize)]
    struct Answer {
        gtid: String,
        outcome: &'static str,
        /// For a commit released without its quorum: the quorum holds it now.
        quorum_holds_it_now: Option<bool>,
    }
    let outcome = admin.durability.outcome(&gtid);
    json(
        StatusCode::OK,
        &Answer {
            gtid: gtid.to_string(),
            outcome: outcome.label(),
            quorum_holds_it_now: match outcome {
                GtidOutcome::ReleasedWithoutQuorum { held } => Some(held),
                _ => None,
            },
        },
    )
}

fn json(status: StatusCode, value: &impl Serialize) -> Response {
    // Pretty: people read it with curl as often as programs do.
    match serde_json::to_string_pretty(value) {
        Ok(mut json) => {
            json.push('\n');
            (status, [(header::CONTENT_TYPE, "application/json")], json).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

async fn status(AppState(admin): AppState<Admin>) -> Response {
    let reachable = admin.primary.check().await;
    let members = match &admin.cluster {
        Some(cluster) => Some(cluster.members().await),
        None => None,
    };
    let config = admin.durability.config();
    let s: DurabilityStatus = admin.durability.status();
    let status = Status {
        state: match s.state {
            State::Strong => "strong",
            State::Degraded => "degraded",
        },
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
        session_tracking: admin.durability.session_defaults.describe(),
        persisted: admin.control.persists(),
        retired_primaries: admin
            .control
            .retired()
            .into_iter()
            .map(|r| RetiredPrimary {
                address: r.address,
                identity: r.identity.map(|i| i.to_string()),
            })
            .collect(),
        failover_candidates: s.failover_candidates,
        not_failover_candidates: s
            .not_candidates
            .into_iter()
            .map(|n| NotCandidate {
                server_id: n.server_id,
                reason: n.reason,
            })
            .collect(),
        parked_sessions: s.parked,
        parked_overdue: s.parked_overdue,
        degraded_seconds_total: s.degraded_total.as_secs_f64(),
        released_without_quorum: s
            .released_without_quorum
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
            .collect(),
        unresolved_releases: s
            .unresolved
            .iter()
            .map(|u| UnresolvedRelease {
                connection_id: u.connection_id,
                reason: u.reason.clone(),
                gtids: u.gtids.clone(),
                seconds_ago: u.at.elapsed().as_secs_f64(),
            })
            .collect(),
        released: s.released,
        visibility: s.visibility.to_string(),
        reads_held: s.reads_parked,
        reads_released: s.reads_released,
        reads_waited: s.reads_queued,
        reads_in_snapshot: s.reads_in_snapshot,
        tls: admin.tls.clone(),
        cluster: admin.cluster.as_ref().map(|cluster| {
            let me = cluster.me();
            let standing = admin.standing.borrow().clone();
            let (members, members_problem) = match members {
                Some(Ok(members)) => (members, None),
                Some(Err(problem)) => (Vec::new(), Some(problem)),
                None => (Vec::new(), None),
            };
            ClusterStatus {
                name: me.name.clone(),
                members,
                members_problem,
                standing: standing.label(),
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
        }),
        sharing: admin.pools.enabled().then(|| SharingStatus {
            pool_size: admin.pools.pool_size(),
            free_connections: admin.pools.free(),
            pools: admin.pools.count(),
            pinned_sessions: crate::metrics::PIN_REASONS
                .iter()
                .map(|why| {
                    (
                        *why,
                        admin
                            .metrics
                            .sessions_pinned
                            .with_label_values(&[why])
                            .get(),
                    )
                })
                .collect(),
            set_names: admin.durability.session_defaults.names_known(),
        }),
        primary: PrimaryStatus {
            address: admin.control.primary(),
            identity: admin.control.followed().identity.map(|i| i.to_string()),
            reachable: reachable.is_ok(),
            problem: reachable.err().map(|e| e.to_string()),
        },
        replicas: s
            .replicas
            .into_iter()
            .chain(s.departed)
            .map(|r| Replica {
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
            })
            .collect(),
    };
    json(StatusCode::OK, &status)
}
