//! Typed configuration of the proxy, with defaults and validation. The config file and the
//! command line fill it in through [`settings`]; nothing else reads flags or the environment.

pub mod settings;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use crate::durability::{DurabilityConfig, Topology, Visibility};

/// Everything the proxy needs to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Address of the SQL port that clients (and replicas) connect to.
    pub listen: SocketAddr,
    /// The primary, as `host:port` (resolved at each connect, so a DNS name may move), or the
    /// absolute path of its Unix socket.
    pub primary: String,
    /// Certificate and key for TLS on the client leg; plain connections only when `None`.
    pub tls: Option<TlsFiles>,
    /// Bounds on what one peer can make the proxy hold.
    pub limits: Limits,
    /// How long the proxy waits for peers.
    pub timeouts: Timeouts,
    /// Strong sync: quorum, ACK timeout and what happens when it passes.
    pub durability: DurabilityConfig,
    /// The replicas' zones and labels, and the primary's zone (`[[replica]]`,
    /// `durability.primary_zone`).
    pub topology: Topology,
    /// strongsync's own account on the primary, for the probe (see [`crate::probe`]); without
    /// it the probe is off.
    pub probe: Option<ProbeAccount>,
    /// Address of the admin HTTP port (metrics, health, status).
    pub admin_listen: SocketAddr,
    /// Log filter (`info`, `debug`, `strongsync=debug`, …).
    pub log_level: String,
    /// On SIGTERM, how long sessions in flight (parked commits included) may take to finish.
    pub shutdown_grace: Duration,
    /// Runtime worker threads; `None`: see [`Config::worker_threads`]. Taken at start only.
    pub worker_threads: Option<usize>,
    /// zlib level (0–9) of what the proxy sends clients that use the compressed protocol.
    /// Default 1: measured (`bench/run compression`), higher levels cost several times the
    /// CPU for a few percent fewer bytes. Taken at each login.
    pub compression_level: u32,
}

/// PEM files for the client-facing TLS endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// strongsync's own account on the primary. It needs no privilege: the probe only reads
/// `@@global.gtid_binlog_pos`. The password is never logged, printed or shown in `/status`.
#[derive(Clone, PartialEq, Eq)]
pub struct ProbeAccount {
    /// User name.
    pub user: String,
    /// Password (read from `password_file` when that is given).
    pub password: String,
    /// The file the password was read from, if it came from one (shown instead of it).
    pub password_file: Option<PathBuf>,
}

/// Limits. Each names what happens when it is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Client connections served at once; one more is answered with ER_CON_COUNT_ERROR (1040)
    /// and closed. Default 4096.
    pub max_connections: usize,
    /// Largest payload (reassembled over several packets) accepted from a client or the
    /// primary; a client exceeding it gets ER_NET_PACKET_TOO_LARGE (1153) and is closed.
    /// The primary enforces its own `max_allowed_packet`; this only bounds the proxy.
    /// Default 1 GiB, the largest `max_allowed_packet` MariaDB allows.
    pub max_packet_size: usize,
    /// Largest packet accepted from a client before it has logged in. Default 64 KiB.
    pub max_handshake_packet_size: usize,
    /// Bytes of a response the proxy may hold back while it checks what the response
    /// committed (a legacy EOF hid it, or the statement changed the session's trackers). Past
    /// it what was held is released as unresolved and the response flows on. Default 64 MiB.
    pub max_held_response_bytes: usize,
    /// Binlog bytes held back from one replica without semisync while the quorum does not
    /// hold them (`durability.async_replicas = "after_quorum"`). Past it the proxy stops
    /// reading that replica's dump, so the replica falls behind (it is never sent ahead).
    /// Default 64 MiB.
    pub max_async_held_bytes: usize,
}

/// Timeouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting to the primary (TCP connect and its greeting). Default 5 s.
    pub primary_connect: Duration,
    /// A new client must finish TLS and send its login within this. Default 10 s.
    pub client_handshake: Duration,
    /// Once a logged-in client has begun a packet, or owes one in the middle of a command (the
    /// rest of a payload of 16 MiB or more, a `LOAD DATA LOCAL INFILE` upload), the packet must
    /// arrive whole within this; otherwise the client gets ER_NET_READ_INTERRUPTED (1159) and
    /// is closed. It bounds clients that trickle bytes in (slow-loris) or stop half-way. Waiting
    /// for the next command is not limited: pools idle for hours, and the primary's
    /// `wait_timeout` ends sessions that idle too long. Default 30 s (MariaDB's
    /// `net_read_timeout`).
    pub client_read: Duration,
    /// A write to a client that makes no progress for this long (the client stopped reading
    /// its results) closes the session. Meanwhile the session reads nothing more from the
    /// primary, so what it holds stays bounded. Default 60 s (MariaDB's `net_write_timeout`).
    pub client_write: Duration,
}

