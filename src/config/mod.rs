//! The proxy's configuration: every setting defined once ([`define`]), with its type, default,
//! meaning, flag and bounds; read from the TOML file and from flags and `STRONGSYNC_*`
//! environment variables, which win ([`load`]); checked as a whole ([`Config::validate`]).
//! Nothing else reads the file, flags or the environment (`main.rs` hands the flags over).

/// The words of each policy or mode, both ways (`Display` and `FromStr`). A word is read in any
/// case and with `-` or `_` between its parts, as MySQL's clients and clap spell them
/// (`VERIFY_CA`, `verify-ca`); it is written as the file does (`verify_ca`).
macro_rules! words {
    ($ty:ident { $($variant:ident = $word:literal),* $(,)? }) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(match self {
                    $($ty::$variant => $word,)*
                })
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = $crate::config::UnknownWord;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
                    $($word => Ok($ty::$variant),)*
                    _ => Err($crate::config::UnknownWord {
                        expected: &[$($word),*],
                        got: s.to_owned(),
                    }),
                }
            }
        }
    };
}

mod cluster;
pub(crate) mod define;
mod durability;
pub mod load;
mod reference;
mod sharing;
mod tls;
mod topology;
mod values;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

pub use cluster::ClusterConfig;
use define::{settings, Meta, Section, SettingInfo};
pub use durability::{AsyncReplicas, DurabilityConfig, OnTimeout, Visibility, WithoutQuorum};
pub use reference::{reference_table, reload_lists};
pub use sharing::SharingConfig;
pub use tls::{generated_files, PrimaryTls, TlsConfig, TlsFiles};
pub use topology::{ReplicaConfig, ReplicaLabels, Topology};
pub use values::Secret;

settings! {
    /// Everything the proxy needs to run.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Config {
        /// The SQL port: applications connect here instead of to the primary, and replicas
        /// replicate from here.
        #[setting(Meta::FLAG)]
        pub listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 3307)),
        /// The primary: `HOST:PORT` (resolved at every connection, so a DNS name may move), or
        /// the absolute path of its Unix socket when strongsync runs on the same host (cheaper
        /// per query than TCP loopback).
        #[setting(Meta::FLAG.value_name("HOST:PORT|SOCKET").required())]
        pub primary: String = String::new(),
        /// The admin HTTP port: `/metrics`, `/healthz`, `/readyz`, `/status`. Keep it off the
        /// network the applications use.
        #[setting(Meta::FLAG)]
        pub admin_listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9104)),
        /// The admin port speaks HTTPS, with the `[tls]` certificate and key: for an admin port
        /// reached over a network, where the admin token must not travel in clear. Read at
        /// start.
        #[setting(Meta::FLAG)]
        pub admin_tls: bool = false,
        /// Log filter: `error`, `warn`, `info`, `debug`, or per module, e.g.
        /// `info,strongsync::durability=debug`. Logs go to stderr.
        #[setting(Meta::FLAG.live().value_name("FILTER").default_text("info (or RUST_LOG)"))]
        pub log_level: String = "info".into(),
        /// On SIGTERM, how long sessions in flight (parked commits included) may finish; what
        /// is still parked at the end gets an error saying so.
        #[setting(Meta::FLAG)]
        pub shutdown_grace: Duration = Duration::from_secs(10),
        /// Threads that run sessions and replica pipes, 1 to 1024 (read at start). Fewer spend
        /// less CPU per statement (one runs on tokio's single-threaded scheduler); raise it
        /// when strongsync's CPU nears that many cores.
        #[setting(Meta::FLAG.range(1, 1024).default_text("one per four CPUs, at least 1"))]
        pub worker_threads: Option<usize> = None,
        /// zlib level (0–9) of what strongsync sends clients that use the compressed protocol;
        /// 1 costs the least CPU per byte saved. Read at start.
        #[setting(Meta::FILE.range(0, 9))]
        pub compression_level: u32 = 1,
        /// TLS for clients and replicas (`[tls]`): on by default.
        #[setting(Meta::FILE)]
        pub tls: TlsConfig = TlsConfig::default(),
        /// TLS to the primary, as MySQL's clients name it: `disabled`, `preferred` (when the
        /// primary offers it), `required`, `verify_ca` or `verify_identity` (both need
        /// `primary_tls_ca`). A primary reached by its Unix socket needs none. Read at start.
        #[setting(Meta::FLAG.value_name("MODE"))]
        pub primary_tls: PrimaryTls = PrimaryTls::Preferred,
        /// PEM file of the certificate authorities the primary's certificate is checked
        /// against under `verify_ca` and `verify_identity`. Read at start.
        #[setting(Meta::FLAG)]
        pub primary_tls_ca: Option<PathBuf> = None,
        /// Bounds on what one peer can make the proxy hold (`[limits]`).
        #[setting(Meta::FILE)]
        pub limits: Limits = Limits::default(),
        /// How long the proxy waits for peers (`[timeouts]`).
        #[setting(Meta::FILE)]
        pub timeouts: Timeouts = Timeouts::default(),
        /// Strong sync (`[durability]`).
        #[setting(Meta::FILE)]
        pub durability: DurabilityConfig = DurabilityConfig::default(),
        /// strongsync's own account on the primary, for the probe (`[probe]`).
        #[setting(Meta::FILE)]
        pub probe: ProbeConfig = ProbeConfig::default(),
        /// Fencing, following a new primary, and the state file (`[failover]`).
        #[setting(Meta::FILE)]
        pub failover: FailoverConfig = FailoverConfig::default(),
        /// Several instances, one leader by an etcd lease (`[cluster]`).
        #[setting(Meta::FILE)]
        pub cluster: ClusterConfig = ClusterConfig::default(),
        /// Connections to the primary shared by clients without session state (`[sharing]`).
        #[setting(Meta::FILE)]
        pub sharing: SharingConfig = SharingConfig::default(),
        /// Replicas by the `server_id` they replicate with, with their zones and labels
        /// (`[[replica]]`).
        #[setting(Meta::FILE)]
        pub replica: Vec<ReplicaConfig> = Vec::new(),
    }
}

