//! A Rust client library (mysql_async) and a raw protocol client through the proxy: prepared
//! statements, multi-result sets, a 20 MiB BLOB, LOAD DATA LOCAL INFILE, COM_CHANGE_USER,
//! COM_RESET_CONNECTION, COM_PING, COM_INIT_DB, KILL, server-side cursors, and session
//! tracking the client asked for itself.

use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts, OptsBuilder, Row, Value, WhiteListFsHandler};
use mysql_common::constants::{CapabilityFlags, StatusFlags};
use support::clientlib::retry_ed25519;
use support::mariadb::{MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER, ED_PASSWORD, ED_USER};
use support::proxy::TestProxy;
use support::rawclient::{tracked_variables, RawClient};
use support::sql::Statements;

fn start() -> (MariaDb, TestProxy) {
    let primary = MariaDb::start(MariaDbOptions::default());
    let proxy = TestProxy::start(&primary);
    (primary, proxy)
}

async fn connect(proxy: &TestProxy, infile: Option<&str>) -> Conn {
    let opts = Opts::from_url(&proxy.url(APP_USER, APP_PASSWORD)).unwrap();
    let opts = OptsBuilder::from_opts(opts)
        .max_allowed_packet(Some(64 << 20))
        .local_infile_handler(infile.map(|path| WhiteListFsHandler::new(&[path][..])));
    Conn::new(opts).await.expect("connect through the proxy")
}

