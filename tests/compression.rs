//! The compressed protocol (`CLIENT_COMPRESS`) on the client leg, against a real MariaDB
//! primary: the `mariadb` CLI with `--compress` gets what it gets from the primary directly,
//! a compressed session's commits still park until their quorum holds them, a replica that
//! asks for a compressed stream is served one, and a decompression bomb closes only the
//! session that sent it. (mysql_async with compression — prepared statements, multi-results,
//! LOCAL INFILE, COM_CHANGE_USER — runs the GTID comparison in `gtid_tracking.rs`.)

use std::fs;

use mysql_async::{Conn, Opts, OptsBuilder};
use mysql_common::constants::CapabilityFlags;
use strongsync::config::DurabilityConfig;
use support::admin;
use support::cli::mariadb;
use support::mariadb::{wait_for, MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER};
use support::proxy::{free_port, ProxyProcess, TestProxy};
use support::rawclient::RawClient;
use support::sql::Statements;
use support::strong::{
    blocking, newest_gtid, ok_once_held, position_holds, spawn_watched, Strong, PATIENCE,
};
use support::sysbench::Sysbench;

/// Bytes of the BLOB: past the 16 MiB of one packet, and of one frame.
const BLOB: usize = 20 << 20;

/// Bytes the proxy has written to clients so far.
fn sent_to_clients(proxy: &TestProxy) -> f64 {
    admin::metrics(proxy.admin_addr())
        .get("strongsync_relayed_bytes_total{direction=\"primary_to_client\"}")
}

#[test]
fn the_cli_compressed_gets_what_it_gets_directly_and_a_20_mib_blob_both_ways() {
    let primary = MariaDb::start(MariaDbOptions::default());
    primary.sql("CREATE TABLE sbtest.blobs (id INT PRIMARY KEY, b LONGBLOB)");
    let proxy = TestProxy::start(&primary);
    let cli = |port: u16| {
        mariadb(port, APP_USER, APP_PASSWORD).args([
            "--compress",
            "--batch",
            "--max-allowed-packet=64M",
            "sbtest",
        ])
    };

    // Several statements, a procedure's two result sets, warnings: the same as direct.
    let addr = primary.addr().parse().unwrap();
    let mut setup = RawClient::connect(addr, APP_USER, APP_PASSWORD, CapabilityFlags::empty());
    let create = "CREATE PROCEDURE sbtest.twice() BEGIN SELECT 1 AS a; SELECT 2 AS b; END";
    assert_eq!(setup.query(create).error, None);
    let script =
        "SELECT 1/0; SHOW WARNINGS; CALL twice(); SELECT @@version_comment IS NOT NULL AS v";
    let through = cli(proxy.port()).execute(script).expect_success();
    let direct = cli(primary.port()).execute(script).expect_success();
    assert_eq!(through.stdout, direct.stdout, "direct:\n{direct}");
    assert!(
        through.stdout.contains("Warning\t1365\tDivision by 0"),
        "{through}"
    );
    assert!(through.stdout.contains("a\n1\nb\n2\n"), "{through}");

    // A 20 MiB statement from the client, in compressed frames.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("blob.sql");
    fs::write(
        &file,
        format!("INSERT INTO blobs VALUES (1, '{}');\n", "x".repeat(BLOB)),
    )
    .unwrap();
    cli(proxy.port()).stdin_file(&file).run().expect_success();
    assert_eq!(
        primary.sql("SELECT LENGTH(b), MD5(b) = MD5(REPEAT('x', 20971520)) FROM sbtest.blobs"),
        format!("{BLOB}\t1")
    );

    // And 20 MiB back, in compressed frames: the CLI prints it whole, and what the proxy
    // wrote to its client is a small part of it.
    let before = sent_to_clients(&proxy);
    let out = cli(proxy.port())
        .execute("SELECT b FROM blobs WHERE id = 1")
        .expect_success();
    let sent = sent_to_clients(&proxy) - before;
    assert_eq!(out.stdout.len(), "b\n".len() + BLOB + 1);
    assert!(out
        .stdout
        .lines()
        .nth(1)
        .unwrap()
        .bytes()
        .all(|b| b == b'x'));
    assert!(sent < (BLOB / 20) as f64, "{sent} bytes went to the client");
}

/// Logins with the compressed protocol the proxy has served.
fn compressed_logins(admin: std::net::SocketAddr) -> f64 {
    admin::metrics(admin).get("strongsync_compressed_logins_total")
}

