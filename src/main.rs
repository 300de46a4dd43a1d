//! The `strongsync` binary: command-line flags (each also settable as a `STRONGSYNC_*`
//! environment variable), logging, and the proxy's lifetime until a signal.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use strongsync::durability::{DurabilityConfig, OnTimeout, WithoutQuorum};
use strongsync::{Config, Limits, Proxy, Timeouts, TlsFiles};
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

/// Exit code for a configuration that cannot work (EX_USAGE).
const EXIT_CONFIG: u8 = 64;

/// strongsync: a MySQL/MariaDB proxy that acknowledges a commit only once replicas have it.
///
/// Applications connect to strongsync instead of the primary. Every setting can also be given
/// as an environment variable, shown in brackets.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// Address of the SQL port clients connect to.
    #[arg(
        long,
        env = "STRONGSYNC_LISTEN",
        default_value = "127.0.0.1:3307",
        value_name = "ADDR"
    )]
    listen: SocketAddr,

    /// The primary MySQL/MariaDB server.
    #[arg(long, env = "STRONGSYNC_PRIMARY", value_name = "HOST:PORT")]
    primary: String,

    /// PEM certificate chain for TLS on the client side (needs --tls-key).
    #[arg(
        long,
        env = "STRONGSYNC_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,

    /// PEM private key for --tls-cert.
    #[arg(
        long,
        env = "STRONGSYNC_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,

    /// Most client connections served at once.
    #[arg(long, env = "STRONGSYNC_MAX_CONNECTIONS", default_value_t = Limits::default().max_connections)]
    max_connections: usize,

    /// Largest packet payload accepted, in bytes.
    #[arg(long, env = "STRONGSYNC_MAX_PACKET_SIZE", default_value_t = Limits::default().max_packet_size)]
    max_packet_size: usize,

    /// Time allowed to connect to the primary (e.g. "5s", "500ms").
    #[arg(long, env = "STRONGSYNC_CONNECT_TIMEOUT", value_parser = humantime::parse_duration, default_value = "5s")]
    connect_timeout: Duration,

    /// Time a new client has to log in.
    #[arg(long, env = "STRONGSYNC_HANDSHAKE_TIMEOUT", value_parser = humantime::parse_duration, default_value = "10s")]
    handshake_timeout: Duration,

    /// Replicas that must acknowledge a transaction before its commit is acknowledged to the
    /// client (0: do not wait, only relay).
    #[arg(long, env = "STRONGSYNC_QUORUM", default_value_t = 1)]
    quorum: usize,

    /// How long a commit waits for its quorum before --on-timeout applies.
    #[arg(long, env = "STRONGSYNC_ACK_TIMEOUT", value_parser = humantime::parse_duration, default_value = "10s")]
    ack_timeout: Duration,

    /// What happens to a commit that waited --ack-timeout without quorum: "degrade" (release it
    /// and stop waiting until the replicas catch up), "block" (keep waiting), "error" (answer
    /// with an error saying it committed without quorum).
    #[arg(
        long,
        env = "STRONGSYNC_ON_TIMEOUT",
        default_value = "degrade",
        value_name = "POLICY"
    )]
    on_timeout: OnTimeout,

    /// What a commit does while fewer than --quorum semisync replicas are connected: "wait"
    /// (for --ack-timeout) or "immediate" (apply --on-timeout at once).
    #[arg(
        long,
        env = "STRONGSYNC_WITHOUT_QUORUM",
        default_value = "wait",
        value_name = "BEHAVIOUR"
    )]
    without_quorum: WithoutQuorum,

    /// Ask a replica again for an acknowledgement that has not come after this long.
    #[arg(long, env = "STRONGSYNC_ACK_NUDGE_AFTER", value_parser = humantime::parse_duration, default_value = "1s")]
    ack_nudge_after: Duration,

    /// Log level or filter (e.g. "info", "strongsync=debug"); overrides RUST_LOG.
    #[arg(long, env = "STRONGSYNC_LOG_LEVEL", value_name = "FILTER")]
    log_level: Option<String>,

    /// How long in-flight sessions get to finish on SIGTERM.
    #[arg(long, env = "STRONGSYNC_SHUTDOWN_GRACE", value_parser = humantime::parse_duration, default_value = "10s")]
    shutdown_grace: Duration,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_level.as_deref());
    let config = Config {
        listen: cli.listen,
        primary: cli.primary,
        tls: cli
            .tls_cert
            .zip(cli.tls_key)
            .map(|(cert, key)| TlsFiles { cert, key }),
        limits: Limits {
            max_connections: cli.max_connections,
            max_packet_size: cli.max_packet_size,
            ..Limits::default()
        },
        timeouts: Timeouts {
            primary_connect: cli.connect_timeout,
            client_handshake: cli.handshake_timeout,
        },
        durability: DurabilityConfig {
            quorum: cli.quorum,
            ack_timeout: cli.ack_timeout,
            on_timeout: cli.on_timeout,
            without_quorum: cli.without_quorum,
            ack_nudge_after: cli.ack_nudge_after,
            ..DurabilityConfig::default()
        },
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            error!(%err, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(config, cli.shutdown_grace))
}

async fn run(config: Config, grace: Duration) -> ExitCode {
    let proxy = match Proxy::builder(config).start().await {
        Ok(proxy) => proxy,
        Err(err) => {
            error!(%err, "cannot start");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match shutdown_signal().await {
        Signal::Terminate => {
            info!(?grace, "SIGTERM: stopping, letting sessions finish");
            proxy.shutdown(grace).await;
        }
        Signal::Interrupt => info!("SIGINT: exiting"),
    }
    ExitCode::SUCCESS
}

enum Signal {
    Terminate,
    Interrupt,
}

/// Waits for SIGTERM (graceful) or SIGINT (prompt).
async fn shutdown_signal() -> Signal {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(err) => {
            error!(%err, "cannot install the SIGTERM handler; only SIGINT will stop the proxy");
            let _ = tokio::signal::ctrl_c().await;
            return Signal::Interrupt;
        }
    };
    tokio::select! {
        _ = term.recv() => Signal::Terminate,
        _ = tokio::signal::ctrl_c() => Signal::Interrupt,
    }
}

fn init_logging(level: Option<&str>) {
    let filter = match level {
        Some(level) => EnvFilter::new(level),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
