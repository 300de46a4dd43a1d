//! For every kind of statement that commits (and some that do not), the session reports
//! exactly the GTIDs the primary wrote — checked against the primary's own binlog position —
//! through a client library (mysql_async, which always negotiates CLIENT_DEPRECATE_EOF), a raw
//! protocol client with and without CLIENT_DEPRECATE_EOF, and the `mariadb` CLI (legacy EOF).

use std::collections::BTreeMap;
use std::process::Command;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts, OptsBuilder, WhiteListFsHandler};
use mysql_common::constants::CapabilityFlags;
use support::clientlib::retry_ed25519;
use support::mariadb::{MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER, ED_PASSWORD, ED_USER};
use support::proxy::TestProxy;
use support::rawclient::RawClient;
use support::sql::Statements;

/// What a statement must report.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Every GTID the primary wrote for it, in order (at least one).
    Written,
    /// Only the last GTID written (a procedure that commits twice reports the last).
    LastWritten,
    /// Nothing (and the primary wrote nothing).
    Nothing,
}

struct Fixture {
    primary: MariaDb,
    proxy: TestProxy,
}

impl Fixture {
    fn start() -> Fixture {
        let primary = MariaDb::start(MariaDbOptions::default());
        // Directly on the primary, one statement per query (the CLI would split the bodies).
        let addr = primary.addr().parse().unwrap();
        let mut setup = RawClient::connect(addr, APP_USER, APP_PASSWORD, CapabilityFlags::empty());
        for sql in SCHEMA {
            assert_eq!(setup.query(sql).error, None, "{sql}");
        }
        let proxy = TestProxy::start(&primary);
        Fixture { primary, proxy }
    }

    /// A client of the proxy, speaking the compressed protocol if `compressed`.
    async fn connect(&self, compressed: bool) -> Conn {
        let opts = Opts::from_url(&self.proxy.url(APP_USER, APP_PASSWORD)).unwrap();
        let opts = OptsBuilder::from_opts(opts)
            .local_infile_handler(Some(WhiteListFsHandler::new(&[infile_path()][..])))
            .compression(compressed.then(mysql_async::Compression::fast));
        Conn::new(opts).await.expect("connect through the proxy")
    }

    /// Like [`check`](Self::check), through the raw client.
    fn check_raw(&self, client: &mut RawClient, sql: &str, expect: Expect) {
        let before = self.primary.gtid_binlog_pos();
        let reported_before = self.proxy.recorder.gtids_of(client.connection_id).len();
        let reply = client.query(sql);
        assert_eq!(reply.error, None, "{sql}");
        self.expect(client.connection_id, sql, &before, reported_before, expect);
    }

