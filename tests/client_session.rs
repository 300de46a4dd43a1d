//! What a client does to its own session does not blind strongsync, on MariaDB 10.11 and on
//! MySQL 9.7: a session whose results come back in another character set, or that tracks no
//! variable or every one, still has each commit waited for by its quorum; a `CALL` that
//! commits ten thousand transactions is released once a replica holds the last of them; an
//! error with code 65535 reaches the client as the server sent it, and the session goes on.
//! Each release is witnessed by the replica's own received GTIDs at the moment of the answer.
//! A session also sees through strongsync what it sees direct, down to its counters, its
//! profile and the query cache: strongsync runs no statement of its own in it.

use std::time::Duration;

use mysql_async::prelude::*;
use support::each_server;
use support::failover_rounds::LedgerCluster;
use support::mariadb::{APP_PASSWORD, APP_USER};
use support::sql::Statements;
use support::strong::Strong;
use support::strong::{blocking, ok_once_held, spawn_watched};
use support::topology::MySqlTopology;
use support::topology::Topology;

/// What the tests need to know of a server kind.
trait Flavoured: LedgerCluster {
    /// The character sets of results the tests set (MySQL has no `filename` to set).
    const RESULT_CHARSETS: &'static [&'static str];
    /// A commit its OK does not report is bounded by the probe (MySQL), rather than read from
    /// the session's `@@last_gtid` (MariaDB, which needs no probe for it).
    const HIDDEN_NEEDS_PROBE: bool;
    /// The application account's URL straight to the primary.
    fn direct_url(&self) -> String;
}

impl Flavoured for Topology {
    const RESULT_CHARSETS: &'static [&'static str] = &["filename", "utf16", "utf32", "binary"];
    const HIDDEN_NEEDS_PROBE: bool = false;

    fn direct_url(&self) -> String {
        // As the proxy's URL: TCP all the way, without mysql_async's `SELECT @@socket` to look
        // for a socket (a statement the primary would count).
        format!(
            "{}?prefer_socket=false",
            self.primary.url(APP_USER, APP_PASSWORD)
        )
    }
}

impl Flavoured for MySqlTopology {
    const RESULT_CHARSETS: &'static [&'static str] = &["utf16", "utf32", "binary"];
    const HIDDEN_NEEDS_PROBE: bool = true;

    fn direct_url(&self) -> String {
        self.primary.url(APP_USER, APP_PASSWORD)
    }
}

/// Quorum 1, waiting as long as it takes, two replicas; with `probe`, the probe that bounds
/// what a response may have committed unreported (as `deploy/` configures it).
fn start<C: Flavoured>(probe: bool) -> Strong<C> {
    Strong::<C>::launch(2, None, |config, topology| {
        config.durability = blocking(1);
        if probe {
            config.probe = topology.probe_account();
        }
    })
}

/// Runs `sql` on `conn` with both replicas' I/O stopped: it must park, and its OK must come
/// only once replica 0 (started again) holds the newest transaction the primary wrote.
async fn waited_for_by_quorum<C: Flavoured>(
    s: &Strong<C>,
    conn: mysql_async::Conn,
    sql: &str,
) -> mysql_async::Conn {
    s.stop_all();
    let before = s.parked();
    let watched = spawn_watched(conn, sql, vec![s.witness(0)]);
    support::mariadb::wait_for(&format!("{sql} to park"), support::strong::PATIENCE, || {
        s.parked() == before + 1
    });
    let newest = s.topology.newest_gtid();
    // Only the witnessed replica: with quorum 1 the other one could be the quorum.
    s.start_io(0);
    let watched = ok_once_held(watched, 0, C::holds, &newest, sql).await;
    s.start_io(1);
    s.wait_semisync(2);
    watched.conn
}

