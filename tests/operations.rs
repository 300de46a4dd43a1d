//! Running the `strongsync` binary as an operator does, against a real primary and two
//! replicas replicating through it: the admin port (metrics under a write load and through a
//! degraded spell, readiness, status, bad requests), the config file and its errors, SIGHUP
//! reloads, SIGTERM with parked commits.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use nix::sys::signal::Signal;
use strongsync::status::DomainName;
use support::admin::{self, Scrape};
use support::cli::{mariadb, Output};
use support::deploy::{deploy_path, queried_metrics};
use support::mariadb::{wait_for, APP_PASSWORD, APP_USER, TEST_DB};
use support::proxy::{free_port, run_strongsync, ProxyProcess};
use support::sql::Statements;
use support::sysbench::Sysbench;
use support::topology::Topology;

const PATIENCE: Duration = Duration::from_secs(60);
/// The binary's exit code for an unusable configuration.
const EXIT_CONFIG: i32 = 64;

/// A primary and replicas, and the binary in front of the primary.
struct Sidecar {
    topology: Topology,
    proxy: ProxyProcess,
    listen: SocketAddr,
    admin: SocketAddr,
}

impl Sidecar {
    /// Starts `replicas` replicas (still replicating from the primary directly) and the binary
    /// with `args` after `--listen` and `--primary`.
    fn start(replicas: usize, args: &[&str]) -> Sidecar {
        let topology = Topology::start(replicas);
        topology
            .primary
            .sql("CREATE TABLE sbtest.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)");
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let (listen_text, primary) = (listen.to_string(), topology.primary.addr());
        let mut all = vec!["--listen", &listen_text, "--primary", &primary];
        all.extend_from_slice(args);
        let proxy = ProxyProcess::start(&all, &[], listen);
        let admin = proxy.admin_addr().expect("a free admin port");
        Sidecar {
            topology,
            proxy,
            listen,
            admin,
        }
    }

    /// Points replica `i` at the proxy with semisync on, and waits until it replicates.
    fn attach(&self, i: usize) {
        self.topology.replicas[i].set_semi_sync_replica(true);
        self.topology
            .point_replica_at(i, "127.0.0.1", self.listen.port());
        self.topology.wait_replica_running(i);
    }

    fn stop_io(&self, i: usize) {
        self.topology.replicas[i].sql("STOP SLAVE IO_THREAD");
    }

    fn start_io(&self, i: usize) {
        self.topology.replicas[i].sql("START SLAVE IO_THREAD");
    }

    fn scrape(&self) -> Scrape {
        admin::metrics(self.admin)
    }

    /// Scrapes until `condition` holds; returns that scrape.
    fn scrape_until(&self, what: &str, condition: impl Fn(&Scrape) -> bool) -> Scrape {
        let mut last = None;
        wait_for(what, PATIENCE, || {
            let scrape = self.scrape();
            let done = condition(&scrape);
            last = Some(scrape);
            done
        });
        last.expect("scraped")
    }

