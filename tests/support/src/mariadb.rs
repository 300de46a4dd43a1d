//! One throwaway MariaDB server process for tests, with its own data directory, port and socket.
//!
//! Every server starts from a data directory template that `mariadb-install-db` builds once per
//! MariaDB version under `target/tmp`; starting an instance copies it into a fresh
//! temporary directory, so instances are cheap and never share state.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use nix::sys::prctl;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

pub(crate) use crate::ports::free_port;
use crate::server_process::ServerProcess;

pub use clock::{timed, Deadline};

/// Superuser, reachable only over the unix socket with an empty password.
pub const ROOT_USER: &str = "root";
/// Application user (`mysql_native_password`), all privileges, any host.
pub const APP_USER: &str = "app";
pub const APP_PASSWORD: &str = "app-secret";
/// Application user authenticating with `ed25519`, all privileges, any host.
pub const ED_USER: &str = "eduser";
pub const ED_PASSWORD: &str = "ed-secret";
/// Replication user: enough to pull binlogs and to run `SHOW SLAVE STATUS`.
pub const REPL_USER: &str = "repl";
pub const REPL_PASSWORD: &str = "repl-secret";
/// Database created on every instance (sysbench's default).
pub const TEST_DB: &str = "sbtest";

const MARIADBD: &str = "/usr/sbin/mariadbd";
const INSTALL_DB: &str = "mariadb-install-db";
const CLIENT: &str = "mariadb";

/// The template is bootstrapped with the same InnoDB sizes the servers run with, so a fresh copy
/// starts without resizing its redo log (10.11 would resize it, but that costs start time).
const INNODB_SIZES: &[&str] = &["innodb_log_file_size=16M", "innodb_buffer_pool_size=64M"];
/// Part of the template's cache key: bump it whenever the bootstrap arguments change.
const TEMPLATE_REVISION: u32 = 1;

const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// Attempts with a different port when the chosen one got taken before the server bound it.
const PORT_ATTEMPTS: usize = 5;
/// Linux `sun_path` is 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;
const LOG_TAIL_LINES: usize = 40;

/// Environment variables the MariaDB client library reads even with `--no-defaults`; an
/// inherited `MYSQL_PWD` or `MYSQL_HOST` would silently change what a client connects to.
const CLIENT_ENV: &[&str] = &[
    "MYSQL_PWD",
    "MYSQL_HOST",
    "MYSQL_TCP_PORT",
    "MYSQL_UNIX_PORT",
];

/// Removes the environment variables the MariaDB client library would read from `command`
/// (the `mariadb` CLI, `mariadb-admin`, sysbench).
pub fn without_client_env(command: &mut Command) -> &mut Command {
    for var in CLIENT_ENV {
        command.env_remove(var);
    }
    command
}

/// Users and the test database, created on every instance. `sql_log_bin=0` keeps them out of the
/// binlog: each server creates its own, so replicating them would conflict.
const SETUP_SQL: &str = "
SET SESSION sql_log_bin = 0;
CREATE USER 'app'@'%' IDENTIFIED WITH mysql_native_password USING PASSWORD('app-secret');
GRANT ALL PRIVILEGES ON *.* TO 'app'@'%' WITH GRANT OPTION;
CREATE USER 'eduser'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('ed-secret');
GRANT ALL PRIVILEGES ON *.* TO 'eduser'@'%';
CREATE USER 'repl'@'%' IDENTIFIED WITH mysql_native_password USING PASSWORD('repl-secret');
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SLAVE MONITOR ON *.* TO 'repl'@'%';
CREATE DATABASE sbtest;
";

mod clock {
    //! Wall-clock time for the harness.
    // The harness blocks on real processes, so it must not follow tokio's clock, which a test may
    // have paused: a paused clock would make every timeout below infinite.
    #![allow(clippy::disallowed_types)]

    use std::time::{Duration, Instant};

    /// A point in real time after which a wait gives up.
    #[derive(Debug, Clone, Copy)]
    pub struct Deadline(Instant);

