//! The failover nemesis against real servers: each scenario of `support::nemesis`, written
//! once, on MariaDB 10.11 and on MySQL 9.7; then what is particular to one of them (MySQL's
//! GTID sets with many gaps, MySQL's `gtid_mode`), and what is strongsync's own (the state
//! file that fails closed, the admin port under load).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mysql_async::prelude::*;
use strongsync::config::OnTimeout;
use support::admin;
use support::each_server;
use support::failover_rounds::{start, LedgerCluster, LedgerServer, TOKEN};
use support::mariadb::{wait_for, MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER};
use support::nemesis::*;
use support::proxy::{free_port, run_strongsync, ProxyProcess, TestProxy};
use support::sql::Statements;
use support::strong::PATIENCE;
use support::tcp_relay::TcpRelay;
use support::topology::MySqlTopology;
use support::topology::Topology;

// === 1. A planned switch, the old primary alive ===

each_server!(a_planned_switch_leaves_nothing_on_the_live_old_primary);

// === 2. A partition that heals ===

each_server!(a_healed_partition_leaves_nothing_on_the_old_primary);

// === 2b. A paused primary that wakes after the failover ===

each_server!(a_paused_old_primary_that_wakes_gets_nothing);

// === 3. A candidate with a diverged history ===

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_candidate_numbered_far_ahead_is_refused_and_passed_over() {
    a_diverged_candidate_is_refused_and_passed_over::<Topology>().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_a_candidate_with_a_foreign_source_is_refused_and_passed_over() {
    a_diverged_candidate_is_refused_and_passed_over::<MySqlTopology>().await;
}

// === 4. A replica holding a fenced tail ===

each_server!(a_replica_with_a_fenced_tail_does_not_cover_the_next_epoch);

// === 5. MySQL: a GTID set with many gaps ===

/// 2,000 direct writes on the primary between 2,000 commits through strongsync: the
/// watermark holds every transaction the quorum held (one interval, no gap), the last
/// acknowledged GTID among them; its outcome reads acknowledged, and a follow to a server
/// lacking it is refused. (The 100,000 gaps of GTIDs the quorum never passed are a unit test:
/// `durability::watermark`.)
#[tokio::test(flavor = "multi_thread")]
async fn mysql_two_thousand_direct_writes_leave_no_gap_in_the_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let s = start::<MySqlTopology>(1, dir.path(), true, |_| {});
    s.topology.wait_caught_up();
    interleaved_direct_writes(&s, 2000).await;
    let lacking = &s.topology.replicas[1];
    lacking.stop_io();
    s.wait_semisync(1);
    let mut client = s.client().await;
    client
        .run("INSERT INTO sbtest.ledger (id) VALUES (999999)")
        .await;
    drop(client);
    let last = s.topology.primary.newest_gtid();
    let executed = s.topology.primary.gtid_executed();
    let watermark = || admin::status(s.proxy.admin_addr()).watermark_gtid_position;
    wait_for("the watermark to reach the last commit", PATIENCE, || {
        s.topology.primary.gtid_subset(&last, &watermark())
    });
    let watermark = watermark();
    let intervals = watermark.split(':').count() - 1;
    assert_eq!(intervals, 1, "gaps in the watermark: {watermark}");
    assert!(
        s.topology.primary.gtid_subset(&watermark, &executed),
        "{watermark} vs {executed}"
    );
    let outcome = admin::get(s.proxy.admin_addr(), &format!("/outcome?gtid={last}"));
    assert!(
        outcome.body.contains("\"acknowledged\""),
        "{}",
        outcome.body
    );
    lacking.make_primary_by_hand();
    let body = format!(r#"{{"primary": "{}"}}"#, lacking.addr());
    let refused = admin::post(s.proxy.admin_addr(), "/follow", Some(TOKEN), &body);
    assert_eq!(refused.status, 409, "{}", refused.body);
    let source = last.split(':').next().unwrap();
    assert!(
        refused.body.contains("of the watermark") && refused.body.contains(source),
        "{}",
        refused.body
    );
}

// === 6. A slow replica in the middle of a large transaction ===

each_server!(a_slow_replica_mid_transaction_stops_at_the_fence);

// === 7. A state file that fails closed ===

/// A configured state file that is missing, truncated or garbage stops the binary, naming the
/// file and why; `strongsync init-state` creates a new deployment's, once.
#[test]
fn a_missing_truncated_or_garbage_state_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let config = dir.path().join("strongsync.toml");
    std::fs::write(
        &config,
        format!(
            "primary = \"127.0.0.1:9\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n[failover]\nstate_file = \"{}\"\n",
            state.display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let refused = |why: &str| {
        let out = run_strongsync(&["--config", &config]);
        let stderr = out.stderr.clone();
        assert_eq!(out.status.code(), Some(64), "{why}: {stderr}");
        assert!(
            stderr.contains(&state.display().to_string()),
            "{why}: {stderr}"
        );
        stderr
    };
    assert!(refused("missing").contains("does not exist"));
    let created = run_strongsync(&["init-state", "--config", &config]);
    assert!(created.status.success(), "{created:?}");
    let whole = std::fs::read_to_string(&state).unwrap();
    for (why, text) in [
        ("truncated", &whole[..whole.len() / 2]),
        ("garbage", "\u{1}garbage"),
    ] {
        std::fs::write(&state, text).unwrap();
        assert!(refused(why).contains("unreadable"), "{why}");
    }
    std::fs::write(&state, whole).unwrap();
    let again = run_strongsync(&["init-state", "--config", &config]);
    assert!(!again.status.success(), "init-state overwrote a state file");
}

/// A fence whose caller hangs up while it drains (a session is writing a large statement to
/// a primary that stopped taking bytes) is in the state file all the same, and survives a
/// SIGKILL and a restart.
#[tokio::test(flavor = "multi_thread")]
async fn a_fence_whose_caller_hangs_up_mid_drain_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let primary = MariaDb::start(MariaDbOptions::default());
    let relay = TcpRelay::start(primary.addr().parse().unwrap());
    let token = admin::token_file(dir.path(), TOKEN);
    let state = admin::state_file(dir.path(), &relay.addr().to_string());
    let listen = format!("127.0.0.1:{}", free_port());
    let admin_addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.path().join("strongsync.toml");
    std::fs::write(
        &config,
        format!(
            "primary = \"{}\"\nlisten = \"{listen}\"\nadmin_listen = \"{admin_addr}\"\n\n\
             [durability]\npassthrough = true\n\n[timeouts]\nprimary_connect = \"1s\"\n\n\
             [failover]\nstate_file = \"{}\"\nadmin_token_file = \"{}\"\nfence_drain = \"1h\"\n",
            relay.addr(),
            state.display(),
            token.display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let args = ["--config", config.as_str()];
    let mut proxy = ProxyProcess::start_as_given(&args, &[], listen.parse().unwrap());
    let url = format!("mysql://{APP_USER}:{APP_PASSWORD}@{listen}/sbtest?prefer_socket=false");
    let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
        .await
        .unwrap();
    // The primary stops taking bytes; a 15 MB statement is on its way to it.
    relay.stall();
    let big = format!("SELECT LENGTH('{}')", "x".repeat(15 << 20));
    let stuck = tokio::spawn(async move { conn.query_drop(big).await });
    // Under way once strongsync has bytes of it queued towards the relay that nobody takes.
    let relay_port = relay.port();
    wait_for(
        "the statement to be on its way to the primary",
        PATIENCE,
        || queued_towards(relay_port) > 1 << 20,
    );
    // The hook: sends the fence, and hangs up once the fence is up and draining.
    let body = r#"{"reason": "hook"}"#;
    let mut hook = TcpStream::connect(admin_addr).unwrap();
    write!(
        hook,
        "POST /fence HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    wait_for("the fence to be up", PATIENCE, || {
        admin::status(admin_addr).fenced
    });
    drop(hook);
    // The drain cannot end while the statement is stuck (it waits an hour): a fence in the
    // file now was written before the drain.
    wait_for("the fence in the state file", PATIENCE, || {
        strongsync::failover::State::load(&state).is_ok_and(|kept| kept.durability.fence.is_some())
    });
    assert!(!stuck.is_finished(), "the statement was answered");
    proxy.stop_with(nix::sys::signal::Signal::SIGKILL);
    let proxy = ProxyProcess::start_as_given(&args, &[], listen.parse().unwrap());
    let status = admin::status(admin_addr);
    assert!(status.fenced, "{status:#?}");
    drop(proxy);
    relay.resume();
}

/// Bytes the kernel holds unsent on loopback TCP sockets whose peer is `port`
/// (`/proc/net/tcp`'s `tx_queue`).
fn queued_towards(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote_port = u16::from_str_radix(fields.get(2)?.rsplit(':').next()?, 16).ok()?;
            let tx = u64::from_str_radix(fields.get(4)?.split(':').next()?, 16).ok()?;
            (remote_port == port).then_some(tx)
        })
        .sum()
}

