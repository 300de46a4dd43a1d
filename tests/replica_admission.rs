//! Who counts as a replica: only a connection whose binlog dump the primary accepted. Clients
//! that speak the whole replica protocol through the SQL port — without `REPLICATION SLAVE`, or
//! with it but asking for what the primary refuses — change nothing: no parked commit is
//! released, no replica displaced, nothing shows in `/status`, metrics or failover candidates
//! (on both servers). And on MariaDB a replica that reconnects is credited with exactly what it
//! holds, domain by domain (MySQL's sources: `mysql_replica_admission.rs`).

use std::net::SocketAddr;
use std::time::Duration;

use strongsync::config::{AsyncReplicas, DurabilityConfig};
use support::admin;
use support::each_server;
use support::fake_replica::FakeReplica;
use support::mariadb::{wait_for, REPL_PASSWORD, REPL_USER};
use support::mysql_fake_replica::{Answered, HandMade, Refusal};
use support::strong::{
    answered, blocking, newest_gtid, ok_once_held, position_holds, Cluster, Strong, PATIENCE,
};
use support::tcp_relay::{Direction, TcpRelay};

/// The account without `REPLICATION SLAVE` that poses as a replica.
const PLAIN_USER: &str = "plain";
const PLAIN_PASSWORD: &str = "plain-secret";

/// A commit parks with replica A's ACK only (quorum 2, B stopped); three clients that speak
/// the replica protocol through the SQL port are refused their dump (each server's own way:
/// [`mariadb_impostors`], [`mysql_impostors`]); nothing changes, and the commit's OK comes once
/// B has it.
async fn clients_that_speak_the_replica_protocol_but_are_refused_a_dump_change_nothing<
    C: Cluster,
