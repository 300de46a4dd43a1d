//! The operator's commands (`strongsync status`, `fence`, `follow`, `promote`, `reinstate`,
//! `outcome`): calls to a running proxy's admin port, answered in words.

// Over HTTPS when the proxy has `admin_tls`. The calls that change anything carry the admin
// token from its file; the token is never printed. Each call waits as long as the proxy's own
// timeouts may make it take: a promote fences, drains, looks at every replica and waits for
// one to apply.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use thiserror::Error;

use crate::config::Config;
use crate::status::{ClusterStatus, Replica, Status};

/// Time for the call itself, beyond what the proxy's timeouts allow it.
const MARGIN: Duration = Duration::from_secs(30);

/// Where the admin port is, the token for calls that change anything, and how long each call
/// may take.
#[derive(Debug, Clone)]
pub struct AdminPort {
    /// `HOST:PORT` of the admin port.
    pub addr: String,
    /// The token, if a token file was given.
    token: Option<String>,
    /// The certificates an HTTPS admin port is trusted by (`None`: plain HTTP).
    tls: Option<Vec<ureq::tls::Certificate<'static>>>,
    limits: CallLimits,
}

/// How long each call may take, from the proxy's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// `status`, `outcome`, `reinstate`.
    pub read: Duration,
    /// A fence: its drain (twice: pipes, then writes under way).
    pub fence: Duration,
    /// A follow: the checks, the fence and the epoch's drain.
    pub follow: Duration,
    /// A promote: the fence, a look at every replica, the apply, the follow.
    pub promote: Duration,
}

impl CallLimits {
    /// The limits of a proxy that runs with `config` (its defaults, if none is given).
    pub fn of(config: &Config) -> Self {
        let f = &config.failover;
        let connect = config.timeouts.primary_connect;
        let fence = f.fence_drain * 2 + MARGIN;
        // Two looks at the server (connect and ask, each within the connect timeout) and the
        // fence, then the drain of the epoch.
        let follow = connect * 4 + f.fence_drain * 3 + MARGIN;
        let replicas = u32::try_from(config.replica.len())
            .unwrap_or(u32::MAX)
            .max(1);
        let promote = follow + connect * 2 * (replicas + 1) + f.promote_apply_timeout;
        CallLimits {
            read: MARGIN,
            fence,
            follow,
            promote,
        }
    }
}

/// Whether `outcome` could say what became of a commit (its exit code tells scripts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// It did: acknowledged, released without its quorum, or the tail of a fenced primary.
    Answer,
    /// Not yet: the commit still waits for its quorum.
    Waiting,
    /// strongsync knows nothing of the GTID.
    Unknown,
}

/// Why a command failed.
#[derive(Debug, Error)]
pub enum OperatorError {
    /// The admin port could not be reached, or did not answer HTTP.
    #[error("admin port {addr}: {problem}")]
    Unreachable {
        /// Where.
        addr: String,
        /// What went wrong.
        problem: String,
    },
    /// The proxy refused the call or failed it.
    #[error("{status}: {body}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// What the proxy said.
        body: String,
    },
    /// The token file cannot be read.
    #[error("token file {path}: {problem}")]
    Token {
        /// The file.
        path: String,
        /// Why.
        problem: String,
    },
    /// The certificate file to trust the admin port by cannot be read.
    #[error("certificate file {path}: {problem}")]
    Certificate {
        /// The file.
        path: String,
        /// Why.
        problem: String,
    },
    /// The proxy's answer to a call is not what this command reads.
    #[error("unexpected answer: {path}: {source}")]
    Unexpected {
        /// The call.
        path: String,
        /// What does not read.
        source: serde_json::Error,
    },
    /// The proxy's answer lacks what this command reads.
    #[error("unexpected answer: {answer}")]
    Lacking {
        /// The answer as it came.
        answer: serde_json::Value,
    },
}

// === impl AdminPort ===