// === 8. The retired primary under another name ===

each_server!(the_retired_primary_is_refused_under_any_name);

// === 9. MySQL without gtid_mode ON ===

/// A MySQL primary with `gtid_mode = OFF_PERMISSIVE` is refused at start, the fix named; one
/// switched to it at run time makes strongsync bound every response (a commit without a GTID
/// waits for the replicas to ACK the binlog position after it, instead of going out
/// at once); back to ON, it says so.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_without_gtid_mode_on_is_refused_at_start_and_bounded_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    let s = start::<MySqlTopology>(1, dir.path(), false, |config| {
        config.durability.on_timeout = OnTimeout::Block;
    });
    s.topology.wait_caught_up();
    let primary = &s.topology.primary;
    primary.sql("SET GLOBAL gtid_mode = ON_PERMISSIVE; SET GLOBAL gtid_mode = OFF_PERMISSIVE");
    // A second strongsync starting against it now is refused.
    let mut config = support::cluster::Cluster::proxy_config(&s.topology);
    // The probe account `start` made on the primary.
    config.probe = strongsync::config::ProbeConfig::account_of("probe", "probe-secret");
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin_listen = "127.0.0.1:0".parse().unwrap();
    let error = strongsync::Proxy::builder(config)
        .start()
        .await
        .expect_err("started against a primary without gtid_mode ON")
        .to_string();
    assert!(
        error.contains("gtid_mode is OFF_PERMISSIVE")
            && error.contains("set enforce_gtid_consistency = ON"),
        "{error}"
    );
    // The one running finds it out and bounds every response.
    wait_for("strongsync to see gtid_mode off", PATIENCE, || {
        admin::status(s.proxy.admin_addr())
            .commits_untracked
            .is_some()
    });
    // Every response is bounded now, the client's own set-up queries too: it logs in while
    // the replicas still ACK.
    let conn = s.client().await;
    s.stop_all();
    let watched = support::strong::spawn_watched(
        conn,
        "INSERT INTO sbtest.ledger (id) VALUES (1)",
        Vec::new(),
    );
    // Without a GTID to wait for it would be answered at once; it waits for the position.
    wait_for("the commit without a GTID to park", PATIENCE, || {
        watched.is_finished() || s.parked() == 1
    });
    assert!(!watched.is_finished(), "answered without its quorum");
    let fenced = admin::post(s.proxy.admin_addr(), "/fence", Some(TOKEN), "");
    assert_eq!(fenced.status, 200, "{}", fenced.body);
    let answer = support::strong::answered(watched).await;
    assert!(
        answer.result.is_err(),
        "a commit nobody acknowledged went OK"
    );
    primary.sql("SET GLOBAL gtid_mode = ON_PERMISSIVE; SET GLOBAL gtid_mode = ON");
}