settings! {
    /// strongsync's own account on the primary, for the probe (see [`crate::probe`]); without
    /// it the probe is off. It only reads the primary's binlog position: no privilege on
    /// MariaDB, `REPLICATION CLIENT` on MySQL. The password is never logged, printed or shown
    /// in `/status`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ProbeConfig in "probe" {
        /// strongsync's own account on the primary: no privilege on MariaDB, `REPLICATION
        /// CLIENT` on MySQL (required by `visibility = "quorum"`). `strongsync follow` checks
        /// the new primary with it, which on MariaDB also needs `SLAVE MONITOR` there. Restart
        /// to change.
        #[setting(Meta::FLAG.value_name("USER"))]
        pub user: Option<String> = None,
        /// A file holding its password (a mounted secret); a trailing newline is ignored.
        #[setting(Meta::FLAG)]
        pub password_file: Option<PathBuf> = None,
        /// Its password, instead of a file. Prefer the environment variable or a file: a flag
        /// shows in the process list.
        #[setting(Meta::FLAG.secret())]
        pub password: Option<Secret> = None,
    }
}

settings! {
    /// Fencing the primary and following a new one, the admin calls that do it, and the state
    /// that outlives strongsync's own restart (see docs/failover.md).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct FailoverConfig in "failover" {
        /// A file holding the token the admin calls that change anything (fence, follow,
        /// promote) must present as `Authorization: Bearer <token>`; a trailing newline is
        /// ignored. Without it those calls are refused. Read at start.
        #[setting(Meta::FLAG.formerly("admin-token-file"))]
        pub admin_token_file: Option<PathBuf> = None,
        /// Where strongsync keeps its epoch, the fence, the primary it follows, and the
        /// watermark and the replicas' positions, so that a restart remembers them. Without it they live only
        /// in memory. Read at start.
        #[setting(Meta::FLAG.formerly("state-file"))]
        pub state_file: Option<PathBuf> = None,
        /// How often, at most, the watermark and the replicas' positions are written to the state file when
        /// they changed: how far behind the file may be when strongsync is killed. The fence,
        /// the epoch and the primary are written before the call that changes them returns.
        /// Read at start.
        #[setting(Meta::FILE.nonzero())]
        pub state_interval: Duration = Duration::from_millis(100),
        /// While fenced, sessions may still run statements on the fenced primary (reads);
        /// whatever they commit gets the fence's error and joins the tail. Off: every
        /// statement is refused. Read at start.
        #[setting(Meta::FILE)]
        pub fenced_reads: bool = false,
        /// How long a fence waits for every replica pipe to close before it reports; a pipe
        /// writes nothing once the fence is up, whether or not it closed in time.
        #[setting(Meta::FILE.nonzero())]
        pub fence_drain: Duration = Duration::from_secs(5),
        /// The account `strongsync promote` logs in to the replicas with (their addresses are
        /// `[[replica]] address`): it reads their replication status, waits for them to apply,
        /// stops and resets replication and makes one writable (MariaDB: `SLAVE MONITOR`,
        /// `REPLICATION SLAVE ADMIN`, `READ_ONLY ADMIN`, or `SUPER`; MySQL:
        /// `REPLICATION_SLAVE_ADMIN`, `SYSTEM_VARIABLES_ADMIN`, `REPLICATION CLIENT`). Restart to
        /// change.
        #[setting(Meta::FILE.value_name("USER"))]
        pub user: Option<String> = None,
        /// A file holding its password; a trailing newline is ignored.
        #[setting(Meta::FILE)]
        pub password_file: Option<PathBuf> = None,
        /// Its password, instead of a file.
        #[setting(Meta::FILE.secret())]
        pub password: Option<Secret> = None,
        /// How long `strongsync promote` waits for the chosen replica to apply what it
        /// received before it gives up (and changes nothing more).
        #[setting(Meta::FILE.nonzero())]
        pub promote_apply_timeout: Duration = Duration::from_secs(60),
        /// How often strongsync looks at its primary with the probe account: it learns who the
        /// primary is (so that a retired primary is known under any name), fences if its
        /// address comes to reach another server, and on MySQL bounds every response while
        /// `gtid_mode` is not `ON`. Read at start.
        #[setting(Meta::FILE.nonzero())]
        pub check_interval: Duration = Duration::from_secs(1),
    }
}