impl AdminPort {
    /// The admin port at `addr`, with the token in `token_file` if given, over HTTPS trusting
    /// the certificates in `ca` if given, each call within `limits`.
    ///
    /// # Errors
    /// [`OperatorError::Token`] for a token file that cannot be read;
    /// [`OperatorError::Certificate`] for a certificate file that cannot.
    pub fn new(
        addr: String,
        token_file: Option<&Path>,
        ca: Option<&Path>,
        limits: CallLimits,
    ) -> Result<Self, OperatorError> {
        let tls = ca
            .map(|path| {
                let unreadable = |problem: String| OperatorError::Certificate {
                    path: path.display().to_string(),
                    problem,
                };
                let pem = std::fs::read(path).map_err(|e| unreadable(e.to_string()))?;
                let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
                    .filter_map(|item| match item {
                        Ok(ureq::tls::PemItem::Certificate(cert)) => Some(Ok(cert)),
                        Ok(_) => None,
                        Err(e) => Some(Err(e)),
                    })
                    .collect::<Result<_, _>>()
                    .map_err(|e| unreadable(e.to_string()))?;
                if certs.is_empty() {
                    return Err(unreadable("no PEM certificate in it".into()));
                }
                Ok(certs)
            })
            .transpose()?;
        let token = token_file
            .map(|path| {
                std::fs::read_to_string(path)
                    .map(|t| t.trim_end_matches(['\n', '\r']).to_owned())
                    .map_err(|e| OperatorError::Token {
                        path: path.display().to_string(),
                        problem: e.to_string(),
                    })
            })
            .transpose()?;
        Ok(AdminPort {
            addr,
            token,
            tls,
            limits,
        })
    }

    /// `strongsync status`: the state, the epoch, the fence's tail, the candidates and a table
    /// of replicas.
    ///
    /// # Errors
    /// [`OperatorError`].
    pub fn status(&self) -> Result<String, OperatorError> {
        let status = self.call("GET", "/status", None, self.limits.read)?;
        let status: Status =
            serde_json::from_value(status).map_err(|source| OperatorError::Unexpected {
                path: "/status".to_owned(),
                source,
            })?;
        Ok(render_status(&status))
    }

    /// `strongsync fence`: fences the primary.
    ///
    /// # Errors
    /// [`OperatorError`], [`OperatorError::Refused`] for a missing or wrong token.
    pub fn fence(&self, reason: Option<&str>) -> Result<String, OperatorError> {
        let body = serde_json::json!({ "reason": reason.unwrap_or("strongsync fence") });
        let answer = self.call("POST", "/fence", Some(body.to_string()), self.limits.fence)?;
        let epoch = &answer["epoch"];
        let tail = answer["unacknowledged_tail"].as_str().unwrap_or("");
        let mut out = if answer["newly"].as_bool() == Some(true) {
            format!("fenced the primary of epoch {epoch}\n")
        } else {
            format!("already fenced (epoch {epoch}); nothing changed\n")
        };
        let tail = if tail.is_empty() { "none known" } else { tail };
        let _ = writeln!(out, "unacknowledged tail: {tail}");
        warn_unpersisted(&mut out, &answer);
        Ok(out)
    }

    /// `strongsync follow HOST:PORT`: follows a new primary.
    ///
    /// # Errors
    /// [`OperatorError`]; [`OperatorError::Refused`] says why a follow was refused.
    pub fn follow(
        &self,
        primary: &str,
        force: bool,
        allow_retired: bool,
    ) -> Result<String, OperatorError> {
        let body = serde_json::json!({
            "primary": primary, "force": force, "allow_retired": allow_retired,
        });
        let answer = self.call(
            "POST",
            "/follow",
            Some(body.to_string()),
            self.limits.follow,
        )?;
        let mut out = format!(
            "following {} (epoch {})\n",
            answer["primary"].as_str().unwrap_or(primary),
            answer["epoch"]
        );
        if let Some(retired) = answer["retired"].as_str().filter(|r| !r.is_empty()) {
            let _ = writeln!(out, "retired: {retired}");
        }
        if let Some(lacking) = answer["lacking"].as_str().filter(|l| !l.is_empty()) {
            let _ = writeln!(
                out,
                "FORCED: the new primary lacks {lacking} of the watermark"
            );
        }
        warn_unpersisted(&mut out, &answer);
        Ok(out)
    }

    /// `strongsync promote`: fences, promotes the replica that holds the whole
    /// commit and received the most, follows it.
    ///
    /// # Errors
    /// [`OperatorError`]; [`OperatorError::Refused`] says which step stopped it.
    pub fn promote(&self) -> Result<String, OperatorError> {
        let answer = self.call(
            "POST",
            "/promote",
            Some("{}".to_owned()),
            self.limits.promote,
        )?;
        let mut out = format!(
            "promoted server {} at {} (epoch {})\n",
            answer["server_id"],
            answer["primary"].as_str().unwrap_or("?"),
            answer["epoch"]
        );
        for looked in answer["looked"].as_array().into_iter().flatten() {
            let what = looked["received"].as_str().map_or_else(
                || {
                    format!(
                        "not looked at: {}",
                        looked["problem"].as_str().unwrap_or("?")
                    )
                },
                |r| format!("had received {r}"),
            );
            let _ = writeln!(out, "  server {}: {what}", looked["server_id"]);
        }
        warn_unpersisted(&mut out, &answer);
        Ok(out)
    }