    /// Runs `sql` on `conn` (all result sets read) and checks what the session reported
    /// against what the primary wrote meanwhile.
    async fn check(&self, conn: &mut Conn, sql: &str, expect: Expect) {
        let before = self.primary.gtid_binlog_pos();
        let reported_before = self.proxy.recorder.gtids_of(conn.id()).len();
        let mut result = conn
            .query_iter(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        while !result.is_empty() {
            result.collect::<mysql_async::Row>().await.unwrap();
        }
        drop(result);
        self.expect(conn.id(), sql, &before, reported_before, expect);
    }

    fn expect(
        &self,
        conn_id: u32,
        what: &str,
        before: &str,
        reported_before: usize,
        expect: Expect,
    ) {
        let written = written_between(before, &self.primary.gtid_binlog_pos());
        let reported = self.proxy.recorder.gtids_of(conn_id)[reported_before..].to_vec();
        assert!(
            !self.proxy.recorder.any_unresolved(conn_id),
            "{what}: unresolved commit"
        );
        let want = match expect {
            Expect::Written => {
                assert!(!written.is_empty(), "{what}: the primary wrote nothing");
                written
            }
            Expect::LastWritten => {
                assert!(
                    written.len() > 1,
                    "{what}: expected several commits, got {written:?}"
                );
                written[written.len() - 1..].to_vec()
            }
            Expect::Nothing => {
                assert!(written.is_empty(), "{what}: the primary wrote {written:?}");
                Vec::new()
            }
        };
        assert_eq!(reported, want, "{what}: reported vs written");
    }
}

/// The GTIDs a single-server primary wrote between two `@@gtid_binlog_pos` readings.
fn written_between(before: &str, after: &str) -> Vec<String> {
    let parse = |pos: &str| -> BTreeMap<u32, (u32, u64)> {
        pos.split(',')
            .filter(|g| !g.is_empty())
            .map(|g| {
                let p: Vec<&str> = g.trim().split('-').collect();
                (
                    p[0].parse().unwrap(),
                    (p[1].parse().unwrap(), p[2].parse().unwrap()),
                )
            })
            .collect()
    };
    let (before, after) = (parse(before), parse(after));
    after
        .iter()
        .flat_map(|(domain, (server, seq))| {
            let from = before.get(domain).map_or(1, |(_, s)| s + 1);
            (from..=*seq).map(move |n| format!("{domain}-{server}-{n}"))
        })
        .collect()
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB",
    "CREATE TABLE m (id INT PRIMARY KEY) ENGINE=MyISAM",
    "CREATE SEQUENCE s NOCACHE",
    "CREATE PROCEDURE one_commit() INSERT INTO t (v) VALUES ('proc')",
    "CREATE PROCEDURE two_commits() BEGIN
       INSERT INTO t (v) VALUES ('proc1'); INSERT INTO t (v) VALUES ('proc2');
     END",
    "CREATE PROCEDURE write_then_read() BEGIN
       INSERT INTO t (v) VALUES ('proc3'); SELECT COUNT(*) FROM t;
     END",
    "CREATE FUNCTION f() RETURNS INT DETERMINISTIC BEGIN INSERT INTO t (v) VALUES ('func'); RETURN 1; END",
];

/// Statements and what each must report, run in this order on one connection.
const CASES: &[(&str, Expect)] = &[
    ("INSERT INTO t (v) VALUES ('auto')", Expect::Written),
    (
        "UPDATE t SET v = 'upd' ORDER BY id DESC LIMIT 1",
        Expect::Written,
    ),
    ("DELETE FROM t ORDER BY id DESC LIMIT 1", Expect::Written),
    ("REPLACE INTO m VALUES (1), (2)", Expect::Written), // MyISAM: Query COMMIT group
    ("BEGIN", Expect::Nothing),
    ("INSERT INTO t (v) VALUES ('trx')", Expect::Nothing),
    ("COMMIT", Expect::Written),
    ("CREATE TABLE ddl_probe (id INT)", Expect::Written),
    ("DROP TABLE ddl_probe", Expect::Written),
    ("XA START 'x'", Expect::Nothing),
    ("INSERT INTO t (v) VALUES ('xa')", Expect::Nothing),
    ("XA END 'x'", Expect::Nothing),
    ("XA PREPARE 'x'", Expect::Written),
    ("XA COMMIT 'x'", Expect::Written),
    ("XA START 'y'", Expect::Nothing),
    ("INSERT INTO t (v) VALUES ('xa1p')", Expect::Nothing),
    ("XA END 'y'", Expect::Nothing),
    ("XA COMMIT 'y' ONE PHASE", Expect::Written),
    ("CALL one_commit()", Expect::Written),
    ("CALL two_commits()", Expect::LastWritten),
    ("CALL write_then_read()", Expect::Written),
    (
        "INSERT INTO t (v) VALUES ('ms'); COMMIT; SELECT COUNT(*) FROM t",
        Expect::Written,
    ),
    (
        "INSERT INTO t (v) VALUES ('ret') RETURNING id",
        Expect::Written,
    ),
    ("SELECT NEXT VALUE FOR s", Expect::Written),
    ("SELECT f()", Expect::Written),
    ("SELECT * FROM t", Expect::Nothing),
    ("DO 1", Expect::Nothing),
    ("BEGIN; SELECT COUNT(*) FROM t; COMMIT", Expect::Nothing),
    ("BEGIN", Expect::Nothing),
    ("INSERT INTO t (v) VALUES ('rolled back')", Expect::Nothing),
    ("ROLLBACK", Expect::Nothing),
    // Transactions inside one batch: only the COMMIT's OK reports.
    ("SET autocommit = 0", Expect::Nothing),
    (
        "INSERT INTO t (v) VALUES ('ac0'); COMMIT; SELECT 1",
        Expect::Written,
    ),
    ("SET autocommit = 1", Expect::Nothing),
    // The client switches tracking off in the same batch as a commit: the proxy
    // notices, reads @@last_gtid, and tracks again for the next statement.
    (
        "SET SESSION session_track_system_variables = ''; INSERT INTO t (v) VALUES ('untracked')",
        Expect::Written,
    ),
    (
        "INSERT INTO t (v) VALUES ('tracked again')",
        Expect::Written,
    ),
];

fn infile_path() -> String {
    std::env::temp_dir()
        .join(format!("strongsync-gtid-infile-{}.csv", std::process::id()))
        .display()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_commit_reports_exactly_the_gtids_the_primary_wrote() {
    each_commit_reports_what_the_primary_wrote(false).await;
}

/// The same, every packet of the session in compressed frames (`CLIENT_COMPRESS`).
#[tokio::test(flavor = "multi_thread")]
async fn compressed_sessions_report_exactly_the_gtids_the_primary_wrote() {
    each_commit_reports_what_the_primary_wrote(true).await;
}

async fn each_commit_reports_what_the_primary_wrote(compressed: bool) {
    let fx = Fixture::start();
    std::fs::write(infile_path(), "a\nb\nc\n").unwrap();
    {
        let mut conn = fx.connect(compressed).await;
        let logins = support::admin::metrics(fx.proxy.admin_addr())
            .get("strongsync_compressed_logins_total");
        assert_eq!(
            logins,
            f64::from(u8::from(compressed)),
            "compressed as asked"
        );
        for &(sql, expect) in CASES {
            fx.check(&mut conn, sql, expect).await;
        }

        // Binary protocol and LOAD DATA LOCAL INFILE.
        let before = fx.primary.gtid_binlog_pos();
        let n = fx.proxy.recorder.gtids_of(conn.id()).len();
        conn.exec_drop("INSERT INTO t (v) VALUES (?)", ("prepared",))
            .await
            .unwrap();
        fx.expect(conn.id(), "prepared INSERT", &before, n, Expect::Written);
        let sql = format!(
            "LOAD DATA LOCAL INFILE '{}' INTO TABLE t (v)",
            infile_path()
        );
        fx.check(&mut conn, &sql, Expect::Written).await;
        // A commit reported before the file request of the same batch.
        let sql = format!(
            "INSERT INTO t (v) VALUES ('before'); LOAD DATA LOCAL INFILE '{}' INTO TABLE t (v)",
            infile_path()
        );
        fx.check(&mut conn, &sql, Expect::Written).await;

        // What the session last reported is what the primary says it committed last.
        let last: Option<String> = conn.query_first("SELECT @@last_gtid").await.unwrap();
        assert_eq!(fx.proxy.recorder.gtids_of(conn.id()).last(), last.as_ref());

        // Tracking survives COM_RESET_CONNECTION and COM_CHANGE_USER.
        assert!(conn.reset().await.unwrap());
        fx.check(
            &mut conn,
            "INSERT INTO t (v) VALUES ('after reset')",
            Expect::Written,
        )
        .await;
        let to_ed = mysql_async::ChangeUserOpts::default()
            .with_user(Some(ED_USER.into()))
            .with_pass(Some(ED_PASSWORD.into()));
        // A refused attempt leaves the connection unusable: each retry starts afresh.
        conn = retry_ed25519(|| async {
            let mut conn = fx.connect(compressed).await;
            conn.change_user(to_ed.clone()).await.map(|()| conn)
        })
        .await
        .unwrap();
        let user: String = conn.one("SELECT CURRENT_USER()").await;
        assert_eq!(user, "eduser@%");
        fx.check(
            &mut conn,
            "INSERT INTO t (v) VALUES ('after change user')",
            Expect::Written,
        )
        .await;
        conn.disconnect().await.unwrap();
    }
}

#[test]
fn legacy_eof_and_ok_terminators_report_the_same() {
    let fx = Fixture::start();
    for deprecate_eof in [false, true] {
        let extra = if deprecate_eof {
            CapabilityFlags::CLIENT_SESSION_TRACK | CapabilityFlags::CLIENT_DEPRECATE_EOF
        } else {
            CapabilityFlags::empty()
        };
        let mut client = RawClient::connect(fx.proxy.addr(), APP_USER, APP_PASSWORD, extra);
        for &(sql, expect) in CASES {
            fx.check_raw(&mut client, sql, expect);
        }
    }
}

#[test]
fn the_cli_with_legacy_eof_reports_a_returning_insert() {
    let fx = Fixture::start();
    let before = fx.primary.gtid_binlog_pos();
    let out = Command::new("mariadb")
        .args(["--no-defaults", "-h127.0.0.1", "-N", "-B"])
        .arg(format!("-P{}", fx.proxy.port()))
        .arg(format!("-u{APP_USER}"))
        .arg(format!("-p{APP_PASSWORD}"))
        .args(["sbtest", "-e"])
        .arg("SELECT CONNECTION_ID(); INSERT INTO t (v) VALUES ('cli') RETURNING id; SELECT NEXT VALUE FOR s;")
        .env_remove("MYSQL_PWD")
        .env_remove("MYSQL_HOST")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let conn_id: u32 = stdout.lines().next().unwrap().trim().parse().unwrap();
    let written = written_between(&before, &fx.primary.gtid_binlog_pos());
    assert_eq!(written.len(), 2, "{written:?}");
    assert_eq!(fx.proxy.recorder.gtids_of(conn_id), written);
}
