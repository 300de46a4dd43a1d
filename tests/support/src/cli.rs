//! The `mariadb` and `mariadb-admin` command-line clients, always over TCP to 127.0.0.1,
//! reading no option file and none of the `MYSQL_*` environment; run to completion or kept
//! open and fed statements on stdin.

use std::fmt;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tempfile::TempDir;

use super::mariadb::{timed, without_client_env, Deadline};

pub const MARIADB: &str = "mariadb";
pub const MARIADB_ADMIN: &str = "mariadb-admin";

/// A guard against a client that never exits (e.g. a proxy that stops answering): after this
/// the client is killed and the test fails. Not a performance expectation.
const HANG_GUARD: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// One invocation of a client program, built up argument by argument.
#[derive(Debug, Clone)]
pub struct Client {
    program: &'static str,
    args: Vec<String>,
    stdin: Option<PathBuf>,
}

/// How a client run ended.
#[derive(Debug)]
pub struct Output {
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// Real time from start to exit, for messages only.
    pub elapsed: Duration,
}

/// A client that is still running, with its stdin open for statements and its stdout read
/// line by line.
pub struct Interactive {
    command: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    reader: Option<thread::JoinHandle<()>>,
    stderr: PathBuf,
    _dir: TempDir,
}

/// `mariadb --no-defaults -h127.0.0.1 -P<port> --user=… --password=…`.
pub fn mariadb(port: u16, user: &str, password: &str) -> Client {
    Client::new(MARIADB, port, user, password)
}

/// `mariadb-admin --no-defaults -h127.0.0.1 -P<port> --user=… --password=…`.
pub fn mariadb_admin(port: u16, user: &str, password: &str) -> Client {
    Client::new(MARIADB_ADMIN, port, user, password)
}

// === impl Client ===

impl Client {
    fn new(program: &'static str, port: u16, user: &str, password: &str) -> Client {
        Client {
            program,
            args: vec![
                // --no-defaults must come first.
                "--no-defaults".into(),
                "-h127.0.0.1".into(),
                format!("-P{port}"),
                "--protocol=TCP".into(),
                format!("--user={user}"),
                format!("--password={password}"),
            ],
            stdin: None,
        }
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Client {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Client
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Feeds `path` to the client's stdin (`mariadb … < path`).
    pub fn stdin_file(mut self, path: &Path) -> Client {
        self.stdin = Some(path.to_owned());
        self
    }

    /// Runs `sql` with `--execute` and waits for the client to exit.
    pub fn execute(self, sql: &str) -> Output {
        self.arg("--execute").arg(sql).run()
    }

    /// Runs the client to completion, stdin from the file given (or empty).
    pub fn run(self) -> Output {
        let stdin = match &self.stdin {
            Some(path) => Stdio::from(
                File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display())),
            ),
            None => Stdio::null(),
        };
        let mut command = self.command();
        command.stdin(stdin);
        run_command(command, &self.to_string())
    }

    /// Starts the client with stdin open: statements written to it run one by one, and
    /// `--unbuffered` makes each result reach stdout as soon as it is complete.
    pub fn interactive(self) -> Interactive {
        let client = self.arg("--unbuffered");
        let dir = tempdir();
        let stderr = dir.path().join("stderr");
        let mut command = client.command();
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(create(&stderr));
        let mut child = client.spawn(command);
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        let reader = thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Interactive {
            command: client.to_string(),
            stdin: child.stdin.take(),
            child,
            lines,
            reader: Some(reader),
            stderr,
            _dir: dir,
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(self.program);
        command.args(&self.args);
        without_client_env(&mut command);
        command
    }

    fn spawn(&self, mut command: Command) -> Child {
        command
            .spawn()
            .unwrap_or_else(|e| panic!("start `{self}`: {e}"))
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.program)?;
        for arg in &self.args {
            if arg.contains(|c: char| c.is_whitespace() || c == '\'' || c == ';') {
                write!(f, " '{}'", arg.replace('\'', r"'\''"))?;
            } else {
                write!(f, " {arg}")?;
            }
        }
        if let Some(path) = &self.stdin {
            write!(f, " < {}", path.display())?;
        }
        Ok(())
    }
}

// === impl Output ===

impl Output {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Panics, showing everything, unless the client exited with status 0.
    #[track_caller]
    pub fn expect_success(self) -> Output {
        assert!(self.success(), "client failed:\n{self}");
        self
    }

    /// Panics, showing everything, if the client exited with status 0.
    #[track_caller]
    pub fn expect_failure(self) -> Output {
        assert!(!self.success(), "client unexpectedly succeeded:\n{self}");
        self
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "$ {}\n{} after {:?}\n--- stdout:\n{}--- stderr:\n{}",
            self.command, self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

// === impl Interactive ===

impl Interactive {
    /// Writes `sql` and a newline to the client's stdin.
    pub fn send(&mut self, sql: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is still open");
        writeln!(stdin, "{sql}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("write to `{}`: {e}", self.command));
    }

    /// Closes stdin: the client exits once it has run what it was sent.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next line the client printed. Panics (with its stderr) if stdout ends first.
    pub fn next_line(&mut self) -> String {
        match self.lines.recv_timeout(HANG_GUARD) {
            Ok(line) => line,
            Err(e) => panic!(
                "no further output from `{}` ({e:?}); stderr:\n{}",
                self.command,
                read(&self.stderr)
            ),
        }
    }

    /// Closes stdin and waits for the client to exit; stdout holds the lines not yet read.
    /// `elapsed` counts from this call.
    pub fn finish(mut self) -> Output {
        self.close_stdin();
        let (status, elapsed) = timed(|| wait_guarded(&mut self.child, &self.command));
        if let Some(reader) = self.reader.take() {
            reader.join().expect("stdout reader");
        }
        let stdout: String = self.lines.try_iter().map(|line| line + "\n").collect();
        Output {
            command: self.command.clone(),
            status,
            stdout,
            stderr: read(&self.stderr),
            elapsed,
        }
    }
}

impl Drop for Interactive {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `command` (stdin as it was set up, stdout and stderr captured) to completion; `what`
/// names it in panic messages.
pub fn run_command(mut command: Command, what: &str) -> Output {
    let dir = tempdir();
    let (stdout, stderr) = (dir.path().join("stdout"), dir.path().join("stderr"));
    command.stdout(create(&stdout)).stderr(create(&stderr));
    let (status, elapsed) = timed(|| {
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start `{what}`: {e}"));
        wait_guarded(&mut child, what)
    });
    Output {
        command: what.to_owned(),
        status,
        stdout: read(&stdout),
        stderr: read(&stderr),
        elapsed,
    }
}

/// Waits for `child`; kills it and panics if it is still running after [`HANG_GUARD`].
fn wait_guarded(child: &mut Child, what: &str) -> ExitStatus {
    let deadline = Deadline::after(HANG_GUARD);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if deadline.expired() => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`{what}` still running after {HANG_GUARD:?}; killed it");
            }
            Ok(None) => thread::sleep(POLL_INTERVAL),
            Err(e) => panic!("wait for `{what}`: {e}"),
        }
    }
}

fn tempdir() -> TempDir {
    tempfile::Builder::new()
        .prefix("strongsync-cli-")
        .tempdir()
        .expect("create a temporary directory for client output")
}

fn create(path: &Path) -> File {
    File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}