    impl Deadline {
        pub fn after(timeout: Duration) -> Deadline {
            Deadline(Instant::now() + timeout)
        }

        pub fn expired(&self) -> bool {
            Instant::now() >= self.0
        }
    }

    /// Runs `f` and returns its result with the real time it took.
    pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
        let start = Instant::now();
        let value = f();
        (value, start.elapsed())
    }
}

/// Polls `condition` every 50 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Deadline::after(timeout);
    while !condition() {
        assert!(
            !deadline.expired(),
            "timed out after {timeout:?} waiting for {what}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// How to configure one server.
#[derive(Debug, Clone)]
pub struct MariaDbOptions {
    pub server_id: u32,
    /// Extra `key=value` lines for `[mariadbd]`; they come last, so they override the defaults.
    pub extra_cnf: Vec<String>,
}

impl Default for MariaDbOptions {
    fn default() -> Self {
        MariaDbOptions {
            server_id: 1,
            extra_cnf: Vec::new(),
        }
    }
}

/// The options every local server shares, the sandbox's and the bench's included.
fn shared_cnf() -> PathBuf {
    crate::repo().join("deploy/sandbox/mariadb.cnf")
}

/// Where one instance keeps its files, all inside its temporary directory.
#[derive(Debug)]
struct Paths {
    cnf: PathBuf,
    datadir: PathBuf,
    /// The server's own temporary directory: a server started after a crash deletes every
    /// `#sql*` file in its tmpdir, which in a shared one would be other servers' tables.
    tmpdir: PathBuf,
    socket: PathBuf,
    pid_file: PathBuf,
    error_log: PathBuf,
    /// mariadbd's own stdout/stderr: the few messages printed before `log_error` takes over.
    stderr_log: PathBuf,
}

impl Paths {
    fn new(dir: &Path) -> Paths {
        Paths {
            cnf: dir.join("my.cnf"),
            datadir: dir.join("data"),
            tmpdir: dir.join("tmp"),
            socket: dir.join("mysqld.sock"),
            pid_file: dir.join("mysqld.pid"),
            error_log: dir.join("error.log"),
            stderr_log: dir.join("stderr.log"),
        }
    }
}

/// A running (or stopped) MariaDB server owned by the test. Dropping it stops the server and
/// deletes its files.
#[derive(Debug)]
pub struct MariaDb {
    process: ServerProcess,
    port: u16,
    server_id: u32,
    paths: Paths,
    // Declared last so the directory is removed only after everything else is gone; held only
    // for that.
    _dir: TempDir,
}

impl MariaDb {
    crate::server_process::handle_methods!();

    /// Runs the client as root over its socket in batch mode with `extra_args`.
    fn run_root(&self, extra_args: &[&str], sql: &str) -> Result<String, String> {
        run_client(&self.paths.socket, extra_args, sql)
    }

    /// Starts a new server from the cached template and creates the test users and database.
    /// Panics, with the tail of the error log, if it does not come up within a minute.
    pub fn start(opts: MariaDbOptions) -> MariaDb {
        let template = template_datadir();
        let dir = tempfile::Builder::new()
            .prefix("strongsync-mariadb-")
            .tempdir()
            .expect("create a temporary directory for mariadbd");
        let paths = Paths::new(dir.path());
        check_socket_path(&paths.socket);
        copy_dir(template, &paths.datadir).unwrap_or_else(|e| {
            panic!(
                "copy template {} to {}: {e}",
                template.display(),
                paths.datadir.display()
            )
        });
        fs::create_dir(&paths.tmpdir)
            .unwrap_or_else(|e| panic!("create {}: {e}", paths.tmpdir.display()));
        let (child, port) = launch_on_free_port(&paths, &opts);
        let name = format!("mariadbd server_id={} port={port}", opts.server_id);
        let server = MariaDb {
            process: ServerProcess::new(child, name),
            port,
            server_id: opts.server_id,
            paths,
            _dir: dir,
        };
        server.sql(SETUP_SQL);
        server
    }

    pub fn socket(&self) -> &Path {
        &self.paths.socket
    }

    pub fn datadir(&self) -> &Path {
        &self.paths.datadir
    }

    /// Its own temporary directory.
    pub fn tmpdir(&self) -> &Path {
        &self.paths.tmpdir
    }

    /// `SHOW SLAVE STATUS` as column -> value; empty when the server is not a replica.
    pub fn slave_status(&self) -> HashMap<String, String> {
        self.query_maps("SHOW SLAVE STATUS")
            .into_iter()
            .next()
            .unwrap_or_default()
    }

    /// The whole error log (all starts of this instance).
    pub fn error_log(&self) -> String {
        fs::read_to_string(&self.paths.error_log).unwrap_or_default()
    }

    pub fn gtid_binlog_pos(&self) -> String {
        self.sql("SELECT @@global.gtid_binlog_pos")
    }

    pub fn gtid_slave_pos(&self) -> String {
        self.sql("SELECT @@global.gtid_slave_pos")
    }

    /// A `mysql_async` URL for `user` over TCP, defaulting to the test database.
    pub fn url(&self, user: &str, password: &str) -> String {
        format!("{}/{TEST_DB}", self.url_without_db(user, password))
    }

    /// Turns semi-sync acknowledgements on or off on this replica. The setting only takes effect
    /// when the IO thread reconnects, hence the restart of the IO thread.
    pub fn set_semi_sync_replica(&self, enabled: bool) {
        let value = if enabled { "ON" } else { "OFF" };
        self.sql(&format!(
            "SET GLOBAL rpl_semi_sync_slave_enabled = {value}; \
             STOP SLAVE IO_THREAD; START SLAVE IO_THREAD"
        ));
    }

    /// Starts the server again on the same port and data directory (stopping it first if it
    /// still runs) and waits until it accepts connections.
    pub fn restart(&mut self) {
        let paths = &self.paths;
        self.process
            .restart(|| launch(paths), || diagnostics(paths));
    }

    fn name(&self) -> &str {
        self.process.name()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.process.report_if_failing(|| diagnostics(&self.paths));
        self.process.stop();
    }
}

/// SIGTERM to a server process (`pid`, named `name` in messages), then SIGKILL if it has not
/// exited within [`STOP_TIMEOUT`]; reaps it either way.
pub(crate) fn stop_child(mut child: Child, pid: Pid, name: &str) {
    if signal::kill(pid, Signal::SIGTERM).is_ok() {
        let deadline = Deadline::after(STOP_TIMEOUT);
        while !deadline.expired() {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) => thread::sleep(POLL_INTERVAL),
                Err(_) => break,
            }
        }
        eprintln!("{name}: no exit 30 s after SIGTERM, sending SIGKILL");
    }
    reap_with_sigkill(&mut child);
}

