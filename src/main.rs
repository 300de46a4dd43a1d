//! The `strongsync` binary: settings from a TOML file, command-line flags and `STRONGSYNC_*`
//! environment variables (flags and environment win over the file), logging, and the proxy's
//! lifetime: SIGHUP reloads, SIGTERM stops gracefully, SIGINT stops at once.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use strongsync::config::settings::{
    DurabilitySettings, LimitSettings, ProbeSettings, Settings, TimeoutSettings, TlsSettings,
};
use strongsync::config::ConfigError;
use strongsync::{Config, Proxy};
use tokio::signal::unix::{signal, SignalKind};
use tracing::{error, info, warn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter};

/// Exit code for a configuration that cannot work (EX_USAGE).
const EXIT_CONFIG: u8 = 64;

/// strongsync: a MySQL/MariaDB proxy that acknowledges a commit only once replicas have it.
///
/// Applications connect to strongsync instead of the primary; replicas replicate from it. Every
/// setting can come from the config file (--config), a flag, or an environment variable (shown
/// in brackets); flags and environment win over the file.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    settings: Flags,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a config file and print the configuration that would take effect.
    CheckConfig {
        /// The TOML config file.
        file: PathBuf,
    },
}

/// Settings as flags; unset ones come from the config file or the defaults.
#[derive(Debug, Args)]
struct Flags {
    /// TOML config file (see deploy/strongsync.toml); SIGHUP re-reads it.
    #[arg(long, env = "STRONGSYNC_CONFIG", value_name = "FILE", global = true)]
    config: Option<PathBuf>,

    /// SQL port clients and replicas connect to [default: 127.0.0.1:3307].
    #[arg(long, env = "STRONGSYNC_LISTEN", value_name = "ADDR")]
    listen: Option<String>,

    /// The primary MySQL/MariaDB server: HOST:PORT, or the path of its Unix socket.
    #[arg(long, env = "STRONGSYNC_PRIMARY", value_name = "HOST:PORT|SOCKET")]
    primary: Option<String>,

    /// Admin HTTP port: /metrics, /healthz, /readyz, /status [default: 127.0.0.1:9104].
    #[arg(long, env = "STRONGSYNC_ADMIN_LISTEN", value_name = "ADDR")]
    admin_listen: Option<String>,

    /// PEM certificate chain for TLS on the client side (with --tls-key).
    #[arg(long, env = "STRONGSYNC_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,

    /// PEM private key for --tls-cert.
    #[arg(long, env = "STRONGSYNC_TLS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,