settings! {
    /// Limits. Each names what happens when it is reached.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Limits in "limits" {
        /// Client connections served at once; one more gets error 1040 and is closed.
        #[setting(Meta::FLAG.formerly("max-connections").at_least(1))]
        pub max_connections: usize = 4096,
        /// Largest packet payload (bytes, reassembled over several packets) accepted from a
        /// client or the primary, 1 KiB to 1 GiB; a client over it gets error 1153 and is
        /// closed. The primary's own `max_allowed_packet` still applies.
        #[setting(Meta::FLAG.formerly("max-packet-size").range(1024, 1 << 30).value_name("BYTES").default_text("1073741824 (1 GiB)"))]
        pub max_packet_size: usize = 1 << 30,
        /// Largest packet (bytes) from a client that has not logged in yet.
        #[setting(Meta::FILE.at_least(1024).default_text("65536 (64 KiB)"))]
        pub max_handshake_packet_size: usize = 64 * 1024,
        /// Response bytes held back while strongsync checks what the response committed (a
        /// legacy EOF hid it, or the statement changed the session's trackers); past it the
        /// held part goes out as `unresolved`: counted, logged and listed in `/status`.
        #[setting(Meta::FILE.at_least(64 * 1024).default_text("67108864 (64 MiB)"))]
        pub max_held_response_bytes: usize = 64 << 20,
        /// Binlog bytes held back from one replica without semisync while the quorum does not
        /// hold them (`async_replicas = "after_quorum"`); past it strongsync stops reading that
        /// replica's dump, so it falls behind (it is never sent ahead).
        #[setting(Meta::FILE.at_least(64 * 1024).default_text("67108864 (64 MiB)"))]
        pub max_async_held_bytes: usize = 64 << 20,
        /// Connections to the admin port served at once; one more is closed at once (counted
        /// in `strongsync_admin_refused_total{why="too_many_connections"}`).
        #[setting(Meta::FILE.at_least(1))]
        pub max_admin_connections: usize = 128,
    }
}