pub(crate) fn reap_with_sigkill(child: &mut Child) {
    // `Child::kill` sends SIGKILL to the pid unless the child was already reaped.
    let _ = child.kill();
    let _ = child.wait();
}

/// Why a launch attempt failed.
pub(crate) enum LaunchFailure {
    PortTaken,
    Failed(String),
}

impl LaunchFailure {
    pub(crate) fn message(&self) -> &str {
        match self {
            LaunchFailure::PortTaken => "the port is already in use",
            LaunchFailure::Failed(msg) => msg,
        }
    }
}

/// Picks a free port, writes the cnf and launches; picks another port if this one got taken
/// between choosing it and the server binding it.
fn launch_on_free_port(paths: &Paths, opts: &MariaDbOptions) -> (Child, u16) {
    for _ in 0..PORT_ATTEMPTS {
        let port = free_port();
        fs::write(&paths.cnf, cnf_text(paths, port, opts))
            .unwrap_or_else(|e| panic!("write {}: {e}", paths.cnf.display()));
        match launch(paths) {
            Ok(child) => return (child, port),
            Err(LaunchFailure::PortTaken) => continue,
            Err(LaunchFailure::Failed(msg)) => panic!(
                "mariadbd (server_id={}) failed to start: {msg}\n{}",
                opts.server_id,
                diagnostics(paths)
            ),
        }
    }
    panic!(
        "mariadbd (server_id={}): every port tried was taken\n{}",
        opts.server_id,
        diagnostics(paths)
    )
}

