//! The replica side of strong sync, driven by hand-made replicas: which events are flagged for
//! ACK, ACKs releasing parked commits, ACKs that are lost or garbled, a replica that reconnects
//! before it ACKed, and replicas that do not ask for semisync.

use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use strongsync::config::{DurabilityConfig, OnTimeout};
use strongsync::durability::State;
use support::fake_replica::{FakeReplica, HEARTBEAT_EVENT, QUERY_EVENT, XID_EVENT};
use support::mariadb::{wait_for, MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER};
use support::proxy::{free_port, ProxyProcess, TestProxy};
use support::sql::Statements;
use support::strong::joined;

const PATIENCE: Duration = Duration::from_secs(30);

/// A primary with a table, and the proxy in front of it with quorum 1 and `block` (nothing is
/// ever released without an ACK), asking again for a missing ACK after `nudge`.
fn setup(nudge: Duration) -> (MariaDb, TestProxy) {
    let primary = MariaDb::start(MariaDbOptions::default());
    primary.sql("CREATE TABLE sbtest.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)");
    let mut config = TestProxy::config(&primary);
    config.durability = DurabilityConfig {
        quorum: 1,
        on_timeout: OnTimeout::Block,
        ack_timeout: Duration::from_secs(3600),
        ack_nudge_after: nudge,
        ..DurabilityConfig::default()
    };
    let proxy = TestProxy::start_with(config);
    (primary, proxy)
}

async fn client(proxy: &TestProxy) -> Conn {
    Conn::new(Opts::from_url(&proxy.url(APP_USER, APP_PASSWORD)).unwrap())
        .await
        .unwrap()
}

fn parked(proxy: &TestProxy) -> usize {
    proxy.durability().status().parked
}

fn released(proxy: &TestProxy, outcome: &str) -> u64 {
    proxy.durability().status().released[outcome]
}

/// Waits for the parked `insert` to be answered, released by its quorum (the only release so
/// far); returns what its task returned.
async fn released_by_the_quorum<T>(insert: tokio::task::JoinHandle<T>, proxy: &TestProxy) -> T {
    let answer = joined(insert).await;
    assert_eq!(released(proxy, "quorum"), 1);
    answer
}

/// Starts an INSERT in the background and waits until it is parked.
async fn parked_insert(proxy: &TestProxy) -> tokio::task::JoinHandle<Conn> {
    let mut conn = client(proxy).await;
    let before = parked(proxy);
    let insert = tokio::spawn(async move {
        conn.run("INSERT INTO t (v) VALUES (1)").await;
        conn
    });
    wait_for("the INSERT to park", PATIENCE, || {
        parked(proxy) == before + 1
    });
    insert
}

