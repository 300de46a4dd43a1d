//! sysbench 1.0 for tests, benchmarks and load tests: a builder for `prepare`, `run` and
//! `cleanup` of its bundled OLTP workloads, and a parser for the report `run` prints.
//!
//! ```ignore
//! let bench = Sysbench::new("oltp_read_write")
//!     .port(proxy.port())
//!     .tables(4)
//!     .table_size(10_000)
//!     .threads(64)
//!     .time(8);
//! bench.prepare();
//! let report = bench.run();
//! assert_eq!(report.errors, 0, "{}", report.raw);
//! bench.cleanup();
//! ```

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::Duration;

use super::mariadb::{without_client_env, Deadline, APP_PASSWORD, APP_USER, TEST_DB};

const SYSBENCH: &str = "sysbench";

/// How long a command may take beyond its `--time`, for connecting, preparing statements and
/// shutting down; and how long a command without a time limit may take at all.
const GRACE: Duration = Duration::from_secs(120);
const UNTIMED_LIMIT: Duration = Duration::from_secs(600);

/// `--db-ps-mode`: whether sysbench uses server-side prepared statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PsMode {
    /// Server-side prepared statements (`COM_STMT_PREPARE`/`COM_STMT_EXECUTE`) where the
    /// server supports them; sysbench's default.
    Auto,
    /// Client-side emulation: every statement goes out as a text `COM_QUERY`.
    Disable,
}

impl PsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PsMode::Auto => "auto",
            PsMode::Disable => "disable",
        }
    }
}

impl fmt::Display for PsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One sysbench configuration; each command runs `sysbench <workload> <options> <command>`.
/// Cheap to clone, so one base configuration can be varied per run.
#[derive(Debug, Clone)]
pub struct Sysbench {
    workload: String,
    host: String,
    port: u16,
    user: String,
    password: String,
    db: String,
    threads: u32,
    tables: u32,
    table_size: u64,
    time: Option<u32>,
    events: Option<u64>,
    ps_mode: PsMode,
    extra_args: Vec<String>,
    timeout: Option<Duration>,
}

impl Sysbench {
    /// A workload bundled with sysbench (`oltp_read_write`, `oltp_point_select`,
    /// `oltp_update_non_index`, ...) or a path to a Lua script. Defaults: 127.0.0.1:3306,
    /// [`APP_USER`], database [`TEST_DB`], 1 thread, 1 table of 10,000 rows, sysbench's own
    /// `--time` (10 s), `--db-ps-mode=auto`.
    pub fn new(workload: &str) -> Sysbench {
        Sysbench {
            workload: workload.to_string(),
            host: "127.0.0.1".to_string(),
            port: 3306,
            user: APP_USER.to_string(),
            password: APP_PASSWORD.to_string(),
            db: TEST_DB.to_string(),
            threads: 1,
            tables: 1,
            table_size: 10_000,
            time: None,
            events: None,
            ps_mode: PsMode::Auto,
            extra_args: Vec::new(),
            timeout: None,
        }
    }

    /// The same configuration with another workload.
    pub fn workload(mut self, workload: &str) -> Self {
        self.workload = workload.to_string();
        self
    }

    pub fn host(mut self, host: &str) -> Self {
        self.host = host.to_string();
        self
    }

    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    pub fn user(mut self, user: &str) -> Self {
        self.user = user.to_string();
        self
    }

    pub fn password(mut self, password: &str) -> Self {
        self.password = password.to_string();
        self
    }

    pub fn db(mut self, db: &str) -> Self {
        self.db = db.to_string();
        self
    }

    pub fn threads(mut self, threads: u32) -> Self {
        self.threads = threads;
        self
    }

    pub fn tables(mut self, tables: u32) -> Self {
        self.tables = tables;
        self
    }

    pub fn table_size(mut self, rows: u64) -> Self {
        self.table_size = rows;
        self
    }

    /// `--time`: run for this many seconds (0: no time limit, so set [`Sysbench::events`]).
    pub fn time(mut self, seconds: u32) -> Self {
        self.time = Some(seconds);
        self
    }

    /// `--events`: stop after this many events (transactions). Without an explicit
    /// [`Sysbench::time`] this also passes `--time=0`, so the event count alone ends the run.
    pub fn events(mut self, events: u64) -> Self {
        self.events = Some(events);
        self
    }