/// Starts mariadbd with the cnf already in place and waits until it answers on its socket.
fn launch(paths: &Paths) -> Result<Child, LaunchFailure> {
    let log_start = file_len(&paths.error_log);
    let child = spawn_mariadbd(paths).unwrap_or_else(|e| panic!("spawn {MARIADBD}: {e}"));
    await_start(child, "mariadbd", &paths.error_log, log_start, || {
        run_client(&paths.socket, &["-N"], "SELECT 1").is_ok()
    })
}

/// Waits (up to a minute) until `child`, a server `name` just spawned, `answers`. If it exits
/// first: `PortTaken` if its port was, else the errors this start wrote to `error_log` (from
/// `log_start` on). If it never answers, it is killed.
pub(crate) fn await_start(
    mut child: Child,
    name: &str,
    error_log: &Path,
    log_start: u64,
    answers: impl Fn() -> bool,
) -> Result<Child, LaunchFailure> {
    let deadline = Deadline::after(START_TIMEOUT);
    loop {
        if let Some(status) = child
            .try_wait()
            .unwrap_or_else(|e| panic!("poll {name}: {e}"))
        {
            let log = read_from(error_log, log_start);
            if log.contains("Address already in use") {
                return Err(LaunchFailure::PortTaken);
            }
            return Err(LaunchFailure::Failed(format!(
                "{name} exited with {status} while starting; this start's errors:\n{}",
                errors_of(&log)
            )));
        }
        if answers() {
            return Ok(child);
        }
        if deadline.expired() {
            reap_with_sigkill(&mut child);
            return Err(LaunchFailure::Failed(format!(
                "no connection within {} s",
                START_TIMEOUT.as_secs()
            )));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

fn spawn_mariadbd(paths: &Paths) -> io::Result<Child> {
    let output = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&paths.stderr_log)?;
    let mut cmd = Command::new(MARIADBD);
    // --defaults-file must be the first argument.
    cmd.arg(format!("--defaults-file={}", paths.cnf.display()))
        .stdin(Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output);
    spawn_from_long_lived_thread(cmd)
}

/// Spawns `cmd` so that it gets SIGKILL when the test process dies, however it dies: a test
/// binary killed by a CI timeout must not leave servers running.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process, and
/// tests start servers from short-lived threads. So all servers are forked by one thread that
/// lives as long as the process.
pub(crate) fn spawn_from_long_lived_thread(mut cmd: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        thread::Builder::new()
            .name("mariadbd-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("start the mariadbd spawner thread");
        tx
    });
    // SAFETY: the closure only makes the prctl system call, which is async-signal-safe, and
    // converts its errno without allocating.
    unsafe {
        cmd.pre_exec(|| prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from));
    }
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .send((cmd, reply_tx))
        .expect("mariadbd spawner thread is gone");
    reply_rx
        .recv()
        .expect("mariadbd spawner thread dropped a request")
}