    /// Semisync replicas that must acknowledge a transaction before its commit is acknowledged
    /// to the client, 1 to 64 [default: 1].
    #[arg(
        long,
        env = "STRONGSYNC_QUORUM",
        value_name = "N",
        allow_negative_numbers = true
    )]
    quorum: Option<i64>,

    /// How long a commit waits for its quorum before --on-timeout applies [default: 10s].
    #[arg(long, env = "STRONGSYNC_ACK_TIMEOUT", value_name = "DURATION")]
    ack_timeout: Option<String>,

    /// What happens to a commit that waited --ack-timeout without quorum: "degrade" (release it
    /// and stop waiting until the replicas catch up), "block" (keep waiting), "error" (answer
    /// with an error saying it committed without quorum) [default: degrade].
    #[arg(long, env = "STRONGSYNC_ON_TIMEOUT", value_name = "POLICY")]
    on_timeout: Option<String>,

    /// What a commit does while fewer than --quorum semisync replicas are connected: "wait"
    /// (for --ack-timeout) or "immediate" (apply --on-timeout at once) [default: wait].
    #[arg(long, env = "STRONGSYNC_WITHOUT_QUORUM", value_name = "BEHAVIOUR")]
    without_quorum: Option<String>,

    /// Ask a replica again for an acknowledgement that has not come after this long
    /// [default: 1s].
    #[arg(long, env = "STRONGSYNC_ACK_NUDGE_AFTER", value_name = "DURATION")]
    ack_nudge_after: Option<String>,

    /// What responses may reveal of transactions their quorum does not hold yet: "commit"
    /// (anything committed, like semisync AFTER_COMMIT), "quorum" (nothing: every response
    /// waits, like AFTER_SYNC; needs a probe account) or "snapshot" (as quorum, a transaction
    /// under innodb_snapshot_isolation bounded once for its reads) [default: commit].
    #[arg(long, env = "STRONGSYNC_VISIBILITY", value_name = "MODE")]
    visibility: Option<String>,

    /// When a replica without semisync receives a transaction: "after_quorum" (once the quorum
    /// holds it, so it is never ahead of a promoted replica) or "immediate" [default:
    /// after_quorum]. Zones, labels and session quorums are set in the config file.
    #[arg(long, env = "STRONGSYNC_ASYNC_REPLICAS", value_name = "WHEN")]
    async_replicas: Option<String>,

    /// Relay only: commits never wait for replicas (measuring the proxy's own cost).
    #[arg(long, env = "STRONGSYNC_PASSTHROUGH", num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    passthrough: Option<bool>,

    /// Most client connections served at once [default: 4096].
    #[arg(
        long,
        env = "STRONGSYNC_MAX_CONNECTIONS",
        value_name = "N",
        allow_negative_numbers = true
    )]
    max_connections: Option<i64>,

    /// Largest packet payload accepted, in bytes [default: 1073741824].
    #[arg(
        long,
        env = "STRONGSYNC_MAX_PACKET_SIZE",
        value_name = "BYTES",
        allow_negative_numbers = true
    )]
    max_packet_size: Option<i64>,

    /// Time allowed to connect to the primary [default: 5s].
    #[arg(long, env = "STRONGSYNC_CONNECT_TIMEOUT", value_name = "DURATION")]
    connect_timeout: Option<String>,

    /// Time a new client has to log in [default: 10s].
    #[arg(long, env = "STRONGSYNC_HANDSHAKE_TIMEOUT", value_name = "DURATION")]
    handshake_timeout: Option<String>,

    /// Time a logged-in client has to finish a packet it began (or owes mid-command) before it
    /// is disconnected with error 1159; waiting for a command is not limited [default: 30s].
    #[arg(long, env = "STRONGSYNC_CLIENT_READ_TIMEOUT", value_name = "DURATION")]
    client_read_timeout: Option<String>,

    /// A client that takes none of its results for this long is disconnected [default: 60s].
    #[arg(long, env = "STRONGSYNC_CLIENT_WRITE_TIMEOUT", value_name = "DURATION")]
    client_write_timeout: Option<String>,

    /// On SIGTERM, how long sessions in flight (parked commits included) may finish
    /// [default: 10s].
    #[arg(long, env = "STRONGSYNC_SHUTDOWN_GRACE", value_name = "DURATION")]
    shutdown_grace: Option<String>,

    /// Threads that run sessions and replica pipes [default: one per four CPUs, at least
    /// one].
    #[arg(long, env = "STRONGSYNC_WORKER_THREADS", value_name = "N")]
    worker_threads: Option<usize>,

    /// Log level or filter, e.g. "info", "strongsync=debug" [default: RUST_LOG, or info].
    #[arg(long, env = "STRONGSYNC_LOG_LEVEL", value_name = "FILTER")]
    log_level: Option<String>,

    /// strongsync's own account on the primary, for the probe (it needs no privilege).
    #[arg(long, env = "STRONGSYNC_PROBE_USER", value_name = "USER")]
    probe_user: Option<String>,

    /// The probe account's password, in a file (a mounted secret, say).
    #[arg(long, env = "STRONGSYNC_PROBE_PASSWORD_FILE", value_name = "FILE")]
    probe_password_file: Option<PathBuf>,

    /// The probe account's password. Prefer the environment variable or a file: a flag shows
    /// in the process list.
    #[arg(
        long,
        env = "STRONGSYNC_PROBE_PASSWORD",
        value_name = "PASSWORD",
        hide_env_values = true
    )]
    probe_password: Option<String>,
}

type FilterHandle = reload::Handle<EnvFilter, tracing_subscriber::Registry>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let file = match (&cli.command, &cli.settings.config) {
        (Some(Command::CheckConfig { file }), _) => Some(file.clone()),
        (None, file) => file.clone(),
    };
    let config = match load(file.as_deref(), &cli.settings) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("strongsync: {err}");
            if let ConfigError::Missing { key: "primary" } = err {
                eprintln!(
                    "set primary in the config file, with --primary or STRONGSYNC_PRIMARY\n\n{}",
                    Cli::command().render_usage()
                );
            }
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Some(Command::CheckConfig { .. }) = cli.command {
        print!("{}", Settings::from_config(&config).to_toml());
        if config
            .probe
            .as_ref()
            .is_some_and(|p| p.password_file.is_none())
        {
            println!("# probe.password is set; it is not shown");
        }
        return ExitCode::SUCCESS;
    }
    let filter_handle = init_logging(&config.log_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads())
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            error!(%err, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(config, file, cli.settings, filter_handle))
}

