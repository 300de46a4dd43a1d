//! The proxy with the stock MariaDB command-line clients (`mariadb`, `mariadb-admin`): login
//! with each authentication plugin, TLS, SQL files, warnings, administration; and the
//! `strongsync` binary's own command-line contract (flags, environment, logging, exit codes,
//! signals).

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use nix::sys::signal::Signal;

use support::certs::TestCerts;
use support::cli::{mariadb, mariadb_admin, Output};
use support::mariadb::{
    sql_quote, wait_for, MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER, ED_PASSWORD, ED_USER,
    TEST_DB,
};
use support::proxy::{free_port, run_strongsync, ProxyProcess, TestProxy};
use support::sql::Statements;

/// The binary's exit code for an unusable configuration (EX_USAGE).
const EXIT_CONFIG: i32 = 64;
/// How long a test waits for the primary to reach a state it polls for.
const POLL_TIMEOUT: Duration = Duration::from_secs(30);

// --- helpers ---

fn start_primary() -> MariaDb {
    MariaDb::start(MariaDbOptions::default())
}

/// A loopback address on a free port, for the binary to listen on.
fn free_listen_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Starts the binary with `--listen` and `--primary` flags plus `extra` arguments.
fn start_binary(primary: &str, extra: &[&str]) -> (ProxyProcess, SocketAddr) {
    let listen = free_listen_addr();
    let listen_text = listen.to_string();
    let mut args = vec!["--listen", &listen_text, "--primary", primary];
    args.extend_from_slice(extra);
    (ProxyProcess::start(&args, &[], listen), listen)
}

/// Non-empty lines of `text`.
fn lines(text: &str) -> Vec<&str> {
    text.lines().filter(|line| !line.is_empty()).collect()
}

/// An access-denied message with the host part of `'user'@'host'` blanked out, so the same
/// refusal seen from different client addresses compares equal.
fn without_host(message: &str) -> String {
    let mut out = String::new();
    let mut rest = message;
    while let Some(at) = rest.find("'@'") {
        out.push_str(&rest[..at + 3]);
        rest = &rest[at + 3..];
        match rest.find('\'') {
            Some(end) => {
                out.push_str("<host>");
                rest = &rest[end..];
            }
            None => break,
        }
    }
    out.push_str(rest);
    out
}

/// `text` without ANSI escape sequences (the log may be coloured).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC '[' parameters... final byte in '@'..='~'.
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The binary's log so far, without colour codes.
fn log_of(proxy: &ProxyProcess) -> String {
    strip_ansi(&proxy.log())
}

/// The `SSL:` line of the client's `status` output.
fn ssl_status(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|line| line.starts_with("SSL:"))
        .unwrap_or_else(|| panic!("no SSL: line in the status output:\n{stdout}"))
}