/// A client of the proxy speaking the compressed protocol.
async fn compressed_client(s: &Strong) -> Conn {
    let opts = Opts::from_url(&s.proxy.url(APP_USER, APP_PASSWORD)).unwrap();
    Conn::new(OptsBuilder::from_opts(opts).compression(Some(mysql_async::Compression::fast())))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_compressed_commit_parks_until_its_quorum_holds_it() {
    let s = Strong::start(2, blocking(2));
    s.stop_io(1);
    s.wait_semisync(1);
    let conn = compressed_client(&s).await;
    assert_eq!(compressed_logins(s.proxy.admin_addr()), 1.0);
    let parked = spawn_watched(
        conn,
        "INSERT INTO sbtest.t (v) VALUES (1)",
        vec![s.witness(0), s.witness(1)],
    );
    wait_for("the compressed commit to park", PATIENCE, || {
        s.parked() == 1
    });
    let gtid = newest_gtid(&s.topology.primary, 0);
    assert!(!parked.is_finished());
    s.start_io(1);
    ok_once_held(parked, 1, position_holds, &gtid, "the compressed commit").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_asking_for_a_compressed_stream_acks_through_it() {
    let s = Strong::start(2, blocking(2));
    let replica = &s.topology.replicas[1];
    replica.sql("STOP SLAVE; SET GLOBAL slave_compressed_protocol = ON; START SLAVE");
    s.topology.wait_replica_running(1);
    s.wait_semisync(2);
    let status = admin::status(s.proxy.admin_addr());
    assert!(!status.replicas[0].compressed);
    assert!(status.replicas[1].compressed, "{status:#?}");
    // Every commit needs the compressed replica's ACK.
    let mut conn = s.client().await;
    for v in 0..50 {
        let before = s.witness(1).received();
        conn.run(format!("INSERT INTO sbtest.t (v) VALUES ({v})"))
            .await;
        let gtid = newest_gtid(&s.topology.primary, 0);
        assert!(
            position_holds(&s.witness(1).received(), &gtid),
            "{gtid} released without the compressed replica (it had {before})"
        );
    }
    s.topology.wait_replicas_caught_up();
    assert_eq!(
        replica.sql("SELECT COUNT(*) FROM sbtest.t"),
        s.topology.primary.sql("SELECT COUNT(*) FROM sbtest.t")
    );
    let status = replica.slave_status();
    assert_eq!(status["Slave_IO_Running"], "Yes", "{status:?}");
    assert_eq!(status["Last_IO_Errno"], "0", "{status:?}");
}

#[test]
fn a_decompression_bomb_closes_only_its_session_with_a_log_line() {
    let primary = MariaDb::start(MariaDbOptions::default());
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let listen_text = listen.to_string();
    let mut proxy = ProxyProcess::start(
        &[
            "--listen",
            &listen_text,
            "--primary",
            &primary.addr(),
            "--durability-passthrough",
        ],
        &[],
        listen,
    );
    let mut other = RawClient::connect(listen, APP_USER, APP_PASSWORD, CapabilityFlags::empty());
    let mut bomber = RawClient::connect(
        listen,
        APP_USER,
        APP_PASSWORD,
        CapabilityFlags::CLIENT_COMPRESS,
    );
    // One frame claiming 1,000 bytes whose body inflates to 16 MiB of zeros.
    let mut frame = bytes::BytesMut::new();
    strongsync_proto::compress::FrameEncoder::new(9).encode(
        0,
        &vec![0u8; (16 << 20) - 1],
        &mut frame,
    );
    frame[4..7].copy_from_slice(&1000u32.to_le_bytes()[..3]);
    bomber.send_raw(&frame);
    bomber.set_read_timeout(Some(PATIENCE));
    // The proxy answers with an error (or nothing) and closes.
    while bomber.try_read_packet().is_some() {}
    assert!(
        other.query("SELECT 1").error.is_none(),
        "the other session goes on"
    );
    wait_for("the log line", PATIENCE, || {
        proxy
            .log()
            .contains("compressed packet (it inflates to more than its header gives)")
    });
    assert!(proxy.is_running());
}

#[test]
fn sysbench_with_compression_runs_through_the_proxy() {
    let s = Strong::start(2, DurabilityConfig::default());
    let sysbench = Sysbench::new("oltp_read_write")
        .port(s.proxy.port())
        .threads(8)
        .tables(2)
        .table_size(1000)
        .time(10)
        .arg("--mysql-compression=on");
    sysbench.prepare();
    let report = sysbench.run();
    assert_eq!(
        (report.errors, report.reconnects),
        (0, 0),
        "{}",
        report.summary()
    );
    assert!(report.transactions > 0, "{}", report.summary());
    s.topology.wait_replicas_caught_up();
    let checksum = |server: &MariaDb| server.sql("CHECKSUM TABLE sbtest.sbtest1, sbtest.sbtest2");
    for replica in &s.topology.replicas {
        assert_eq!(checksum(replica), checksum(&s.topology.primary));
    }
}

#[test]
fn compression_inside_tls() {
    let certs = support::certs::TestCerts::generate(&["127.0.0.1"]);
    let primary = MariaDb::start(MariaDbOptions::default());
    primary.sql("CREATE TABLE sbtest.t (id INT AUTO_INCREMENT PRIMARY KEY, v MEDIUMTEXT)");
    let mut config = TestProxy::config(&primary);
    config.tls = certs.tls_config();
    let proxy = TestProxy::start_with(config);
    let out = mariadb(proxy.port(), APP_USER, APP_PASSWORD)
        .args(["--ssl", "--ssl-verify-server-cert", "--compress", "--batch"])
        .arg(format!("--ssl-ca={}", certs.ca.display()))
        .execute(
            r"INSERT INTO sbtest.t (v) VALUES (REPEAT('tls and zlib ', 10000)); SELECT LENGTH(v) FROM sbtest.t; \s",
        )
        .expect_success();
    assert!(out.stdout.contains("130000"), "{out}");
    assert!(out.stdout.contains("Cipher in use is"), "{out}");
    assert!(out.stdout.contains("Compressed"), "{out}");
    // The commit was reported as on any session.
    let gtid = primary.gtid_binlog_pos();
    let reported = proxy.recorder.gtids();
    assert_eq!(reported.last(), Some(&gtid), "{reported:?}");
}