    pub fn ps_mode(mut self, mode: PsMode) -> Self {
        self.ps_mode = mode;
        self
    }

    /// One more option, passed verbatim before the command (e.g. `--rand-type=uniform`,
    /// `--mysql-ignore-errors=all`, `--range_selects=off`).
    pub fn arg(mut self, arg: &str) -> Self {
        self.extra_args.push(arg.to_string());
        self
    }

    pub fn args<'a>(mut self, args: impl IntoIterator<Item = &'a str>) -> Self {
        self.extra_args.extend(args.into_iter().map(String::from));
        self
    }

    /// How long a command may take before it is killed and reported as failed. Default: the
    /// `--time` plus two minutes, or ten minutes without a time limit.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The arguments for `command` (`prepare`, `run`, `cleanup`).
    pub fn command_args(&self, command: &str) -> Vec<String> {
        let mut args = vec![
            self.workload.clone(),
            "--db-driver=mysql".to_string(),
            format!("--mysql-host={}", self.host),
            format!("--mysql-port={}", self.port),
            format!("--mysql-user={}", self.user),
            format!("--mysql-password={}", self.password),
            format!("--mysql-db={}", self.db),
            format!("--threads={}", self.threads),
            format!("--tables={}", self.tables),
            format!("--table-size={}", self.table_size),
            format!("--db-ps-mode={}", self.ps_mode),
        ];
        match (self.time, self.events) {
            (Some(time), _) => args.push(format!("--time={time}")),
            (None, Some(_)) => args.push("--time=0".to_string()),
            (None, None) => {}
        }
        if let Some(events) = self.events {
            args.push(format!("--events={events}"));
        }
        args.extend(self.extra_args.iter().cloned());
        args.push(command.to_string());
        args
    }

    /// The command line, for messages.
    pub fn command_line(&self, command: &str) -> String {
        let mut line = SYSBENCH.to_string();
        for arg in self.command_args(command) {
            line.push(' ');
            line.push_str(&arg);
        }
        line
    }

    /// `prepare`: creates and fills the tables. Returns the output; panics with it if
    /// sysbench fails.
    pub fn prepare(&self) -> String {
        self.checked("prepare")
    }

    /// `cleanup`: drops the tables. Returns the output; panics with it if sysbench fails.
    pub fn cleanup(&self) -> String {
        self.checked("cleanup")
    }

    /// `run`, parsed. Panics with the full output if sysbench fails (a non-ignored SQL error
    /// is fatal in sysbench 1.0: it exits non-zero without a report) or the report cannot be
    /// parsed.
    pub fn run(&self) -> SysbenchReport {
        self.try_run().unwrap_or_else(|failure| panic!("{failure}"))
    }

    /// `run`, parsed; a failure is returned instead of panicking, for callers that expect
    /// some runs to fail (load tests that break the server or the proxy on purpose).
    pub fn try_run(&self) -> Result<SysbenchReport, SysbenchFailure> {
        let outcome = self.execute("run");
        if !outcome.status.success() {
            return Err(outcome.failure("exited unsuccessfully"));
        }
        SysbenchReport::parse(&outcome.output).map_err(|what| outcome.failure(&what))
    }

    fn checked(&self, command: &str) -> String {
        let outcome = self.execute(command);
        if !outcome.status.success() {
            panic!("{}", outcome.failure("exited unsuccessfully"));
        }
        outcome.output
    }

    fn limit(&self) -> Duration {
        self.timeout.unwrap_or(match self.time {
            Some(time) if time > 0 => Duration::from_secs(time.into()) + GRACE,
            _ => UNTIMED_LIMIT,
        })
    }

    /// Runs `command` in a scratch directory (so no stray `*.lua` in the working directory can
    /// shadow a bundled workload), killing it once it overruns its limit.
    fn execute(&self, command: &str) -> Outcome {
        let command_line = self.command_line(command);
        let dir = tempfile::Builder::new()
            .prefix("strongsync-sysbench-")
            .tempdir()
            .expect("create a temporary directory for sysbench");
        let stdout_path = dir.path().join("stdout");
        let stderr_path = dir.path().join("stderr");
        let mut cmd = Command::new(SYSBENCH);
        cmd.args(self.command_args(command))
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(File::create(&stdout_path).expect("create sysbench stdout file"))
            .stderr(File::create(&stderr_path).expect("create sysbench stderr file"));
        let mut child = without_client_env(&mut cmd)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{command_line}`: {e}"));
        let limit = self.limit();
        let deadline = Deadline::after(limit);
        let mut timed_out = false;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for sysbench") {
                break status;
            }
            if deadline.expired() {
                timed_out = true;
                let _ = child.kill();
                break child.wait().expect("wait for killed sysbench");
            }
            thread::sleep(Duration::from_millis(50));
        };
        let mut output = read_lossy(&stdout_path);
        let stderr = read_lossy(&stderr_path);
        if !stderr.trim().is_empty() {
            output.push_str("\n--- stderr ---\n");
            output.push_str(&stderr);
        }
        Outcome {
            command_line,
            status,
            timed_out: timed_out.then_some(limit),
            output,
        }
    }
}

fn read_lossy(path: &Path) -> String {
    String::from_utf8_lossy(&fs::read(path).unwrap_or_default()).into_owned()
}

/// A finished sysbench command.
struct Outcome {
    command_line: String,
    status: ExitStatus,
    /// Set if it was killed for overrunning this limit.
    timed_out: Option<Duration>,
    /// stdout, then stderr (if any) after a marker line.
    output: String,
}

impl Outcome {
    fn failure(self, what: &str) -> SysbenchFailure {
        let what = match self.timed_out {
            Some(limit) => format!("killed after running for {limit:?}"),
            None => what.to_string(),
        };
        SysbenchFailure {
            error_lines: error_lines(&self.output),
            command_line: self.command_line,
            status: self.status,
            what,
            output: self.output,
        }
    }
}

/// A sysbench command that failed, timed out, or printed no readable report.
#[derive(Debug)]
pub struct SysbenchFailure {
    pub command_line: String,
    pub status: ExitStatus,
    /// What went wrong, in a few words.
    pub what: String,
    /// The `FATAL:`/`ERROR:` lines of the output.
    pub error_lines: Vec<String>,
    /// The full output: stdout, then stderr.
    pub output: String,
}

impl fmt::Display for SysbenchFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` failed ({}): {}\n--- output ---\n{}",
            self.command_line, self.status, self.what, self.output
        )
    }
}

