//! Bad input and failures around the proxy: garbage and malformed packets from clients, limits,
//! a primary that is unreachable, killed or restarted, and clients that vanish. Each case must
//! end with a clear error (or a clean close) for the one connection concerned, a log line that
//! says why, and no effect on anyone else.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use mysql_common::constants::CapabilityFlags;
use rand::{Rng, SeedableRng};
use support::mariadb::{wait_for, MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER};
use support::proxy::{free_port, ProxyProcess, TestProxy};
use support::rawclient::{self, greeted, packet, RawClient, Rejection};
use support::sql::Statements;

/// Generous bound for "eventually" (a guard against hangs, not a timing expectation).
const PATIENCE: Duration = Duration::from_secs(30);

/// The proxy binary in front of `primary`, listening on a fresh port.
fn binary(primary: &str, extra: &[&str]) -> (ProxyProcess, SocketAddr) {
    ProxyProcess::passthrough(primary, extra)
}

fn url(addr: SocketAddr) -> Opts {
    let url = format!("mysql://{APP_USER}:{APP_PASSWORD}@{addr}/sbtest?prefer_socket=false");
    Opts::from_url(&url).unwrap()
}

fn rejection(stream: TcpStream, greeting_unread: bool) -> Rejection {
    rawclient::rejection(stream, greeting_unread, PATIENCE)
}