/// Sessions that set each character set of results, or track no variable or every one,
/// commit, and each commit is waited for.
async fn sessions_of_any_charset_or_tracked_list_are_waited_for<C: Flavoured>() {
    let s = start::<C>(C::HIDDEN_NEEDS_PROBE);
    let sessions: Vec<String> = C::RESULT_CHARSETS
        .iter()
        .map(|c| format!("SET character_set_results = {c}"))
        .chain([
            "SET SESSION session_track_system_variables = ''".to_string(),
            "SET SESSION session_track_system_variables = '*'".to_string(),
        ])
        .collect();
    // A commit its OK does not report: the procedure switches the tracking off first.
    s.client()
        .await
        .run(
            "CREATE PROCEDURE sbtest.hidden() BEGIN \
             SET SESSION session_track_system_variables = ''; \
             INSERT INTO sbtest.t (v) VALUES (2); END",
        )
        .await;
    for setting in &sessions {
        let mut conn = s.client().await;
        conn.run(setting).await;
        // A statement that changes the session's state on the way, then the commit.
        conn.run("SET @a = 1").await;
        drop(waited_for_by_quorum(&s, conn, "INSERT INTO sbtest.t (v) VALUES (1)").await);
        let mut conn = s.client().await;
        conn.run(setting).await;
        drop(waited_for_by_quorum(&s, conn, "CALL sbtest.hidden()").await);
    }
    let status = s.proxy.durability().status();
    assert_eq!(status.released["unresolved"], 0, "{status:?}");
    assert!(
        status.released["quorum"] >= 2 * sessions.len() as u64,
        "{status:?}"
    );
}

/// Without a probe to fall back on: the commit's own report names what to wait for.
async fn a_call_committing_ten_thousand_waits_for_the_last<C: Flavoured>() {
    let s = start::<C>(false);
    let mut setup = s.client().await;
    setup
        .run(
            "CREATE PROCEDURE sbtest.many(n INT) BEGIN DECLARE i INT DEFAULT 0; \
             WHILE i < n DO INSERT INTO sbtest.t (v) VALUES (i); SET i = i + 1; END WHILE; END",
        )
        .await;
    let conn = s.client().await;
    drop(waited_for_by_quorum(&s, conn, "CALL sbtest.many(10000)").await);
    // What the replica received is all ten thousand.
    support::mariadb::wait_for(
        "the replica to apply them",
        support::strong::PATIENCE,
        || s.topology.replica_sql(0, "SELECT COUNT(*) FROM sbtest.t") == "10000",
    );
}

/// MySQL lets `SIGNAL` raise any code up to 65535, which MariaDB uses for progress reports
/// only on a connection that asked for them: strongsync asks for none, so it is an error like
/// any other.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_an_error_with_code_65535_reaches_the_client_and_the_session_goes_on() {
    let s = start::<MySqlTopology>(false);
    let mut conn = s.client().await;
    let error = conn
        .query_drop("SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 65535, MESSAGE_TEXT = 'sixty'")
        .await
        .expect_err("SIGNAL raises an error");
    assert!(
        matches!(&error, mysql_async::Error::Server(e) if e.code == 65535 && e.message == "sixty"),
        "{error}"
    );
    let one: Option<i64> =
        tokio::time::timeout(support::strong::PATIENCE, conn.query_first("SELECT 1"))
            .await
            .expect("the session answers after the error")
            .unwrap();
    assert_eq!(one, Some(1));
}

// === Invisible: what a session sees of itself is what it sees direct ===