settings! {
    /// Timeouts.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Timeouts in "timeouts" {
        /// Connecting to the primary (TCP and its greeting); a client that cannot be connected
        /// gets error 1105 naming the primary.
        #[setting(Meta::FLAG.formerly("connect-timeout").nonzero())]
        pub primary_connect: Duration = Duration::from_secs(5),
        /// A new client must finish TLS and log in within this, or it gets error 1043.
        #[setting(Meta::FLAG.formerly("handshake-timeout").nonzero())]
        pub client_handshake: Duration = Duration::from_secs(10),
        /// A logged-in client that has begun a packet (or owes one in the middle of a command,
        /// such as a `LOAD DATA LOCAL INFILE` upload) must finish it within this, or it gets
        /// error 1159 and is closed: this bounds clients that trickle bytes in. Waiting for the
        /// next command is not limited (the primary's `wait_timeout` ends idle sessions).
        #[setting(Meta::FLAG.formerly("client-read-timeout").nonzero())]
        pub client_read: Duration = Duration::from_secs(30),
        /// A client that takes none of its results for this long is disconnected (its session
        /// holds at most what is queued meanwhile).
        #[setting(Meta::FLAG.formerly("client-write-timeout").nonzero())]
        pub client_write: Duration = Duration::from_secs(60),
        /// A caller of the admin port must send a request's headers within this (a slow client
        /// is cut off), and an idle connection is closed after it.
        #[setting(Meta::FILE.nonzero())]
        pub admin_request: Duration = Duration::from_secs(10),
    }
}

/// strongsync's own account on the primary, as the probe logs in.
#[derive(Clone, PartialEq, Eq)]
pub struct ProbeAccount {
    /// User name.
    pub user: String,
    /// Password (read from `probe.password_file` when that is given).
    pub password: String,
    /// How its connections use TLS: `primary_tls`, as the sessions' do.
    pub tls: PrimaryTls,
    /// `primary_tls_ca`.
    pub tls_ca: Option<PathBuf>,
}

/// Whether loading a configuration opens the files its settings name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Files {
    /// Read them, as a start does.
    Open,
    /// Leave them unopened: only the settings are checked (a config for another host, or an
    /// operator's command that needs only the admin port's address).
    Skip,
}

/// A configuration that cannot work, with the setting at fault.
#[derive(Debug, Clone, PartialEq, Error)]
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
    /// The config file names a setting there is none of.
    #[error("unknown field {key}: there is no such setting")]
    Unknown {
        /// The key, with its section.
        key: String,
    },
    /// The config file cannot be read.
    #[error("cannot read {}: {problem}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        problem: String,
    },
    /// The config file is not valid TOML.
    #[error("{}: {problem}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's error (its message names the line).
        #[source]
        problem: toml::de::Error,
    },
    /// A setting's value does not read as its type, or is out of its bounds.
    #[error("invalid value for {key}: {problem}{}", hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    Value {
        /// Name of the setting (its key in the config file).
        key: &'static str,
        /// What is wrong with it.
        #[source]
        problem: ValueError,
        /// What the setting adds to an out-of-bounds value (its `Meta::hint`).
        hint: Option<&'static str>,
    },
}

