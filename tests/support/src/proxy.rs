//! strongsync for tests: in-process on a runtime of its own (so tests may block freely), with a
//! commit hook that records what each session reported; or as the built binary, for the CLI.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use futures::future::BoxFuture;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use strongsync::durability::Durability;
use strongsync::{Commit, CommitHook, Config, Proxy, Release, WaitKind};
use tempfile::TempDir;

use super::cli::{run_command, Output};
use super::mariadb::{wait_for, MariaDb};

/// Records every commit the sessions report.
#[derive(Debug, Default, Clone)]
pub struct Recorder(Arc<Mutex<Vec<Commit>>>);

/// The proxy's own commit hook (strong sync), with a [`Recorder`] listening in.
struct Recording {
    recorder: Recorder,
    inner: Arc<dyn CommitHook>,
}

impl CommitHook for Recording {
    fn on_commit(&self, commit: Commit) -> BoxFuture<'static, Release> {
        if commit.kind == WaitKind::Commit {
            self.recorder.0.lock().unwrap().push(commit.clone());
        }
        self.inner.on_commit(commit)
    }
}

impl Recorder {
    /// Everything recorded so far.
    pub fn commits(&self) -> Vec<Commit> {
        self.0.lock().unwrap().clone()
    }

    /// The GTIDs reported for the primary connection `connection_id`, in order, as text.
    pub fn gtids_of(&self, connection_id: u32) -> Vec<String> {
        self.gtids_where(|c| c.connection_id == connection_id)
    }

    /// Every GTID reported, in order, as text.
    pub fn gtids(&self) -> Vec<String> {
        self.gtids_where(|_| true)
    }

    fn gtids_where(&self, which: impl Fn(&Commit) -> bool) -> Vec<String> {
        self.commits()
            .iter()
            .filter(|c| which(c))
            .flat_map(|c| c.gtids.iter().map(ToString::to_string))
            .collect()
    }

    /// True if any commit of `connection_id` was reported without its GTID.
    pub fn any_unresolved(&self, connection_id: u32) -> bool {
        self.commits()
            .iter()
            .any(|c| c.connection_id == connection_id && c.unresolved.is_some())
    }

    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

/// A proxy running in this process.
pub struct TestProxy {
    addr: SocketAddr,
    admin: SocketAddr,
    pub recorder: Recorder,
    durability: Arc<Durability>,
    config: Config,
    reload: tokio::sync::mpsc::UnboundedSender<(Config, mpsc::Sender<Vec<&'static str>>)>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl TestProxy {
    /// A proxy in front of `primary` with default settings.
    pub fn start(primary: &MariaDb) -> TestProxy {
        TestProxy::start_with(TestProxy::config(primary))
    }

    /// The default test configuration: SQL and admin ports on free loopback ports, and no
    /// waiting for replicas (passthrough): tests of strong sync set their own durability.
    pub fn config(primary: &MariaDb) -> Config {
        let mut config = Config::new(primary.addr());
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.admin_listen = "127.0.0.1:0".parse().unwrap();
        config.durability.passthrough = true;
        config.sharing.enabled = sharing_everywhere();
        config
    }

    pub fn start_with(config: Config) -> TestProxy {
        init_test_logging();
        let recorder = Recorder::default();
        let listening = recorder.clone();
        let (addr_tx, addr_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (reload_tx, mut reload_rx) =
            tokio::sync::mpsc::unbounded_channel::<(Config, mpsc::Sender<Vec<&'static str>>)>();
        let started = config.clone();
        let thread = thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("proxy runtime");
            runtime.block_on(async move {
                let proxy = Proxy::builder(config)
                    .commit_hook(move |durability| {
                        Arc::new(Recording {
                            recorder: listening,
                            inner: Arc::new(durability),
                        })
                    })
                    .start()
                    .await
                    .expect("proxy starts");
                addr_tx
                    .send((
                        proxy.local_addr(),
                        proxy.admin_addr(),
                        Arc::clone(proxy.durability()),
                    ))
                    .unwrap();
                let stopped = tokio::task::spawn_blocking(move || stop_rx.recv());
                tokio::pin!(stopped);
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        Some((config, done)) = reload_rx.recv() => {
                            let _ = done.send(proxy.reload(&config));
                        }
                    }
                }
                proxy.shutdown(Duration::from_secs(5)).await;
            });
        });
        let (addr, admin, durability) = addr_rx.recv().expect("proxy reports its address");
        TestProxy {
            addr,
            admin,
            recorder,
            durability,
            config: started,
            reload: reload_tx,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin HTTP port.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// Reloads the proxy with its configuration as `change` leaves it, as SIGHUP does with a
    /// changed file (the configuration is validated first). Returns the settings that need a
    /// restart.
    pub fn reload(&mut self, change: impl FnOnce(&mut Config)) -> Vec<&'static str> {
        let mut config = self.config.clone();
        change(&mut config);
        config.validate().expect("a valid configuration");
        let (done_tx, done_rx) = mpsc::channel();
        self.reload
            .send((config.clone(), done_tx))
            .expect("the proxy runs");
        let needs_restart = done_rx.recv().expect("the proxy reloaded");
        self.config = config;
        needs_restart
    }