#[tokio::test(flavor = "multi_thread")]
async fn only_transaction_ends_are_flagged_and_an_ack_releases_the_commit() {
    let (_primary, proxy) = setup(Duration::from_secs(3600));
    let mut replica = FakeReplica::start(proxy.addr(), 7, true, "");
    wait_for("the replica to register", PATIENCE, || {
        proxy.durability().status().replicas.len() == 1
    });
    let insert = parked_insert(&proxy).await;

    // The dump starts at the beginning of the binlog: the table's CREATE (a standalone
    // transaction ending in its QUERY event) is flagged first, then the INSERT's XID.
    let mut unflagged = Vec::new();
    let mut flagged_kinds = Vec::new();
    let flagged = replica.until(|e| {
        if e.ack_requested {
            flagged_kinds.push(e.kind);
        } else {
            unflagged.push(e.kind);
        }
        e.ack_requested && e.kind == XID_EVENT
    });
    assert_eq!(
        flagged_kinds,
        [QUERY_EVENT, XID_EVENT],
        "only transaction ends are flagged"
    );
    assert!(
        unflagged.contains(&162),
        "its GTID event came unflagged: {unflagged:?}"
    );
    assert_eq!(parked(&proxy), 1, "no ACK yet: still parked");

    replica.ack_event(&flagged);
    let conn = released_by_the_quorum(insert, &proxy).await;
    assert_eq!(proxy.durability().status().state, State::Strong);
    let acked = proxy.durability().status().replicas[0].acked.unwrap();
    assert_eq!(acked.offset, u64::from(flagged.log_pos));

    // After a flagged event the next packet has sequence id 1 (protocol.md §4.5).
    let next = replica.next_event().unwrap();
    assert_eq!(next.seq, 1, "{next:?}");
    conn.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_ack_is_asked_for_again_with_a_flagged_heartbeat() {
    let (_primary, proxy) = setup(Duration::from_millis(300));
    let mut replica = FakeReplica::start(proxy.addr(), 7, true, "");
    let insert = parked_insert(&proxy).await;
    let flagged = replica.until(|e| e.ack_requested && e.kind == XID_EVENT);
    // The ACK is "lost": the proxy must ask again.
    let reminder = replica.until(|e| e.ack_requested);
    assert_eq!(reminder.kind, HEARTBEAT_EVENT, "{reminder:?}");
    assert_eq!(
        reminder.log_pos, flagged.log_pos,
        "at the position the replica has reached"
    );
    replica.ack_event(&reminder);
    released_by_the_quorum(insert, &proxy).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_ack_nudge_after_applies_to_a_dump_already_running() {
    let (_primary, proxy) = setup(Duration::from_secs(3600));
    let mut replica = FakeReplica::start(proxy.addr(), 7, true, "");
    let insert = parked_insert(&proxy).await;
    let flagged = replica.until(|e| e.ack_requested && e.kind == XID_EVENT);
    // Reloaded while the dump runs and its ACK is missing: asked again at the new interval.
    proxy.durability().reconfigure(DurabilityConfig {
        ack_nudge_after: Duration::from_millis(100),
        ..proxy.durability().config()
    });
    let reminder = replica.until(|e| e.ack_requested);
    assert_eq!(
        (reminder.kind, reminder.log_pos),
        (HEARTBEAT_EVENT, flagged.log_pos)
    );
    replica.ack_event(&reminder);
    joined(insert).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_that_reconnects_before_acking_counts_by_its_gtid_state() {
    let (_primary, proxy) = setup(Duration::from_secs(3600));
    let replica = FakeReplica::start(proxy.addr(), 7, true, "");
    let mut conn = client(&proxy).await;
    let id = conn.id();
    let insert = tokio::spawn(async move {
        conn.run("INSERT INTO t (v) VALUES (1)").await;
    });
    wait_for("the INSERT to park", PATIENCE, || parked(&proxy) == 1);
    let mut replica = replica;
    replica.until(|e| e.ack_requested && e.kind == XID_EVENT);
    drop(replica); // gone before its ACK

    let gtid = proxy
        .recorder
        .gtids_of(id)
        .pop()
        .expect("the commit was reported");
    let _back = FakeReplica::start(proxy.addr(), 7, true, &gtid);
    released_by_the_quorum(insert, &proxy).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_without_semisync_gets_plain_events_after_the_quorum_and_never_counts() {
    let (_primary, proxy) = setup(Duration::from_secs(3600));
    let mut plain = FakeReplica::start(proxy.addr(), 8, false, "");
    let mut semisync = FakeReplica::start(proxy.addr(), 9, true, "");
    let insert = parked_insert(&proxy).await;
    // The semisync replica gets the transaction, flagged; the async one only once the quorum
    // holds it (`async_replicas = "after_quorum"`, the default), and without the flag.
    let flagged = semisync.until(|e| e.ack_requested && e.kind == XID_EVENT);
    semisync.ack_event(&flagged);
    joined(insert).await;
    let xid = plain.until(|e| e.kind == XID_EVENT);
    assert!(!xid.ack_requested);
    assert_eq!(xid.log_pos, flagged.log_pos);

    // An async replica that ACKs anyway is disconnected, and its ACK counts for
    // nothing.
    let second = parked_insert(&proxy).await;
    let unacked = semisync.until(|e| e.ack_requested && e.kind == XID_EVENT);
    plain.ack_event(&xid);
    assert!(plain.is_closed_within(PATIENCE));
    assert_eq!(
        parked(&proxy),
        1,
        "an async replica does not release anything"
    );
    let status = proxy.durability().status();
    assert_eq!(status.replicas.iter().filter(|r| r.semisync).count(), 1);
    semisync.ack_event(&unacked);
    joined(second).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_garbled_ack_or_one_beyond_the_stream_disconnects_only_that_replica() {
    let primary = MariaDb::start(MariaDbOptions::default());
    primary.sql("CREATE TABLE sbtest.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)");
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let listen_text = listen.to_string();
    let proxy = ProxyProcess::start(
        &[
            "--listen",
            &listen_text,
            "--primary",
            &primary.addr(),
            "--durability-on-timeout",
            "block",
        ],
        &[],
        listen,
    );
    let mut good = FakeReplica::start(listen, 10, true, "");
    let mut garbled = FakeReplica::start(listen, 11, true, "");
    let mut beyond = FakeReplica::start(listen, 12, true, "");

    garbled.send_packet(b"\xee\x01\x02");
    beyond.ack(1 << 40, "mysql-bin.000001");
    assert!(
        garbled.is_closed_within(PATIENCE),
        "the garbled ACK's sender is disconnected"
    );
    assert!(
        beyond.is_closed_within(PATIENCE),
        "the impossible ACK's sender is disconnected"
    );
    let log = proxy.log();
    assert!(log.contains("malformed semisync ACK"), "{log}");
    assert!(log.contains("beyond anything relayed"), "{log}");

    // The good replica and the clients carry on: a commit is released by its ACK.
    let url = format!("mysql://{APP_USER}:{APP_PASSWORD}@{listen}/sbtest?prefer_socket=false");
    let mut conn = Conn::new(Opts::from_url(&url).unwrap()).await.unwrap();
    let insert = tokio::spawn(async move { conn.query_drop("INSERT INTO t (v) VALUES (1)").await });
    let flagged = good.until(|e| e.ack_requested && e.kind == XID_EVENT);
    good.ack_event(&flagged);
    joined(insert).await.expect("committed");
}

#[tokio::test(flavor = "multi_thread")]
async fn of_the_transactions_relayed_in_one_batch_only_the_last_asks_for_an_ack() {
    let (primary, proxy) = setup(Duration::from_secs(3600));
    // Written before the replica connects, so that its dump reads them in a few large batches.
    let inserts: String = (0..200)
        .map(|v| format!("INSERT INTO sbtest.t (v) VALUES ({v});"))
        .collect();
    primary.sql(&inserts);
    let mut replica = FakeReplica::start(proxy.addr(), 7, true, "");

    let (mut xids, mut flagged_xids) = (0, 0);
    let mut last_xid = 0;
    let mut previous: Option<(u8, bool)> = None;
    let covering = loop {
        let event = replica.next_event().expect("the dump goes on");
        // Sequence ids restart at 1 after a flagged event only (protocol.md §4.5): an event
        // left unflagged must not reset them.
        if let Some((seq, flagged)) = previous {
            let expected = if flagged { 1 } else { seq.wrapping_add(1) };
            assert_eq!(event.seq, expected, "{event:?}");
        }
        previous = Some((event.seq, event.ack_requested));
        if event.kind == XID_EVENT {
            xids += 1;
            flagged_xids += usize::from(event.ack_requested);
            last_xid = event.log_pos;
        }
        if xids == 200 && event.ack_requested && event.log_pos >= last_xid {
            break event;
        }
    };
    assert!(
        (1..200).contains(&flagged_xids),
        "one ACK asked per batch, not per transaction: {flagged_xids} of 200 flagged"
    );
    // One ACK covers the whole batch.
    replica.ack_event(&covering);
    wait_for("the replica to hold every transaction", PATIENCE, || {
        proxy.durability().status().replicas[0]
            .holds_through
            .is_some_and(|p| p.offset >= u64::from(last_xid))
    });
    let insert = parked_insert(&proxy).await;
    let flagged = replica.until(|e| e.ack_requested && e.kind == XID_EVENT);
    replica.ack_event(&flagged);
    joined(insert).await;
}
