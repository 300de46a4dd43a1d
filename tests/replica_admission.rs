//! Who counts as a replica: only a connection whose binlog dump the primary accepted. Clients
//! that speak the whole replica protocol through the SQL port — without `REPLICATION SLAVE`, or
//! with it but asking for what the primary refuses — change nothing: no parked commit is
//! released, no replica displaced, nothing shows in `/status`, metrics or failover candidates.
//! And a replica that reconnects is credited with exactly what it holds, domain by domain.

use std::time::Duration;

use strongsync::config::{AsyncReplicas, DurabilityConfig, OnTimeout};
use support::admin;
use support::fake_replica::FakeReplica;
use support::mariadb::{wait_for, REPL_PASSWORD, REPL_USER};
use support::strong::{
    answered, durability, newest_gtid, position_holds, spawn_watched, Strong, PATIENCE,
};
use support::tcp_relay::{Direction, TcpRelay};

#[tokio::test(flavor = "multi_thread")]
async fn clients_that_speak_the_replica_protocol_but_are_refused_a_dump_change_nothing() {
    let s = Strong::start(
        2,
        durability(2, OnTimeout::Block, Duration::from_secs(3600)),
    );
    let primary = &s.topology.primary;
    primary.sql(
        "CREATE USER 'plain'@'%' IDENTIFIED BY 'plain-secret'; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON sbtest.* TO 'plain'@'%'",
    );
    // Replica B stops: a commit parks with A's acknowledgement only (quorum 2).
    s.stop_io(1);
    s.wait_semisync(1);
    let commit = spawn_watched(
        s.client().await,
        "INSERT INTO t (v) VALUES (1)",
        vec![s.witness(1)],
    );
    s.wait_parked(1);
    let gtid = newest_gtid(primary, 0);
    wait_for("A to acknowledge the parked commit", PATIENCE, || {
        admin::status(s.proxy.admin_addr())["replicas"][0]["acked_gtid_position"]
            .as_str()
            .is_some_and(|held| position_holds(held, &gtid))
    });
    let a = s.topology.replicas[0].server_id();
    let before = admin::status(s.proxy.admin_addr());
    let metrics_before = admin::metrics(s.proxy.admin_addr());
    let far_ahead = {
        let seq: u64 = gtid.rsplit('-').next().unwrap().parse().unwrap();
        format!("0-1-{}", seq + 1_000_000)
    };

    // 1. An application account without REPLICATION SLAVE, claiming A's server id and every
    //    transaction there will ever be, with semisync.
    let refused = FakeReplica::attempt(
        s.proxy.addr(),
        ("plain", "plain-secret"),
        a,
        true,
        &far_ahead,
        &[],
    )
    .expect_err("the primary refuses the dump");
    assert_eq!(refused.code, 1227, "{}", refused.message);
    // What would be an ACK of everything is, on a client connection, an unknown command.
    let mut client = refused.client;
    let mut ack = vec![0xEF];
    ack.extend_from_slice(&u64::MAX.to_le_bytes());
    ack.extend_from_slice(b"mysql-bin.999999");
    let reply = client.command(&ack);
    assert!(
        reply.error.is_some(),
        "forwarded to the primary, which refuses it"
    );
    drop(client);

    // 2. The replication account, asking for GTIDs the primary's binlog does not have. (Under
    //    A's server id the primary itself would end A's dump before refusing this one: a
    //    replication account is trusted with that much.)
    let refused = FakeReplica::attempt(
        s.proxy.addr(),
        (REPL_USER, REPL_PASSWORD),
        77,
        true,
        &far_ahead,
        &[],
    )
    .expect_err("the primary refuses the dump");
    assert_eq!(refused.code, 1236, "{}", refused.message);
    drop(refused);

    // 3. The replication account, with semisync switched on in the primary's own session
    //    (a form the proxy does not answer itself): the proxy refuses the dump.
    let refused = FakeReplica::attempt(
        s.proxy.addr(),
        (REPL_USER, REPL_PASSWORD),
        a,
        false,
        &gtid,
        &["SET @rpl_semi_sync_slave := 1"],
    )
    .expect_err("the proxy refuses the dump");
    assert_eq!(refused.code, 1236, "{}", refused.message);
    assert!(
        refused.message.contains("strongsync"),
        "{}",
        refused.message
    );
    drop(refused);

    // Every attempt is over (each got its ERR): nothing changed.
    assert_eq!(s.parked(), 1, "the commit is still parked");
    let after = admin::status(s.proxy.admin_addr());
    assert_eq!(
        admin::replica_standing(&after),
        admin::replica_standing(&before)
    );
    let metrics_after = admin::metrics(s.proxy.admin_addr());
    assert_eq!(
        admin::replica_series(&metrics_after),
        admin::replica_series(&metrics_before)
    );
    assert_eq!(
        metrics_after.get("strongsync_replica_dumps_refused_total")
            - metrics_before.get("strongsync_replica_dumps_refused_total"),
        3.0
    );

    // B comes back: the OK arrives once B has the transaction — B's own record says so.
    s.start_io(1);
    let watched = answered(commit).await;
    watched.result.expect("OK");
    assert!(
        position_holds(&watched.received[0], &gtid),
        "B had received {} when the OK came, not {gtid}",
        watched.received[0]
    );
    assert_eq!(s.released("quorum"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_reconnecting_with_interleaved_domains_is_credited_with_exactly_what_it_holds() {
    // A holds the commit's domain (0) only up to an earlier transaction, and domain 1 up to a
    // transaction written after the commit: a single position made of its connect state would
    // cover the commit.
    // B relays everything through the proxy without semisync, as the primary writes it
    // (`async_replicas = "immediate"`: no quorum holds anything here): the proxy learns where
    // each transaction ends, and B never counts.
    let s = Strong::start(
        2,
        DurabilityConfig {
            async_replicas: AsyncReplicas::Immediate,
            ..durability(1, OnTimeout::Block, Duration::from_secs(3600))
        },
    );
    let primary = &s.topology.primary;
    s.stop_io(0);
    s.stop_io(1);
    s.wait_semisync(0);
    s.attach(1, false);
    primary.sql("INSERT INTO sbtest.t (v) VALUES (10)");
    let g0_first = newest_gtid(primary, 0);
    let commit = spawn_watched(
        s.client().await,
        "INSERT INTO t (v) VALUES (11)",
        vec![s.witness(0)],
    );
    s.wait_parked(1);
    let g0_commit = newest_gtid(primary, 0);
    primary.sql("SET SESSION gtid_domain_id = 1; INSERT INTO sbtest.t (v) VALUES (20)");
    let g1_later = newest_gtid(primary, 1);
    wait_for("B to relay both domains", PATIENCE, || {
        position_holds(&s.topology.replicas[1].gtid_slave_pos(), &g1_later)
    });

    // A catches up straight from the primary, until 0-… before the commit and 1-… after it.
    let a = &s.topology.replicas[0];
    a.sql(&format!(
        "STOP SLAVE; CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}; \
         START SLAVE UNTIL master_gtid_pos = '{g0_first},{g1_later}'",
        primary.port()
    ));
    let held = format!("{g0_first},{g1_later}");
    wait_for("A to stop at its UNTIL position", PATIENCE, || {
        a.gtid_slave_pos() == held
            && a.slave_status()
                .get("Slave_SQL_Running")
                .map(String::as_str)
                == Some("No")
    });
    assert!(!position_holds(&a.gtid_slave_pos(), &g0_commit));

    // A reconnects through the proxy, its stream slowed so that what the proxy credits on
    // connecting and what A receives later cannot be confused.
    let slow = TcpRelay::start(s.proxy.addr());
    slow.set_delay(Direction::FromTarget, Duration::from_millis(500));
    a.sql(&format!(
        "STOP SLAVE; SET GLOBAL rpl_semi_sync_slave_enabled = ON; \
         CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}; START SLAVE",
        slow.port()
    ));
    let watched = answered(commit).await;
    watched.result.expect("OK");
    assert!(
        position_holds(&watched.received[0], &g0_commit),
        "A had received {} when the OK for {g0_commit} came",
        watched.received[0]
    );
    // What the proxy credits A with is what A itself says it holds.
    s.topology.wait_replicas_caught_up();
    let status = admin::status(s.proxy.admin_addr());
    let credited = status["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["server_id"] == a.server_id())
        .expect("A is listed")["acked_gtid_position"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(credited, a.gtid_slave_pos());
}