/// One run's statements, `{t}` standing for the run's own table. Each is sent as it is, and
/// what comes back (every result set's rows) is compared between the runs.
const SCRIPT: &[&str] = &[
    "SET profiling = 1",
    "SET @a = 1",
    "SELECT ROW_COUNT()",
    "CREATE TEMPORARY TABLE tt (a INT)",
    "SELECT ROW_COUNT()",
    "INSERT INTO {t} (v) VALUES (1), (2), (3)",
    "SELECT ROW_COUNT(), LAST_INSERT_ID() > 0",
    "UPDATE {t} SET v = v + 1",
    "SET @e = 5",
    "SELECT ROW_COUNT()",
    "SELECT SQL_CALC_FOUND_ROWS v FROM {t} ORDER BY v LIMIT 2",
    "SET @c = 2",
    "SELECT FOUND_ROWS()",
    "SET @x = CAST('9x' AS UNSIGNED)",
    "SHOW WARNINGS",
    "SELECT @@warning_count",
    "USE sbtest",
    "SELECT DATABASE()",
    "SET NAMES utf8mb4",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET autocommit = 1",
    "BEGIN",
    "INSERT INTO {t} (v) VALUES (9)",
    "COMMIT",
    "SELECT ROW_COUNT()",
    "SET @m = 1; SELECT ROW_COUNT(); SELECT @m",
    "CALL sbtest.cmp_state()",
    "SELECT @p, ROW_COUNT()",
    "XA START 'cmp{t}'",
    "INSERT INTO {t} (v) VALUES (10)",
    "XA END 'cmp{t}'",
    "XA PREPARE 'cmp{t}'",
    "XA COMMIT 'cmp{t}'",
    "SELECT ROW_COUNT()",
    "LOAD DATA LOCAL INFILE '{f}' INTO TABLE {t} (v)",
    "SELECT ROW_COUNT()",
    "SHOW WARNINGS",
    "SELECT @@session.session_track_system_variables, @@session.session_track_state_change",
    "SET optimizer_trace = 'enabled=on'",
    "SELECT COUNT(*) FROM {t} WHERE v > 2",
    "SELECT QUERY FROM information_schema.OPTIMIZER_TRACE",
    "SET optimizer_trace = 'enabled=off'",
];

/// What a session sees after the [`SCRIPT`]: its own statements in `SHOW PROFILES` (their
/// texts: the durations differ) and its counters (`Questions`: every statement the primary
/// ran for it).
const AFTER: &[&str] = &[
    "SHOW PROFILES",
    "SHOW SESSION STATUS WHERE Variable_name IN ('Questions', 'Com_select', 'Com_set_option')",
];

/// Every row of every result set `sql` returns, as text.
async fn rows_of(conn: &mut mysql_async::Conn, sql: &str) -> Vec<Vec<String>> {
    let mut result = conn
        .query_iter(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut rows = Vec::new();
    while !result.is_empty() {
        let set: Vec<mysql_async::Row> = result.collect().await.unwrap();
        rows.extend(set.into_iter().map(|row| {
            row.unwrap()
                .into_iter()
                .map(|v| match v {
                    mysql_async::Value::NULL => "NULL".to_string(),
                    mysql_async::Value::Bytes(b) => String::from_utf8_lossy(&b).into_owned(),
                    other => format!("{other:?}"),
                })
                .collect()
        }));
    }
    rows
}

/// What `LOAD DATA` reads in the [`SCRIPT`]: three rows, one of them not a number (a warning).
const INFILE: &str = "1\nnot a number\n3\n";

/// Runs the [`SCRIPT`] on a connection to `url` against table `table`, with a reset and a
/// change of user on the way; what it saw, with the table's name taken out.
async fn seen(url: &str, table: &str) -> Vec<(String, Vec<Vec<String>>)> {
    let infile = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(infile.path(), INFILE).unwrap();
    let path = infile.path().to_str().unwrap().to_owned();
    let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(url).unwrap())
        .local_infile_handler(Some(mysql_async::WhiteListFsHandler::new(&[&path][..])));
    let mut conn = mysql_async::Conn::new(opts).await.unwrap();
    let mut seen = Vec::new();
    let mut run = async |conn: &mut mysql_async::Conn, steps: &[&str]| {
        for step in steps {
            let sql = step.replace("{t}", table).replace("{f}", &path);
            let rows = rows_of(conn, &sql).await;
            let rows = rows
                .into_iter()
                .map(|r: Vec<String>| match *step {
                    "SHOW PROFILES" => r.last().into_iter().cloned().collect(),
                    _ => r,
                })
                .map(|r| {
                    r.into_iter()
                        .map(|v| v.replace(table, "{t}").replace(&path, "{f}"))
                        .collect()
                })
                .collect();
            seen.push((step.to_string(), rows));
        }
    };
    run(&mut conn, SCRIPT).await;
    run(&mut conn, AFTER).await;
    assert!(conn.reset().await.unwrap(), "COM_RESET_CONNECTION");
    run(
        &mut conn,
        &["SELECT @a, ROW_COUNT()", "SET @a = 2", "SELECT ROW_COUNT()"],
    )
    .await;
    conn.change_user(Default::default()).await.unwrap();
    run(
        &mut conn,
        &[
            "SELECT @a, ROW_COUNT()",
            "SET @b = 3",
            "SELECT ROW_COUNT(), @b",
        ],
    )
    .await;
    run(
        &mut conn,
        &["SHOW SESSION STATUS WHERE Variable_name IN ('Questions', 'Com_select', 'Com_set_option')"],
    )
    .await;
    conn.disconnect().await.unwrap();
    seen
}

