//! The settings as an operator writes them: every field optional, durations as `"10s"`, from a
//! TOML file and from the command line (which wins), resolved onto the defaults into a
//! [`Config`]. Every error names the key at fault.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Config, ConfigError, ProbeAccount, TlsFiles};
use crate::durability::{ReplicaLabels, Topology};

/// Settings, any of which may be missing (then the default applies). The field names are the
/// config file's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// SQL port for clients and replicas, `ADDR:PORT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// The primary, `HOST:PORT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// Admin HTTP port, `ADDR:PORT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_listen: Option<String>,
    /// Log filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// Grace period on SIGTERM, e.g. `"10s"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_grace: Option<String>,
    /// Runtime worker threads (default: one per four CPUs, at least one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_threads: Option<usize>,
    /// zlib level for clients using the compressed protocol.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression_level: Option<i64>,
    /// TLS on the client side.
    #[serde(default, skip_serializing_if = "TlsSettings::is_empty")]
    pub tls: TlsSettings,
    /// Limits.
    #[serde(default)]
    pub limits: LimitSettings,
    /// Timeouts.
    #[serde(default)]
    pub timeouts: TimeoutSettings,
    /// Strong sync.
    #[serde(default)]
    pub durability: DurabilitySettings,
    /// strongsync's own account on the primary.
    #[serde(default, skip_serializing_if = "ProbeSettings::is_empty")]
    pub probe: ProbeSettings,
    /// Replicas named by `server_id`, with their zone and labels (`[[replica]]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replica: Vec<ReplicaSettings>,
}

/// `[probe]`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSettings {
    /// User name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Password (or `password_file`); never printed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// A file holding the password (a mounted Kubernetes secret, say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
}

/// `[tls]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM certificate chain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// PEM private key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
}

/// `[limits]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSettings {
    /// Clients served at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<i64>,
    /// Largest packet payload, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_packet_size: Option<i64>,
    /// Largest packet before login, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_handshake_packet_size: Option<i64>,
    /// Most bytes of a response held while its GTID is resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_held_response_bytes: Option<i64>,
    /// Binlog bytes held back from one async replica until the quorum holds them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_async_held_bytes: Option<i64>,
}

/// `[timeouts]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutSettings {
    /// Connecting to the primary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_connect: Option<String>,
    /// A new client's login.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_handshake: Option<String>,
    /// A packet a client began (or owes mid-command), to arrive whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_read: Option<String>,
    /// A write to a client that makes no progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_write: Option<String>,
}

/// `[durability]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DurabilitySettings {
    /// Replicas that must acknowledge a commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quorum: Option<i64>,
    /// How long a commit waits for its quorum.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_timeout: Option<String>,
    /// `degrade`, `block` or `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<String>,
    /// `wait` or `immediate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub without_quorum: Option<String>,
    /// When to ask a replica again for a missing ACK.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_nudge_after: Option<String>,
    /// Transactions whose end position is remembered exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gtid_index_capacity: Option<i64>,
    /// Relay only, never wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passthrough: Option<bool>,
    /// `commit`, `quorum` or `snapshot`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visibility: Option<String>,
    /// Zones the acknowledging replicas must span.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quorum_zones: Option<i64>,
    /// One acknowledging replica must be outside the primary's zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross_zone: Option<bool>,
    /// The primary's zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_zone: Option<String>,
    /// The lowest quorum a session may ask for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_quorum_floor: Option<i64>,
    /// The highest quorum a session may ask for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_quorum_max: Option<i64>,
    /// `after_quorum` or `immediate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub async_replicas: Option<String>,
}

/// `[[replica]]`: one replica the operator names, by the `server_id` it sends with its dump.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaSettings {
    /// The replica's `server_id`.
    pub server_id: i64,
    /// Its zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Anything else to show in `/status`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

// === impl Settings ===

