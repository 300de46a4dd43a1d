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
use strongsync::operator::{AdminPort, CallLimits, Known};
use strongsync::{Config, Proxy};
use tokio::signal::unix::{signal, SignalKind};
use tracing::{error, info, warn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter};

/// Exit code for a configuration that cannot work (EX_USAGE): restarting will not help.
const EXIT_CONFIG: u8 = 64;
/// Exit code of `outcome` for a GTID strongsync knows nothing of.
const EXIT_UNKNOWN: u8 = 3;
/// Exit code of `outcome` for a commit still waiting for its quorum: ask again.
const EXIT_WAITING: u8 = 4;

/// What every exit code means, as `--help` and docs/configuration.md say it.
const EXIT_CODES: &str = "\
Exit codes:
  0   done (the proxy: stopped by SIGTERM or SIGINT)
  1   failed: a port could not be bound, the admin port could not be reached or refused the call
  2   the command line is not understood
  3   outcome: strongsync does not know the GTID
  4   outcome: the commit still waits for its quorum
  64  the configuration cannot work (a setting, or a file it names): restarting will not help";

/// strongsync: a MySQL/MariaDB proxy that acknowledges a commit only once replicas have it.
///
/// Applications connect to strongsync instead of the primary; replicas replicate from it. Every
/// setting can come from the config file (--config), a flag, or an environment variable (shown
/// in brackets); flags and environment win over the file. A flag is its key in the file with
/// `-` for `.` and `_` (`durability.quorum`: `--durability-quorum`,
/// `STRONGSYNC_DURABILITY_QUORUM`); a switch is `--flag` or `--flag=false`. Settings without a
/// flag are set in the file (see docs/configuration.md).
#[derive(Debug, Parser)]
#[command(version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Option<Subcommands>,

    /// TOML config file the proxy runs with (see deploy/strongsync.toml); SIGHUP re-reads it.
    #[arg(long, env = "STRONGSYNC_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Subcommands {
    /// Check a config file as a start would, every file it names included, and print the
    /// configuration that would take effect. Exits 64 if it would not start.
    CheckConfig {
        /// The TOML config file.
        file: PathBuf,
        /// Check the settings only, opening none of the files they name (for a config written
        /// for another host); says which files went unchecked.
        #[arg(long)]
        skip_files: bool,
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
    /// Create the state of a new deployment (the file `failover.state_file`, or with
    /// `[cluster]` the key under `cluster.prefix` in etcd): epoch 1, following the config's
    /// primary. Once state is configured strongsync starts only from it, so that a lost or
    /// wrong file is never taken for a fresh start.
    InitState {
        /// The TOML config file whose state to create (the one the proxy runs with).
        #[arg(long, env = "STRONGSYNC_CONFIG", value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Say what became of a commit: acknowledged, released without quorum, the
    /// unacknowledged tail of a fenced primary, waiting, or unknown.
    #[command(
        after_help = "Exit codes: 0 an answer; 3 unknown to strongsync; 4 still waiting \
        for its quorum; 1 the call failed."
    )]
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
    /// The config file of the strongsync to call: its `admin_listen`,
    /// `failover.admin_token_file`, `admin_tls` and `tls.cert` tell where and how.
    #[arg(long, env = "STRONGSYNC_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The admin port (default: `admin_listen` of --config, else 127.0.0.1:9104).
    #[arg(
        long,
        env = "STRONGSYNC_ADMIN_LISTEN",
        value_name = "HOST:PORT",
        alias = "admin"
    )]
    admin_listen: Option<String>,
    /// The admin token's file (default: `failover.admin_token_file` of --config).
    #[arg(
        long,
        env = "STRONGSYNC_FAILOVER_ADMIN_TOKEN_FILE",
        value_name = "FILE",
        alias = "token-file"
    )]
    failover_admin_token_file: Option<PathBuf>,
    /// Call the admin port over HTTPS, trusting the certificate(s) in FILE (default, when
    /// --config has `admin_tls`: its `tls.cert`).
    #[arg(long, env = "STRONGSYNC_ADMIN_CA", value_name = "FILE")]
    admin_ca: Option<PathBuf>,
}

/// The flags of the operator's commands renamed after their keys: the former name, the new.
const FORMER_ADMIN_FLAGS: [(&str, &str); 2] = [
    ("admin", "admin-listen"),
    ("token-file", "failover-admin-token-file"),
];

type FilterHandle = reload::Handle<EnvFilter, tracing_subscriber::Registry>;