// === 10. The admin port under load ===

fn admin_proxy(max: usize, request: Duration) -> TestProxy {
    let mut config = strongsync::Config::new("127.0.0.1:9");
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin_listen = "127.0.0.1:0".parse().unwrap();
    config.durability.passthrough = true;
    config.limits.max_admin_connections = max;
    config.timeouts.admin_request = request;
    TestProxy::start_with(config)
}

/// Whether the server closed `stream` (read gives the end, or a reset), without waiting.
fn closed(mut stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// A caller that never finishes its headers, or never sends any, is cut off.
#[test]
fn the_admin_port_cuts_off_a_caller_that_never_finishes_its_headers() {
    let proxy = admin_proxy(16, Duration::from_secs(1));
    let mut slow = TcpStream::connect(proxy.admin_addr()).unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut silent = TcpStream::connect(proxy.admin_addr()).unwrap();
    for stream in [&mut slow, &mut silent] {
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut answer = Vec::new();
        let read = stream.read_to_end(&mut answer);
        assert!(
            read.is_ok()
                || read
                    .as_ref()
                    .is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock),
            "still open after {PATIENCE:?}: {read:?}"
        );
    }
    assert_eq!(admin::get(proxy.admin_addr(), "/healthz").status, 200);
}

/// Past `limits.max_admin_connections` a connection is closed at once and counted, the ones
/// held are not disturbed, and once they go the port answers.
#[test]
fn the_admin_port_refuses_the_connection_past_its_cap_and_answers_after() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    let proxy = admin_proxy(999, Duration::from_secs(600));
    let held: Vec<TcpStream> = (0..1000)
        .map(|_| {
            let mut s = TcpStream::connect(proxy.admin_addr()).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    wait_for("one connection refused", PATIENCE, || {
        held.iter().filter(|s| closed(s)).count() == 1
    });
    assert_eq!(held.iter().filter(|s| closed(s)).count(), 1);
    drop(held);
    let addr = proxy.admin_addr();
    // Until the proxy has seen the held connections close, a probe is refused as well, and
    // counted: each such refusal is one more.
    let mut refused_probes = 0;
    wait_for(
        "the admin port to answer",
        PATIENCE,
        || match std::panic::catch_unwind(|| admin::get(addr, "/healthz").status) {
            Ok(status) => status == 200,
            Err(_) => {
                refused_probes += 1;
                false
            }
        },
    );
    let metrics = admin::metrics(proxy.admin_addr());
    assert_eq!(
        metrics.get("strongsync_admin_refused_total{why=\"too_many_connections\"}"),
        1.0 + f64::from(refused_probes)
    );
}

/// A token file its group or others may read stops the start, naming the mode and the fix.
#[test]
fn a_token_file_others_may_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let token = admin::token_file(dir.path(), TOKEN);
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let token = token.display().to_string();
    let out = run_strongsync(&[
        "--primary",
        "127.0.0.1:9",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--failover-admin-token-file",
        &token,
    ]);
    let stderr = &out.stderr;
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("mode 0644") && stderr.contains("chmod 600"),
        "{stderr}"
    );
}

/// The same file, readable by its owner only, starts.
#[test]
fn a_private_token_file_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let token = admin::token_file(dir.path(), TOKEN).display().to_string();
    let listen = format!("127.0.0.1:{}", free_port());
    let args = [
        "--primary",
        "127.0.0.1:9",
        "--listen",
        listen.as_str(),
        "--failover-admin-token-file",
        token.as_str(),
    ];
    let proxy = ProxyProcess::start(&args, &[], listen.parse().unwrap());
    let status = admin::status(proxy.admin_addr().unwrap());
    assert!(!status.persisted, "{status:#?}");
}