/// What is wrong with one setting's value, as the file or a flag gives it.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ValueError {
    /// The file gives another kind of value (`found` is TOML's name for it).
    #[error("expected {expected}, not {found}")]
    Kind {
        /// What the setting takes, in words.
        expected: &'static str,
        /// The kind of value the file gives.
        found: &'static str,
    },
    /// An array of the file holds something other than a non-empty string.
    #[error("expected non-empty strings, not {found}")]
    Item {
        /// The item, as TOML writes it.
        found: String,
    },
    /// A label of a table of labels is not a string.
    #[error("label {name}: expected a string, not {found}")]
    Label {
        /// The label.
        name: String,
        /// The kind of value the file gives it.
        found: &'static str,
    },
    /// A flag's text is not a whole number.
    #[error("{text:?} is not a whole number")]
    NotWhole {
        /// The flag's text.
        text: String,
    },
    /// A count below zero.
    #[error("{n} is negative")]
    Negative {
        /// The number given.
        n: i64,
    },
    /// A count too large for the setting's type.
    #[error("{n} is too large")]
    TooLarge {
        /// The number given.
        n: i64,
    },
    /// A count outside its setting's range.
    #[error("{n} is not between {min} and {max}")]
    NotBetween {
        /// The count.
        n: u64,
        /// The least it may be.
        min: u64,
        /// The most it may be.
        max: u64,
    },
    /// A count below its setting's least.
    #[error("must be at least {min}")]
    BelowLeast {
        /// The least it may be.
        min: u64,
    },
    /// A count above its setting's most.
    #[error("must be at most {max}")]
    AboveMost {
        /// The most it may be.
        max: u64,
    },
    /// A flag's text is no switch.
    #[error("{text:?} is not true or false")]
    NotSwitch {
        /// The flag's text.
        text: String,
    },
    /// A text that is no duration.
    #[error("{text:?} is not a duration like \"10s\" or \"250ms\" ({source})")]
    NotDuration {
        /// The text given.
        text: String,
        /// Why it does not read.
        #[source]
        source: humantime::DurationError,
    },
    /// A duration of zero where the setting needs time.
    #[error("must be greater than zero")]
    Zero,
    /// A text that does not read as the setting's type.
    #[error("{text:?}: {source}")]
    Text {
        /// The text given.
        text: String,
        /// Why it does not read.
        #[source]
        source: TextError,
    },
    /// An empty zone (no zone is a zone left out).
    #[error("a zone cannot be empty (leave it out for none)")]
    EmptyZone,
    /// A setting of the file only, given as a flag.
    #[error("{what} are set in the config file")]
    FileOnly {
        /// What the setting holds.
        what: &'static str,
    },
}

/// Why a text does not read as a setting's type.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TextError {
    /// Not an address.
    #[error(transparent)]
    Address(#[from] std::net::AddrParseError),
    /// Not one of a policy's words.
    #[error(transparent)]
    Word(#[from] UnknownWord),
}

/// A text that is none of the words a policy or mode takes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("expected {}, got {got:?}", values::either(expected))]
pub struct UnknownWord {
    /// The words it takes.
    pub expected: &'static [&'static str],
    /// The text given.
    pub got: String,
}

// === impl Config ===

impl Config {
    /// A configuration with defaults for everything but the primary.
    pub fn new(primary: impl Into<String>) -> Self {
        Config {
            primary: primary.into(),
            ..Config::default()
        }
    }

    /// Every setting, as `--help` and the reference table describe it, in the order they are
    /// defined.
    pub fn settings() -> Vec<SettingInfo> {
        let mut out = Vec::new();
        Config::default().describe_all(&mut out);
        out
    }