/// A configuration that cannot work, with the setting at fault.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// A setting is out of range or does not parse.
    #[error("invalid value for {key}: {problem}")]
    Invalid {
        /// Name of the setting (its key in the config file).
        key: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A required setting is missing.
    #[error("missing setting {key}")]
    Missing {
        /// Name of the setting.
        key: &'static str,
    },
    /// The config file cannot be read.
    #[error("cannot read {}: {problem}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        problem: String,
    },
    /// The config file is not valid TOML or has an unknown key.
    #[error("{}: {problem}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (it names the key and the line).
        problem: String,
    },
}

// === impl Config ===

impl Config {
    /// A configuration with defaults for everything but the primary.
    pub fn new(primary: impl Into<String>) -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 3307)),
            primary: primary.into(),
            tls: None,
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            durability: DurabilityConfig::default(),
            topology: Topology::default(),
            probe: None,
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 9104)),
            log_level: "info".into(),
            shutdown_grace: Duration::from_secs(10),
            worker_threads: None,
            compression_level: 1,
        }
    }

    /// How many threads run sessions and replica pipes: as configured, or one per four CPUs
    /// (at least one). A statement through the proxy costs a few socket calls and wake-ups,
    /// and each worker that runs out of work sleeps and must be woken again: measured on two
    /// CPUs shared with the primary (README "Benchmarks"), one worker spent half the CPU per
    /// statement that two did, and served more of them, as long as one core carried the load.
    pub fn worker_threads(&self) -> usize {
        self.worker_threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| (n.get() / 4).max(1))
        })
    }

    /// Checks every setting.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, problem: &str| {
            Err(ConfigError::Invalid {
                key,
                problem: problem.to_owned(),
            })
        };
        if !is_host_port(&self.primary) && !crate::primary::is_socket_path(&self.primary) {
            return invalid(
                "primary",
                "expected HOST:PORT or the absolute path of a Unix socket",
            );
        }
        let l = &self.limits;
        if l.max_connections == 0 {
            return invalid("limits.max_connections", "must be at least 1");
        }
        if l.max_packet_size < 1024 || l.max_packet_size > (1 << 30) {
            return invalid("limits.max_packet_size", "must be between 1 KiB and 1 GiB");
        }
        if l.max_handshake_packet_size < 1024 || l.max_handshake_packet_size > l.max_packet_size {
            return invalid(
                "limits.max_handshake_packet_size",
                "must be between 1 KiB and limits.max_packet_size",
            );
        }
        if l.max_held_response_bytes < 64 * 1024 {
            return invalid("limits.max_held_response_bytes", "must be at least 64 KiB");
        }
        if l.max_async_held_bytes < 64 * 1024 {
            return invalid("limits.max_async_held_bytes", "must be at least 64 KiB");
        }
        let d = &self.durability;
        if d.quorum == 0 || d.quorum > 64 {
            return invalid(
                "durability.quorum",
                "must be between 1 and 64 (to relay without waiting, set durability.passthrough)",
            );
        }
        if d.visibility != Visibility::Commit && self.probe.is_none() {
            return invalid(
                "durability.visibility",
                "\"quorum\" and \"snapshot\" bound responses by the primary's binlog position, read on strongsync's own connection: configure a [probe] account",
            );
        }
        self.validate_rule()?;
        if d.gtid_index_capacity == 0 {
            return invalid("durability.gtid_index_capacity", "must be at least 1");
        }
        for (key, value) in [
            ("timeouts.primary_connect", self.timeouts.primary_connect),
            ("timeouts.client_handshake", self.timeouts.client_handshake),
            ("timeouts.client_read", self.timeouts.client_read),
            ("timeouts.client_write", self.timeouts.client_write),
            ("durability.ack_timeout", d.ack_timeout),
            ("durability.ack_nudge_after", d.ack_nudge_after),
        ] {
            if value.is_zero() {
                return invalid(key, "must be greater than zero");
            }
        }
        if self.compression_level > 9 {
            return invalid("compression_level", "must be between 0 and 9");
        }
        // Port 0 asks the OS for a free port, so two zero ports never collide.
        if self.admin_listen == self.listen && self.listen.port() != 0 {
            return invalid("admin_listen", "must differ from listen");
        }
        Ok(())
    }
}