    /// `strongsync reinstate HOST:PORT`: a retired primary may be followed again.
    ///
    /// # Errors
    /// [`OperatorError`].
    pub fn reinstate(&self, primary: &str) -> Result<String, OperatorError> {
        let body = serde_json::json!({ "primary": primary });
        let answer = self.call(
            "POST",
            "/reinstate",
            Some(body.to_string()),
            self.limits.read,
        )?;
        let mut out = format!("reinstated {primary}: it may be followed and promoted again\n");
        warn_unpersisted(&mut out, &answer);
        Ok(out)
    }

    /// `strongsync outcome GTID`: the answer in words, and whether it is one.
    ///
    /// # Errors
    /// [`OperatorError`].
    pub fn outcome(&self, gtid: &str) -> Result<(String, Known), OperatorError> {
        let query = format!("/outcome?gtid={}", gtid.replace(':', "%3A"));
        let answer = self.call("GET", &query, None, self.limits.read)?;
        let outcome = answer["outcome"]
            .as_str()
            .ok_or_else(|| OperatorError::Lacking {
                answer: answer.clone(),
            })?;
        let words = match outcome {
            "acknowledged" => {
                "held by the quorum (acknowledged, if a client of strongsync committed it)"
            }
            "released_without_quorum" => {
                if answer["quorum_holds_it_now"].as_bool() == Some(true) {
                    "released to its client without its quorum (the quorum holds it now)"
                } else {
                    "released to its client without its quorum"
                }
            }
            "unacknowledged_tail" => {
                "committed on a fenced primary and never acknowledged (the unacknowledged tail)"
            }
            "waiting" => "waiting for its quorum",
            _ => "unknown to strongsync",
        };
        let known = match outcome {
            "waiting" => Known::Waiting,
            "acknowledged" | "released_without_quorum" | "unacknowledged_tail" => Known::Answer,
            _ => Known::Unknown,
        };
        Ok((format!("{gtid}: {outcome}: {words}\n"), known))
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
        limit: Duration,
    ) -> Result<Value, OperatorError> {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(limit));
        let scheme = match &self.tls {
            None => "http",
            Some(certs) => {
                let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
                config = config.tls_config(
                    ureq::tls::TlsConfig::builder()
                        .provider(ureq::tls::TlsProvider::Rustls)
                        .unversioned_rustls_crypto_provider(provider)
                        .root_certs(ureq::tls::RootCerts::new_with_certs(certs))
                        .build(),
                );
                "https"
            }
        };
        let agent: ureq::Agent = config.build().into();
        let url = format!("{scheme}://{}{path}", self.addr);
        let unreachable = |e: ureq::Error| OperatorError::Unreachable {
            addr: self.addr.clone(),
            problem: e.to_string(),
        };
        let bearer = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let response = match method {
            "POST" => {
                let mut request = agent.post(&url);
                if let Some(bearer) = &bearer {
                    request = request.header("Authorization", bearer);
                }
                request
                    .header("Content-Type", "application/json")
                    .send(body.unwrap_or_default())
            }
            _ => {
                let mut request = agent.get(&url);
                if let Some(bearer) = &bearer {
                    request = request.header("Authorization", bearer);
                }
                request.call()
            }
        };
        let mut response = response.map_err(unreachable)?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(unreachable)?;
        if status != 200 {
            return Err(OperatorError::Refused {
                status,
                body: text.trim_end().to_owned(),
            });
        }
        serde_json::from_str(&text).map_err(|source| OperatorError::Unexpected {
            path: path.to_owned(),
            source,
        })
    }
}

/// Adds the answer's warning that nothing was persisted, if it has one.
fn warn_unpersisted(out: &mut String, answer: &Value) {
    if let Some(warning) = answer["warning"].as_str() {
        let _ = writeln!(out, "WARNING: {warning}");
    }
}

/// `/status` as an operator reads it: the headline, what stands out about this instance,
/// what a failover needs, and a table of replicas.
fn render_status(s: &Status) -> String {
    let mut out = String::new();
    headline(&mut out, s);
    if let Some(cluster) = &s.cluster {
        cluster_line(&mut out, cluster);
    }
    setup_lines(&mut out, s);
    failover_lines(&mut out, s);
    out.push('\n');
    replica_table(&mut out, &s.replicas);
    out
}