impl Settings {
    /// Reads a TOML config file.
    ///
    /// # Errors
    /// [`ConfigError::File`] if it cannot be read, [`ConfigError::Syntax`] if it is not valid
    /// TOML or has a key this version does not know (the message names it and its line).
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_owned(),
            problem: e.to_string(),
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            ConfigError::Syntax { problem, .. } => ConfigError::Syntax {
                path: path.to_owned(),
                problem,
            },
            other => other,
        })
    }

    /// Parses TOML text.
    ///
    /// # Errors
    /// [`ConfigError::Syntax`] for invalid TOML or an unknown key.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: PathBuf::from("<config>"),
            problem: e.to_string(),
        })
    }

    /// These settings, with every setting `over` has replacing ours.
    pub fn overridden_by(self, over: Settings) -> Settings {
        fn pick<T>(base: Option<T>, over: Option<T>) -> Option<T> {
            over.or(base)
        }
        let (b, o) = (self, over);
        Settings {
            listen: pick(b.listen, o.listen),
            primary: pick(b.primary, o.primary),
            admin_listen: pick(b.admin_listen, o.admin_listen),
            log_level: pick(b.log_level, o.log_level),
            shutdown_grace: pick(b.shutdown_grace, o.shutdown_grace),
            worker_threads: pick(b.worker_threads, o.worker_threads),
            compression_level: pick(b.compression_level, o.compression_level),
            tls: TlsSettings {
                cert: pick(b.tls.cert, o.tls.cert),
                key: pick(b.tls.key, o.tls.key),
            },
            limits: LimitSettings {
                max_connections: pick(b.limits.max_connections, o.limits.max_connections),
                max_packet_size: pick(b.limits.max_packet_size, o.limits.max_packet_size),
                max_handshake_packet_size: pick(
                    b.limits.max_handshake_packet_size,
                    o.limits.max_handshake_packet_size,
                ),
                max_held_response_bytes: pick(
                    b.limits.max_held_response_bytes,
                    o.limits.max_held_response_bytes,
                ),
                max_async_held_bytes: pick(
                    b.limits.max_async_held_bytes,
                    o.limits.max_async_held_bytes,
                ),
            },
            timeouts: TimeoutSettings {
                primary_connect: pick(b.timeouts.primary_connect, o.timeouts.primary_connect),
                client_handshake: pick(b.timeouts.client_handshake, o.timeouts.client_handshake),
                client_read: pick(b.timeouts.client_read, o.timeouts.client_read),
                client_write: pick(b.timeouts.client_write, o.timeouts.client_write),
            },
            probe: b.probe.overridden_by(o.probe),
            durability: DurabilitySettings {
                quorum: pick(b.durability.quorum, o.durability.quorum),
                ack_timeout: pick(b.durability.ack_timeout, o.durability.ack_timeout),
                on_timeout: pick(b.durability.on_timeout, o.durability.on_timeout),
                without_quorum: pick(b.durability.without_quorum, o.durability.without_quorum),
                ack_nudge_after: pick(b.durability.ack_nudge_after, o.durability.ack_nudge_after),
                gtid_index_capacity: pick(
                    b.durability.gtid_index_capacity,
                    o.durability.gtid_index_capacity,
                ),
                passthrough: pick(b.durability.passthrough, o.durability.passthrough),
                visibility: pick(b.durability.visibility, o.durability.visibility),
                quorum_zones: pick(b.durability.quorum_zones, o.durability.quorum_zones),
                cross_zone: pick(b.durability.cross_zone, o.durability.cross_zone),
                primary_zone: pick(b.durability.primary_zone, o.durability.primary_zone),
                session_quorum_floor: pick(
                    b.durability.session_quorum_floor,
                    o.durability.session_quorum_floor,
                ),
                session_quorum_max: pick(
                    b.durability.session_quorum_max,
                    o.durability.session_quorum_max,
                ),
                async_replicas: pick(b.durability.async_replicas, o.durability.async_replicas),
            },
            // Replicas are named in the file only.
            replica: if o.replica.is_empty() {
                b.replica
            } else {
                o.replica
            },
        }
    }

    /// The configuration these settings describe, on top of the defaults, validated.
    ///
    /// # Errors
    /// [`ConfigError::Missing`] without a primary; [`ConfigError::Invalid`] naming the first
    /// setting that does not parse or is out of range.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let primary = self
            .primary
            .clone()
            .ok_or(ConfigError::Missing { key: "primary" })?;
        let mut c = Config::new(primary);
        if let Some(v) = &self.listen {
            c.listen = parse("listen", v)?;
        }
        if let Some(v) = &self.admin_listen {
            c.admin_listen = parse("admin_listen", v)?;
        }
        if let Some(v) = &self.log_level {
            c.log_level = v.clone();
        }
        if let Some(v) = &self.shutdown_grace {
            c.shutdown_grace = duration("shutdown_grace", v)?;
        }
        if let Some(n) = self.worker_threads {
            if !(1..=1024).contains(&n) {
                return Err(ConfigError::Invalid {
                    key: "worker_threads",
                    problem: format!("{n} is not between 1 and 1024"),
                });
            }
            c.worker_threads = Some(n);
        }
        if let Some(level) = self.compression_level {
            c.compression_level =
                u32::try_from(level)
                    .ok()
                    .filter(|l| *l <= 9)
                    .ok_or_else(|| ConfigError::Invalid {
                        key: "compression_level",
                        problem: format!("{level} is not between 0 and 9"),
                    })?;
        }
        c.tls = match (&self.tls.cert, &self.tls.key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None) => None,
            (Some(_), None) => return Err(ConfigError::Missing { key: "tls.key" }),
            (None, Some(_)) => return Err(ConfigError::Missing { key: "tls.cert" }),
        };
        let l = &self.limits;
        set_count(
            &mut c.limits.max_connections,
            "limits.max_connections",
            l.max_connections,
        )?;
        set_count(
            &mut c.limits.max_packet_size,
            "limits.max_packet_size",
            l.max_packet_size,
        )?;
        set_count(
            &mut c.limits.max_handshake_packet_size,
            "limits.max_handshake_packet_size",
            l.max_handshake_packet_size,
        )?;
        set_count(
            &mut c.limits.max_held_response_bytes,
            "limits.max_held_response_bytes",
            l.max_held_response_bytes,
        )?;
        set_count(
            &mut c.limits.max_async_held_bytes,
            "limits.max_async_held_bytes",
            l.max_async_held_bytes,
        )?;
        let t = &self.timeouts;
        if let Some(v) = &t.primary_connect {
            c.timeouts.primary_connect = duration("timeouts.primary_connect", v)?;
        }
        if let Some(v) = &t.client_handshake {
            c.timeouts.client_handshake = duration("timeouts.client_handshake", v)?;
        }
        if let Some(v) = &t.client_read {
            c.timeouts.client_read = duration("timeouts.client_read", v)?;
        }
        if let Some(v) = &t.client_write {
            c.timeouts.client_write = duration("timeouts.client_write", v)?;
        }
        let d = &self.durability;
        set_count(&mut c.durability.quorum, "durability.quorum", d.quorum)?;
        if let Some(v) = &d.ack_timeout {
            c.durability.ack_timeout = duration("durability.ack_timeout", v)?;
        }
        if let Some(v) = &d.on_timeout {
            c.durability.on_timeout = parse("durability.on_timeout", v)?;
        }
        if let Some(v) = &d.without_quorum {
            c.durability.without_quorum = parse("durability.without_quorum", v)?;
        }
        if let Some(v) = &d.ack_nudge_after {
            c.durability.ack_nudge_after = duration("durability.ack_nudge_after", v)?;
        }
        set_count(
            &mut c.durability.gtid_index_capacity,
            "durability.gtid_index_capacity",
            d.gtid_index_capacity,
        )?;
        if let Some(v) = d.passthrough {
            c.durability.passthrough = v;
        }
        if let Some(v) = &d.visibility {
            c.durability.visibility = parse("durability.visibility", v)?;
        }
        set_count(
            &mut c.durability.quorum_zones,
            "durability.quorum_zones",
            d.quorum_zones,
        )?;
        if let Some(v) = d.cross_zone {
            c.durability.cross_zone = v;
        }
        if let Some(v) = d.session_quorum_floor {
            let mut floor = 0;
            set_count(&mut floor, "durability.session_quorum_floor", Some(v))?;
            c.durability.session_quorum_floor = Some(floor);
        }
        set_count(
            &mut c.durability.session_quorum_max,
            "durability.session_quorum_max",
            d.session_quorum_max,
        )?;
        if let Some(v) = &d.async_replicas {
            c.durability.async_replicas = parse("durability.async_replicas", v)?;
        }
        c.topology = self.topology()?;
        c.probe = self.probe.resolve()?;
        c.validate()?;
        Ok(c)
    }

    /// Every setting of `config`, as a file would say it (what `check-config` prints).
    pub fn from_config(config: &Config) -> Settings {
        let d = &config.durability;
        Settings {
            listen: Some(config.listen.to_string()),
            primary: Some(config.primary.clone()),
            admin_listen: Some(config.admin_listen.to_string()),
            log_level: Some(config.log_level.clone()),
            shutdown_grace: Some(show(config.shutdown_grace)),
            worker_threads: config.worker_threads,
            compression_level: Some(i64::from(config.compression_level)),
            tls: TlsSettings {
                cert: config.tls.as_ref().map(|t| t.cert.clone()),
                key: config.tls.as_ref().map(|t| t.key.clone()),
            },
            limits: LimitSettings {
                max_connections: Some(config.limits.max_connections as i64),
                max_packet_size: Some(config.limits.max_packet_size as i64),
                max_handshake_packet_size: Some(config.limits.max_handshake_packet_size as i64),
                max_held_response_bytes: Some(config.limits.max_held_response_bytes as i64),
                max_async_held_bytes: Some(config.limits.max_async_held_bytes as i64),
            },
            timeouts: TimeoutSettings {
                primary_connect: Some(show(config.timeouts.primary_connect)),
                client_handshake: Some(show(config.timeouts.client_handshake)),
                client_read: Some(show(config.timeouts.client_read)),
                client_write: Some(show(config.timeouts.client_write)),
            },
            durability: DurabilitySettings {
                quorum: Some(d.quorum as i64),
                ack_timeout: Some(show(d.ack_timeout)),
                on_timeout: Some(d.on_timeout.to_string()),
                without_quorum: Some(d.without_quorum.to_string()),
                ack_nudge_after: Some(show(d.ack_nudge_after)),
                gtid_index_capacity: Some(d.gtid_index_capacity as i64),
                passthrough: Some(d.passthrough),
                visibility: Some(d.visibility.to_string()),
                quorum_zones: Some(d.quorum_zones as i64),
                cross_zone: Some(d.cross_zone),
                primary_zone: config.topology.primary_zone.as_deref().map(str::to_owned),
                session_quorum_floor: d.session_quorum_floor.map(|f| f as i64),
                session_quorum_max: Some(d.session_quorum_max as i64),
                async_replicas: Some(d.async_replicas.to_string()),
            },
            replica: config
                .topology
                .replicas
                .iter()
                .map(|(server_id, r)| ReplicaSettings {
                    server_id: i64::from(*server_id),
                    zone: r.zone.as_deref().map(str::to_owned),
                    labels: r.labels.clone(),
                })
                .collect(),
            // A password is shown by the file it came from, never itself.
            probe: config
                .probe
                .as_ref()
                .map(|p| ProbeSettings {
                    user: Some(p.user.clone()),
                    password: None,
                    password_file: p.password_file.clone(),
                })
                .unwrap_or_default(),
        }
    }

    /// The replicas' zones and labels, and the primary's zone.
    fn topology(&self) -> Result<Topology, ConfigError> {
        let invalid = |problem: String| ConfigError::Invalid {
            key: "replica",
            problem,
        };
        let zone = |z: &Option<String>, key: &'static str| match z.as_deref().map(str::trim) {
            Some("") => Err(ConfigError::Invalid {
                key,
                problem: "a zone cannot be empty (leave it out for none)".into(),
            }),
            z => Ok(z.map(Into::into)),
        };
        let mut topology = Topology {
            primary_zone: zone(&self.durability.primary_zone, "durability.primary_zone")?,
            ..Topology::default()
        };
        for r in &self.replica {
            let server_id = u32::try_from(r.server_id)
                .ok()
                .filter(|id| *id != 0)
                .ok_or_else(|| {
                    invalid(format!(
                        "server_id {} is not between 1 and 4294967295",
                        r.server_id
                    ))
                })?;
            let labels = ReplicaLabels {
                zone: zone(&r.zone, "replica.zone")?,
                labels: r.labels.clone(),
            };
            if topology.replicas.insert(server_id, labels).is_some() {
                return Err(invalid(format!("server_id {server_id} is named twice")));
            }
        }
        Ok(topology)
    }

    /// TOML text of these settings.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot render the settings: {e}\n"))
    }
}