    fn semisync_replicas(&self, n: usize) -> Scrape {
        self.scrape_until(&format!("{n} semisync replicas"), |s| {
            s.get(r#"strongsync_replicas_connected{kind="semisync"}"#) == n as f64
        })
    }

    /// One statement through the proxy with the `mariadb` client.
    fn sql(&self, sql: &str) -> Output {
        mariadb(self.listen.port(), APP_USER, APP_PASSWORD)
            .arg(TEST_DB)
            .execute(sql)
    }

    fn url(&self) -> String {
        format!(
            "mysql://{APP_USER}:{APP_PASSWORD}@{}/{TEST_DB}?prefer_socket=false",
            self.listen
        )
    }

    async fn client(&self) -> Conn {
        Conn::new(Opts::from_url(&self.url()).unwrap())
            .await
            .unwrap()
    }

    fn log(&self) -> String {
        self.proxy.log()
    }
}

/// Lines of `log` that contain `text`.
fn count(log: &str, text: &str) -> usize {
    log.lines().filter(|l| l.contains(text)).count()
}

fn replica_series(name: &str, server_id: u32) -> String {
    format!(r#"{name}{{server_id="{server_id}"}}"#)
}

// --- metrics ---

#[test]
fn metrics_follow_a_write_load_and_a_degraded_spell() {
    let sidecar = Sidecar::start(
        2,
        &[
            "--durability-quorum",
            "2",
            "--durability-ack-timeout",
            "1s",
            "--durability-on-timeout",
            "degrade",
        ],
    );
    sidecar.attach(0);
    sidecar.attach(1);
    sidecar.semisync_replicas(2);
    let ids: Vec<u32> = sidecar
        .topology
        .replicas
        .iter()
        .map(|r| r.server_id())
        .collect();

    // A write load, scraped while it runs.
    let sysbench = Sysbench::new("oltp_write_only")
        .port(sidecar.listen.port())
        .threads(8)
        .table_size(1000)
        .time(5);
    sysbench.prepare();
    let before = sidecar.scrape();
    let grew = |s: &Scrape, series: &str| s.get(series) > before.value(series).unwrap_or(0.0);
    let load = std::thread::spawn(move || sysbench.run());
    let during = sidecar.scrape_until("the load's commits and ACKs counted as it runs", |s| {
        // The replicas' two connections are always there; more are the load's.
        s.get("strongsync_client_connections") > 2.0
            && grew(
                s,
                r#"strongsync_commit_wait_seconds_count{outcome="quorum"}"#,
            )
            && ids.iter().all(|&id| {
                grew(
                    s,
                    &replica_series("strongsync_replica_ack_latency_seconds_count", id),
                )
            })
    });
    let report = load.join().expect("sysbench");
    assert_eq!(
        (report.errors, report.reconnects),
        (0, 0),
        "{}",
        report.summary()
    );
    assert!(
        grew(
            &during,
            r#"strongsync_commit_wait_seconds_sum{outcome="quorum"}"#
        ),
        "waits are measured"
    );

    let after = sidecar.scrape();
    assert_eq!(after.get("strongsync_parked_sessions"), 0.0);
    let quorum_commits = after.get(r#"strongsync_commits_released_total{outcome="quorum"}"#);
    assert!(quorum_commits >= report.transactions as f64, "{}", after.0);
    assert_eq!(
        after.get(r#"strongsync_commit_wait_seconds_count{outcome="quorum"}"#),
        quorum_commits,
        "one wait observed per commit released"
    );
    for &id in &ids {
        assert!(after.get(&replica_series("strongsync_replica_acks_total", id)) > 0.0);
    }
    for direction in ["client_to_primary", "primary_to_client"] {
        assert!(
            after.get(&format!(
                r#"strongsync_relayed_bytes_total{{direction="{direction}"}}"#
            )) > 0.0
        );
    }
    assert_eq!(
        after.get(r#"strongsync_durability_state{state="strong"}"#),
        1.0
    );
    assert_eq!(after.get("strongsync_quorum"), 2.0);
    assert_eq!(after.get("strongsync_primary_up"), 1.0);

    // Both replicas stop: a commit waits out the 1 s ACK timeout and strong sync degrades.
    sidecar.stop_io(0);
    sidecar.stop_io(1);
    sidecar.semisync_replicas(0);
    let output = sidecar.sql("INSERT INTO t (v) VALUES (1)");
    assert!(output.success(), "{output}\n{}", sidecar.log());
    let degraded = sidecar.scrape();
    for (series, expected) in [
        (r#"strongsync_durability_state{state="degraded"}"#, 1.0),
        (r#"strongsync_durability_state{state="strong"}"#, 0.0),
        (
            r#"strongsync_durability_transitions_total{to="degraded"}"#,
            1.0,
        ),
        (
            r#"strongsync_commits_released_total{outcome="timeout"}"#,
            1.0,
        ),
    ] {
        assert_eq!(degraded.get(series), expected, "{series}");
    }
    assert!(
        degraded.get(r#"strongsync_commit_wait_seconds_sum{outcome="timeout"}"#) >= 1.0,
        "the commit waited its ACK timeout"
    );
    // DEGRADED: commits go at once, each counted, none logged on its own; /status says per
    // domain what a failover now may lose, and a periodic summary says it in the log.
    for v in 2..=4 {
        let output = sidecar.sql(&format!("INSERT INTO t (v) VALUES ({v})"));
        assert!(output.success(), "{output}");
    }
    let status = admin::status(sidecar.admin);
    let released = &status.released_without_quorum;
    assert_eq!(released.len(), 1, "{status:#?}");
    assert_eq!(released[0].domain, DomainName::Maria(0));
    assert_eq!(released[0].count, 4);
    assert_eq!(released[0].last, sidecar.topology.primary.gtid_binlog_pos());
    wait_for(
        "a summary of the DEGRADED spell in the log",
        PATIENCE,
        || sidecar.log().contains("still DEGRADED"),
    );
    let log = sidecar.log();
    let summary = log
        .lines()
        .find(|l| l.contains("still DEGRADED"))
        .expect("summary");
    assert!(summary.contains("released_without_quorum=4"), "{summary}");
    assert!(summary.contains(&released[0].first), "{summary}");
    assert_eq!(count(&log, "STRONG -> DEGRADED"), 1, "{log}");
    assert_eq!(
        count(&log, "released without quorum"),
        0,
        "no line per commit:\n{log}"
    );

    // They come back and catch up: strong again.
    sidecar.start_io(0);
    sidecar.start_io(1);
    let strong = sidecar.scrape_until("strong again", |s| {
        s.get(r#"strongsync_durability_state{state="strong"}"#) == 1.0
    });
    assert_eq!(
        strong.get(r#"strongsync_durability_transitions_total{to="strong"}"#),
        1.0
    );
    assert_eq!(count(&sidecar.log(), "DEGRADED -> STRONG"), 1);
    assert_eq!(admin::status(sidecar.admin).released_without_quorum, []);
    assert!(strong.get("strongsync_degraded_seconds_total") > 0.0);
    let caught_up = sidecar.scrape_until("both replicas caught up", |s| {
        ids.iter().all(|&id| {
            s.value(&replica_series("strongsync_replica_lag_transactions", id)) == Some(0.0)
                && s.value(&replica_series("strongsync_replica_lag_bytes", id)) == Some(0.0)
        })
    });
    for &id in &ids {
        assert!(
            caught_up.get(&replica_series(
                "strongsync_replica_acked_binlog_offset",
                id
            )) > 0.0
        );
        assert!(caught_up.get(&replica_series("strongsync_replica_acked_binlog_file", id)) >= 1.0);
    }

    // What the alert rules and the dashboard query, this proxy exports.
    for name in queried_metrics() {
        assert!(
            caught_up.has_metric(&name),
            "deploy/ queries {name}, which /metrics does not export:\n{}",
            caught_up.0
        );
    }
}

// --- readiness, status, bad requests ---

#[test]
fn readiness_and_status_follow_the_replicas_and_the_primary() {
    // Under block a commit cannot be acknowledged without its replicas: not ready without them.
    let mut sidecar = Sidecar::start(
        2,
        &[
            "--durability-quorum",
            "2",
            "--durability-on-timeout",
            "block",
        ],
    );
    let healthz = admin::get(sidecar.admin, "/healthz");
    assert_eq!(healthz.status, 200);

    let not_ready = admin::get(sidecar.admin, "/readyz");
    assert_eq!(not_ready.status, 503, "{}", not_ready.body);
    assert!(
        not_ready
            .body
            .contains("0 semisync replica(s) connected, the quorum needs 2"),
        "{}",
        not_ready.body
    );
    sidecar.attach(0);
    sidecar.semisync_replicas(1);
    let one = admin::get(sidecar.admin, "/readyz");
    assert_eq!(one.status, 503, "{}", one.body);
    assert!(one.body.contains("1 semisync replica(s)"), "{}", one.body);
    sidecar.attach(1);
    sidecar.semisync_replicas(2);
    assert_eq!(admin::get(sidecar.admin, "/readyz").status, 200);

    let output = sidecar.sql("INSERT INTO t (v) VALUES (1), (2)");
    assert!(output.success(), "{output}");
    let primary_addr = sidecar.topology.primary.addr();
    let mut status = admin::status(sidecar.admin);
    wait_for("both replicas ACKed the head", PATIENCE, || {
        status = admin::status(sidecar.admin);
        let head = &status.head;
        head.is_some() && status.replicas.iter().all(|r| &r.acked_position == head)
    });
    assert_eq!(status.state, "strong", "{status:#?}");
    assert_eq!(status.quorum, 2);
    assert_eq!(status.on_timeout, "block");
    assert_eq!(status.parked_sessions, 0);
    assert_eq!(status.primary.address, primary_addr);
    assert!(status.primary.reachable);
    assert!(status.released["quorum"] >= 1);
    let replicas = &status.replicas;
    let ids: Vec<u32> = replicas.iter().map(|r| r.server_id).collect();
    let expected: Vec<u32> = sidecar
        .topology
        .replicas
        .iter()
        .map(|r| r.server_id())
        .collect();
    assert_eq!(ids, expected, "{status:#?}");
    for replica in replicas {
        assert!(replica.semisync);
        assert!(replica.address.starts_with("127.0.0.1:"));
        assert_eq!(replica.lag_transactions, Some(0), "{status:#?}");
        assert_eq!(replica.lag_bytes, Some(0), "{status:#?}");
        assert!(replica.last_ack_age_seconds.is_some(), "{status:#?}");
        let position = replica.acked_position.as_deref().unwrap();
        assert_eq!(
            position,
            format!(
                "{}:{}",
                replica.acked_file.unwrap(),
                replica.acked_offset.unwrap()
            )
        );
        // What a failover tool compares: the GTIDs the replica holds, here all of them.
        assert!(replica.connected);
        assert_eq!(replica.disconnected_seconds, None);
        assert_eq!(
            replica.acked_gtid_position,
            sidecar.topology.primary.gtid_binlog_pos(),
            "{status:#?}"
        );
    }
    let held_before = status.replicas.clone();
    assert_eq!(
        status.watermark_gtid_position,
        sidecar.topology.primary.gtid_binlog_pos()
    );
    assert_eq!(status.failover_candidates, expected);

    // Bad requests get 4xx and the port keeps serving.
    let garbage = admin::raw(sidecar.admin, b"\x16\x03\x01 not http at all\r\n\r\n");
    assert_eq!(garbage.status, 400);
    assert_eq!(admin::get(sidecar.admin, "/nothing-here").status, 404);
    assert_eq!(
        admin::request(sidecar.admin, "POST", "/metrics").status,
        405
    );
    assert_eq!(admin::get(sidecar.admin, "/healthz").status, 200);

    // The primary goes away: not ready, and /status says why.
    sidecar.topology.primary.stop();
    let mut body = String::new();
    wait_for("/readyz to fail without the primary", PATIENCE, || {
        let response = admin::get(sidecar.admin, "/readyz");
        body = response.body;
        response.status == 503 && body.contains("primary")
    });
    assert!(body.contains(&primary_addr), "{body}");
    let status = admin::status(sidecar.admin);
    assert!(!status.primary.reachable, "{status:#?}");
    assert!(status.primary.problem.is_some());
    // The replicas' dumps end with the primary; they stay listed as last known, for the
    // failover tool that now needs them.
    let mut status = status;
    wait_for("the replicas' dumps to end", PATIENCE, || {
        status = admin::status(sidecar.admin);
        status.replicas.iter().all(|r| !r.connected)
    });
    let replicas = &status.replicas;
    assert_eq!(replicas.len(), 2, "{status:#?}");
    for (replica, before) in replicas.iter().zip(&held_before) {
        assert!(!replica.connected, "{status:#?}");
        assert!(replica.disconnected_seconds.is_some(), "{status:#?}");
        assert_eq!(replica.server_id, before.server_id);
        assert_eq!(replica.acked_gtid_position, before.acked_gtid_position);
        assert_eq!(replica.acked_position, before.acked_position);
    }
    assert_eq!(sidecar.scrape().get("strongsync_primary_up"), 0.0);
    assert_eq!(
        admin::get(sidecar.admin, "/healthz").status,
        200,
        "alive all the same"
    );
}

// --- config file ---

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn config_file_errors_name_the_key_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let head = format!("listen = \"{listen}\"\nprimary = \"127.0.0.1:1\"\n");
    let cases = [
        (
            "unknown key",
            "[durability]\nquorum = 1\nqourum = 2\n",
            "qourum",
        ),
        (
            "negative timeout",
            "[durability]\nack_timeout = \"-5s\"\n",
            "durability.ack_timeout",
        ),
        (
            "quorum of 0",
            "[durability]\nquorum = 0\n",
            "durability.quorum",
        ),
        (
            "negative limit",
            "[limits]\nmax_connections = -1\n",
            "limits.max_connections",
        ),
        (
            "unknown policy",
            "[durability]\non_timeout = \"retry\"\n",
            "durability.on_timeout",
        ),
        ("not TOML", "quorum = \n", "quorum"),
        (
            "a value of the wrong type",
            "shutdown_grace = 10\n",
            "shutdown_grace",
        ),
    ];
    for (what, body, key) in cases {
        let file = write(dir.path(), "bad.toml", &format!("{head}{body}"));
        for args in [vec!["check-config", &file], vec!["--config", &file]] {
            let out = run_strongsync(&args);
            assert_eq!(out.status.code(), Some(EXIT_CONFIG), "{what}: {out}");
            assert!(
                out.stderr.contains(key),
                "{what}: the message names {key}:\n{out}"
            );
            assert!(
                TcpStream::connect(listen).is_err(),
                "{what}: nothing listens"
            );
        }
    }
    let missing = run_strongsync(&["--config", "/nonexistent/strongsync.toml"]);
    assert_eq!(missing.status.code(), Some(EXIT_CONFIG), "{missing}");
    assert!(
        missing.stderr.contains("/nonexistent/strongsync.toml"),
        "{missing}"
    );
}

#[test]
fn check_config_accepts_the_example_and_prints_what_takes_effect() {
    let example = deploy_path("strongsync.toml");
    let out = run_strongsync(&["check-config", example.to_str().unwrap()]);
    assert!(out.success(), "{out}");
    for line in [
        "listen = \"0.0.0.0:3307\"",
        "admin_listen = \"127.0.0.1:9104\"",
        "quorum = 1",
        "ack_timeout = \"10s\"",
        "on_timeout = \"degrade\"",
        "max_connections = 4096",
    ] {
        assert!(out.stdout.lines().any(|l| l == line), "{line}:\n{out}");
    }
    // What it prints is a config file that checks to the same thing.
    let dir = tempfile::tempdir().unwrap();
    let printed = write(dir.path(), "effective.toml", &out.stdout);
    let again = run_strongsync(&["check-config", &printed]);
    assert!(again.success(), "{again}");
    assert_eq!(again.stdout, out.stdout);
}

#[test]
fn flags_and_environment_win_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let admin_port = free_port();
    let file = write(
        dir.path(),
        "strongsync.toml",
        &format!(
            "listen = \"{listen}\"\nprimary = \"127.0.0.1:1\"\n\
             admin_listen = \"127.0.0.1:{admin_port}\"\n\
             [durability]\nquorum = 3\nack_timeout = \"7s\"\non_timeout = \"block\"\n"
        ),
    );
    let _proxy = ProxyProcess::start_as_given(
        &["--config", &file, "--durability-quorum", "2"],
        &[("STRONGSYNC_DURABILITY_ACK_TIMEOUT", "250ms")],
        listen,
    );
    let status = admin::status(SocketAddr::from(([127, 0, 0, 1], admin_port)));
    assert_eq!(status.quorum, 2, "the flag wins");
    assert_eq!(status.ack_timeout, "250ms", "the environment wins");
    assert_eq!(status.on_timeout, "block", "the file applies");
}

// --- SIGHUP ---

#[tokio::test(flavor = "multi_thread")]
async fn sighup_applies_a_new_quorum_to_the_next_commit_without_dropping_connections() {
    let dir = tempfile::tempdir().unwrap();
    let config = |quorum: &str, extra: &str| {
        format!(
            "log_level = \"info\"\n{extra}[durability]\nquorum = {quorum}\n\
             ack_timeout = \"1h\"\non_timeout = \"block\"\n"
        )
    };
    let file = write(dir.path(), "strongsync.toml", &config("1", ""));
    let sidecar = Sidecar::start(2, &["--config", &file]);
    sidecar.attach(0);
    sidecar.attach(1);
    sidecar.semisync_replicas(2);
    let mut writer = sidecar.client().await;
    let mut idle = sidecar.client().await;
    let writer_id: u32 = writer.one("SELECT CONNECTION_ID()").await;

    // With one replica left, quorum 1 commits.
    sidecar.stop_io(1);
    sidecar.semisync_replicas(1);
    writer.run("INSERT INTO t (v) VALUES (1)").await;

    let reloads = sidecar.log().matches("SIGHUP: config reloaded").count();
    write(dir.path(), "strongsync.toml", &config("2", ""));
    sidecar.proxy.signal(Signal::SIGHUP);
    wait_for("the reload", PATIENCE, || {
        sidecar.log().matches("SIGHUP: config reloaded").count() > reloads
    });
    assert_eq!(admin::status(sidecar.admin).quorum, 2);

    // The next commit needs both replicas: it parks until the second is back.
    let commit = tokio::spawn(async move {
        let result = writer.query_drop("INSERT INTO t (v) VALUES (2)").await;
        (writer, result)
    });
    sidecar.scrape_until("the commit to park", |s| {
        s.get("strongsync_parked_sessions") == 1.0
    });
    assert!(!commit.is_finished());
    sidecar.start_io(1);
    let (mut writer, result) = commit.await.unwrap();
    result.expect("the commit completes once both replicas have it");

    // The same connections, still serving.
    let id_after: u32 = writer.one("SELECT CONNECTION_ID()").await;
    assert_eq!(id_after, writer_id);
    let one: u32 = idle.one("SELECT 1").await;
    assert_eq!(one, 1);

    // A setting that cannot change live is reported; an invalid file changes nothing.
    write(
        dir.path(),
        "strongsync.toml",
        &config("1", "[limits]\nmax_connections = 10\n"),
    );
    sidecar.proxy.signal(Signal::SIGHUP);
    wait_for("the restart warning", PATIENCE, || {
        sidecar.log().contains("only take effect after a restart")
    });
    assert!(sidecar.log().contains("\"limits\""), "{}", sidecar.log());
    assert_eq!(admin::status(sidecar.admin).quorum, 1);

    write(dir.path(), "strongsync.toml", &config("0", ""));
    sidecar.proxy.signal(Signal::SIGHUP);
    wait_for("the rejection", PATIENCE, || {
        sidecar.log().contains("config rejected")
    });
    assert!(sidecar.log().contains("durability.quorum"));
    assert_eq!(admin::status(sidecar.admin).quorum, 1, "unchanged");

    // The read barrier needs the probe account: a file without one is refused, and one that
    // adds it waits for the restart that starts the probe.
    let rejected = sidecar.log().matches("config rejected").count();
    write(
        dir.path(),
        "strongsync.toml",
        &config("1", "").replace("[durability]\n", "[durability]\nvisibility = \"quorum\"\n"),
    );
    sidecar.proxy.signal(Signal::SIGHUP);
    wait_for("the second rejection", PATIENCE, || {
        sidecar.log().matches("config rejected").count() > rejected
    });
    assert!(
        sidecar.log().contains("durability.visibility"),
        "{}",
        sidecar.log()
    );
    let with_probe = config("1", "[probe]\nuser = \"probe\"\npassword = \"x\"\n")
        .replace("[durability]\n", "[durability]\nvisibility = \"quorum\"\n");
    let restarts = sidecar
        .log()
        .matches("only take effect after a restart")
        .count();
    write(dir.path(), "strongsync.toml", &with_probe);
    sidecar.proxy.signal(Signal::SIGHUP);
    wait_for("the second restart warning", PATIENCE, || {
        sidecar
            .log()
            .matches("only take effect after a restart")
            .count()
            > restarts
    });
    assert!(
        sidecar.log().contains("\"durability.visibility\""),
        "{}",
        sidecar.log()
    );
    assert_eq!(
        admin::status(sidecar.admin).visibility,
        "commit",
        "unchanged"
    );
    writer.disconnect().await.unwrap();
    idle.disconnect().await.unwrap();
}

// --- SIGTERM ---

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_releases_parked_commits_at_the_end_of_the_grace_period_and_exits_0() {
    // No replica: commits park, and `block` would keep them parked for good.
    let mut sidecar = Sidecar::start(
        0,
        &[
            "--durability-quorum",
            "1",
            "--durability-ack-timeout",
            "1h",
            "--durability-on-timeout",
            "block",
            "--shutdown-grace",
            "3s",
        ],
    );
    let mut parked = Vec::new();
    for v in 0..2 {
        let mut conn = sidecar.client().await;
        parked.push(tokio::spawn(async move {
            conn.query_drop(format!("INSERT INTO t (v) VALUES ({v})"))
                .await
        }));
    }
    sidecar.scrape_until("two parked commits", |s| {
        s.get("strongsync_parked_sessions") == 2.0
    });
    let idle = sidecar.client().await;

    sidecar.proxy.signal(Signal::SIGTERM);
    wait_for("the SQL port to close", PATIENCE, || {
        TcpStream::connect(sidecar.listen).is_err()
    });
    assert!(
        sidecar.proxy.is_running(),
        "closed while the grace period runs"
    );
    let status = sidecar.proxy.wait_exit(PATIENCE);
    assert_eq!(status.code(), Some(0), "{}", sidecar.log());

    for task in parked {
        let error = task
            .await
            .unwrap()
            .expect_err("a commit released without its quorum gets an error");
        let message = error.to_string();
        assert!(message.contains("proxy shutting down"), "{message}");
        assert!(message.contains("committed on the primary"), "{message}");
    }
    let log = sidecar.log();
    assert!(log.contains("shutdown complete"), "{log}");
    assert!(log.contains("released_parked=2"), "{log}");
    // The commits did happen on the primary: nothing is lost, the clients were told.
    assert_eq!(
        sidecar
            .topology
            .primary
            .sql("SELECT COUNT(*) FROM sbtest.t"),
        "2"
    );
    drop(idle);
}