impl std::error::Error for SysbenchFailure {}

/// What `sysbench ... run` reported.
#[derive(Debug, Clone, PartialEq)]
pub struct SysbenchReport {
    /// `queries performed`: read, write (statements that changed rows), other (the rest:
    /// BEGIN, COMMIT, statements that matched no row), total.
    pub reads: u64,
    pub writes: u64,
    pub other: u64,
    pub queries: u64,
    pub qps: f64,
    /// Completed transactions (events); an event restarted after an ignored error counts
    /// once, when it completes.
    pub transactions: u64,
    pub tps: f64,
    /// SQL errors logged as `FATAL:`/`ERROR:` lines (0 in a run that exited successfully;
    /// sysbench 1.0 aborts on the first error not in `--mysql-ignore-errors`).
    pub errors: u64,
    /// Those lines.
    pub error_lines: Vec<String>,
    /// Errors sysbench ignored (by default deadlocks 1213, 1020 and lock wait timeouts 1205)
    /// and retried the event after.
    pub ignored_errors: u64,
    /// Reconnects after a lost connection (only with 2013/2006/... ignored).
    pub reconnects: u64,
    /// Statements sysbench failed to prepare on the server and emulated client-side instead
    /// (`Failed to prepare query ... using emulation`, printed at the default verbosity).
    pub ps_fallbacks: u64,
    /// `total time` in seconds and `total number of events`.
    pub total_time_s: f64,
    pub events: u64,
    pub latency_min_ms: f64,
    pub latency_avg_ms: f64,
    pub latency_max_ms: f64,
    /// The latency percentile sysbench printed: 95 unless `--percentile` says otherwise.
    pub percentile: u32,
    /// Latency at [`SysbenchReport::percentile`] (the p95 by default), in ms.
    pub p95_latency_ms: f64,
    /// The whole output: stdout, then stderr after a marker line.
    pub raw: String,
}