    /// How many threads run sessions and replica pipes: as configured, or one per four CPUs
    /// (at least one). A statement through the proxy costs a few socket calls and wake-ups,
    /// and each worker that runs out of work sleeps and must be woken again: measured on two
    /// CPUs shared with the primary (docs/benchmarks-history.md, "The hop, next to HAProxy"), one worker spent half the CPU per
    /// statement that two did, and served more of them, as long as one core carried the load.
    pub fn worker_threads(&self) -> usize {
        self.worker_threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| (n.get() / 4).max(1))
        })
    }

    /// The settings that differ in `new` and that a reload cannot apply: they take effect
    /// after a restart.
    pub fn restart_needed(&self, new: &Config) -> Vec<&'static str> {
        let mut keys = Vec::new();
        self.restarts_all(new, &mut keys);
        keys
    }

    /// These settings, with `new`'s value of every one a reload applies.
    pub fn with_live_from(&self, new: &Config) -> Config {
        let mut applied = self.clone();
        applied.take_live_all(new);
        applied
    }

    /// The replicas' zones and labels, and the primary's zone.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a `[[replica]]` whose `server_id` is 0 or named twice.
    pub fn topology(&self) -> Result<Topology, ConfigError> {
        Topology::of(&self.replica, self.durability.primary_zone.clone())
    }

    /// Every setting as a config file would say it (what `check-config` prints): itself a
    /// file that loads to the same configuration, but for a password, which is never shown.
    pub fn to_toml(&self) -> String {
        toml::to_string(&self.write_all())
            .unwrap_or_else(|e| format!("# cannot render the settings: {e}\n"))
    }

    /// Checks every setting, each against its bounds and all of them together.
    ///
    /// # Errors
    /// [`ConfigError::Value`], [`ConfigError::Invalid`] or [`ConfigError::Missing`] naming the
    /// first bad setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, problem: &str| {
            Err(ConfigError::Invalid {
                key,
                problem: problem.to_owned(),
            })
        };
        if self.primary.is_empty() {
            return Err(ConfigError::Missing { key: "primary" });
        }
        if !is_host_port(&self.primary) && !crate::primary::is_socket_path(&self.primary) {
            return invalid(
                "primary",
                "expected HOST:PORT or the absolute path of a Unix socket",
            );
        }
        self.check_all()?;
        self.tls.files()?;
        self.probe.account()?;
        self.failover.account()?;
        self.cluster.validate()?;
        let l = &self.limits;
        if l.max_handshake_packet_size > l.max_packet_size {
            return invalid(
                "limits.max_handshake_packet_size",
                "must be between 1 KiB and limits.max_packet_size",
            );
        }
        if self.durability.visibility != Visibility::Commit && self.probe.user.is_none() {
            return invalid(
                "durability.visibility",
                "\"quorum\" and \"snapshot\" bound responses by the primary's binlog position, read on strongsync's own connection: configure a [probe] account",
            );
        }
        self.validate_rule()?;
        // Port 0 asks the OS for a free port, so two zero ports never collide.
        if self.admin_listen == self.listen && self.listen.port() != 0 {
            return invalid("admin_listen", "must differ from listen");
        }
        if self.cluster.enabled() && self.failover.state_file.is_some() {
            return invalid(
                "failover.state_file",
                "a cluster keeps its state in etcd, where every instance reads it: remove failover.state_file (or [cluster] endpoints)",
            );
        }
        if self.primary_tls.verifies() && self.primary_tls_ca.is_none() {
            return invalid(
                "primary_tls",
                "verify_ca and verify_identity check the primary's certificate against primary_tls_ca: set it",
            );
        }
        if self.tls.disabled && self.tls.files()?.is_some() {
            return invalid(
                "tls.disabled",
                "TLS for clients is off, yet tls.cert and tls.key are set: remove one or the other",
            );
        }
        if self.admin_tls
            && self
                .tls
                .certificate_file(self.failover.state_file.as_deref())
                .is_none()
        {
            return invalid(
                "admin_tls",
                "the admin port's HTTPS uses the clients' certificate, which strongsync's commands must be able to read: set tls.cert and tls.key, or failover.state_file (next to which strongsync keeps the certificate it makes)",
            );
        }
        Ok(())
    }
}

impl Config {
    /// The probe's account (`[probe]`), connecting as `primary_tls` says.
    ///
    /// # Errors
    /// As [`ProbeConfig::account`].
    pub fn probe_account(&self) -> Result<Option<ProbeAccount>, ConfigError> {
        Ok(self.probe.account()?.map(|a| self.over_primary_tls(a)))
    }