/// A value as the status shows it: `-` for none or empty.
fn text(v: Option<&str>) -> String {
    match v {
        None | Some("") => "-".to_owned(),
        Some(v) => v.to_owned(),
    }
}

/// The state, the epoch and the primary.
fn headline(out: &mut String, s: &Status) {
    let state = if s.fenced {
        "FENCED".to_owned()
    } else {
        text(Some(&s.state)).to_uppercase()
    };
    let reachable = if s.primary.reachable {
        "reachable"
    } else {
        "unreachable"
    };
    let _ = writeln!(
        out,
        "state {state}   epoch {}   primary {} ({reachable})",
        s.epoch,
        text(Some(&s.primary.address)),
    );
}

/// This instance in its cluster: its standing, its lease, the leader and the members.
fn cluster_line(out: &mut String, c: &ClusterStatus) {
    let members: Vec<String> = c
        .members
        .iter()
        .map(|m| format!("{} ({})", text(Some(&m.name)), text(Some(&m.advertise))))
        .collect();
    let lease = c
        .lease
        .as_ref()
        .map(|l| format!(", lease {} of {}s", l.id, l.ttl_seconds))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "cluster: {} is {}{lease}; leader {}; members {}",
        text(Some(&c.name)),
        text(Some(&c.standing)),
        text(c.leader.as_ref().map(|l| l.name.as_str())),
        if members.is_empty() {
            text(c.members_problem.as_deref())
        } else {
            members.join(", ")
        }
    );
}

