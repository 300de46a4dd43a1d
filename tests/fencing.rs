//! The fence against real servers: once fenced, no replica receives anything more of the old
//! primary however much it commits, a parked commit gets the outcome error naming its GTID,
//! statements are refused, and the fence survives a restart of strongsync (the state file).

use mysql_async::prelude::*;
use support::admin;
use support::mariadb::{wait_for, MariaDb};
use support::sql::Statements;
use support::strong::{answered, newest_gtid, Strong, PATIENCE};

const TOKEN: &str = "fence-test-token-0123456789";

/// A proxy with quorum 2 that blocks, an admin token and a state file.
fn fenceable(dir: &tempfile::TempDir) -> Strong {
    Strong::start_with(2, |config, _| {
        admin::with_token(config, dir.path(), TOKEN, 2);
        config.failover.state_file = Some(support::admin::state_file(dir.path(), &config.primary));
    })
}

fn mysql_code(error: &mysql_async::Error) -> Option<u16> {
    match error {
        mysql_async::Error::Server(e) => Some(e.code),
        _ => None,
    }
}

/// The replica's IO thread was turned away by the fence (it tried to reconnect and got the
/// fence's error), so it is not receiving.
fn turned_away(replica: &MariaDb) -> bool {
    let status = replica.slave_status();
    status
        .get("Last_IO_Error")
        .is_some_and(|e| e.contains("primary fenced"))
        && status.get("Slave_IO_Running").map(String::as_str) != Some("Yes")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fence_stops_every_replica_fails_parked_commits_and_refuses_statements() {
    let dir = tempfile::tempdir().unwrap();
    let s = fenceable(&dir);
    // With one replica's I/O stopped, quorum 2 cannot be met: the commit parks.
    s.stop_io(1);
    s.wait_semisync(1);
    let parked = s
        .park("INSERT INTO sbtest.t (v) VALUES (1)", Vec::new())
        .await;
    let gtid = newest_gtid(&s.topology.primary, 0);
    let mut idle = s.client().await;

    let fenced = admin::post(
        s.proxy.admin_addr(),
        "/fence",
        Some(TOKEN),
        r#"{"reason":"test"}"#,
    );
    assert_eq!(fenced.status, 200, "{}", fenced.body);
    let report: serde_json::Value = serde_json::from_str(&fenced.body).unwrap();
    assert_eq!(report["newly"], true, "{report}");
    let tail = report["unacknowledged_tail"].as_str().unwrap();
    assert!(
        tail.contains(&gtid),
        "the tail {tail} lists the parked {gtid}"
    );

    // The parked commit's client learns that its outcome is unknown, and which GTID it was.
    let answer = answered(parked).await;
    let error = answer
        .result
        .expect_err("a fenced commit is not acknowledged");
    assert_eq!(mysql_code(&error), Some(1180), "{error}");
    let text = error.to_string();
    assert!(text.contains(&gtid) && text.contains("fenced"), "{text}");
    let outcome = admin::get(s.proxy.admin_addr(), &format!("/outcome?gtid={gtid}"));
    assert!(
        outcome.body.contains("\"unacknowledged_tail\""),
        "{}",
        outcome.body
    );

    // Statements on a session that was idle, and new sessions, are refused.
    let refused = idle.query_drop("SELECT 1").await.expect_err("refused");
    assert_eq!(mysql_code(&refused), Some(1290), "{refused}");
    let new = mysql_async::Conn::new(
        mysql_async::Opts::from_url(
            &s.proxy
                .url(support::mariadb::APP_USER, support::mariadb::APP_PASSWORD),
        )
        .unwrap(),
    )
    .await
    .expect_err("a new session is turned away");
    assert_eq!(mysql_code(&new), Some(1290), "{new}");

    // The old primary goes on committing directly; neither replica receives any of it. Both
    // have tried to reconnect (the stopped one restarted now) and were turned away.
    let received: Vec<String> = (0..2).map(|i| s.witness(i).received()).collect();
    s.start_io(1);
    for _ in 0..20 {
        s.topology
            .primary
            .sql("INSERT INTO sbtest.t (v) VALUES (2)");
    }
    for (i, replica) in s.topology.replicas.iter().enumerate() {
        wait_for(&format!("replica {i} to be turned away"), PATIENCE, || {
            turned_away(replica)
        });
    }
    let after: Vec<String> = (0..2).map(|i| s.witness(i).received()).collect();
    assert_eq!(
        after, received,
        "the replicas received nothing after the fence"
    );
    let primary_now = newest_gtid(&s.topology.primary, 0);
    assert_ne!(primary_now, gtid, "the old primary did commit more");

    // Fencing again changes nothing; /status and the metrics show it.
    let again = admin::post(s.proxy.admin_addr(), "/fence", Some(TOKEN), "");
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.body.contains("\"newly\": false"), "{}", again.body);
    let status = admin::status(s.proxy.admin_addr());
    assert!(status.fenced);
    assert!(status.unacknowledged_tail.contains(&gtid));
    assert_eq!(s.metrics().get("strongsync_fenced"), 1.0);
    assert_eq!(
        s.metrics()
            .get("strongsync_commits_released_total{outcome=\"fenced\"}"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_calls_without_the_token_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = fenceable(&dir);
    let addr = s.proxy.admin_addr();
    let cases = [
        (None, "", 401),
        (Some("wrong-token-0123456789abc"), "", 403),
        (Some(TOKEN), "{not json", 400),
        (Some(TOKEN), r#"{"reason": "x", "force": true}"#, 400),
    ];
    for (token, body, want) in cases {
        let answer = admin::post(addr, "/fence", token, body);
        assert_eq!(answer.status, want, "{token:?} {body:?}: {}", answer.body);
        assert!(answer.body.starts_with("refused"), "{}", answer.body);
    }
    let status = admin::status(addr);
    assert!(!status.fenced, "{status:#?}");
    // Commits still wait for and get their quorum.
    let mut client = s.client().await;
    client.run("INSERT INTO sbtest.t (v) VALUES (3)").await;
    let scrape = s.metrics();
    for why in ["missing_token", "wrong_token", "malformed"] {
        assert!(
            scrape.get(&format!("strongsync_admin_refused_total{{why=\"{why}\"}}")) >= 1.0,
            "{why}"
        );
    }
}

/// The binary in front of a primary with two replicas, with a state file and a token, on
/// fixed ports so that a restart finds the replicas pointed at it.
struct Binary {
    topology: support::topology::Topology,
    args: Vec<String>,
    listen: std::net::SocketAddr,
    admin: std::net::SocketAddr,
    state: std::path::PathBuf,
    token: std::path::PathBuf,
    proxy: Option<support::proxy::ProxyProcess>,
}

impl Binary {
    fn start(dir: &tempfile::TempDir) -> Binary {
        use support::proxy::free_port;
        let topology = support::topology::Topology::start(2);
        topology
            .primary
            .sql("CREATE TABLE sbtest.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)");
        let listen = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        let admin = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        let token = support::admin::token_file(dir.path(), TOKEN);
        let state = support::admin::state_file(dir.path(), &topology.primary.addr());
        let args = vec![
            "--listen".to_owned(),
            listen.to_string(),
            "--admin-listen".to_owned(),
            admin.to_string(),
            "--primary".to_owned(),
            topology.primary.addr(),
            "--durability-quorum".to_owned(),
            "1".to_owned(),
            "--failover-state-file".to_owned(),
            state.display().to_string(),
            "--failover-admin-token-file".to_owned(),
            token.display().to_string(),
            // The follow check reads a candidate's channels (SLAVE MONITOR).
            "--probe-user".to_owned(),
            support::mariadb::REPL_USER.to_owned(),
            "--probe-password".to_owned(),
            support::mariadb::REPL_PASSWORD.to_owned(),
        ];
        let mut binary = Binary {
            topology,
            args,
            listen,
            admin,
            state,
            token,
            proxy: None,
        };
        binary.run();
        for i in 0..2 {
            binary.topology.replicas[i].set_semi_sync_replica(true);
            binary
                .topology
                .point_replica_at(i, "127.0.0.1", listen.port());
            binary.topology.wait_replica_running(i);
        }
        // Running is not yet admitted: that comes with the dump's first event.
        wait_for("both replicas admitted", PATIENCE, || {
            let replicas = admin::status(admin).replicas;
            replicas.iter().filter(|r| r.connected).count() == 2
        });
        binary
    }

    fn run(&mut self) {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.proxy = Some(support::proxy::ProxyProcess::start_as_given(
            &args,
            &[],
            self.listen,
        ));
        wait_for("the admin port", PATIENCE, || {
            std::net::TcpStream::connect(self.admin).is_ok()
        });
    }

    fn kill_and_restart(&mut self) {
        let mut proxy = self.proxy.take().expect("running");
        proxy.stop_with(nix::sys::signal::Signal::SIGKILL);
        self.run();
    }

    fn cli(&self, command: &[&str]) -> support::cli::Output {
        let admin = self.admin.to_string();
        let token = self.token.display().to_string();
        let mut args = command.to_vec();
        args.extend([
            "--admin-listen",
            &admin,
            "--failover-admin-token-file",
            &token,
        ]);
        support::proxy::run_strongsync(&args)
    }

    async fn client(&self) -> mysql_async::Result<mysql_async::Conn> {
        let url = format!(
            "mysql://{}:{}@{}/sbtest?prefer_socket=false",
            support::mariadb::APP_USER,
            support::mariadb::APP_PASSWORD,
            self.listen
        );
        mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap()).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fence_and_the_watermark_survive_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Binary::start(&dir);
    let mut client = b.client().await.unwrap();
    for v in 0..10 {
        client.run(format!("INSERT INTO t (v) VALUES ({v})")).await;
    }
    drop(client);
    let watermark = admin::status(b.admin).watermark_gtid_position;
    assert_eq!(watermark, newest_gtid(&b.topology.primary, 0));
    // The file is written behind (failover.state_interval): observe it, then kill. At
    // quorum 1 the watermark can be in it before the slower replica's ACK of the last commit
    // is, and both replicas must be there as holding it to be the candidates below.
    wait_for(
        "the state file to hold the watermark and both replicas holding it",
        PATIENCE,
        || {
            let Ok(text) = std::fs::read_to_string(&b.state) else {
                return false;
            };
            let state: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let replicas = state["replicas"].as_array().cloned().unwrap_or_default();
            // The state file keeps its field names from before the glossary.
            state["acknowledged"] == watermark.as_str()
                && replicas.len() == 2
                && replicas.iter().all(|r| r["held"] == watermark.as_str())
        },
    );
    b.kill_and_restart();
    let status = admin::status_json(b.admin);
    assert_eq!(status["watermark_gtid_position"], watermark.as_str());
    // Its name before the glossary, kept for one release.
    assert_eq!(status["acknowledged_gtid_position"], watermark.as_str());
    assert_eq!(status["fenced"], false);

    // The real binary refuses every call that changes anything without the right token, or
    // with a malformed body, and changes nothing.
    let follow_body = format!(r#"{{"primary": "{}"}}"#, b.topology.replicas[0].addr());
    let cases: [(&str, Option<&str>, &str, u16); 9] = [
        ("/fence", Some("not-the-token-0123456789"), "", 403),
        ("/fence", None, "", 401),
        ("/follow", None, &follow_body, 401),
        (
            "/follow",
            Some("not-the-token-0123456789"),
            &follow_body,
            403,
        ),
        ("/follow", Some(TOKEN), "{\"primary\": 7}", 400),
        ("/follow", Some(TOKEN), "{\"primary\": \"\"}", 400),
        ("/promote", None, "{}", 401),
        ("/promote", Some("not-the-token-0123456789"), "{}", 403),
        ("/promote", Some(TOKEN), "{\"force\": true}", 400),
    ];
    for (path, token, body, want) in cases {
        let refused = admin::post(b.admin, path, token, body);
        assert_eq!(
            refused.status, want,
            "{path} {token:?} {body}: {}",
            refused.body
        );
        assert!(refused.body.starts_with("refused"), "{}", refused.body);
    }
    assert_eq!(admin::epoch_and_fence(b.admin), (1, false));
    let scrape = admin::metrics(b.admin);
    assert_eq!(
        scrape.get("strongsync_admin_refused_total{why=\"missing_token\"}"),
        3.0
    );
    assert_eq!(
        scrape.get("strongsync_admin_refused_total{why=\"wrong_token\"}"),
        3.0
    );
    assert_eq!(
        scrape.get("strongsync_admin_refused_total{why=\"malformed\"}"),
        3.0
    );
    let no_token =
        support::proxy::run_strongsync(&["fence", "--admin-listen", &b.admin.to_string()]);
    assert!(!no_token.status.success(), "{}", no_token.stdout);
    assert!(no_token.stderr.contains("401"), "{}", no_token.stderr);
    assert!(!admin::status(b.admin).fenced);

    // Fenced with the operator's command, then killed: it comes back fenced.
    let fenced = b.cli(&["fence", "--reason", "test"]);
    assert!(fenced.status.success(), "{}", fenced.stderr);
    assert!(
        fenced.stdout.starts_with("fenced the primary of epoch 1"),
        "{}",
        fenced.stdout
    );
    b.kill_and_restart();
    let status = admin::status(b.admin);
    assert!(status.fenced, "{status:#?}");
    assert_eq!(status.watermark_gtid_position, watermark);
    // No replica can reconnect while fenced: the candidates are the ones the file kept.
    assert_eq!(status.failover_candidates, [2, 3], "{status:#?}");
    let error = b.client().await.expect_err("turned away while fenced");
    assert_eq!(mysql_code(&error), Some(1290), "{error}");
    let scrape = admin::metrics(b.admin);
    let (sum, count) = (
        scrape.get("strongsync_state_file_write_seconds_sum"),
        scrape.get("strongsync_state_file_write_seconds_count"),
    );
    assert!(count >= 1.0, "the restarted proxy wrote its state file");
    eprintln!(
        "state file: {count} writes, {:.2} ms each on average",
        sum / count * 1e3
    );
    let shown = b.cli(&["status"]);
    assert!(
        shown.stdout.starts_with("state FENCED   epoch 1"),
        "{}",
        shown.stdout
    );
    // The follow check still knows the watermark: a server without it is refused.
    let empty = MariaDb::start(support::mariadb::MariaDbOptions {
        server_id: 9,
        ..Default::default()
    });
    let refused = b.cli(&["follow", &empty.addr()]);
    assert!(!refused.status.success(), "{}", refused.stdout);
    assert!(
        refused.stderr.contains("409") && refused.stderr.contains(&watermark),
        "{}",
        refused.stderr
    );
    assert_eq!(admin::status(b.admin).epoch, 1);
    let outcome = b.cli(&["outcome", &watermark]);
    assert!(
        outcome
            .stdout
            .contains(": acknowledged: held by the quorum"),
        "{}",
        outcome.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_fenced_reads_sessions_read_on_and_what_they_commit_joins_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let s = Strong::start_with(2, |config, _| {
        admin::with_token(config, dir.path(), TOKEN, 1);
        config.failover.fenced_reads = true;
    });
    let mut before = s.client().await;
    before.run("INSERT INTO sbtest.t (v) VALUES (1)").await;
    let fenced = admin::post(s.proxy.admin_addr(), "/fence", Some(TOKEN), "");
    assert_eq!(fenced.status, 200, "{}", fenced.body);
    // Reads go on, on the old session and on a new one.
    let count: Option<u64> = before
        .query_first("SELECT COUNT(*) FROM sbtest.t")
        .await
        .unwrap();
    assert_eq!(count, Some(1));
    let mut after = s.client().await;
    // A write commits on the fenced primary, and is not acknowledged.
    let error = after
        .query_drop("INSERT INTO sbtest.t (v) VALUES (2)")
        .await
        .expect_err("a commit on a fenced primary is not acknowledged");
    assert_eq!(mysql_code(&error), Some(1180), "{error}");
    let gtid = newest_gtid(&s.topology.primary, 0);
    assert!(error.to_string().contains(&gtid), "{error}");
    let status = admin::status(s.proxy.admin_addr());
    assert!(status.unacknowledged_tail.contains(&gtid), "{status:#?}");
}