    /// The account promote uses on the replicas (`failover.user`), connecting as
    /// `primary_tls` says (each candidate may become the primary).
    ///
    /// # Errors
    /// As [`FailoverConfig::account`].
    pub fn failover_account(&self) -> Result<Option<ProbeAccount>, ConfigError> {
        Ok(self.failover.account()?.map(|a| self.over_primary_tls(a)))
    }

    fn over_primary_tls(&self, account: ProbeAccount) -> ProbeAccount {
        ProbeAccount {
            tls: self.primary_tls,
            tls_ca: self.primary_tls_ca.clone(),
            ..account
        }
    }

    /// Checks that the quorum rule can be met by the replicas the file names, and that a
    /// session's bounds make sense.
    fn validate_rule(&self) -> Result<(), ConfigError> {
        let invalid = |key, problem: String| Err(ConfigError::Invalid { key, problem });
        let d = &self.durability;
        let topology = self.topology()?;
        let zones = topology.zones();
        if d.quorum_zones > 1 {
            if d.quorum_zones > d.quorum {
                return invalid(
                    "durability.quorum_zones",
                    format!(
                        "{} zones need a quorum of at least {} replicas: raise durability.quorum to {} or more",
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
            let Some(primary_zone) = d.primary_zone.as_deref() else {
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
        let floor = d.session_quorum_floor.unwrap_or(d.quorum);
        if floor > d.session_quorum_max {
            return invalid(
                "durability.session_quorum_floor",
                format!(
                    "the floor ({floor}) is above durability.session_quorum_max ({})",
                    d.session_quorum_max
                ),
            );
        }
        if floor > d.quorum {
            return invalid(
                "durability.session_quorum_floor",
                format!(
                    "the floor ({floor}) is above durability.quorum ({}): sessions that ask for nothing get the quorum",
                    d.quorum
                ),
            );
        }
        Ok(())
    }
}

// === impl ProbeConfig ===

impl ProbeConfig {
    /// An account given as it is (tests and embedders).
    pub fn account_of(user: impl Into<String>, password: impl Into<String>) -> Self {
        ProbeConfig {
            user: Some(user.into()),
            password: Some(Secret(password.into())),
            password_file: None,
        }
    }

    /// The account, if one is configured.
    ///
    /// # Errors
    /// [`ConfigError::Missing`] for a user without a password or a password without a user;
    /// [`ConfigError::Invalid`] for a password given both inline and in a file.
    pub fn account(&self) -> Result<Option<ProbeAccount>, ConfigError> {
        PROBE_KEYS.account(&self.user, &self.password, &self.password_file)
    }

    /// Reads the password file, if one is named, into the password (shown by its file, never
    /// itself); with [`Files::Skip`], takes the file's password as given without opening it.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] if the file cannot be read, or if a password is also given.
    pub fn read_password_file(&mut self, files: Files) -> Result<(), ConfigError> {
        PROBE_KEYS.read_password(&mut self.password, &self.password_file, files)
    }
}

impl FailoverConfig {
    /// The account `strongsync promote` logs in to the replicas with, if one is configured.
    ///
    /// # Errors
    /// As [`ProbeConfig::account`].
    pub fn account(&self) -> Result<Option<ProbeAccount>, ConfigError> {
        FAILOVER_KEYS.account(&self.user, &self.password, &self.password_file)
    }

    /// As [`ProbeConfig::read_password_file`].
    ///
    /// # Errors
    /// As [`ProbeConfig::read_password_file`].
    pub fn read_password_file(&mut self, files: Files) -> Result<(), ConfigError> {
        FAILOVER_KEYS.read_password(&mut self.password, &self.password_file, files)
    }
}

impl ClusterConfig {
    /// The etcd account, if one is configured.
    ///
    /// # Errors
    /// As [`ProbeConfig::account`].
    pub fn account(&self) -> Result<Option<ProbeAccount>, ConfigError> {
        CLUSTER_KEYS.account(&self.user, &self.password, &self.password_file)
    }

    /// As [`ProbeConfig::read_password_file`].
    ///
    /// # Errors
    /// As [`ProbeConfig::read_password_file`].
    pub fn read_password_file(&mut self, files: Files) -> Result<(), ConfigError> {
        CLUSTER_KEYS.read_password(&mut self.password, &self.password_file, files)
    }

    /// Checks the lease's timing and the TLS pair.
    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, problem: &str| {
            Err(ConfigError::Invalid {
                key,
                problem: problem.to_owned(),
            })
        };
        if self.lease_ttl < std::time::Duration::from_secs(2) {
            return invalid(
                "cluster.lease_ttl",
                "at least 2s: etcd does not keep a shorter lease",
            );
        }
        if self.lease_margin * 2 >= self.lease_ttl {
            return invalid(
                "cluster.lease_margin",
                "must be less than half of cluster.lease_ttl, or the leader renews too late to ever act",
            );
        }
        match (&self.cert, &self.key) {
            (Some(_), None) => return Err(ConfigError::Missing { key: "cluster.key" }),
            (None, Some(_)) => {
                return Err(ConfigError::Missing {
                    key: "cluster.cert",
                })
            }
            _ => {}
        }
        self.account().map(|_| ())
    }
}

/// The keys of an account's settings (a user and its password, inline or in a file).
struct AccountKeys {
    user: &'static str,
    password: &'static str,
    password_file: &'static str,
}

const PROBE_KEYS: AccountKeys = AccountKeys {
    user: "probe.user",
    password: "probe.password",
    password_file: "probe.password_file",
};

const CLUSTER_KEYS: AccountKeys = AccountKeys {
    user: "cluster.user",
    password: "cluster.password",
    password_file: "cluster.password_file",
};

const FAILOVER_KEYS: AccountKeys = AccountKeys {
    user: "failover.user",
    password: "failover.password",
    password_file: "failover.password_file",
};

impl AccountKeys {
    fn account(
        &self,
        user: &Option<String>,
        password: &Option<Secret>,
        password_file: &Option<PathBuf>,
    ) -> Result<Option<ProbeAccount>, ConfigError> {
        let Some(user) = user else {
            if password.is_some() || password_file.is_some() {
                return Err(ConfigError::Missing { key: self.user });
            }
            return Ok(None);
        };
        match password {
            Some(password) => Ok(Some(ProbeAccount {
                user: user.clone(),
                password: password.0.clone(),
                tls: PrimaryTls::Preferred,
                tls_ca: None,
            })),
            None => Err(ConfigError::Missing {
                key: self.password_file,
            }),
        }
    }

    fn read_password(
        &self,
        password: &mut Option<Secret>,
        file: &Option<PathBuf>,
        files: Files,
    ) -> Result<(), ConfigError> {
        let Some(file) = file else {
            return Ok(());
        };
        if password.is_some() {
            return Err(ConfigError::Invalid {
                key: self.password,
                problem: format!("set {} or {}, not both", self.password, self.password_file),
            });
        }
        if files == Files::Skip {
            // Stands for the password the file holds: never used, never shown.
            *password = Some(Secret::default());
            return Ok(());
        }
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError::Invalid {
            key: self.password_file,
            problem: format!("cannot read {}: {e}", file.display()),
        })?;
        // A file written by `echo` or a secret mount may end in a newline.
        let text = text
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(&text);
        *password = Some(Secret(text.to_owned()));
        Ok(())
    }
}

impl std::fmt::Debug for ProbeAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeAccount")
            .field("user", &self.user)
            .field("password", &"(hidden)")
            .field("tls", &self.tls)
            .finish()
    }
}

// === impl TextError ===

/// A type whose text always reads (`String`) has no error to give.
impl From<std::convert::Infallible> for TextError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

fn is_host_port(addr: &str) -> bool {
    addr.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0))
}

#[cfg(test)]
mod tests;