impl TlsSettings {
    fn is_empty(&self) -> bool {
        self.cert.is_none() && self.key.is_none()
    }
}

// === impl ProbeSettings ===

impl ProbeSettings {
    fn is_empty(&self) -> bool {
        self.user.is_none() && self.password.is_none() && self.password_file.is_none()
    }

    /// These settings with `over`'s winning; a password given either way replaces both of
    /// ours (a password from the command line replaces a file's password file).
    fn overridden_by(self, over: ProbeSettings) -> ProbeSettings {
        let password_given = over.password.is_some() || over.password_file.is_some();
        ProbeSettings {
            user: over.user.or(self.user),
            password: if password_given {
                over.password
            } else {
                self.password
            },
            password_file: if password_given {
                over.password_file
            } else {
                self.password_file
            },
        }
    }

    /// The account, reading the password file if one is named.
    fn resolve(&self) -> Result<Option<ProbeAccount>, ConfigError> {
        let Some(user) = &self.user else {
            if self.password.is_some() || self.password_file.is_some() {
                return Err(ConfigError::Missing { key: "probe.user" });
            }
            return Ok(None);
        };
        let password = match (&self.password, &self.password_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid {
                    key: "probe.password",
                    problem: "set probe.password or probe.password_file, not both".into(),
                })
            }
            (None, None) => {
                return Err(ConfigError::Missing {
                    key: "probe.password_file",
                })
            }
            (Some(password), None) => password.clone(),
            (None, Some(file)) => {
                let text = std::fs::read_to_string(file).map_err(|e| ConfigError::Invalid {
                    key: "probe.password_file",
                    problem: format!("cannot read {}: {e}", file.display()),
                })?;
                // A file written by `echo` or a secret mount may end in a newline.
                text.strip_suffix('\n')
                    .map(|t| t.strip_suffix('\r').unwrap_or(t))
                    .unwrap_or(&text)
                    .to_owned()
            }
        };
        Ok(Some(ProbeAccount {
            user: user.clone(),
            password,
            password_file: self.password_file.clone(),
        }))
    }
}

impl std::fmt::Debug for ProbeSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeSettings")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "(hidden)"))
            .field("password_file", &self.password_file)
            .finish()
    }
}

fn parse<T: FromStr>(key: &'static str, value: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value.parse().map_err(|e: T::Err| ConfigError::Invalid {
        key,
        problem: format!("{value:?}: {e}"),
    })
}

fn duration(key: &'static str, value: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(value).map_err(|e| ConfigError::Invalid {
        key,
        problem: format!("{value:?} is not a duration like \"10s\" or \"250ms\" ({e})"),
    })
}

fn set_count(slot: &mut usize, key: &'static str, value: Option<i64>) -> Result<(), ConfigError> {
    if let Some(v) = value {
        *slot = usize::try_from(v).map_err(|_| ConfigError::Invalid {
            key,
            problem: format!("{v} is negative"),
        })?;
    }
    Ok(())
}

fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests;