#[tokio::test(flavor = "multi_thread")]
async fn prepared_statements_round_trip_every_common_type() {
    let (_primary, proxy) = start();
    let mut conn = connect(&proxy, None).await;
    conn.run(
        "CREATE TABLE types (id INT PRIMARY KEY, i BIGINT, d DOUBLE, s VARCHAR(20), b BLOB,
         dt DATETIME(6), n INT NULL, amount DECIMAL(10, 3))",
    )
    .await;
    let insert = conn
        .prep("INSERT INTO types VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        .await
        .unwrap();
    conn.exec_batch(
        &insert,
        (1..=50).map(|i| {
            (
                i,
                -(i as i64) << 40,
                i as f64 / 3.0,
                format!("row {i}"),
                vec![i as u8; i as usize * 10],
                "2026-11-30 12:34:56.789012",
                None::<i32>,
                "1234.567",
            )
        }),
    )
    .await
    .unwrap();
    let select = conn
        .prep("SELECT i, d, s, b, dt, n, amount FROM types WHERE id = ?")
        .await
        .unwrap();
    for i in [1, 25, 50] {
        let row: Row = conn.exec_first(&select, (i,)).await.unwrap().unwrap();
        assert_eq!(row.get::<i64, _>(0), Some(-(i as i64) << 40));
        assert_eq!(row.get::<f64, _>(1), Some(i as f64 / 3.0));
        assert_eq!(row.get::<String, _>(2), Some(format!("row {i}")));
        assert_eq!(
            row.get::<Vec<u8>, _>(3),
            Some(vec![i as u8; i as usize * 10])
        );
        assert_eq!(row.as_ref(5), Some(&Value::NULL));
        assert_eq!(row.get::<String, _>(6), Some("1234.567".into()));
    }
    let count: Vec<(u64, f64)> = conn
        .exec("SELECT COUNT(*), SUM(d) FROM types WHERE id > ?", (10,))
        .await
        .unwrap();
    assert_eq!(count[0].0, 40);
    conn.close(select).await.unwrap();
    conn.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn multi_statements_and_procedures_return_every_result_set() {
    let (_primary, proxy) = start();
    let mut conn = connect(&proxy, None).await;
    conn.run(
        "CREATE PROCEDURE two_sets() BEGIN SELECT 1 AS a; SELECT 'x' AS b UNION ALL SELECT 'y'; END",
    ).await;
    let mut result = conn
        .query_iter("SELECT 1; SELECT 2, 3; DO 1; SELECT 'a' UNION ALL SELECT 'b'")
        .await
        .unwrap();
    let mut sets: Vec<Vec<Vec<Value>>> = Vec::new();
    while !result.is_empty() {
        let rows: Vec<Row> = result.collect().await.unwrap();
        sets.push(rows.into_iter().map(Row::unwrap).collect());
    }
    drop(result);
    let text = |v: &str| Value::Bytes(v.as_bytes().to_vec());
    assert_eq!(
        sets,
        vec![
            vec![vec![text("1")]],
            vec![vec![text("2"), text("3")]],
            vec![],
            vec![vec![text("a")], vec![text("b")]],
        ]
    );
    for text_protocol in [true, false] {
        let sets = if text_protocol {
            let mut r = conn.query_iter("CALL two_sets()").await.unwrap();
            collect_sets(&mut r).await
        } else {
            let mut r = conn.exec_iter("CALL two_sets()", ()).await.unwrap();
            collect_sets(&mut r).await
        };
        assert_eq!(
            sets[0],
            vec!["1".to_string()],
            "text protocol: {text_protocol}"
        );
        assert_eq!(sets[1], vec!["x".to_string(), "y".into()]);
    }
    conn.disconnect().await.unwrap();
}

async fn collect_sets<P: mysql_async::prelude::Protocol>(
    result: &mut mysql_async::QueryResult<'_, '_, P>,
) -> Vec<Vec<String>> {
    let mut sets = Vec::new();
    while !result.is_empty() {
        let rows: Vec<Row> = result.collect().await.unwrap();
        // The text protocol sends every value as text, the binary one as typed values.
        let rows: Vec<String> = rows
            .into_iter()
            .map(|r| match r.as_ref(0) {
                Some(Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(Value::Int(i)) => i.to_string(),
                other => panic!("unexpected value {other:?}"),
            })
            .collect();
        if !rows.is_empty() {
            sets.push(rows);
        }
    }
    sets
}

#[tokio::test(flavor = "multi_thread")]
async fn a_20_mib_blob_round_trips_through_both_protocols() {
    let (primary, proxy) = start();
    let mut conn = connect(&proxy, None).await;
    conn.run("CREATE TABLE blobs (id INT PRIMARY KEY, b LONGBLOB)")
        .await;
    let blob: Vec<u8> = (0..20 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    conn.exec_drop("INSERT INTO blobs VALUES (1, ?)", (blob.clone(),))
        .await
        .unwrap();
    // Text protocol: the row is larger than one packet.
    let text: Vec<u8> = conn.one("SELECT b FROM blobs WHERE id = 1").await;
    assert!(text == blob, "text protocol returned {} bytes", text.len());
    let binary: Vec<u8> = conn
        .exec_first("SELECT b FROM blobs WHERE id = ?", (1,))
        .await
        .unwrap()
        .unwrap();
    assert!(
        binary == blob,
        "binary protocol returned {} bytes",
        binary.len()
    );
    // And the primary has exactly those bytes.
    let md5_direct = primary.sql("SELECT MD5(b) FROM sbtest.blobs WHERE id = 1");
    let md5_proxy: String = conn.one("SELECT MD5(b) FROM blobs WHERE id = 1").await;
    assert_eq!(md5_direct, md5_proxy);
    conn.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn load_data_local_infile_uploads_the_whole_file() {
    let (primary, proxy) = start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.csv");
    let content: String = (0..20_000)
        .map(|i| format!("{i},value number {i}\n"))
        .collect();
    std::fs::write(&path, &content).unwrap();
    let path = path.display().to_string();
    let mut conn = connect(&proxy, Some(&path)).await;
    conn.run("CREATE TABLE loaded (id INT PRIMARY KEY, v VARCHAR(64))")
        .await;
    conn.run(format!(
        "LOAD DATA LOCAL INFILE '{path}' INTO TABLE loaded FIELDS TERMINATED BY ','"
    ))
    .await;
    assert_eq!(conn.affected_rows(), 20_000);
    assert_eq!(
        primary.sql("SELECT COUNT(*), MAX(id) FROM sbtest.loaded"),
        "20000\t19999"
    );
    // The connection is still in step afterwards.
    let one: u32 = conn.one("SELECT 1").await;
    assert_eq!(one, 1);
    conn.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn change_user_reset_ping_and_kill() {
    let (_primary, proxy) = start();
    let to_ed = mysql_async::ChangeUserOpts::default()
        .with_user(Some(ED_USER.into()))
        .with_pass(Some(ED_PASSWORD.into()));
    // A refused attempt leaves the connection unusable: each retry starts afresh.
    let mut conn = retry_ed25519(|| async {
        let mut conn = connect(&proxy, None).await;
        conn.query_drop("SET @marker = 42").await?;
        conn.change_user(to_ed.clone()).await.map(|()| conn)
    })
    .await
    .unwrap();
    let (user, marker): (String, Option<u32>) = conn.one("SELECT CURRENT_USER(), @marker").await;
    assert_eq!((user.as_str(), marker), ("eduser@%", None));

    let wrong = mysql_async::ChangeUserOpts::default()
        .with_user(Some(APP_USER.into()))
        .with_pass(Some("wrong".into()));
    let err = conn.change_user(wrong).await.unwrap_err();
    assert!(err.to_string().contains("1045"), "{err}");

    let mut conn = connect(&proxy, None).await;
    conn.run("SET @marker = 7").await;
    assert!(
        conn.reset().await.unwrap(),
        "COM_RESET_CONNECTION is supported"
    );
    let marker: Option<u32> = conn.one("SELECT @marker").await;
    assert_eq!(marker, None, "the reset reached the primary");
    conn.ping().await.unwrap();

    // KILL QUERY from another connection interrupts a running statement (connection ids are
    // the primary's), and the victim's connection stays usable.
    let mut victim = connect(&proxy, None).await;
    let victim_id = victim.id();
    let sleeper = tokio::spawn(async move {
        let slept = victim.query_first::<u64, _>("SELECT SLEEP(60)").await;
        (slept, victim)
    });
    let mut killer = connect(&proxy, None).await;
    wait_until_running(&mut killer, victim_id).await;
    killer.run(format!("KILL QUERY {victim_id}")).await;
    let (slept, mut victim) = tokio::time::timeout(Duration::from_secs(30), sleeper)
        .await
        .expect("KILL QUERY ends the SLEEP")
        .unwrap();
    match slept {
        Err(mysql_async::Error::Server(e)) => assert_eq!(e.code, 1317, "{e}"), // ER_QUERY_INTERRUPTED
        other => panic!("the SLEEP was not interrupted: {other:?}"),
    }
    let one: u32 = victim.one("SELECT 1").await;
    assert_eq!(one, 1);
    killer.disconnect().await.unwrap();
}

async fn wait_until_running(conn: &mut Conn, id: u32) {
    for _ in 0..600 {
        let n: u64 = conn
            .one(format!(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id} AND INFO LIKE 'SELECT SLEEP%'"
            )).await;
        if n == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("connection {id} never started its SLEEP");
}

#[test]
fn com_init_db_com_process_kill_and_cursors_through_the_raw_client() {
    let (primary, proxy) = start();
    primary.sql("CREATE DATABASE other; CREATE TABLE sbtest.c (id INT PRIMARY KEY); INSERT INTO sbtest.c VALUES (1),(2),(3),(4),(5)");
    for deprecate_eof in [false, true] {
        let extra = if deprecate_eof {
            CapabilityFlags::CLIENT_DEPRECATE_EOF
        } else {
            CapabilityFlags::empty()
        };
        let mut client = RawClient::connect(proxy.addr(), APP_USER, APP_PASSWORD, extra);
        // COM_INIT_DB
        let reply = client.command(b"\x02other");
        assert_eq!(reply.error, None);
        assert_eq!(
            client.query("SELECT DATABASE()").first_values,
            vec![Some(b"other".to_vec())]
        );
        let reply = client.command(b"\x02no_such_db");
        assert_eq!(reply.error.map(|e| e.0), Some(1049));
        client.command(b"\x02sbtest");

        // A read-only cursor, fetched two rows at a time.
        let (stmt, columns) = client.prepare("SELECT id FROM c ORDER BY id");
        let opened = client.execute_with_cursor(stmt, columns);
        assert!(opened.contains(StatusFlags::SERVER_STATUS_CURSOR_EXISTS));
        let mut fetched = Vec::new();
        loop {
            let (rows, status) = client.fetch(stmt, 2);
            fetched.push(rows);
            if status.contains(StatusFlags::SERVER_STATUS_LAST_ROW_SENT) {
                break;
            }
            assert!(fetched.len() < 10, "the cursor never ended");
        }
        assert_eq!(fetched.iter().sum::<usize>(), 5, "{fetched:?}");
        let mut close = vec![0x19];
        close.extend_from_slice(&stmt.to_le_bytes());
        client.send(&close);
        assert_eq!(
            client.query("SELECT 1").error,
            None,
            "in step after the cursor"
        );

        // COM_PROCESS_KILL of another proxied connection.
        let victim = RawClient::connect(proxy.addr(), APP_USER, APP_PASSWORD, extra);
        let mut kill = vec![0x0C];
        kill.extend_from_slice(&victim.connection_id.to_le_bytes());
        assert_eq!(client.command(&kill).error, None);
        let mut victim = victim;
        assert!(
            victim.is_closed_within(Duration::from_secs(30)),
            "the killed connection is closed"
        );
    }
}

#[test]
fn session_tracking_the_client_asks_for_reaches_it_and_nothing_else_does() {
    let (primary, proxy) = start();
    primary.sql("CREATE TABLE sbtest.t (id INT AUTO_INCREMENT PRIMARY KEY); CREATE DATABASE other");
    // MariaDB's own defaults (the test servers track what strongsync needs): new sessions
    // track no last_gtid, so what the proxy adds must not reach the client.
    primary.sql(
        "SET GLOBAL session_track_system_variables = DEFAULT; \
         SET GLOBAL session_track_state_change = OFF",
    );
    for deprecate_eof in [false, true] {
        let mut extra = CapabilityFlags::CLIENT_SESSION_TRACK;
        if deprecate_eof {
            extra |= CapabilityFlags::CLIENT_DEPRECATE_EOF;
        }
        let mut client = RawClient::connect(proxy.addr(), APP_USER, APP_PASSWORD, extra);
        let conn = client.connection_id;

        // The server's default trackers: no last_gtid, even though the proxy tracks it.
        let reply = client.query("INSERT INTO t VALUES ()");
        assert_eq!(all_tracked(&reply), Vec::<String>::new());
        let reply = client.query("SET autocommit = 0");
        assert_eq!(all_tracked(&reply), vec!["autocommit=OFF"]);
        client.query("SET autocommit = 1");
        let reply = client.query("USE other");
        assert_eq!(all_tracked(&reply), vec!["schema=other"]);
        client.query("USE sbtest");

        // The client asks for last_gtid itself: it gets exactly the primary's GTID.
        client.query("SET SESSION session_track_system_variables = 'last_gtid,autocommit'");
        let reply = client.query("INSERT INTO t VALUES ()");
        let last = primary.sql("SELECT @@global.gtid_binlog_pos");
        assert_eq!(all_tracked(&reply), vec![format!("last_gtid={last}")]);
        assert_eq!(proxy.recorder.gtids_of(conn).last(), Some(&last));

        // And stops asking: the data stops, the proxy still follows commits.
        client.query("SET SESSION session_track_system_variables = 'autocommit'");
        let reply = client.query("INSERT INTO t VALUES ()");
        assert_eq!(all_tracked(&reply), Vec::<String>::new());
        let last = primary.sql("SELECT @@global.gtid_binlog_pos");
        assert_eq!(proxy.recorder.gtids_of(conn).last(), Some(&last));
    }

    // A client without CLIENT_SESSION_TRACK reads every OK as the primary would send it.
    let mut client = RawClient::connect(
        proxy.addr(),
        APP_USER,
        APP_PASSWORD,
        CapabilityFlags::empty(),
    );
    let reply = client.query("UPDATE t SET id = id + 1000 ORDER BY id DESC");
    assert_eq!(reply.error, None);
    let ok = &reply.oks[0];
    assert!(
        ok.info_str()
            .unwrap_or_default()
            .starts_with("Rows matched: 6"),
        "{ok:?}"
    );
    assert!(!ok
        .status_flags()
        .contains(StatusFlags::SERVER_SESSION_STATE_CHANGED));
}

fn all_tracked(reply: &support::rawclient::Reply) -> Vec<String> {
    assert_eq!(reply.error, None);
    reply.oks.iter().flat_map(tracked_variables).collect()
}