>() {
    let s = Strong::<C>::start_on(2, blocking(2));
    s.topology.primary_sql(&format!(
        "CREATE USER '{PLAIN_USER}'@'%' IDENTIFIED BY '{PLAIN_PASSWORD}'; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON sbtest.* TO '{PLAIN_USER}'@'%'"
    ));
    s.topology.cache_password(PLAIN_USER, PLAIN_PASSWORD);
    s.topology.cache_password(REPL_USER, REPL_PASSWORD);
    // Replica B stops: a commit parks with A's ACK only (quorum 2).
    s.stop_io(1);
    s.wait_semisync(1);
    let commit = s
        .park("INSERT INTO t (v) VALUES (1)", vec![s.witness(1)])
        .await;
    let gtid = s.topology.newest_gtid();
    let a = s.topology.replica_server_id(0);
    wait_for("A to ACK the parked commit", PATIENCE, || {
        C::holds(&admin::credited(s.proxy.admin_addr(), a), &gtid)
    });
    assert!(!C::holds(&s.witness(1).received(), &gtid), "B is stopped");
    let before = admin::status(s.proxy.admin_addr());
    let metrics_before = admin::metrics(s.proxy.admin_addr());

    if C::MYSQL {
        mysql_impostors(s.proxy.addr(), a, &gtid);
    } else {
        mariadb_impostors(s.proxy.addr(), a, &gtid);
    }

    // Every attempt is over (each got its ERR): nothing changed.
    assert_eq!(s.parked(), 1, "the commit is still parked");
    let after = admin::status(s.proxy.admin_addr());
    assert_eq!(
        admin::replica_standing(&after),
        admin::replica_standing(&before)
    );
    assert!(
        !after.replicas.iter().any(|r| r.server_id == 77),
        "{after:#?}"
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
    assert!(!C::holds(&s.witness(1).received(), &gtid));

    // B comes back: the OK arrives once B has the transaction — B's own record says so.
    s.start_io(1);
    ok_once_held(commit, 0, C::holds, &gtid, "the commit B was away for").await;
    assert_eq!(s.released("quorum"), 1);
}

/// On MariaDB, through the proxy at `proxy`, with A's server id `a` and the parked commit
/// `gtid`: 1. the application account, claiming A's server id and every transaction there will
/// ever be, with semisync; 2. the replication account, asking for GTIDs the primary's binlog
/// does not have (under A's server id the primary itself would end A's dump before refusing
/// this one: a replication account is trusted with that much); 3. the replication account with
/// semisync switched on in the primary's own session, a form the proxy does not answer itself.
fn mariadb_impostors(proxy: SocketAddr, a: u32, gtid: &str) {
    let far_ahead = {
        let seq: u64 = gtid.rsplit('-').next().unwrap().parse().unwrap();
        format!("0-1-{}", seq + 1_000_000)
    };
    let refused = FakeReplica::attempt(
        proxy,
        (PLAIN_USER, PLAIN_PASSWORD),
        a,
        true,
        &far_ahead,
        &[],
    )
    .expect_err("the primary refuses the dump");
    assert_eq!(refused.code, 1227, "{}", refused.message);
    // What would be an ACK of everything is, on a client connection, an unknown command.
    let mut client = refused.client;
    let reply = client.command(&ack_of_everything("mysql-bin.999999"));
    assert!(
        reply.error.is_some(),
        "forwarded to the primary, which refuses it"
    );
    drop(client);

    let refused =
        FakeReplica::attempt(proxy, (REPL_USER, REPL_PASSWORD), 77, true, &far_ahead, &[])
            .expect_err("the primary refuses the dump");
    assert_eq!(refused.code, 1236, "{}", refused.message);
    drop(refused);

    let refused = FakeReplica::attempt(
        proxy,
        (REPL_USER, REPL_PASSWORD),
        a,
        false,
        gtid,
        &["SET @rpl_semi_sync_slave := 1"],
    )
    .expect_err("the proxy refuses the dump");
    assert_refused_by_the_proxy(refused.code, &refused.message);
}

/// The same three on MySQL 9.7, each as a 9.7 receiver does it up to its
/// `COM_BINLOG_DUMP_GTID` (`caching_sha2_password`, its setup queries, `COM_REGISTER_SLAVE`,
/// the semisync negotiation); the third under A's server id, refused by the proxy before the
/// primary sees it.
fn mysql_impostors(proxy: SocketAddr, a: u32, gtid: &str) {
    let (uuid, number) = gtid.rsplit_once(':').unwrap();
    let number: u64 = number.parse().unwrap();
    let far_ahead = [(uuid, 1, number + 1_000_000)];
    let mut plain = HandMade::login(proxy, PLAIN_USER, PLAIN_PASSWORD);
    let refused = plain
        .attempt_dump(a, true, &far_ahead, &[])
        .expect("the primary refuses the dump");
    assert_eq!(refused.code, 1227, "{}", refused.message);
    // What would be an ACK of everything is, on a client connection, an unknown command.
    let reply = plain.command(&ack_of_everything("binlog.999999"));
    assert!(
        matches!(reply, Answered::Err(Refusal { code: 1047, .. })),
        "forwarded to the primary, which does not know it: {reply:?}"
    );
    drop(plain);

    let mut repl = HandMade::login(proxy, REPL_USER, REPL_PASSWORD);
    let refused = repl
        .attempt_dump(77, true, &far_ahead, &[])
        .expect("the primary refuses the dump");
    assert_eq!(refused.code, 1236, "{}", refused.message);
    drop(repl);

    let mut repl = HandMade::login(proxy, REPL_USER, REPL_PASSWORD);
    let refused = repl
        .attempt_dump(
            a,
            false,
            &[(uuid, 1, number)],
            &["SET @rpl_semi_sync_replica := 1"],
        )
        .expect("the proxy refuses the dump");
    assert_refused_by_the_proxy(refused.code, &refused.message);
}

/// A semisync ACK of everything in binlog file `file`.
fn ack_of_everything(file: &str) -> Vec<u8> {
    let mut ack = vec![0xEF];
    ack.extend_from_slice(&u64::MAX.to_le_bytes());
    ack.extend_from_slice(file.as_bytes());
    ack
}

/// The dump was refused by strongsync itself, not by the primary.
fn assert_refused_by_the_proxy(code: u16, message: &str) {
    assert_eq!(code, 1236, "{message}");
    assert!(message.contains("strongsync"), "{message}");
}

each_server!(clients_that_speak_the_replica_protocol_but_are_refused_a_dump_change_nothing);

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_replica_reconnecting_with_interleaved_domains_is_credited_with_exactly_what_it_holds(
) {
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
            ..blocking(1)
        },
    );
    let primary = &s.topology.primary;
    s.stop_io(0);
    s.stop_io(1);
    s.wait_semisync(0);
    s.attach(1, false);
    primary.sql("INSERT INTO sbtest.t (v) VALUES (10)");
    let g0_first = newest_gtid(primary, 0);
    let commit = s
        .park("INSERT INTO t (v) VALUES (11)", vec![s.witness(0)])
        .await;
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
    let credited = admin::replica_record(&status, a.server_id()).acked_gtid_position;
    assert_eq!(credited, a.gtid_slave_pos());
}