fn cnf_text(paths: &Paths, port: u16, opts: &MariaDbOptions) -> String {
    let mut lines: Vec<String> = vec![
        "[mariadbd]".into(),
        "user=root".into(),
        format!("port={port}"),
        format!("socket={}", paths.socket.display()),
        format!("datadir={}", paths.datadir.display()),
        format!("tmpdir={}", paths.tmpdir.display()),
        format!("pid-file={}", paths.pid_file.display()),
        format!("log_error={}", paths.error_log.display()),
        format!("server_id={}", opts.server_id),
        format!("!include {}", shared_cnf().display()),
        // What only the tests need, after the shared options so that it wins.
        "[mariadbd]".into(),
    ];
    lines.extend(
        [
            "max_allowed_packet=256M",
            "max_connections=4000",
            "thread_cache_size=256",
            "local_infile=ON",
            "plugin_load_add=auth_ed25519",
            // Durability against a lost host is traded for speed: a SIGKILL keeps what was
            // written in the page cache, so these lose nothing to the kills the tests make.
            "innodb_flush_log_at_trx_commit=2",
            "sync_binlog=0",
            // The doublewrite buffer stays on: it repairs a page write that a kill cut short.
            // With it off, a restart in CI aborted in binlog recovery (ha_recover_complete),
            // twice on the same data; a torn page is the likeliest cause.
            "innodb_doublewrite=ON",
        ]
        .map(String::from),
    );
    lines.extend(INNODB_SIZES.iter().map(|s| s.to_string()));
    lines.extend(opts.extra_cnf.iter().cloned());
    lines.join("\n") + "\n"
}

/// The cached template data directory for the installed MariaDB, built on first use.
fn template_datadir() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(build_template)
}

/// Bootstraps the template once per MariaDB version. Concurrent test processes may race to
/// build it: each builds in its own staging directory and renames it into place, so a reader
/// never sees a half-built template, and the loser's equivalent copy is discarded.
fn build_template() -> PathBuf {
    // Cargo's own place for tests' files (CARGO_TARGET_TMPDIR), which `cargo clean` clears.
    let root = &crate::target_dir().join("..").join("tmp");
    let version = server_version();
    let final_dir = root.join(format!(
        "mariadb-template-r{TEMPLATE_REVISION}-{}",
        sanitize(&version)
    ));
    if final_dir.is_dir() {
        return final_dir;
    }
    let staging = staging_dir(root, ".mariadb-template-staging-");
    let datadir = staging.path().join("data");
    let tmpdir = staging.path().join("tmp");
    fs::create_dir(&tmpdir).unwrap_or_else(|e| panic!("create {}: {e}", tmpdir.display()));
    install_db(&datadir, &tmpdir);
    if let Err(e) = fs::rename(&datadir, &final_dir) {
        assert!(
            final_dir.is_dir(),
            "rename {} to {}: {e}",
            datadir.display(),
            final_dir.display()
        );
    }
    final_dir
}

fn server_version() -> String {
    let out = Command::new(MARIADBD)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("run {MARIADBD} --version: {e}"));
    assert!(out.status.success(), "{MARIADBD} --version: {}", out.status);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs `mariadb-install-db` without binary logging, so nothing from the bootstrap ends up in a
/// binlog that replicas would pull, and with root@localhost on an empty password; in a tmpdir of
/// its own, like every server.
fn install_db(datadir: &Path, tmpdir: &Path) {
    let mut install = Command::new(INSTALL_DB);
    // --no-defaults must be the first argument.
    install
        .arg("--no-defaults")
        .arg(format!("--datadir={}", datadir.display()))
        .arg(format!("--tmpdir={}", tmpdir.display()))
        .args([
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--user=root",
        ])
        .args(INNODB_SIZES.iter().map(|s| format!("--{s}")));
    must_succeed(&mut install, INSTALL_DB);
}

/// A new directory in `root` (made if need be) named from `prefix`, in which a template is built
/// before it is renamed into place: a build cut short leaves no half template behind.
pub(crate) fn staging_dir(root: &Path, prefix: &str) -> TempDir {
    fs::create_dir_all(root).unwrap_or_else(|e| panic!("create {}: {e}", root.display()));
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(root)
        .expect("create a staging directory for the template")
}