    /// Strong sync's state.
    pub fn durability(&self) -> &Arc<Durability> {
        &self.durability
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// A mysql_async URL through the proxy. `prefer_socket=false`: otherwise mysql_async asks
    /// the server for its unix socket and reconnects there, around the proxy.
    pub fn url(&self, user: &str, password: &str) -> String {
        format!(
            "mysql://{user}:{password}@127.0.0.1:{}/sbtest?prefer_socket=false",
            self.addr.port()
        )
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The `strongsync` binary, started with the given arguments; stopped by pid on drop.
pub struct ProxyProcess {
    child: Child,
    admin: Option<SocketAddr>,
    log: PathBuf,
    _dir: TempDir,
}

impl ProxyProcess {
    /// Starts the binary and waits until `listen` accepts connections.
    /// The admin port goes to a free loopback port unless `args` choose one.
    pub fn start(args: &[&str], envs: &[(&str, &str)], listen: SocketAddr) -> ProxyProcess {
        let chosen = args.contains(&"--admin-listen")
            || envs.iter().any(|(k, _)| *k == "STRONGSYNC_ADMIN_LISTEN");
        if chosen {
            return ProxyProcess::start_as_given(args, envs, listen);
        }
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let admin_text = admin.to_string();
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--admin-listen", &admin_text]);
        let mut process = ProxyProcess::spawn(&all, envs);
        // Ready once the admin port accepts: the proxy binds its SQL port first. A connection
        // to the SQL port would be a client session of its own, holding one of
        // `limits.max_connections` until the proxy has seen it close.
        wait_for("strongsync to listen", Duration::from_secs(20), || {
            TcpStream::connect(admin).is_ok()
        });
        process.admin = Some(admin);
        process
    }

    /// The binary in front of `primary` on a fresh loopback port, with `extra` arguments. No
    /// replicas: commits do not wait for a quorum (passthrough).
    pub fn passthrough(primary: &str, extra: &[&str]) -> (ProxyProcess, SocketAddr) {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let listen_text = listen.to_string();
        let mut args = vec![
            "--listen",
            &listen_text,
            "--primary",
            primary,
            "--durability-passthrough",
        ];
        args.extend_from_slice(extra);
        (ProxyProcess::start(&args, &[], listen), listen)
    }

    /// Starts the binary with exactly `args` and waits until `listen` accepts connections.
    pub fn start_as_given(
        args: &[&str],
        envs: &[(&str, &str)],
        listen: SocketAddr,
    ) -> ProxyProcess {
        let process = ProxyProcess::spawn(args, envs);
        wait_for("strongsync to listen", Duration::from_secs(20), || {
            TcpStream::connect(listen).is_ok()
        });
        process
    }

    fn spawn(args: &[&str], envs: &[(&str, &str)]) -> ProxyProcess {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("strongsync.log");
        let child = strongsync_command(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("start strongsync");
        ProxyProcess {
            child,
            admin: None,
            log,
            _dir: dir,
        }
    }

    /// The admin port, when [`start`](Self::start) chose it.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig` and waits for the exit status.
    pub fn stop_with(&mut self, sig: Signal) -> std::process::ExitStatus {
        self.signal(sig);
        self.child.wait().expect("wait for strongsync")
    }

    pub fn signal(&self, sig: Signal) {
        signal::kill(Pid::from_raw(self.child.id() as i32), sig).expect("signal strongsync");
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the process to exit on its own, failing the test after `patience`.
    pub fn wait_exit(&mut self, patience: Duration) -> std::process::ExitStatus {
        let mut status = None;
        wait_for("strongsync to exit", patience, || {
            status = self.child.try_wait().expect("wait for strongsync");
            status.is_some()
        });
        status.expect("exited")
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `STRONGSYNC_SHARING_ENABLED=true` in the test's environment: the whole suite runs with
/// `[sharing]` on. The binary reads the same variable (the proxies the tests start inherit it);
/// in-process proxies start from it in their default configuration, which a test that chooses
/// (tests/sharing.rs) overrides.
pub fn sharing_everywhere() -> bool {
    std::env::var("STRONGSYNC_SHARING_ENABLED").is_ok_and(|v| matches!(v.as_str(), "true" | "1"))
}

/// The `strongsync` binary of this build: cargo builds it beside the test executables when it
/// runs the package's integration tests.
pub fn strongsync_bin() -> PathBuf {
    let bin = crate::target_dir().join("strongsync");
    assert!(
        bin.is_file(),
        "no strongsync binary at {} (run the tests with cargo test)",
        bin.display()
    );
    bin
}

/// The `strongsync` binary with a clean environment (no `STRONGSYNC_*`, no `RUST_LOG`).
pub fn strongsync_command(args: &[&str]) -> Command {
    strongsync_command_of(&strongsync_bin(), args)
}

/// As [`strongsync_command`], running the binary at `bin` (a copy another user may run).
pub fn strongsync_command_of(bin: &std::path::Path, args: &[&str]) -> Command {
    let mut command = Command::new(bin);
    command.args(args).env_remove("RUST_LOG");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("STRONGSYNC_") {
            command.env_remove(name);
        }
    }
    command
}

/// Runs the binary to completion (for invocations that must exit on their own).
pub fn run_strongsync(args: &[&str]) -> Output {
    let what = format!("strongsync {}", args.join(" "));
    run_command(strongsync_command(args), &what)
}

/// Proxy logs for a test run: set `STRONGSYNC_TEST_LOG` (e.g. `strongsync=debug`) to see
/// them in a failing test's output.
fn init_test_logging() {
    if let Ok(filter) = std::env::var("STRONGSYNC_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

pub use crate::ports::free_port;

/// Checks that `error` is the one strongsync answers a commit whose quorum did not come in time
/// (`on_timeout = error`): 1105, naming the transaction's GTID.
pub fn assert_not_acknowledged(error: &mysql_async::Error, gtid: &str) {
    match error {
        mysql_async::Error::Server(e) => {
            assert_eq!(e.code, 1105, "{}", e.message);
            let said =
                format!("transaction {gtid} committed on the primary but was not acknowledged");
            assert!(e.message.contains(&said), "{}", e.message);
        }
        other => panic!("expected the proxy's error, got {other:?}"),
    }
}