/// How this instance is set up, where it stands out: no state file, session tracking, TLS,
/// commits untracked.
fn setup_lines(out: &mut String, s: &Status) {
    if !s.persisted {
        let _ = writeln!(
            out,
            "state file: none (the fence, the epoch and the retired primaries live in memory only)"
        );
    }
    let _ = writeln!(out, "session tracking: {}", s.session_tracking);
    let pin = s
        .tls
        .clients_sha256
        .as_ref()
        .map(|sha| format!(", sha256 {sha}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "TLS: clients {}{pin}; primary_tls {}",
        text(Some(&s.tls.clients)),
        text(Some(&s.tls.primary))
    );
    if let Some(why) = &s.commits_untracked {
        let _ = writeln!(out, "COMMITS UNTRACKED: {why}: every response is bounded");
    }
}

/// What a failover needs: the retired primaries, the rule, the watermark, the tail, the
/// candidates and the commits parked.
fn failover_lines(out: &mut String, s: &Status) {
    let retired: Vec<String> = s
        .retired_primaries
        .iter()
        .map(|r| match &r.identity {
            Some(identity) => format!("{} ({identity})", text(Some(&r.address))),
            None => text(Some(&r.address)),
        })
        .collect();
    if !retired.is_empty() {
        let _ = writeln!(out, "retired primaries: {}", retired.join(", "));
    }
    let _ = writeln!(out, "quorum rule: {}", text(Some(&s.quorum_rule)));
    let _ = writeln!(out, "watermark: {}", text(Some(&s.watermark_gtid_position)));
    let _ = writeln!(
        out,
        "unacknowledged tail: {}",
        text(Some(&s.unacknowledged_tail))
    );
    let candidates: Vec<String> = s.failover_candidates.iter().map(u32::to_string).collect();
    let _ = writeln!(
        out,
        "failover candidates: {}",
        if candidates.is_empty() {
            "none".to_owned()
        } else {
            candidates.join(", ")
        }
    );
    let _ = writeln!(out, "parked commits: {}", s.parked_sessions);
}

/// The replicas, one row each, in columns as wide as their widest cell.
fn replica_table(out: &mut String, replicas: &[Replica]) {
    let header = [
        "server_id",
        "connected",
        "semisync",
        "GTIDs of the watermark",
        "lag (transactions)",
        "last ACK (s ago)",
    ];
    let rows: Vec<[String; 6]> = replicas
        .iter()
        .map(|r| {
            [
                r.server_id.to_string(),
                r.connected.to_string(),
                r.semisync.to_string(),
                text(Some(&r.acked_gtid_position)),
                r.lag_transactions
                    .map_or_else(|| "-".to_owned(), |l| l.to_string()),
                r.last_ack_age_seconds
                    .map_or_else(|| "-".to_owned(), |a| format!("{a:.1}")),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|row| row[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |out: &mut String, cells: &[&str]| {
        let cells: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    };
    line(out, &header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(out, &cells);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{PrimaryStatus, TlsStatus};

    fn replica(server_id: u32, connected: bool, held: &str, lag: Option<u64>) -> Replica {
        Replica {
            server_id,
            address: "10.0.0.9:40000".into(),
            zone: None,
            labels: Default::default(),
            connected,
            disconnected_seconds: (!connected).then_some(4.0),
            semisync: true,
            compressed: false,
            acked_gtid_position: held.into(),
            acked_position: None,
            holds_through: None,
            acked_file: None,
            acked_offset: None,
            lag_bytes: None,
            lag_transactions: lag,
            last_ack_age_seconds: connected.then_some(0.3),
        }
    }

    /// A status as a proxy with two replicas, one gone, serves it.
    fn status() -> Status {
        Status {
            state: "strong".into(),
            fenced: false,
            epoch: 2,
            unacknowledged_tail: String::new(),
            quorum: 1,
            quorum_rule: "1 of the semisync replicas".into(),
            quorum_zones: 0,
            cross_zone: false,
            primary_zone: None,
            quorum_unmet: None,
            session_quorum_floor: 1,
            session_quorum_max: 1,
            async_replicas: "after_quorum".into(),
            ack_timeout: "10s".into(),
            on_timeout: "block".into(),
            without_quorum: "refuse".into(),
            passthrough: false,
            quorum_position: None,
            head: None,
            watermark_gtid_position: "0-1-40".into(),
            watermark_gtid_state: "0-1-40".into(),
            watermark_inexact: false,
            acknowledged_gtid_position: "0-1-40".into(),
            acknowledged_gtid_state: "0-1-40".into(),
            acknowledged_inexact: false,
            commits_untracked: None,
            session_tracking: "configured".into(),
            persisted: true,
            retired_primaries: Vec::new(),
            failover_candidates: vec![2],
            not_failover_candidates: Vec::new(),
            parked_sessions: 0,
            parked_overdue: 0,
            degraded_seconds_total: 0.0,
            released_without_quorum: Vec::new(),
            unresolved_releases: Vec::new(),
            released: Default::default(),
            visibility: "commit".into(),
            reads_held: 0,
            reads_released: Default::default(),
            reads_waited: 0,
            reads_in_snapshot: 0,
            tls: TlsStatus {
                clients: "off".into(),
                clients_sha256: None,
                primary: "off".into(),
            },
            cluster: None,
            sharing: None,
            primary: PrimaryStatus {
                address: "10.0.0.2:3306".into(),
                identity: None,
                reachable: true,
                problem: None,
            },
            replicas: vec![
                replica(2, true, "0-1-40", Some(0)),
                replica(3, false, "0-1-12", None),
            ],
        }
    }

    #[test]
    fn status_reads_as_a_table() {
        let out = render_status(&status());
        assert!(
            out.starts_with("state STRONG   epoch 2   primary 10.0.0.2:3306 (reachable)\n"),
            "{out}"
        );
        assert!(out.contains("unacknowledged tail: -\n"), "{out}");
        assert!(out.contains("failover candidates: 2\n"), "{out}");
        let rows: Vec<Vec<&str>> = out
            .lines()
            .skip_while(|l| !l.starts_with("server_id"))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows[1],
            ["2", "true", "true", "0-1-40", "0", "0.3"],
            "{out}"
        );
        assert_eq!(rows[2], ["3", "false", "true", "0-1-12", "-", "-"], "{out}");
        let fenced = Status {
            fenced: true,
            ..status()
        };
        assert!(render_status(&fenced).starts_with("state FENCED"));
    }

    #[test]
    fn a_status_with_fields_missing_still_renders() {
        let partial = serde_json::json!({
            "state": "strong", "fenced": false, "epoch": 2,
            "primary": {"address": "10.0.0.2:3306", "reachable": true},
            "replicas": [{"server_id": 2, "connected": true, "semisync": true}]
        });
        let status: Status = serde_json::from_value(partial).unwrap();
        let out = render_status(&status);
        assert!(
            out.starts_with("state STRONG   epoch 2   primary 10.0.0.2:3306 (reachable)\n"),
            "{out}"
        );
        assert!(out.contains("failover candidates: none\n"), "{out}");
        let last = out.lines().last().unwrap();
        assert_eq!(
            last.split_whitespace().collect::<Vec<_>>(),
            ["2", "true", "true", "-", "-", "-"],
            "{out}"
        );
    }

    #[test]
    fn the_status_read_back_is_the_status_served() {
        let served = serde_json::to_value(status()).unwrap();
        let read: Status = serde_json::from_value(served).unwrap();
        assert_eq!(read, status());
    }
}