/// One session's worth of ordinary work; errors are returned, not panicked, so the caller can
/// report every session.
async fn workload(addr: SocketAddr, session: u32) -> Result<u32, String> {
    let mut conn = Conn::new(url(addr)).await.map_err(|e| e.to_string())?;
    let mut done = 0;
    for i in 0..150u32 {
        conn.exec_drop("INSERT INTO work (session, i) VALUES (?, ?)", (session, i))
            .await
            .map_err(|e| format!("session {session} insert {i}: {e}"))?;
        let n: u64 = conn
            .exec_first("SELECT COUNT(*) FROM work WHERE session = ?", (session,))
            .await
            .map_err(|e| format!("session {session} select {i}: {e}"))?
            .unwrap_or_default();
        if n != u64::from(i) + 1 {
            return Err(format!("session {session} sees {n} rows after {i} inserts"));
        }
        done += 1;
    }
    conn.disconnect().await.map_err(|e| e.to_string())?;
    Ok(done)
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_from_clients_is_rejected_while_sixteen_sessions_keep_working() {
    let primary = MariaDb::start(MariaDbOptions::default());
    primary.sql("CREATE TABLE sbtest.work (session INT, i INT, PRIMARY KEY (session, i))");
    let (proxy, addr) = binary(&primary.addr(), &["--limits-max-packet-size", "1048576"]);

    let sessions: Vec<_> = (0..16).map(|s| tokio::spawn(workload(addr, s))).collect();

    // Meanwhile, garbage of every kind, several times over.
    let attackers = tokio::task::spawn_blocking(move || {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        let mut seen = Vec::new();
        for round in 0..8 {
            // A random byte stream, with or without reading the greeting first.
            let mut noise = vec![0u8; 64 * 1024];
            rng.fill(&mut noise[..]);
            let read_greeting = round % 2 == 0;
            let mut s = if read_greeting {
                greeted(addr)
            } else {
                TcpStream::connect(addr).unwrap()
            };
            let _ = s.write_all(&noise);
            seen.push(("random bytes", rejection(s, !read_greeting)));

            // A header announcing 16 MiB during the handshake.
            let mut s = greeted(addr);
            s.write_all(&[0xFF, 0xFF, 0xFF, 0x01]).unwrap();
            seen.push(("oversized handshake", rejection(s, false)));

            // Out of sequence, and too short to be a login.
            let mut s = greeted(addr);
            s.write_all(&packet(9, &[0u8; 40])).unwrap();
            seen.push(("out of sequence", rejection(s, false)));
            let mut s = greeted(addr);
            s.write_all(&packet(1, &[0x05, 0xa2, 0x0a, 0x00, 0x01]))
                .unwrap();
            seen.push(("truncated login", rejection(s, false)));
        }
        seen
    })
    .await
    .unwrap();

    // After login: a command out of sequence, one over the packet limit, an empty one.
    let mut after_login = Vec::new();
    for (what, bytes) in [
        ("command out of sequence", packet(3, b"\x03SELECT 1")),
        ("command over the limit", vec![0x00, 0x00, 0x20, 0x00]), // 2 MiB header
        ("empty command", packet(0, b"")),
    ] {
        let mut client = RawClient::connect(addr, APP_USER, APP_PASSWORD, CapabilityFlags::empty());
        client.send_raw(&bytes);
        let reply = client.try_read_packet();
        let closed = client.is_closed_within(PATIENCE);
        after_login.push((
            what,
            reply.map(|(_, p)| u16::from_le_bytes([p[1], p[2]])),
            closed,
        ));
    }

    let mut failures = Vec::new();
    for (i, session) in sessions.into_iter().enumerate() {
        match session.await.unwrap() {
            Ok(150) => {}
            other => failures.push(format!("session {i}: {other:?}")),
        }
    }
    assert!(
        failures.is_empty(),
        "sessions were disturbed: {failures:#?}"
    );
    assert_eq!(primary.sql("SELECT COUNT(*) FROM sbtest.work"), "2400");

    for (what, rejection) in &attackers {
        assert!(rejection.closed, "{what}: connection left open");
    }
    let code_of = |what: &str| {
        attackers
            .iter()
            .filter(|(w, _)| *w == what)
            .map(|(_, r)| r.err_code)
            .collect::<Vec<_>>()
    };
    assert!(code_of("oversized handshake")
        .iter()
        .all(|c| *c == Some(1153)));
    assert!(code_of("out of sequence").iter().all(|c| *c == Some(1156)));
    assert!(code_of("truncated login").iter().all(|c| *c == Some(1835)));
    assert_eq!(
        after_login,
        vec![
            ("command out of sequence", Some(1156), true),
            ("command over the limit", Some(1153), true),
            ("empty command", Some(1835), true),
        ]
    );

    // Each rejection is logged with its reason, and the proxy still serves.
    let log = proxy.log();
    for reason in [
        "client sent a malformed packet: packet payload of 16777215 bytes exceeds the limit of 65536 bytes",
        "client sent a malformed packet: packet out of sequence: expected sequence id 1, got 9",
        "client sent a malformed packet: packet out of sequence: expected sequence id 0, got 3",
        "client sent a malformed packet: packet payload of 2097152 bytes exceeds the limit of 1048576 bytes",
        "client sent a malformed packet: malformed empty command packet",
    ] {
        assert!(log.contains(reason), "log lacks {reason:?}:\n{log}");
    }
    let mut conn = Conn::new(url(addr)).await.unwrap();
    assert_eq!(
        conn.query_first::<u32, _>("SELECT 7").await.unwrap(),
        Some(7)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_primary_is_an_error_naming_it() {
    let dead = format!("127.0.0.1:{}", free_port());
    let mut config = strongsync::Config::new(dead.clone());
    config.listen = "127.0.0.1:0".parse().unwrap();
    let proxy = TestProxy::start_with(config);
    let err = Conn::new(url(proxy.addr())).await.unwrap_err();
    match err {
        mysql_async::Error::Server(e) => {
            assert_eq!(e.code, 1105);
            assert!(
                e.message
                    .contains(&format!("cannot connect to primary {dead}")),
                "{}",
                e.message
            );
        }
        other => panic!("expected the proxy's ERR packet, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn losing_the_primary_connection_closes_only_that_client() {
    let primary = MariaDb::start(MariaDbOptions::default());
    let (proxy, addr) = binary(&primary.addr(), &[]);
    let mut victim = Conn::new(url(addr)).await.unwrap();
    let mut bystander = Conn::new(url(addr)).await.unwrap();
    primary.sql(&format!("KILL CONNECTION {}", victim.id()));
    let err = victim.fails("SELECT 1").await;
    assert!(
        !matches!(err, mysql_async::Error::Server(_)),
        "a closed connection, not an ERR: {err:?}"
    );
    assert_eq!(
        bystander.query_first::<u32, _>("SELECT 1").await.unwrap(),
        Some(1)
    );
    wait_for(
        "the proxy to log the lost primary connection",
        PATIENCE,
        || proxy.log().contains("primary closed the connection"),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_primary_killed_mid_query_fails_the_query_and_a_restarted_one_serves_new_clients() {
    let mut primary = MariaDb::start(MariaDbOptions::default());
    let (proxy, addr) = binary(&primary.addr(), &[]);
    let mut conn = Conn::new(url(addr)).await.unwrap();
    let id = conn.id();
    let sleeper = tokio::spawn(async move { conn.query_drop("SELECT SLEEP(60)").await });
    wait_for("the SLEEP to start", PATIENCE, || {
        primary.sql(&format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id} AND INFO LIKE 'SELECT SLEEP%'")) == "1"
    });
    primary.kill();
    let result = tokio::time::timeout(PATIENCE, sleeper)
        .await
        .expect("the query fails, it does not hang");
    assert!(
        result.unwrap().is_err(),
        "the client is told its query did not complete"
    );
    wait_for("the proxy to log it", PATIENCE, || {
        proxy.log().contains("primary")
    });

    primary.restart();
    let mut conn = Conn::new(url(addr))
        .await
        .expect("a new client after the restart");
    assert_eq!(
        conn.query_first::<u32, _>("SELECT 1").await.unwrap(),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn past_max_connections_clients_get_er_con_count_error() {
    let primary = MariaDb::start(MariaDbOptions::default());
    let (proxy, addr) = binary(&primary.addr(), &["--limits-max-connections", "2"]);
    let first = Conn::new(url(addr)).await.unwrap();
    let _second = Conn::new(url(addr)).await.unwrap();
    match Conn::new(url(addr)).await {
        Err(mysql_async::Error::Server(e)) => assert_eq!(e.code, 1040, "{}", e.message),
        other => panic!("a third connection must be refused with 1040: {other:?}"),
    }
    assert!(proxy.log().contains("too many connections (limit 2)"));
    first.disconnect().await.unwrap();
    let mut again = None;
    for _ in 0..100 {
        // The slot frees when the proxy has finished closing the first session.
        if let Ok(conn) = Conn::new(url(addr)).await {
            again = Some(conn);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut again = again.expect("a slot frees up");
    assert_eq!(
        again.query_first::<u32, _>("SELECT 1").await.unwrap(),
        Some(1)
    );
}

#[test]
fn a_client_that_never_logs_in_is_closed_after_the_handshake_timeout() {
    let primary = MariaDb::start(MariaDbOptions::default());
    let (proxy, addr) = binary(&primary.addr(), &["--timeouts-client-handshake", "1s"]);
    let silent = greeted(addr);
    let rejection = rejection(silent, false);
    assert_eq!(
        rejection,
        Rejection {
            err_code: Some(1043),
            closed: true
        }
    );
    assert!(proxy
        .log()
        .contains("client did not complete the handshake within 1s"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_vanishes_mid_query_takes_its_primary_connection_with_it() {
    let primary = MariaDb::start(MariaDbOptions::default());
    let (_proxy, addr) = binary(&primary.addr(), &[]);
    let mut client = RawClient::connect(addr, APP_USER, APP_PASSWORD, CapabilityFlags::empty());
    let id = client.connection_id;
    client.send(b"\x03SELECT SLEEP(60)");
    let running = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}");
    wait_for("the SLEEP to start", PATIENCE, || {
        primary.sql(&format!("{running} AND INFO LIKE 'SELECT SLEEP%'")) == "1"
    });
    drop(client);
    wait_for("the primary connection to go away", PATIENCE, || {
        primary.sql(&running) == "0"
    });
}
