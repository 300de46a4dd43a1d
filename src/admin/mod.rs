//! The admin HTTP port: what an operator, a load balancer and Prometheus ask of a running
//! strongsync ([`ENDPOINTS`]), separate from the SQL port.

mod listener;
mod status;

pub use crate::status::TlsStatus;
pub use listener::Listening;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, RawQuery, State as AppState};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::OnTimeout;
use crate::durability::{Durability, GtidOutcome};
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

/// Largest body an admin call may carry.
const MAX_BODY: usize = 64 * 1024;

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
        route: || get(status::status),
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