fn main() -> ExitCode {
    let matches = command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    warn_of_former_names(&matches);
    let flags = flags_of(&matches);
    if cli.command.is_some() && matches.value_source("config") == Some(ValueSource::CommandLine) {
        eprintln!(
            "strongsync: --config before a command is not read; give it after the command (strongsync init-state --config FILE), or the file to check-config as its argument"
        );
        return ExitCode::from(EXIT_CONFIG);
    }
    let file = match &cli.command {
        Some(Subcommands::CheckConfig { file, skip_files }) => {
            return check_config(file, *skip_files, &flags)
        }
        Some(Subcommands::InitState { config }) => return init_state(config.as_deref(), &flags),
        Some(operator) => return operate(operator),
        None => cli.config.clone(),
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
/// variable) for every setting that has one, made from the settings' own definitions: on the
/// proxy itself and on the commands that read a configuration (`check-config`, `init-state`).
fn command() -> Command {
    Cli::command()
        .args(setting_args())
        .mut_subcommand("check-config", |sub| sub.args(setting_args()))
        .mut_subcommand("init-state", |sub| sub.args(setting_args()))
}

/// A flag for every setting that has one. A switch takes `--flag` or `--flag=VALUE`, never
/// the next word, which may be a command.
fn setting_args() -> Vec<Arg> {
    Config::settings()
        .into_iter()
        .filter_map(|setting| {
            let (flag, env) = (setting.flag()?, setting.env()?);
            let mut help = setting.doc.clone();
            if let Some(default) = setting.default_words() {
                help.push_str(&format!(" [default: {default}]"));
            }
            let mut arg = Arg::new(setting.key)
                .long(flag)
                .env(env)
                .value_name(setting.value_name)
                .help(help)
                .hide_env_values(setting.meta.secret)
                .allow_negative_numbers(true)
                .action(ArgAction::Set);
            if let Some(former) = setting.meta.former_flag {
                arg = arg.alias(former);
            }
            if setting.value_name == "BOOL" {
                arg = arg
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true");
            }
            Some(arg)
        })
        .collect()
}

/// Says so when a flag or an environment variable is given by its former name (still taken for
/// this release).
fn warn_of_former_names(matches: &ArgMatches) {
    let typed = |flag: &str| {
        std::env::args().any(|arg| {
            arg.strip_prefix("--")
                .is_some_and(|a| a == flag || a.starts_with(&format!("{flag}=")))
        })
    };
    let settings = Config::settings();
    let renamed = settings
        .iter()
        .filter_map(|s| Some((s.meta.former_flag?, s.flag()?)));
    for (former, flag) in renamed.chain(FORMER_ADMIN_FLAGS.map(|(f, n)| (f, n.to_owned()))) {
        if typed(former) {
            eprintln!(
                "strongsync: --{former} is now --{flag}; the former name goes in the next release"
            );
        }
    }
    for setting in &settings {
        if let (Some(former), Some(env)) = (setting.former_env(), setting.env()) {
            if std::env::var_os(&former).is_some() {
                if given(matches, setting.key).is_some() {
                    eprintln!("strongsync: {former} is not read: {env} or its flag is given");
                } else {
                    eprintln!("strongsync: {former} is read for now; rename it to {env}");
                }
            }
        }
    }
    if std::env::var_os("STRONGSYNC_ADMIN").is_some() {
        eprintln!(
            "strongsync: STRONGSYNC_ADMIN is read for now by the operator's commands; rename it to STRONGSYNC_ADMIN_LISTEN"
        );
    }
}

/// The value of the setting `key` as a flag gives it, before the command or after it (which
/// wins), or else as its environment variable gives it: a flag wins over the environment
/// wherever it stands.
fn given(matches: &ArgMatches, key: &str) -> Option<String> {
    let levels: Vec<&ArgMatches> = matches
        .subcommand()
        .map(|(_, sub)| sub)
        .into_iter()
        .chain([matches])
        .collect();
    [ValueSource::CommandLine, ValueSource::EnvVariable]
        .into_iter()
        .find_map(|source| {
            levels.iter().find_map(|m| {
                let here = m.try_get_raw(key).ok().flatten().is_some()
                    && m.value_source(key) == Some(source);
                here.then(|| m.get_one::<String>(key).cloned()).flatten()
            })
        })
}

/// `strongsync check-config FILE`: loads `file` as a start would, then checks each file its
/// settings name (unless `skip_files`), and prints the configuration that would take effect.
fn check_config(file: &std::path::Path, skip_files: bool, flags: &Flags) -> ExitCode {
    let loaded = if skip_files {
        load::load_without_files(Some(file), flags)
    } else {
        load(Some(file), flags)
    };
    let config = match loaded {
        Ok(config) => config,
        Err(err) => {
            eprintln!("strongsync: {err}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let files = strongsync::app::preflight::files_named(&config);
    if !skip_files {
        if let Err(err) = strongsync::app::preflight::check_files(&config) {
            eprintln!("strongsync: {err}");
            return ExitCode::from(EXIT_CONFIG);
        }
    }
    print!("{}", config.to_toml());
    if config.probe.password.is_some() && config.probe.password_file.is_none() {
        println!("# probe.password is set; it is not shown");
    }
    let verb = if skip_files {
        "not opened (--skip-files)"
    } else {
        "checked as a start would"
    };
    for (key, path) in files {
        println!("# {key} = {}: {verb}", path.display());
    }
    ExitCode::SUCCESS
}

/// Runs an operator's command against a running strongsync's admin port.
fn operate(command: &Subcommands) -> ExitCode {
    let (Subcommands::Status { admin }
    | Subcommands::Fence { admin, .. }
    | Subcommands::Follow { admin, .. }
    | Subcommands::Promote { admin }
    | Subcommands::Reinstate { admin, .. }
    | Subcommands::Outcome { admin, .. }) = command
    else {
        return ExitCode::FAILURE;
    };
    match admin_port(admin) {
        Ok(port) => call(&port, command),
        Err(exit) => exit,
    }
}

/// The admin port `admin` names, with its token and certificate: from the flags, then the
/// environment, then the config file; `Err` with the exit code when it cannot be used.
fn admin_port(admin: &AdminArgs) -> Result<AdminPort, ExitCode> {
    // Only where the admin port is and how to call it are read: the files the config names
    // are the proxy's, which its operator's account may not be able to open.
    let config = match admin
        .config
        .as_deref()
        .map(|f| load::load_without_files(Some(f), &Flags::new()))
        .transpose()
    {
        Ok(config) => config,
        Err(err) => {
            eprintln!("strongsync: {err}");
            return Err(ExitCode::from(EXIT_CONFIG));
        }
    };
    let former = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let addr = admin
        .admin_listen
        .clone()
        .or_else(|| former("STRONGSYNC_ADMIN"))
        .unwrap_or_else(|| {
            config.as_ref().map_or_else(
                || "127.0.0.1:9104".to_owned(),
                |c| c.admin_listen.to_string(),
            )
        });
    let token_file = admin
        .failover_admin_token_file
        .clone()
        .or_else(|| former("STRONGSYNC_ADMIN_TOKEN_FILE").map(PathBuf::from))
        .or_else(|| {
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
    AdminPort::new(addr, token_file.as_deref(), ca.as_deref(), limits).map_err(|err| {
        eprintln!("strongsync: {err}");
        ExitCode::from(EXIT_CONFIG)
    })
}

/// Makes `command`'s call to `port`, prints the answer and says how it went.
fn call(port: &AdminPort, command: &Subcommands) -> ExitCode {
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
        Subcommands::Outcome { gtid, .. } => return outcome(port, gtid),
        Subcommands::CheckConfig { .. } | Subcommands::InitState { .. } => {
            return ExitCode::FAILURE
        }
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

/// `strongsync outcome GTID`, whose exit code says whether the answer is one.
fn outcome(port: &AdminPort, gtid: &str) -> ExitCode {
    match port.outcome(gtid) {
        Ok((text, known)) => {
            print!("{text}");
            match known {
                Known::Answer => ExitCode::SUCCESS,
                Known::Unknown => ExitCode::from(EXIT_UNKNOWN),
                Known::Waiting => ExitCode::from(EXIT_WAITING),
            }
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

/// The settings given as flags or environment variables (see [`given`]), or by an environment
/// variable's former name.
fn flags_of(matches: &ArgMatches) -> Flags {
    Config::settings()
        .into_iter()
        .filter_map(|setting| {
            setting.flag()?;
            let value = given(matches, setting.key)
                .or_else(|| std::env::var(setting.former_env()?).ok())?;
            Some((setting.key, value))
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
            // A port in use may be free on the next try; anything else is the configuration.
            return match err {
                strongsync::StartError::Bind { .. } => ExitCode::FAILURE,
                _ => ExitCode::from(EXIT_CONFIG),
            };
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