impl SysbenchReport {
    /// Parses the report sysbench 1.0 prints after `run`. Fields are looked up by section and
    /// name, so column alignment and extra lines (interval reports, histograms, warnings) do
    /// not matter.
    pub fn parse(output: &str) -> Result<SysbenchReport, String> {
        let fields = report_fields(output);
        let get = |key: &str| -> Result<&str, String> {
            fields
                .get(key)
                .map(String::as_str)
                .ok_or_else(|| format!("the report has no `{key}`"))
        };
        let count = |key: &str| -> Result<u64, String> { leading_number(get(key)?, key) };
        let float = |key: &str| -> Result<f64, String> { leading_number(get(key)?, key) };
        let rate = |key: &str| -> Result<f64, String> { per_sec(get(key)?, key) };
        let (percentile, p95_latency_ms) = fields
            .iter()
            .find_map(|(key, value)| {
                let n = key
                    .strip_prefix("Latency (ms)/")?
                    .strip_suffix("th percentile")?;
                Some((n.parse::<u32>().ok()?, value))
            })
            .ok_or_else(|| "the report has no latency percentile".to_string())
            .and_then(|(n, value)| Ok((n, leading_number(value, "percentile")?)))?;
        let error_lines = error_lines(output);
        Ok(SysbenchReport {
            reads: count("SQL statistics/read")?,
            writes: count("SQL statistics/write")?,
            other: count("SQL statistics/other")?,
            queries: count("SQL statistics/queries")?,
            qps: rate("SQL statistics/queries")?,
            transactions: count("SQL statistics/transactions")?,
            tps: rate("SQL statistics/transactions")?,
            errors: error_lines.len() as u64,
            error_lines,
            ignored_errors: count("SQL statistics/ignored errors")?,
            reconnects: count("SQL statistics/reconnects")?,
            ps_fallbacks: output
                .lines()
                .filter(|l| l.contains("Failed to prepare query") && l.contains("emulation"))
                .count() as u64,
            total_time_s: float("General statistics/total time")?,
            events: count("General statistics/total number of events")?,
            latency_min_ms: float("Latency (ms)/min")?,
            latency_avg_ms: float("Latency (ms)/avg")?,
            latency_max_ms: float("Latency (ms)/max")?,
            percentile,
            p95_latency_ms,
            raw: output.to_string(),
        })
    }

    /// One line for logs: `tps=… qps=… p95=…ms …`.
    pub fn summary(&self) -> String {
        format!(
            "transactions={} ({:.1}/s) queries={} ({:.1}/s) p{}={:.2}ms errors={} \
             ignored={} reconnects={} time={:.2}s",
            self.transactions,
            self.tps,
            self.queries,
            self.qps,
            self.percentile,
            self.p95_latency_ms,
            self.errors,
            self.ignored_errors,
            self.reconnects,
            self.total_time_s
        )
    }
}

/// `Section/name` -> value text for every `name: value` line under a top-level heading
/// (`SQL statistics:`, `General statistics:`, `Latency (ms):`, `Threads fairness:`). Nested
/// headings such as `queries performed:` carry no value and are skipped, so their children
/// (`read`, `write`, ...) sit directly under the section.
fn report_fields(output: &str) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    let mut section: Option<&str> = None;
    for line in output.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let indented = line.starts_with(char::is_whitespace);
        let line = line.trim();
        if !indented {
            section = line.strip_suffix(':');
            continue;
        }
        let Some(section) = section else { continue };
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if !value.is_empty() {
            fields
                .entry(format!("{section}/{}", name.trim()))
                .or_insert_with(|| value.to_string());
        }
    }
    fields
}

/// The number a value starts with (`3997   (493.28 per sec.)`, `8.1024s`, `164.45`).
fn leading_number<T: std::str::FromStr>(value: &str, key: &str) -> Result<T, String> {
    let end = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    value[..end]
        .parse()
        .map_err(|_| format!("`{key}` is not a number: {value:?}"))
}

/// The rate in `3997   (493.28 per sec.)`.
fn per_sec(value: &str, key: &str) -> Result<f64, String> {
    let rate = value
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once("per sec."))
        .map(|(rate, _)| rate.trim())
        .ok_or_else(|| format!("`{key}` has no rate: {value:?}"))?;
    rate.parse()
        .map_err(|_| format!("`{key}` has an unreadable rate: {value:?}"))
}

/// The lines in which sysbench reports an error.
fn error_lines(output: &str) -> Vec<String> {
    output
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("FATAL:") || l.starts_with("ERROR:"))
        .map(String::from)
        .collect()
}
