//! The `strongsync` binary: settings from a TOML file, command-line flags and `STRONGSYNC_*`
//! environment variables (flags and environment win over the file), logging, and the proxy's
//! lifetime: SIGHUP reloads, SIGTERM stops gracefully, SIGINT stops at once.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{
    parser::ValueSource, Arg, ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches,
    Parser, Subcommand,
};
use strongsync::config::load::{self, Flags};
use strongsync::config::ConfigError;
use strongsync::operator::{AdminPort, CallLimits};
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
/// in brackets); flags and environment win over the file. Settings without a flag are set in
/// the file (see docs/configuration.md).
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Subcommands>,

    /// TOML config file (see deploy/strongsync.toml); SIGHUP re-reads it.
    #[arg(long, env = "STRONGSYNC_CONFIG", value_name = "FILE", global = true)]
    config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Subcommands {
    /// Validate a config file and print the configuration that would take effect.
    CheckConfig {
        /// The TOML config file.
        file: PathBuf,
    },
    /// Show a running strongsync's state, epoch, fence, candidates and replicas.
    Status {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Fence the primary: nothing more of it reaches a replica or is acknowledged, parked
    /// commits get an error naming their GTIDs, statements are refused.
    Fence {
        #[command(flatten)]
        admin: AdminArgs,
        /// Why (logged by strongsync).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Follow a new primary: checked first (writable, not replicating, holding every
    /// acknowledged commit), the old one fenced and retired, the epoch raised. Replicas keep
    /// replicating through strongsync; clients keep connecting to it.
    Follow {
        #[command(flatten)]
        admin: AdminArgs,
        /// The new primary, `HOST:PORT` or its Unix socket's path.
        primary: String,
        /// Follow even if it lacks transactions of the watermark (they are lost; counted and logged).
        #[arg(long)]
        force: bool,
        /// Follow even a primary strongsync followed before.
        #[arg(long)]
        allow_retired: bool,
    },
    /// Promote a replica (for users without a failover manager): fence, pick the replica that
    /// holds the whole watermark and received the most, wait for it to apply, stop its
    /// replication, make it writable, follow it. Safe to rerun after a failure midway.
    Promote {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Let a retired primary be followed (and promoted) again, once it has rejoined as a
    /// replica without its unacknowledged tail.
    Reinstate {
        #[command(flatten)]
        admin: AdminArgs,
        /// The retired primary, as it was followed.
        primary: String,
    },
    /// Create the state file of a new deployment (`failover.state_file` of --config): epoch 1,
    /// following the config file's primary. Once a state file is configured strongsync starts
    /// only from it, so that a lost or wrong file is never taken for a fresh start.
    InitState,
    /// Say what became of a commit: acknowledged, released without quorum, the
    /// unacknowledged tail of a fenced primary, or unknown.
    Outcome {
        #[command(flatten)]
        admin: AdminArgs,
        /// The GTID (`0-1-42`, or `uuid:42`).
        gtid: String,
    },
}

/// Where the operator's commands find the admin port.
#[derive(Debug, clap::Args)]
struct AdminArgs {
    /// The admin port (default: `admin_listen` of --config, else 127.0.0.1:9104).
    #[arg(long, env = "STRONGSYNC_ADMIN", value_name = "HOST:PORT")]
    admin: Option<String>,
    /// The admin token's file (default: `failover.admin_token_file` of --config).
    #[arg(long, env = "STRONGSYNC_ADMIN_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Call the admin port over HTTPS, trusting the certificate(s) in FILE (default, when
    /// --config has `admin_tls`: its `tls.cert`).
    #[arg(long, env = "STRONGSYNC_ADMIN_CA", value_name = "FILE")]
    admin_ca: Option<PathBuf>,
}

type FilterHandle = reload::Handle<EnvFilter, tracing_subscriber::Registry>;

fn main() -> ExitCode {
    let matches = command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    let flags = flags_of(&matches);
    let file = match (&cli.command, &cli.config) {
        (Some(Subcommands::CheckConfig { file }), _) => Some(file.clone()),
        (Some(Subcommands::InitState), file) => return init_state(file.as_deref(), &flags),
        (Some(operator), file) => return operate(operator, file.as_deref(), &flags),
        (None, file) => file.clone(),
    };
    let config = match load(file.as_deref(), &flags) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("strongsync: {err}");
            if let ConfigError::Missing { key: "primary" } = err {
                eprintln!(
                    "set primary in the config file, with --primary or STRONGSYNC_PRIMARY\n\n{}",
                    command().render_usage()
                );
            }
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Some(Subcommands::CheckConfig { .. }) = cli.command {
        print!("{}", config.to_toml());
        if config.probe.password.is_some() && config.probe.password_file.is_none() {
            println!("# probe.password is set; it is not shown");
        }
        return ExitCode::SUCCESS;
    }
    let filter_handle = init_logging(&config.log_level);
    // One worker runs on this thread, on the single-threaded scheduler: it spends less per
    // task switch and per wake-up than a multi-threaded runtime of one worker
    // (docs/benchmarks.md, round 3).
    let mut builder = match config.worker_threads() {
        1 => tokio::runtime::Builder::new_current_thread(),
        workers => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(workers);
            builder
        }
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            error!(%err, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(config, file, flags, filter_handle))
}

/// The command line: the subcommands and `--config`, and a flag (with its environment
/// variable) for every setting that has one, made from the settings' own definitions.
fn command() -> Command {
    Config::settings()
        .into_iter()
        .filter_map(|setting| {
            let flag = setting.meta.flag?;
            let mut help = setting.doc.clone();
            if let Some(default) = setting.default_words() {
                help.push_str(&format!(" [default: {default}]"));
            }
            let mut arg = Arg::new(setting.key)
                .long(flag)
                .env(setting.env()?)
                .value_name(setting.value_name)
                .help(help)
                .hide_env_values(setting.meta.secret)
                .allow_negative_numbers(true)
                .action(ArgAction::Set);
            if setting.value_name == "BOOL" {
                arg = arg.num_args(0..=1).default_missing_value("true");
            }
            Some(arg)
        })
        .fold(Cli::command(), Command::arg)
}

/// Runs an operator's command against a running strongsync's admin port.
fn operate(command: &Subcommands, file: Option<&std::path::Path>, flags: &Flags) -> ExitCode {
    let (Subcommands::Status { admin }
    | Subcommands::Fence { admin, .. }
    | Subcommands::Follow { admin, .. }
    | Subcommands::Promote { admin }
    | Subcommands::Reinstate { admin, .. }
    | Subcommands::Outcome { admin, .. }) = command
    else {
        return ExitCode::FAILURE;
    };
    let config = match file.map(|f| load(Some(f), flags)).transpose() {
        Ok(config) => config,
        Err(err) => {
            eprintln!("strongsync: {err}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let addr = admin.admin.clone().unwrap_or_else(|| {
        config.as_ref().map_or_else(
            || "127.0.0.1:9104".to_owned(),
            |c| c.admin_listen.to_string(),
        )
    });
    let token_file = admin.token_file.clone().or_else(|| {
        config
            .as_ref()
            .and_then(|c| c.failover.admin_token_file.clone())
    });
    let ca = admin.admin_ca.clone().or_else(|| {
        config
            .as_ref()
            .filter(|c| c.admin_tls)
            .and_then(|c| c.tls.certificate_file(c.failover.state_file.as_deref()))
    });
    let limits = CallLimits::of(config.as_ref().unwrap_or(&Config::default()));
    let port = match AdminPort::new(addr, token_file.as_deref(), ca.as_deref(), limits) {
        Ok(port) => port,
        Err(err) => {
            eprintln!("strongsync: {err}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let answer = match command {
        Subcommands::Status { .. } => port.status(),
        Subcommands::Fence { reason, .. } => port.fence(reason.as_deref()),
        Subcommands::Follow {
            primary,
            force,
            allow_retired,
            ..
        } => port.follow(primary, *force, *allow_retired),
        Subcommands::Promote { .. } => port.promote(),
        Subcommands::Reinstate { primary, .. } => port.reinstate(primary),
        Subcommands::Outcome { gtid, .. } => port.outcome(gtid),
        Subcommands::CheckConfig { .. } | Subcommands::InitState => return ExitCode::FAILURE,
    };
    match answer {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("strongsync: {err}");
            ExitCode::FAILURE
        }
    }
}

/// `strongsync init-state`: creates the state file `--config` names.
fn init_state(file: Option<&std::path::Path>, flags: &Flags) -> ExitCode {
    let config = match load(file, flags) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("strongsync: {err}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match strongsync::failover::init_state(&config) {
        Ok(place) => {
            println!("created {place}: epoch 1, following {}", config.primary);
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("strongsync: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The settings given as flags or environment variables.
fn flags_of(matches: &ArgMatches) -> Flags {
    Config::settings()
        .into_iter()
        .filter(|setting| setting.meta.flag.is_some())
        .filter(|setting| {
            matches!(
                matches.value_source(setting.key),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        })
        .filter_map(|setting| {
            let value: &String = matches.get_one(setting.key)?;
            Some((setting.key, value.clone()))
        })
        .collect()
}

/// The effective configuration: defaults, then the file, then flags and environment. Without
/// a log level from any of them, `RUST_LOG` gives it.
fn load(file: Option<&std::path::Path>, flags: &Flags) -> Result<Config, ConfigError> {
    let rust_log = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty());
    let beneath: Flags = rust_log
        .map(|filter| ("log_level", filter))
        .into_iter()
        .collect();
    load::load(file, flags, &beneath)
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