/// Rows of a `mariadb-admin processlist` table, each split into trimmed cells.
fn processlist_rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .filter(|line| line.starts_with('|'))
        .map(|line| {
            line.trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .skip(1) // the header
        .collect()
}

fn processlist_ids_of(primary: &MariaDb, user: &str) -> Vec<String> {
    primary
        .query_rows(&format!(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = {}",
            sql_quote(user)
        ))
        .into_iter()
        .map(|row| row[0].clone())
        .collect()
}

// --- 1. login ---

/// Logs in through the proxy as `user`, checks `CURRENT_USER()`, and, with the client still
/// connected, that the primary lists the connection id the client sees.
fn login_through_proxy(user: &str, password: &str, expected_user: &str) {
    let primary = start_primary();
    let proxy = TestProxy::start(&primary);
    let mut client = mariadb(proxy.port(), user, password)
        .args(["--batch", "--skip-column-names"])
        .interactive();
    client.send("SELECT CURRENT_USER(), CONNECTION_ID();");
    let line = client.next_line();
    let (current_user, id) = line
        .split_once('\t')
        .unwrap_or_else(|| panic!("expected two columns, got {line:?}"));
    assert_eq!(current_user, expected_user);
    let listed = processlist_ids_of(&primary, user);
    assert!(
        listed.iter().any(|listed| listed == id),
        "CONNECTION_ID() through the proxy is {id}, but the primary lists {user} as {listed:?}"
    );
    let out = client.finish().expect_success();
    assert_eq!(out.stdout, "", "nothing beyond the one row");
}

#[test]
fn native_password_user_logs_in_with_the_primarys_connection_id() {
    login_through_proxy(APP_USER, APP_PASSWORD, "app@%");
}

#[test]
fn ed25519_user_logs_in_with_the_primarys_connection_id() {
    login_through_proxy(ED_USER, ED_PASSWORD, "eduser@%");
}

// --- 2. wrong password ---

#[test]
fn wrong_password_gets_the_primarys_own_access_denied_error() {
    let primary = start_primary();
    let proxy = TestProxy::start(&primary);
    for user in [APP_USER, ED_USER] {
        let via_proxy = mariadb(proxy.port(), user, "wrong-password")
            .execute("SELECT 1")
            .expect_failure();
        let direct = mariadb(primary.port(), user, "wrong-password")
            .execute("SELECT 1")
            .expect_failure();
        let expected = format!("ERROR 1045 (28000): Access denied for user '{user}'");
        assert!(
            via_proxy.stderr.contains(&expected),
            "expected {expected:?}:\n{via_proxy}"
        );
        assert_eq!(
            without_host(&via_proxy.stderr),
            without_host(&direct.stderr),
            "through the proxy:\n{via_proxy}\ndirect:\n{direct}"
        );
        assert_eq!(via_proxy.status.code(), direct.status.code());
        assert_eq!(via_proxy.stdout, "");
    }
}

// --- 3. TLS ---

#[test]
fn tls_client_verifies_the_proxy_certificate_and_logs_in() {
    let certs = TestCerts::generate(&["127.0.0.1"]);
    let primary = start_primary();
    let mut config = TestProxy::config(&primary);
    config.tls = certs.tls_config();
    let proxy = TestProxy::start_with(config);
    let ca = format!("--ssl-ca={}", certs.ca.display());

    for (user, password, expected_user) in [
        (APP_USER, APP_PASSWORD, "app@%"),
        (ED_USER, ED_PASSWORD, "eduser@%"),
    ] {
        let out = mariadb(proxy.port(), user, password)
            .args(["--ssl", &ca, "--ssl-verify-server-cert", "--batch"])
            .args(["--skip-column-names"])
            .execute(r"SELECT CURRENT_USER(); \s")
            .expect_success();
        assert_eq!(
            lines(&out.stdout).first().copied(),
            Some(expected_user),
            "{out}"
        );
        let ssl = ssl_status(&out.stdout);
        assert!(ssl.contains("Cipher in use is"), "{ssl:?}\n{out}");
    }

    // Verification is real: a certificate from another CA is refused.
    let other = TestCerts::generate(&["127.0.0.1"]);
    let out = mariadb(proxy.port(), APP_USER, APP_PASSWORD)
        .args(["--ssl", "--ssl-verify-server-cert"])
        .arg(format!("--ssl-ca={}", other.ca.display()))
        .execute("SELECT 1")
        .expect_failure();
    assert!(out.stderr.contains("ERROR 2026"), "{out}");
}

#[test]
fn without_a_configured_certificate_tls_is_on_with_a_self_signed_one() {
    let primary = start_primary();
    let proxy = TestProxy::start(&primary);

    // Nobody vouches for strongsync's own certificate: a client that verifies refuses it.
    let out = mariadb(proxy.port(), APP_USER, APP_PASSWORD)
        .args(["--ssl", "--ssl-verify-server-cert"])
        .execute("SELECT CURRENT_USER()")
        .expect_failure();
    assert!(out.stderr.contains("ERROR 2026"), "{out}");
    assert_eq!(out.stdout, "", "no query ran");

    // The default client (TLS if offered) gets TLS without being told; one that never asks
    // gets a plain session.
    for (extra, tls) in [(None, true), (Some("--skip-ssl"), false)] {
        let out = mariadb(proxy.port(), APP_USER, APP_PASSWORD)
            .args(["--batch", "--skip-column-names"])
            .args(extra)
            .execute(r"SELECT CURRENT_USER(); \s")
            .expect_success();
        assert_eq!(lines(&out.stdout).first().copied(), Some("app@%"), "{out}");
        let ssl = ssl_status(&out.stdout);
        assert_eq!(ssl.contains("Cipher in use"), tls, "{ssl:?}\n{out}");
    }
}

#[test]
fn with_tls_disabled_the_greeting_offers_none() {
    let primary = start_primary();
    let mut config = TestProxy::config(&primary);
    config.tls.disabled = true;
    let proxy = TestProxy::start_with(config);
    let out = mariadb(proxy.port(), APP_USER, APP_PASSWORD)
        .args(["--batch", "--skip-column-names"])
        .execute(r"SELECT CURRENT_USER(); \s")
        .expect_success();
    assert!(ssl_status(&out.stdout).contains("Not in use"), "{out}");
}

// --- 4. SQL file ---

const SQL_FILE: &str = "\
CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, qty INT NOT NULL);
INSERT INTO items VALUES (1, 'apple', 3); INSERT INTO items VALUES (2, 'pear', 5); INSERT INTO items VALUES (3, 'plum', 7);
DELIMITER //
CREATE PROCEDURE add_item(IN p_id INT, IN p_name VARCHAR(20))
BEGIN
  INSERT INTO items VALUES (p_id, p_name, 1);
  SELECT COUNT(*) AS items_now FROM items;
END //
INSERT INTO items VALUES (5, 'kiwi', 2); SELECT MAX(id) AS max_id FROM items //
DELIMITER ;
CALL add_item(4, 'fig');
UPDATE items SET qty = qty * 10 WHERE id IN (1, 4);
SELECT id, name, qty FROM items ORDER BY id;
";

/// What the client prints for [`SQL_FILE`] in batch mode: the multi-statement's result set,
/// the procedure's, and the final SELECT.
const SQL_FILE_OUTPUT: &str = "\
max_id
5
items_now
5
id\tname\tqty
1\tapple\t30
2\tpear\t5
3\tplum\t7
4\tfig\t10
5\tkiwi\t2
";

#[test]
fn sql_file_with_multi_statements_and_a_procedure_runs_through_the_proxy() {
    let primary = start_primary();
    let proxy = TestProxy::start(&primary);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("script.sql");
    fs::write(&file, SQL_FILE).unwrap();

    let out = mariadb(proxy.port(), APP_USER, APP_PASSWORD)
        .arg(TEST_DB)
        .stdin_file(&file)
        .run()
        .expect_success();
    assert_eq!(out.stdout, SQL_FILE_OUTPUT, "{out}");
    assert_eq!(out.stderr, "", "{out}");

    assert_eq!(
        primary.query_rows("SELECT id, name, qty FROM sbtest.items ORDER BY id"),
        [
            ["1", "apple", "30"],
            ["2", "pear", "5"],
            ["3", "plum", "7"],
            ["4", "fig", "10"],
            ["5", "kiwi", "2"],
        ]
        .map(|row| row.map(String::from).to_vec())
    );
    assert_eq!(
        primary.sql(
            "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'sbtest'"
        ),
        "add_item"
    );

    // Every transaction the script committed was reported, in order: CREATE TABLE, three
    // INSERTs, CREATE PROCEDURE, the multi-statement's INSERT, the procedure's INSERT, UPDATE.
    let expected: Vec<String> = (1..=8).map(|seq| format!("0-1-{seq}")).collect();
    assert_eq!(primary.gtid_binlog_pos(), "0-1-8");
    let reported = proxy.recorder.gtids();
    assert_eq!(reported, expected, "GTIDs reported by the session");
}

// --- 5. warnings ---

/// A table with a row, and a function whose every call commits a transaction.
const WARNINGS_SETUP: &str = "
SET GLOBAL log_bin_trust_function_creators = ON;
CREATE TABLE sbtest.w (id INT PRIMARY KEY);
INSERT INTO sbtest.w VALUES (1);
CREATE TABLE sbtest.calls (id INT AUTO_INCREMENT PRIMARY KEY);
DELIMITER //
CREATE FUNCTION sbtest.log_call() RETURNS INT MODIFIES SQL DATA
BEGIN
  INSERT INTO sbtest.calls VALUES ();
  RETURN 1;
END //
DELIMITER ;
";

#[test]
fn show_warnings_shows_the_last_statements_warnings() {
    let primary = start_primary();
    primary.sql(WARNINGS_SETUP);
    let proxy = TestProxy::start(&primary);
    let duplicate = "Duplicate entry '1' for key 'PRIMARY'";
    let cases = [
        ("SELECT 1/0", 1365, "Division by 0"),
        ("INSERT IGNORE INTO sbtest.w VALUES (1)", 1062, duplicate),
        // A result set from a statement that also commits: the client's legacy EOF does not
        // say what committed, so the proxy has to find out before the SHOW WARNINGS.
        ("SELECT sbtest.log_call() / 0", 1365, "Division by 0"),
    ];
    for (statement, code, message) in cases {
        // SHOW WARNINGS as the next statement.
        let sql = format!("{statement}; SHOW WARNINGS");
        let out = mariadb(proxy.port(), APP_USER, APP_PASSWORD)
            .arg("--batch")
            .execute(&sql)
            .expect_success();
        let row = format!("Warning\t{code}\t{message}");
        assert!(
            lines(&out.stdout).contains(&row.as_str()),
            "{row:?}:\n{out}"
        );
        let direct = mariadb(primary.port(), APP_USER, APP_PASSWORD)
            .arg("--batch")
            .execute(&sql)
            .expect_success();
        assert_eq!(out.stdout, direct.stdout, "direct:\n{direct}");

        // The client's own --show-warnings, which asks after each statement.
        let out = mariadb(proxy.port(), APP_USER, APP_PASSWORD)
            .args(["--batch", "--show-warnings"])
            .execute(statement)
            .expect_success();
        let shown = format!("Warning (Code {code}): {message}");
        assert!(
            out.stdout.contains(&shown) || out.stderr.contains(&shown),
            "{shown:?}:\n{out}"
        );
    }
}

// --- 6. mariadb-admin ---

#[test]
fn mariadb_admin_ping_status_and_processlist_work_through_the_proxy() {
    let primary = start_primary();
    let proxy = TestProxy::start(&primary);
    let admin = || mariadb_admin(proxy.port(), APP_USER, APP_PASSWORD);

    let out = admin().arg("ping").run().expect_success();
    assert_eq!(out.stdout.trim(), "mysqld is alive", "{out}");

    let out = admin().arg("status").run().expect_success();
    let status = out.stdout.trim();
    assert!(
        status.starts_with("Uptime:") && status.contains("Threads:"),
        "{out}"
    );

    // An idle client through the proxy shows up in the processlist, as does the admin itself.
    let mut idle = mariadb(proxy.port(), ED_USER, ED_PASSWORD)
        .args(["--batch", "--skip-column-names"])
        .interactive();
    idle.send("SELECT CONNECTION_ID();");
    let idle_id = idle.next_line();
    let out = admin().arg("processlist").run().expect_success();
    let rows = processlist_rows(&out.stdout);
    assert!(
        rows.iter()
            .any(|row| row[0] == idle_id && row[1] == ED_USER && row[4] == "Sleep"),
        "no idle row for {ED_USER} with id {idle_id}:\n{out}"
    );
    assert!(
        rows.iter()
            .any(|row| row[1] == APP_USER && row[7].eq_ignore_ascii_case("show processlist")),
        "no row for the admin's own query:\n{out}"
    );
    idle.finish().expect_success();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_admin_kill_ends_an_idle_connection_through_the_proxy() {
    let primary = start_primary();
    let proxy = TestProxy::start(&primary);
    let mut victim = mysql_async::Conn::from_url(proxy.url(APP_USER, APP_PASSWORD))
        .await
        .expect("connect through the proxy");
    let id: u32 = victim.one("SELECT CONNECTION_ID()").await;
    assert_eq!(victim.id(), id, "the greeting carried the primary's id");

    mariadb_admin(proxy.port(), APP_USER, APP_PASSWORD)
        .args(["kill", &id.to_string()])
        .run()
        .expect_success();
    wait_for("the killed connection to leave", POLL_TIMEOUT, || {
        !processlist_ids_of(&primary, APP_USER).contains(&id.to_string())
    });

    let result = victim.query_drop("SELECT 1").await;
    assert!(
        result.is_err(),
        "a killed connection still answered: {result:?}"
    );
    // The proxy itself still serves.
    mariadb(proxy.port(), APP_USER, APP_PASSWORD)
        .execute("SELECT 1")
        .expect_success();
}

#[test]
fn mariadb_admin_kill_interrupts_a_query_running_through_the_proxy() {
    let primary = start_primary();
    let proxy = TestProxy::start(&primary);
    let mut victim = mariadb(proxy.port(), APP_USER, APP_PASSWORD)
        .args(["--batch", "--skip-column-names", "--skip-reconnect"])
        .interactive();
    victim.send("SELECT CONNECTION_ID();");
    victim.send("SELECT SLEEP(60);");
    victim.close_stdin();
    let id = victim.next_line();
    wait_for("the victim's SLEEP to run", POLL_TIMEOUT, || {
        primary.sql(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE ID = {id} AND INFO LIKE 'SELECT SLEEP%'"
        )) == "1"
    });

    mariadb_admin(proxy.port(), APP_USER, APP_PASSWORD)
        .args(["kill", &id])
        .run()
        .expect_success();
    let out = victim.finish().expect_failure();
    assert_eq!(out.stdout, "", "SLEEP must not have returned a row:\n{out}");
    assert!(out.stderr.contains("ERROR"), "{out}");
}

// --- 7. the binary's command line ---

#[test]
fn help_documents_the_flags_and_their_environment_variables() {
    let out = run_strongsync(&["--help"]).expect_success();
    for documented in [
        "--listen",
        "--primary",
        "--tls-cert",
        "--tls-key",
        "STRONGSYNC_LISTEN",
        "STRONGSYNC_PRIMARY",
        "STRONGSYNC_TLS_CERT",
        "STRONGSYNC_TLS_KEY",
    ] {
        assert!(out.stdout.contains(documented), "{documented}:\n{out}");
    }
}

#[test]
fn binary_configured_only_through_the_environment_serves_clients() {
    let primary = start_primary();
    let listen = free_listen_addr();
    let (listen_text, primary_addr) = (listen.to_string(), primary.addr());
    let proxy = ProxyProcess::start(
        &[],
        &[
            ("STRONGSYNC_LISTEN", &listen_text),
            ("STRONGSYNC_PRIMARY", &primary_addr),
        ],
        listen,
    );
    let out = mariadb(listen.port(), APP_USER, APP_PASSWORD)
        .args(["--batch", "--skip-column-names"])
        .execute("SELECT CURRENT_USER()")
        .unwrap_or_log(&proxy);
    assert_eq!(out.stdout, "app@%\n", "{out}");
}

#[test]
fn log_level_debug_logs_each_command_and_the_default_does_not() {
    let primary = start_primary();
    let query = |listen: SocketAddr, proxy: &ProxyProcess| {
        mariadb(listen.port(), APP_USER, APP_PASSWORD)
            .execute("SELECT 1")
            .unwrap_or_log(proxy);
    };
    let is_command_line = |line: &&str| line.contains("DEBUG") && line.contains("COM_QUERY");

    let (debug, listen) = start_binary(&primary.addr(), &["--log-level", "debug"]);
    query(listen, &debug);
    let log = log_of(&debug);
    assert!(
        log.lines().any(|line| is_command_line(&line)),
        "no per-command debug line:\n{log}"
    );

    let (default, listen) = start_binary(&primary.addr(), &[]);
    query(listen, &default);
    let log = log_of(&default);
    assert!(log.contains("INFO"), "the default level logs info:\n{log}");
    assert!(
        !log.contains("DEBUG"),
        "debug lines at the default level:\n{log}"
    );
}

#[test]
fn invalid_setting_exits_with_status_64_naming_it() {
    let listen = free_listen_addr().to_string();
    let out = run_strongsync(&[
        "--listen",
        &listen,
        "--primary",
        "127.0.0.1:3306",
        "--limits-max-connections",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(EXIT_CONFIG), "{out}");
    let stderr = strip_ansi(&out.stderr);
    assert!(
        stderr.contains("max_connections") || stderr.contains("max-connections"),
        "the message names the setting:\n{out}"
    );
    assert!(
        TcpStream::connect(&listen).is_err(),
        "nothing listens after a refused configuration"
    );
}

#[test]
fn missing_primary_exits_with_a_usage_message() {
    let listen = free_listen_addr().to_string();
    let out = run_strongsync(&["--listen", &listen]);
    assert_eq!(out.status.code(), Some(EXIT_CONFIG), "{out}");
    let stderr = strip_ansi(&out.stderr);
    assert!(
        stderr.contains("missing setting primary")
            && stderr.contains("--primary")
            && stderr.contains("Usage:"),
        "{out}"
    );
}

// --- 8. primary unreachable ---

/// The client must get the proxy's reason as an error message, not a dropped connection.
/// The test does not demand `ERROR 2003` in the client's output: Connector/C (3.3.9 and later,
/// in the `mariadb` client 10.11) treats an error code from the client-only ranges (2000-2999,
/// 5000-5999) arriving from a server as forged and prints only "ERROR 2027 (HY000): Received
/// malformed packet", so only a server-range code can carry the message to this client.
#[test]
fn unreachable_primary_gives_clients_an_error_and_the_proxy_keeps_running() {
    // A port nobody listens on.
    let dead = format!("127.0.0.1:{}", free_port());
    let (proxy, listen) = start_binary(&dead, &[]);
    let expected = format!("cannot connect to primary {dead}");
    // The default client (TLS if offered: it words an error received before TLS differently)
    // and one that never asks for TLS; each twice, since the proxy must go on serving.
    for extra in [None, Some("--skip-ssl"), None, Some("--skip-ssl")] {
        let out = mariadb(listen.port(), APP_USER, APP_PASSWORD)
            .args(extra)
            .execute("SELECT 1")
            .expect_failure();
        assert!(
            out.stderr.starts_with("ERROR ") && out.stderr.contains(&expected),
            "expected an error naming {expected:?}:\n{out}\nproxy log:\n{}",
            log_of(&proxy)
        );
        if extra.is_some() {
            // Without TLS in play the client prints the proxy's ERR packet as it is.
            assert!(
                out.stderr
                    .starts_with("ERROR 1105 (HY000): strongsync: cannot connect"),
                "{out}"
            );
        }
    }
    let log = log_of(&proxy);
    assert!(log.contains(&expected), "the proxy logs it:\n{log}");
    assert!(
        TcpStream::connect(listen).is_ok(),
        "still accepting connections"
    );
}

// --- 9. signals ---

fn exits_zero_on(signal: Signal) {
    let primary = start_primary();
    let (mut proxy, listen) = start_binary(&primary.addr(), &[]);
    mariadb(listen.port(), APP_USER, APP_PASSWORD)
        .execute("SELECT 1")
        .unwrap_or_log(&proxy);
    let status = proxy.stop_with(signal);
    assert_eq!(
        status.code(),
        Some(0),
        "{signal} gave {status}; log:\n{}",
        log_of(&proxy)
    );
    assert!(
        TcpStream::connect(listen).is_err(),
        "the port is closed after exit"
    );
}

#[test]
fn sigterm_exits_with_status_0() {
    exits_zero_on(Signal::SIGTERM);
}

#[test]
fn sigint_exits_with_status_0() {
    exits_zero_on(Signal::SIGINT);
}

/// Client results checked against a proxy process, whose log is shown on failure.
trait ExpectWithLog {
    fn unwrap_or_log(self, proxy: &ProxyProcess) -> Output;
}

impl ExpectWithLog for Output {
    #[track_caller]
    fn unwrap_or_log(self, proxy: &ProxyProcess) -> Output {
        assert!(
            self.success(),
            "client failed:\n{self}\nproxy log:\n{}",
            log_of(proxy)
        );
        self
    }
}

/// The runtime worker threads of a running proxy (tokio names them).
fn runtime_workers(proxy: &ProxyProcess) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", proxy.pid()))
        .unwrap()
        .filter(|task| {
            let comm = task.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|name| name.trim() == "tokio-rt-worker")
        })
        .count()
}

#[test]
fn worker_threads_sizes_the_runtime_and_defaults_to_one_per_four_cpus() {
    let primary = start_primary();
    let cpus = std::thread::available_parallelism().unwrap().get();
    for (extra, expected) in [
        (&["--worker-threads", "3"][..], 3),
        (&[][..], (cpus / 4).max(1)),
    ] {
        let (proxy, listen) = start_binary(&primary.addr(), extra);
        let out = mariadb(listen.port(), APP_USER, APP_PASSWORD)
            .args(["--batch", "--skip-column-names"])
            .execute("SELECT 1")
            .unwrap_or_log(&proxy);
        assert_eq!(out.stdout, "1\n", "{out}");
        // One worker runs on the main thread, on tokio's single-threaded scheduler: no
        // thread of its own (a multi-threaded runtime of one would have one).
        let threads = if expected == 1 { 0 } else { expected };
        assert_eq!(runtime_workers(&proxy), threads, "{extra:?}");
    }
}