impl Config {
    /// Checks that the quorum rule can be met by the replicas the file names, and that a
    /// session's bounds make sense.
    fn validate_rule(&self) -> Result<(), ConfigError> {
        let invalid = |key, problem: String| Err(ConfigError::Invalid { key, problem });
        let d = &self.durability;
        let zones = self.topology.zones();
        if d.quorum_zones > 1 {
            if d.quorum_zones > d.quorum {
                return invalid(
                    "durability.quorum_zones",
                    format!(
                        "{} zones need at least {} acknowledging replicas: raise durability.quorum to {} or more",
                        d.quorum_zones, d.quorum_zones, d.quorum_zones
                    ),
                );
            }
            if zones.len() < d.quorum_zones {
                return invalid(
                    "durability.quorum_zones",
                    format!(
                        "the rule needs replicas in {} zones, and [[replica]] names {} ({}): it could never be met",
                        d.quorum_zones,
                        zones.len(),
                        if zones.is_empty() { "none".into() } else { zones.join(", ") }
                    ),
                );
            }
        }
        if d.cross_zone {
            let Some(primary_zone) = self.topology.primary_zone.as_deref() else {
                return invalid(
                    "durability.cross_zone",
                    "needs durability.primary_zone: without it no replica is known to be outside the primary's zone".into(),
                );
            };
            if !zones.iter().any(|z| *z != primary_zone) {
                return invalid(
                    "durability.cross_zone",
                    format!(
                        "no [[replica]] has a zone other than the primary's ({primary_zone:?}): the rule could never be met"
                    ),
                );
            }
        }
        if d.session_quorum_max > 64 {
            return invalid("durability.session_quorum_max", "must be at most 64".into());
        }
        if d.session_floor() > d.session_quorum_max {
            return invalid(
                "durability.session_quorum_floor",
                format!(
                    "the floor ({}) is above durability.session_quorum_max ({})",
                    d.session_floor(),
                    d.session_quorum_max
                ),
            );
        }
        if d.session_floor() > d.quorum {
            return invalid(
                "durability.session_quorum_floor",
                format!(
                    "the floor ({}) is above durability.quorum ({}): sessions that ask for nothing get the quorum",
                    d.session_floor(),
                    d.quorum
                ),
            );
        }
        Ok(())
    }
}

impl std::fmt::Debug for ProbeAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeAccount")
            .field("user", &self.user)
            .field("password", &"(hidden)")
            .field("password_file", &self.password_file)
            .finish()
    }
}

fn is_host_port(addr: &str) -> bool {
    addr.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0))
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 4096,
            max_packet_size: 1 << 30,
            max_handshake_packet_size: 64 * 1024,
            max_held_response_bytes: 64 << 20,
            max_async_held_bytes: 64 << 20,
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            primary_connect: Duration::from_secs(5),
            client_handshake: Duration::from_secs(10),
            client_read: Duration::from_secs(30),
            client_write: Duration::from_secs(60),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_their_key() {
        assert_eq!(Config::new("db:3306").validate(), Ok(()));
        assert_eq!(Config::new("[::1]:3306").validate(), Ok(()));
        assert_eq!(Config::new("/run/mysqld/mysqld.sock").validate(), Ok(()));
        type Breaks = fn(&mut Config);
        let table: [(&str, Breaks); 12] = [
            ("primary", |c| c.primary = "db".into()),
            ("primary", |c| c.primary = "db:0".into()),
            ("primary", |c| c.primary = "run/mysqld.sock".into()),
            ("limits.max_connections", |c| c.limits.max_connections = 0),
            ("limits.max_packet_size", |c| {
                c.limits.max_packet_size = 2 << 30
            }),
            ("limits.max_handshake_packet_size", |c| {
                c.limits.max_handshake_packet_size = 2 << 30
            }),
            ("timeouts.client_handshake", |c| {
                c.timeouts.client_handshake = Duration::ZERO
            }),
            ("timeouts.client_read", |c| {
                c.timeouts.client_read = Duration::ZERO
            }),
            ("timeouts.client_write", |c| {
                c.timeouts.client_write = Duration::ZERO
            }),
            ("durability.quorum", |c| c.durability.quorum = 0),
            ("durability.ack_timeout", |c| {
                c.durability.ack_timeout = Duration::ZERO
            }),
            ("admin_listen", |c| c.admin_listen = c.listen),
        ];
        for (key, breaks) in table {
            let mut config = Config::new("db:3306");
            breaks(&mut config);
            match config.validate() {
                Err(ConfigError::Invalid { key: got, .. }) => assert_eq!(got, key),
                other => panic!("{key}: {other:?}"),
            }
        }
    }
}