/// The same statements direct and through strongsync (set up from the primary's defaults)
/// give the client the same answers, row for row, and the primary runs the same statements
/// for each: strongsync runs none of its own.
async fn a_session_sees_through_strongsync_what_it_sees_direct<C: Flavoured>() {
    let s = start::<C>(true);
    wait_for_defaults(&s);
    let mut setup =
        mysql_async::Conn::new(mysql_async::Opts::from_url(&s.topology.direct_url()).unwrap())
            .await
            .unwrap();
    for sql in [
        "CREATE TABLE sbtest.cmp_direct (id INT AUTO_INCREMENT PRIMARY KEY, v INT)",
        "CREATE TABLE sbtest.cmp_through (id INT AUTO_INCREMENT PRIMARY KEY, v INT)",
        "CREATE PROCEDURE sbtest.cmp_state() BEGIN SET @p = 7; \
         CREATE TEMPORARY TABLE IF NOT EXISTS ptt (a INT); END",
    ] {
        setup.run(sql).await;
    }
    setup.disconnect().await.unwrap();
    let direct = seen(&s.topology.direct_url(), "cmp_direct").await;
    let through = seen(&s.proxy.url(APP_USER, APP_PASSWORD), "cmp_through").await;
    for ((step, d), (_, t)) in direct.iter().zip(&through) {
        assert_eq!(d, t, "{step}: direct {d:?}, through strongsync {t:?}");
    }
    assert_eq!(direct.len(), through.len());
    let scrape = support::admin::metrics(s.proxy.admin_addr());
    // Only the CALL (stored code that changed the session's state) leaves a session bounded.
    assert_eq!(scrape.get("strongsync_sessions_untrusted_total"), 1.0);
    for reason in ["setup", "check", "restore", "session_quorum"] {
        assert_eq!(
            scrape.get(&format!(
                r#"strongsync_session_statements_total{{reason="{reason}"}}"#
            )),
            0.0,
            "{reason}"
        );
    }
}

/// Waits until strongsync has looked at the primary's session-tracking defaults and found
/// them as it needs (the servers of the tests are configured so).
fn wait_for_defaults<C: Flavoured>(s: &Strong<C>) {
    support::mariadb::wait_for(
        "strongsync to find the primary's session-tracking defaults",
        support::strong::PATIENCE,
        || support::admin::status(s.proxy.admin_addr()).session_tracking == "configured",
    );
}

/// Set up from the primary's defaults, each step of an XA transaction and each commit a
/// session makes after changing its state plainly is waited for, from its OK alone.
async fn set_up_from_the_defaults_each_commit_waits<C: Flavoured>() {
    let s = start::<C>(true);
    wait_for_defaults(&s);
    let mut conn = s.client().await;
    for sql in [
        "XA START 'x'",
        "INSERT INTO sbtest.t (v) VALUES (1)",
        "XA END 'x'",
    ] {
        conn.run(sql).await;
    }
    let conn = waited_for_by_quorum(&s, conn, "XA PREPARE 'x'").await;
    let mut conn = waited_for_by_quorum(&s, conn, "XA COMMIT 'x'").await;
    for sql in ["SET NAMES utf8mb4", "SET @a = 1", "USE sbtest", "BEGIN"] {
        conn.run(sql).await;
    }
    conn.run("INSERT INTO sbtest.t (v) VALUES (2)").await;
    let conn = waited_for_by_quorum(&s, conn, "COMMIT").await;
    drop(waited_for_by_quorum(&s, conn, "INSERT INTO sbtest.t (v) VALUES (3)").await);
    let scrape = support::admin::metrics(s.proxy.admin_addr());
    assert_eq!(scrape.get("strongsync_sessions_untrusted_total"), 0.0);
    assert_eq!(s.proxy.durability().status().released["unresolved"], 0);
}

