//! Talking to the proxy's admin port: plain HTTP/1.1 requests over a socket (so tests can
//! also send garbage), and lookups in the Prometheus text it serves.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use strongsync::status::{Replica, Status};

/// An HTTP response: status code and body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// Sends `request` as is and reads the whole response (the connection is closed after it).
pub fn raw(addr: SocketAddr, request: &[u8]) -> Response {
    let mut stream = TcpStream::connect(addr).expect("connect to the admin port");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut text = Vec::new();
    stream
        .read_to_end(&mut text)
        .expect("read the admin response");
    let text = String::from_utf8_lossy(&text).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("an HTTP response, got {text:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line, got {head:?}"));
    Response {
        status,
        body: body.to_owned(),
    }
}

/// `method path`, with `Connection: close`.
pub fn request(addr: SocketAddr, method: &str, path: &str) -> Response {
    raw(
        addr,
        format!("{method} {path} HTTP/1.1\r\nHost: strongsync\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
}

/// `POST path` with `body`, carrying `token` as `Authorization: Bearer` if given.
pub fn post(addr: SocketAddr, path: &str, token: Option<&str>, body: &str) -> Response {
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    raw(
        addr,
        format!(
            "POST {path} HTTP/1.1\r\nHost: strongsync\r\nConnection: close\r\n{auth}\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
}

pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path)
}

/// `/metrics`, parsed.
pub fn metrics(addr: SocketAddr) -> Scrape {
    let response = get(addr, "/metrics");
    assert_eq!(response.status, 200, "{}", response.body);
    Scrape(response.body)
}

/// `/status`, read as `strongsync status` reads it.
pub fn status(addr: SocketAddr) -> Status {
    let response = get(addr, "/status");
    assert_eq!(response.status, 200, "{}", response.body);
    serde_json::from_str(&response.body)
        .unwrap_or_else(|e| panic!("/status is a Status ({e}): {}", response.body))
}

/// `/status` as the JSON served, for what is about its form (a field absent, a name kept for
/// a release).
pub fn status_json(addr: SocketAddr) -> serde_json::Value {
    let response = get(addr, "/status");
    assert_eq!(response.status, 200, "{}", response.body);
    serde_json::from_str(&response.body).expect("/status is JSON")
}

/// One scrape of `/metrics`.
#[derive(Debug, Clone)]
pub struct Scrape(pub String);

impl Scrape {
    /// The value of the sample written exactly `series` (name and labels as exported,
    /// e.g. `strongsync_parked_sessions` or `strongsync_replica_acks_total{server_id="2"}`).
    pub fn value(&self, series: &str) -> Option<f64> {
        self.0.lines().find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().expect("a number"))
        })
    }

    /// Like [`value`](Self::value), failing the test when the series is absent.
    pub fn get(&self, series: &str) -> f64 {
        self.value(series)
            .unwrap_or_else(|| panic!("no series {series} in\n{}", self.0))
    }

    /// Names of the metric families exported (from their `# TYPE` lines).
    pub fn families(&self) -> Vec<String> {
        self.0
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    }

    /// True if some sample is of `name` (a family, or a histogram's `_bucket`, `_sum` or
    /// `_count`).
    pub fn has_metric(&self, name: &str) -> bool {
        self.0.lines().filter(|l| !l.starts_with('#')).any(|line| {
            let series = line.split([' ', '{']).next().unwrap_or("");
            series == name
        })
    }
}

/// Writes `token` to `dir/token`, readable by its owner only (strongsync refuses a token file
/// others may read), and returns its path.
pub fn token_file(dir: &std::path::Path, token: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// Creates a new deployment's state file at `dir/state.json`, following `primary`, as
/// `strongsync init-state` does (strongsync starts only from an existing one), and returns
/// its path.
pub fn state_file(dir: &std::path::Path, primary: &str) -> std::path::PathBuf {
    let path = dir.join("state.json");
    strongsync::failover::State::create(&path, primary).expect("create the state file");
    path
}

/// What `/status` says about replicas and failover, without what changes with time alone: two
/// readings compare equal unless something about the replicas changed.
pub fn replica_standing(status: &Status) -> serde_json::Value {
    let replicas: Vec<serde_json::Value> = status
        .replicas
        .iter()
        .map(|r| {
            serde_json::json!({
                "server_id": r.server_id,
                "address": r.address,
                "connected": r.connected,
                "semisync": r.semisync,
                "acked_gtid_position": r.acked_gtid_position,
                "acked_position": r.acked_position,
                "holds_through": r.holds_through,
            })
        })
        .collect();
    serde_json::json!({
        "replicas": replicas,
        "failover_candidates": status.failover_candidates,
        "not_failover_candidates": status.not_failover_candidates,
        "watermark_gtid_position": status.watermark_gtid_position,
        "quorum_position": status.quorum_position,
        "released": status.released,
        "parked_sessions": status.parked_sessions,
    })
}

/// Sets `config` up for a test of the admin port's failover calls: strong sync at `quorum`
/// under `on_timeout = block`, and the admin token `token`, in a file in `dir`.
pub fn with_token(
    config: &mut strongsync::Config,
    dir: &std::path::Path,
    token: &str,
    quorum: usize,
) {
    config.durability = crate::strong::blocking(quorum);
    config.failover.admin_token_file = Some(token_file(dir, token));
}

/// The epoch and whether it is fenced, as `/status` of the proxy at `addr` says.
pub fn epoch_and_fence(addr: SocketAddr) -> (u64, bool) {
    let status = status(addr);
    (status.epoch, status.fenced)
}

/// `/status`'s record of replica `server_id` (connected or departed).
pub fn replica_record(status: &Status, server_id: u32) -> Replica {
    status
        .replicas
        .iter()
        .find(|r| r.server_id == server_id)
        .unwrap_or_else(|| panic!("replica {server_id} is not in /status: {status:#?}"))
        .clone()
}

/// What the proxy at admin address `addr` credits replica `server_id` with: its
/// `acked_gtid_position`.
pub fn credited(addr: SocketAddr, server_id: u32) -> String {
    replica_record(&status(addr), server_id).acked_gtid_position
}

/// The metric series about replicas, as scraped (without the count of refused dumps).
pub fn replica_series(scrape: &Scrape) -> Vec<String> {
    scrape
        .0
        .lines()
        .filter(|l| {
            l.starts_with("strongsync_replica")
                && !l.starts_with("strongsync_replica_dumps_refused_total")
        })
        .map(str::to_owned)
        .collect()
}
