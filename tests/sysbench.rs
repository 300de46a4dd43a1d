//! sysbench 1.0 through the proxy: `oltp_read_write` and `oltp_point_select` at 64 threads,
//! with server-side prepared statements and without, finish without errors; every commit is
//! reported to the commit hook exactly once, with the GTID the primary logged for it.

use std::collections::BTreeSet;
use std::time::Duration;

use strongsync_proto::gtid::{Domain, Gtid};
use support::mariadb::{timed, Deadline, MariaDb, MariaDbOptions, APP_USER};
use support::proxy::TestProxy;
use support::sysbench::{PsMode, Sysbench, SysbenchReport};

const THREADS: u32 = 64;
const TABLES: u32 = 4;
const TABLE_SIZE: u64 = 10_000;
const RUN_SECONDS: u32 = 8;
/// How long the proxy may take to close its primary connections after sysbench quit.
const DISCONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The primary's and the recorder's state before a sysbench command.
struct Before {
    /// Commits the recorder held.
    recorded: usize,
    /// `@@gtid_binlog_pos`, as one GTID (`None` while the binlog has none).
    binlog: Option<Gtid>,
    com_stmt_execute: u64,
}

/// What a command did, measured on the primary and in the recorder.
struct Effect {
    /// GTIDs the sessions reported, in order.
    reported: Vec<Gtid>,
    /// Reports that could not name their GTID, or were not MariaDB GTIDs.
    bad_reports: Vec<String>,
    /// The GTIDs the primary's binlog gained (from its position before and after).
    logged: Vec<Gtid>,
    com_stmt_execute: u64,
}

fn before(primary: &MariaDb, proxy: &TestProxy) -> Before {
    Before {
        recorded: proxy.recorder.commits().len(),
        binlog: binlog_pos(primary),
        com_stmt_execute: status_counter(primary, "Com_stmt_execute"),
    }
}

