//! The operator's commands (`strongsync status`, `fence`, `follow`, `promote`, `reinstate`,
//! `outcome`): calls to a running proxy's admin port (over HTTPS when it has `admin_tls`),
//! answered in words. The calls that change anything carry the admin token from its file; the
//! token is never printed. Each call waits as long as the proxy's own timeouts may make it
//! take: a promote fences, drains, looks at every replica and waits for one to apply.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use thiserror::Error;

use crate::config::Config;

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
    /// The proxy's answer is not what this command reads.
    #[error("unexpected answer: {0}")]
    Unexpected(String),
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
            .ok_or_else(|| OperatorError::Unexpected(answer.to_string()))?;
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
        serde_json::from_str(&text).map_err(|e| OperatorError::Unexpected(e.to_string()))
    }
}

/// Adds the answer's warning that nothing was persisted, if it has one.
fn warn_unpersisted(out: &mut String, answer: &Value) {
    if let Some(warning) = answer["warning"].as_str() {
        let _ = writeln!(out, "WARNING: {warning}");
    }
}

/// `/status` as an operator reads it.
fn render_status(s: &Value) -> String {
    let text = |v: &Value| match v {
        Value::Null => "-".to_owned(),
        Value::String(s) if s.is_empty() => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut out = String::new();
    let state = if s["fenced"].as_bool() == Some(true) {
        "FENCED".to_owned()
    } else {
        text(&s["state"]).to_uppercase()
    };
    let _ = writeln!(
        out,
        "state {state}   epoch {}   primary {} ({})",
        text(&s["epoch"]),
        text(&s["primary"]["address"]),
        if s["primary"]["reachable"].as_bool() == Some(true) {
            "reachable"
        } else {
            "unreachable"
        }
    );
    if s["cluster"].is_object() {
        let c = &s["cluster"];
        let members: Vec<String> = c["members"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|m| format!("{} ({})", text(&m["name"]), text(&m["advertise"])))
                    .collect()
            })
            .unwrap_or_default();
        let lease = c["lease"]["id"]
            .as_str()
            .map(|id| format!(", lease {id} of {}s", text(&c["lease"]["ttl_seconds"])))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "cluster: {} is {}{lease}; leader {}; members {}",
            text(&c["name"]),
            text(&c["standing"]),
            text(&c["leader"]["name"]),
            if members.is_empty() {
                text(&c["members_problem"])
            } else {
                members.join(", ")
            }
        );
    }
    if s["persisted"].as_bool() == Some(false) {
        let _ = writeln!(
            out,
            "state file: none (the fence, the epoch and the retired primaries live in memory only)"
        );
    }
    if let Some(tracking) = s["session_tracking"].as_str() {
        let _ = writeln!(out, "session tracking: {tracking}");
    }
    if s["tls"].is_object() {
        let pin = s["tls"]["clients_sha256"]
            .as_str()
            .map(|sha| format!(", sha256 {sha}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "TLS: clients {}{pin}; primary_tls {}",
            text(&s["tls"]["clients"]),
            text(&s["tls"]["primary"])
        );
    }
    if let Some(why) = s["commits_untracked"].as_str() {
        let _ = writeln!(out, "COMMITS UNTRACKED: {why}: every response is bounded");
    }
    let retired: Vec<String> = s["retired_primaries"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| match r["identity"].as_str() {
                    Some(identity) => format!("{} ({identity})", text(&r["address"])),
                    None => text(&r["address"]),
                })
                .collect()
        })
        .unwrap_or_default();
    if !retired.is_empty() {
        let _ = writeln!(out, "retired primaries: {}", retired.join(", "));
    }
    let _ = writeln!(out, "quorum rule: {}", text(&s["quorum_rule"]));
    let _ = writeln!(out, "watermark: {}", text(&s["watermark_gtid_position"]));
    let _ = writeln!(
        out,
        "unacknowledged tail: {}",
        text(&s["unacknowledged_tail"])
    );
    let candidates: Vec<String> = s["failover_candidates"]
        .as_array()
        .map(|a| a.iter().map(text).collect())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "failover candidates: {}",
        if candidates.is_empty() {
            "none".to_owned()
        } else {
            candidates.join(", ")
        }
    );
    let _ = writeln!(out, "parked commits: {}", text(&s["parked_sessions"]));
    let header = [
        "server_id",
        "connected",
        "semisync",
        "GTIDs of the watermark",
        "lag (transactions)",
        "last ACK (s ago)",
    ];
    let rows: Vec<[String; 6]> = s["replicas"]
        .as_array()
        .map(|replicas| {
            replicas
                .iter()
                .map(|r| {
                    [
                        text(&r["server_id"]),
                        text(&r["connected"]),
                        text(&r["semisync"]),
                        text(&r["acked_gtid_position"]),
                        text(&r["lag_transactions"]),
                        r["last_ack_age_seconds"]
                            .as_f64()
                            .map_or_else(|| "-".to_owned(), |a| format!("{a:.1}")),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
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
    out.push('\n');
    line(&mut out, &header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&mut out, &cells);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_as_a_table() {
        let status = serde_json::json!({
            "state": "strong", "fenced": false, "epoch": 2,
            "primary": {"address": "10.0.0.2:3306", "reachable": true},
            "quorum_rule": "1 of the semisync replicas",
            "watermark_gtid_position": "0-1-40",
            "unacknowledged_tail": "",
            "failover_candidates": [2],
            "parked_sessions": 0,
            "replicas": [
                {"server_id": 2, "connected": true, "semisync": true, "acked_gtid_position": "0-1-40", "lag_transactions": 0, "last_ack_age_seconds": 0.3},
                {"server_id": 3, "connected": false, "semisync": true, "acked_gtid_position": "0-1-12", "lag_transactions": null, "last_ack_age_seconds": null}
            ]
        });
        let out = render_status(&status);
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
        let fenced =
            serde_json::json!({"state": "strong", "fenced": true, "epoch": 2, "replicas": []});
        assert!(render_status(&fenced).starts_with("state FENCED"));
    }
}