/// Runs `command` with its stdin closed, and panics, with what it wrote, unless it succeeds;
/// `what` names it.
pub(crate) fn must_succeed(command: &mut Command, what: &str) {
    let out = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the `mariadb` client as root over `socket` in batch mode; returns stdout as is.
fn run_client(socket: &Path, extra_args: &[&str], sql: &str) -> Result<String, String> {
    run_batch(
        Command::new(CLIENT),
        socket,
        (ROOT_USER, None),
        extra_args,
        sql,
    )
}

/// Runs `client` (a server's command-line client, as a command to which its arguments are
/// added) over `socket` as `account` (a user, and a password if it has one) in batch mode with
/// `extra_args`, `sql` as `--execute`; returns stdout as is, or the exit status and stderr.
pub(crate) fn run_batch(
    mut client: Command,
    socket: &Path,
    account: (&str, Option<&str>),
    extra_args: &[&str],
    sql: &str,
) -> Result<String, String> {
    let (user, password) = account;
    // --no-defaults must be the first argument.
    client
        .arg("--no-defaults")
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--user={user}"))
        .args(password.map(|p| format!("--password={p}")))
        .arg("--batch")
        .args(extra_args)
        .arg("--execute")
        .arg(sql)
        .stdin(Stdio::null());
    let name = format!("{:?}", client.get_program());
    let out = without_client_env(&mut client)
        .output()
        .map_err(|e| format!("run {name}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{name} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `Gtid_IO_Pos` of the replica whose socket is `socket`: every GTID it has received. A free
/// function, so that a task can read it without holding the server.
///
/// # Errors
/// The client's complaint if the server cannot be asked (it is gone).
pub fn received_gtids_at(socket: &Path) -> Result<String, String> {
    let out = run_client(socket, &[], "SHOW SLAVE STATUS")?;
    let mut rows = split_rows(&out).into_iter();
    let names = rows.next().unwrap_or_default();
    let values = rows.next().unwrap_or_default();
    Ok(names
        .iter()
        .zip(values)
        .find(|(name, _)| *name == "Gtid_IO_Pos")
        .map(|(_, value)| value)
        .unwrap_or_default())
}

/// Splits batch-mode output into rows and tab-separated columns. Only the final newline is
/// dropped: trimming more would eat empty trailing columns.
pub(crate) fn split_rows(out: &str) -> Vec<Vec<String>> {
    out.strip_suffix('\n')
        .unwrap_or(out)
        .split('\n')
        .filter(|line| !line.is_empty())
        .map(|line| line.split('\t').map(String::from).collect())
        .collect()
}

/// The tails of the error log and of mariadbd's stderr, for panic messages.
fn diagnostics(paths: &Paths) -> String {
    format!(
        "error log {}:\n{}\nstderr:\n{}",
        paths.error_log.display(),
        tail(&fs::read_to_string(&paths.error_log).unwrap_or_default()),
        tail(&fs::read_to_string(&paths.stderr_log).unwrap_or_default())
    )
}

/// The lines of a start's error log that say why it stopped: its errors and an assertion's
/// message, which come before the stack trace that a log's tail would show instead.
pub(crate) fn errors_of(log: &str) -> String {
    const MARKS: [&str; 4] = ["[ERROR]", "Assertion", "failed", "signal"];
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| MARKS.iter().any(|mark| line.contains(mark)))
        .take(LOG_TAIL_LINES)
        .collect();
    lines.join("\n")
}

pub(crate) fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

pub(crate) fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The part of a file written after `offset`, so a retry does not see an earlier attempt's
/// messages.
pub(crate) fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        if file.seek(SeekFrom::Start(offset)).is_ok() {
            let mut bytes = Vec::new();
            let _ = file.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    text
}

pub(crate) fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

pub(crate) fn check_socket_path(socket: &Path) {
    let len = socket.as_os_str().len();
    assert!(
        len <= MAX_SOCKET_PATH,
        "socket path {} is {len} bytes, over the {MAX_SOCKET_PATH}-byte unix socket limit; \
         set TMPDIR to a shorter directory",
        socket.display()
    );
}

/// A file-name-safe rendering of `text`.
pub(crate) fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Percent-encodes everything but RFC 3986 unreserved characters, for URL userinfo.
pub(crate) fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Quotes `text` as an SQL string literal.
pub fn sql_quote(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}