/// Measures what happened since `before`, once the proxy has closed every primary connection
/// the command opened (so the server's counters include all of them).
fn effect(primary: &MariaDb, proxy: &TestProxy, before: &Before) -> Result<Effect, String> {
    let deadline = Deadline::after(DISCONNECT_TIMEOUT);
    loop {
        let open = app_connections(primary);
        if open == 0 {
            break;
        }
        if deadline.expired() {
            return Err(format!(
                "{open} primary connection(s) of {APP_USER} still open {DISCONNECT_TIMEOUT:?} \
                 after sysbench exited: {:?}",
                primary.query_rows(&format!(
                    "SELECT ID, COMMAND, TIME, STATE, INFO FROM information_schema.PROCESSLIST \
                     WHERE USER = '{APP_USER}'"
                ))
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let commits = proxy.recorder.commits();
    let mut reported = Vec::new();
    let mut bad_reports = Vec::new();
    for commit in &commits[before.recorded..] {
        if commit.unresolved.is_some() {
            bad_reports.push(format!("unresolved: {commit:?}"));
        }
        for gtid in &commit.gtids {
            match gtid.domain {
                Domain::Maria(_) => reported.push(*gtid),
                Domain::MySql(_) | Domain::Binlog(_) => {
                    bad_reports.push(format!("not a MariaDB GTID: {gtid}"))
                }
            }
        }
    }
    let after = binlog_pos(primary);
    let logged = match (before.binlog, after) {
        (_, None) => Vec::new(),
        (Some(b), Some(a)) if (b.domain, b.server_id) != (a.domain, a.server_id) => {
            return Err(format!("the binlog position moved from {b} to {a}"));
        }
        (b, Some(a)) => {
            let first = b.map_or(1, |b| b.seq_no + 1);
            (first..=a.seq_no)
                .map(|seq_no| Gtid { seq_no, ..a })
                .collect()
        }
    };
    Ok(Effect {
        reported,
        bad_reports,
        logged,
        com_stmt_execute: status_counter(primary, "Com_stmt_execute") - before.com_stmt_execute,
    })
}

impl Effect {
    /// Every GTID the primary logged was reported exactly once, and nothing else was.
    fn check_reports(&self, what: &str, fails: &mut Vec<String>) {
        if !self.bad_reports.is_empty() {
            fails.push(format!(
                "{what}: bad commit reports: {:?}",
                self.bad_reports
            ));
        }
        let distinct: BTreeSet<Gtid> = self.reported.iter().copied().collect();
        if distinct.len() != self.reported.len() {
            fails.push(format!(
                "{what}: {} GTID reports but only {} distinct GTIDs",
                self.reported.len(),
                distinct.len()
            ));
        }
        let logged: BTreeSet<Gtid> = self.logged.iter().copied().collect();
        if distinct != logged {
            fails.push(format!(
                "{what}: reported GTIDs differ from the binlog's advance ({} logged, {} \
                 reported); logged but not reported: {:?}; reported but not logged: {:?}",
                logged.len(),
                distinct.len(),
                first_few(logged.difference(&distinct)),
                first_few(distinct.difference(&logged)),
            ));
        }
    }
}

fn first_few<'a>(gtids: impl Iterator<Item = &'a Gtid>) -> Vec<String> {
    gtids.take(10).map(ToString::to_string).collect()
}

fn binlog_pos(primary: &MariaDb) -> Option<Gtid> {
    let pos = primary.gtid_binlog_pos();
    if pos.is_empty() {
        return None;
    }
    Some(Gtid::parse(pos.as_bytes()).unwrap_or_else(|e| {
        panic!("gtid_binlog_pos {pos:?} is not a single GTID (one domain expected): {e}")
    }))
}

fn status_counter(primary: &MariaDb, name: &str) -> u64 {
    let value = primary.status_var(name);
    value
        .parse()
        .unwrap_or_else(|_| panic!("{name} = {value:?}"))
}

fn app_connections(primary: &MariaDb) -> u64 {
    primary
        .sql(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '{APP_USER}'"
        ))
        .parse()
        .expect("a count")
}

/// The checks that hold for every run, whatever the workload.
fn check_run(what: &str, report: &SysbenchReport, fails: &mut Vec<String>) {
    let mut fail = |msg: String| fails.push(format!("{what}: {msg}\n{}", report.raw));
    if report.errors != 0 {
        fail(format!(
            "{} errors: {:?}",
            report.errors, report.error_lines
        ));
    }
    if report.reconnects != 0 {
        fail(format!("{} reconnects", report.reconnects));
    }
    if report.transactions == 0 {
        fail("no transactions".into());
    }
    if report.ps_fallbacks != 0 {
        fail(format!(
            "{} statements fell back to client-side emulation",
            report.ps_fallbacks
        ));
    }
}

#[test]
fn oltp_workloads_through_the_proxy_finish_without_errors_and_report_every_commit() {
    let ((), took) = timed(|| {
        let primary = MariaDb::start(MariaDbOptions::default());
        let proxy = TestProxy::start(&primary);
        let bench = Sysbench::new("oltp_read_write")
            .port(proxy.port())
            .tables(TABLES)
            .table_size(TABLE_SIZE);
        let mut fails = Vec::new();

        // Prepare through the proxy: DDL and multi-row INSERTs in autocommit, 4 sessions.
        let start = before(&primary, &proxy);
        bench.clone().threads(TABLES).prepare();
        let prepared = effect(&primary, &proxy, &start).unwrap_or_else(|e| panic!("prepare: {e}"));
        assert!(!prepared.logged.is_empty(), "prepare logged nothing");
        prepared.check_reports("prepare", &mut fails);
        for table in 1..=TABLES {
            assert_eq!(
                primary.sql(&format!("SELECT COUNT(*) FROM sbtest.sbtest{table}")),
                TABLE_SIZE.to_string(),
                "rows in sbtest{table} after prepare"
            );
        }

        for workload in ["oltp_read_write", "oltp_point_select"] {
            for mode in [PsMode::Auto, PsMode::Disable] {
                let what = format!("{workload} --db-ps-mode={mode}");
                let run = bench
                    .clone()
                    .workload(workload)
                    .threads(THREADS)
                    .time(RUN_SECONDS)
                    .ps_mode(mode);
                let start = before(&primary, &proxy);
                let report = match run.try_run() {
                    Ok(report) => report,
                    Err(failure) => {
                        fails.push(format!("{what}: {failure}"));
                        continue;
                    }
                };
                eprintln!("{what}: {}", report.summary());
                check_run(&what, &report, &mut fails);
                let effect = match effect(&primary, &proxy, &start) {
                    Ok(effect) => effect,
                    Err(e) => {
                        fails.push(format!("{what}: {e}"));
                        continue;
                    }
                };
                effect.check_reports(&what, &mut fails);

                // Every oltp_read_write transaction changes rows (the indexed UPDATE always
                // hits a row) and ends in COMMIT, so it logs exactly one GTID; a transaction
                // that hit an ignored error (deadlock) is rolled back whole and retried, and
                // counts once, when it commits. oltp_point_select only reads.
                let expected_gtids = if workload == "oltp_read_write" {
                    report.transactions
                } else {
                    0
                };
                for (who, gtids) in [
                    ("the binlog gained", effect.logged.len()),
                    ("the proxy reported", effect.reported.len()),
                ] {
                    if gtids as u64 != expected_gtids {
                        fails.push(format!(
                            "{what}: {who} {gtids} GTIDs for {} transactions (expected \
                             {expected_gtids})",
                            report.transactions
                        ));
                    }
                }

                // No silent fallback: with `auto` every statement of these workloads
                // (BEGIN and COMMIT included) is a server-side prepared statement, so each
                // query sysbench counts, and each that failed with an ignored error, is one
                // COM_STMT_EXECUTE. With `disable` all go as text, and nothing else on this
                // server (the harness uses the text protocol) executes prepared statements.
                let expected_executes = match mode {
                    PsMode::Auto => report.queries + report.ignored_errors,
                    PsMode::Disable => 0,
                };
                if effect.com_stmt_execute != expected_executes {
                    fails.push(format!(
                        "{what}: Com_stmt_execute grew by {}, expected {expected_executes} \
                         ({} queries, {} ignored errors)",
                        effect.com_stmt_execute, report.queries, report.ignored_errors
                    ));
                }
            }
        }

        let start = before(&primary, &proxy);
        bench.cleanup();
        let cleaned = effect(&primary, &proxy, &start).unwrap_or_else(|e| panic!("cleanup: {e}"));
        cleaned.check_reports("cleanup", &mut fails);
        assert_eq!(
            cleaned.logged.len(),
            TABLES as usize,
            "one DROP TABLE per table"
        );

        assert!(
            fails.is_empty(),
            "{} check(s) failed:\n\n{}",
            fails.len(),
            fails.join("\n\n")
        );
    });
    eprintln!("sysbench test took {took:?}");
}

const SAMPLE_REPORT: &str = "\
sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)

Running the test with following options:
Number of threads: 64
Initializing random number generator from current time

Initializing worker threads...

Threads started!

SQL statistics:
    queries performed:
        read:                            55958
        write:                           15988
        other:                           7994
        total:                           79940
    transactions:                        3997   (493.28 per sec.)
    queries:                             79940  (9865.51 per sec.)
    ignored errors:                      2      (0.25 per sec.)
    reconnects:                          0      (0.00 per sec.)

General statistics:
    total time:                          8.1024s
    total number of events:              3997

Latency (ms):
         min:                                   41.97
         avg:                                  128.89
         max:                                  252.54
         95th percentile:                      164.45
         sum:                               515192.80

Threads fairness:
    events (avg/stddev):           62.4531/1.29
    execution time (avg/stddev):   8.0499/0.03

";

#[test]
fn parses_the_sysbench_1_0_report() {
    let report = SysbenchReport::parse(SAMPLE_REPORT).expect("parses");
    assert_eq!(
        (report.reads, report.writes, report.other, report.queries),
        (55958, 15988, 7994, 79940)
    );
    assert_eq!(report.transactions, 3997);
    assert_eq!(report.tps, 493.28);
    assert_eq!(report.qps, 9865.51);
    assert_eq!((report.ignored_errors, report.reconnects), (2, 0));
    assert_eq!((report.errors, report.ps_fallbacks), (0, 0));
    assert_eq!((report.total_time_s, report.events), (8.1024, 3997));
    assert_eq!(
        (
            report.latency_min_ms,
            report.latency_avg_ms,
            report.latency_max_ms
        ),
        (41.97, 128.89, 252.54)
    );
    assert_eq!((report.percentile, report.p95_latency_ms), (95, 164.45));
    assert_eq!(report.raw, SAMPLE_REPORT);
}

#[test]
fn counts_errors_and_fallbacks_and_rejects_output_without_a_report() {
    let noisy = SAMPLE_REPORT.replace(
        "Threads started!\n",
        "Failed to prepare query \"BEGIN\" (1295: This command is not supported in the \
         prepared statement protocol yet), using emulation\nThreads started!\n\
         FATAL: mysql_drv_query() returned error 1146 (Table 'sbtest.sbtest6' doesn't exist)\n",
    );
    let report = SysbenchReport::parse(&noisy).expect("parses");
    assert_eq!((report.errors, report.ps_fallbacks), (1, 1));
    assert!(report.error_lines[0].contains("error 1146"));

    let aborted = "\
Initializing worker threads...

FATAL: mysql_stmt_prepare() failed
FATAL: MySQL error: 1146 \"Table 'sbtest.sbtest5' doesn't exist\"
FATAL: `thread_init' function failed: /usr/share/sysbench/oltp_common.lua:284: SQL API error
";
    let err = SysbenchReport::parse(aborted).expect_err("no report");
    assert!(err.starts_with("the report has no"), "{err}");
}