// === Invisible to the query cache (MariaDB) ===

/// Cacheable reads around the statements after which strongsync used to ask in the session:
/// each read is stored, found, or passed over by the query cache as it is direct.
const CACHED_SCRIPT: &[&str] = &[
    "SELECT COUNT(*) FROM sbtest.{t}",
    "SELECT COUNT(*) FROM sbtest.{t}",
    "SET @a = 1",
    "SELECT COUNT(*) FROM sbtest.{t}",
    "INSERT INTO sbtest.{t} (v) VALUES (1)",
    "SELECT COUNT(*) FROM sbtest.{t}",
    "CREATE TEMPORARY TABLE tt (a INT)",
    "SELECT COUNT(*) FROM sbtest.{t}",
    "SELECT COUNT(*) FROM tt",
    "USE sbtest",
    "SELECT COUNT(*) FROM {t}",
    "SELECT @@last_gtid IS NOT NULL",
];

/// The query cache's global counters, by name.
fn qcache(primary: &support::mariadb::MariaDb) -> std::collections::BTreeMap<String, i64> {
    primary
        .sql("SHOW GLOBAL STATUS WHERE Variable_name IN ('Qcache_hits', 'Qcache_inserts', 'Qcache_not_cached', 'Qcache_queries_in_cache')")
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(name, value)| (name.to_string(), value.parse().unwrap()))
        .collect()
}

/// What running the [`CACHED_SCRIPT`] on `url` against `table` did to the query cache's
/// counters.
async fn cache_counted(
    primary: &support::mariadb::MariaDb,
    url: &str,
    table: &str,
) -> std::collections::BTreeMap<String, i64> {
    let before = qcache(primary);
    let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(url).unwrap())
        .await
        .unwrap();
    for step in CACHED_SCRIPT {
        conn.run(step.replace("{t}", table)).await;
    }
    conn.disconnect().await.unwrap();
    let after = qcache(primary);
    after
        .iter()
        .map(|(name, n)| (name.clone(), n - before[name]))
        .collect()
}

/// The query cache counts the same for a session through strongsync as direct: strongsync
/// runs no statement in the session, and, set up from the primary's defaults, none of its
/// own elsewhere while the session runs (the primary's watch is told to look only at start).
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_the_query_cache_counts_through_strongsync_what_it_counts_direct() {
    let s = Strong::<Topology>::launch(2, None, |config, topology| {
        config.durability = blocking(1);
        config.probe = topology.probe_account();
        config.failover.check_interval = Duration::from_secs(3600);
    });
    wait_for_defaults(&s);
    let primary = &s.topology.primary;
    primary.sql(
        "SET GLOBAL query_cache_type = ON; \
         CREATE TABLE sbtest.qc_direct (id INT AUTO_INCREMENT PRIMARY KEY, v INT); \
         CREATE TABLE sbtest.qc_through (id INT AUTO_INCREMENT PRIMARY KEY, v INT)",
    );
    let direct = cache_counted(primary, &s.topology.direct_url(), "qc_direct").await;
    let through = cache_counted(primary, &s.proxy.url(APP_USER, APP_PASSWORD), "qc_through").await;
    assert!(
        direct["Qcache_hits"] > 0 && direct["Qcache_inserts"] > 0,
        "the query cache is in use: {direct:?}"
    );
    assert_eq!(direct, through, "direct, then through strongsync");
}

each_server!(
    sessions_of_any_charset_or_tracked_list_are_waited_for,
    a_call_committing_ten_thousand_waits_for_the_last,
    a_session_sees_through_strongsync_what_it_sees_direct,
    set_up_from_the_defaults_each_commit_waits,
);