/// The effective configuration: defaults, then the file, then flags and environment.
fn load(file: Option<&std::path::Path>, flags: &Flags) -> Result<Config, ConfigError> {
    let from_file = match file {
        Some(path) => Settings::from_file(path)?,
        None => Settings::default(),
    };
    let mut settings = from_file.overridden_by(flags.settings());
    if settings.log_level.is_none() {
        settings.log_level = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty());
    }
    settings.resolve()
}

async fn run(
    config: Config,
    file: Option<PathBuf>,
    flags: Flags,
    filter: FilterHandle,
) -> ExitCode {
    let grace = config.shutdown_grace;
    let proxy = match Proxy::builder(config).start().await {
        Ok(proxy) => proxy,
        Err(err) => {
            error!(%err, "cannot start");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        error!("cannot install signal handlers");
        return ExitCode::FAILURE;
    };
    loop {
        tokio::select! {
            _ = term.recv() => {
                info!(?grace, "SIGTERM: stopping; sessions in flight may finish");
                let report = proxy.shutdown(grace).await;
                info!(released_parked = report.released_parked, unfinished = report.unfinished, "shutdown complete");
                return ExitCode::SUCCESS;
            }
            _ = tokio::signal::ctrl_c() => {
                info!("SIGINT: exiting");
                return ExitCode::SUCCESS;
            }
            _ = hup.recv() => reload(&proxy, file.as_deref(), &flags, &filter),
        }
    }
}

/// SIGHUP: re-read the config file and apply what can change live.
fn reload(proxy: &Proxy, file: Option<&std::path::Path>, flags: &Flags, filter: &FilterHandle) {
    if file.is_none() {
        warn!("SIGHUP: no config file to reload (start with --config)");
        return;
    }
    match load(file, flags) {
        Err(err) => error!(%err, "SIGHUP: config rejected, the running settings stay"),
        Ok(config) => {
            if let Err(e) = filter.modify(|f| *f = EnvFilter::new(&config.log_level)) {
                warn!(%e, "SIGHUP: cannot change the log filter");
            }
            let needs_restart = proxy.reload(&config);
            if needs_restart.is_empty() {
                info!("SIGHUP: config reloaded");
            } else {
                warn!(?needs_restart, "SIGHUP: config reloaded; these settings changed but only take effect after a restart");
            }
        }
    }
}

fn init_logging(filter: &str) -> FilterHandle {
    let (filter, handle) = reload::Layer::new(EnvFilter::new(filter));
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .init();
    handle
}

// === impl Flags ===

impl Flags {
    /// The settings given as flags or environment variables.
    fn settings(&self) -> Settings {
        Settings {
            listen: self.listen.clone(),
            primary: self.primary.clone(),
            admin_listen: self.admin_listen.clone(),
            log_level: self.log_level.clone(),
            shutdown_grace: self.shutdown_grace.clone(),
            worker_threads: self.worker_threads,
            compression_level: None,
            tls: TlsSettings {
                cert: self.tls_cert.clone(),
                key: self.tls_key.clone(),
            },
            limits: LimitSettings {
                max_connections: self.max_connections,
                max_packet_size: self.max_packet_size,
                ..LimitSettings::default()
            },
            timeouts: TimeoutSettings {
                primary_connect: self.connect_timeout.clone(),
                client_handshake: self.handshake_timeout.clone(),
                client_read: self.client_read_timeout.clone(),
                client_write: self.client_write_timeout.clone(),
            },
            durability: DurabilitySettings {
                quorum: self.quorum,
                ack_timeout: self.ack_timeout.clone(),
                on_timeout: self.on_timeout.clone(),
                without_quorum: self.without_quorum.clone(),
                ack_nudge_after: self.ack_nudge_after.clone(),
                passthrough: self.passthrough,
                visibility: self.visibility.clone(),
                async_replicas: self.async_replicas.clone(),
                ..DurabilitySettings::default()
            },
            probe: ProbeSettings {
                user: self.probe_user.clone(),
                password: self.probe_password.clone(),
                password_file: self.probe_password_file.clone(),
            },
            replica: Vec::new(),
        }
    }
}
