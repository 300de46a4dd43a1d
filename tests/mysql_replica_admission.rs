//! Who counts as a replica on MySQL 9.7, and with what: a replica whose GTID set spans several
//! sources is credited with exactly that set, source by source, and `/status` shows each
//! replica's ACKed GTID set as the replica's own sets bound it.
//!
//! A replica whose GTID set spans several sources (its own UUID, tags, a transaction of the
//! primary's it got without receiving it) is credited source by source: a commit it holds
//! counts by its connect state, one it lacks only once its own `RECEIVED_TRANSACTION_SET` has
//! it. `/status` bounds each replica's ACKed set by the server's `GTID_SUBSET`, with the
//! failover candidates that hold the whole watermark. (Clients refused a dump are in
//! `replica_admission.rs`, for both servers.)

use std::time::Duration;

use strongsync_proto::gtid::GtidPosition;
use support::admin;
use support::mariadb::wait_for;
use support::mysql::{sql_quote, MySql};
use support::mysql_gtid::gtid_set_holds;
use support::sql::Statements;
use support::strong::{answered, blocking, spawn_watched, Strong, PATIENCE};
use support::tcp_relay::{Direction, TcpRelay};
use support::topology::MySqlTopology;

type MySqlStrong = Strong<MySqlTopology>;

// === GTID sets ===

/// The primary's `server_uuid`.
fn primary_uuid(s: &MySqlStrong) -> String {
    s.topology.primary.sql("SELECT @@global.server_uuid")
}

/// The newest GTID the primary executed of `source` (`uuid` or `uuid:tag`).
fn newest_of(s: &MySqlStrong, source: &str) -> String {
    let executed = s.topology.primary.gtid_executed();
    let newest = support::mysql_gtid::newest_of(&executed, source)
        .unwrap_or_else(|| panic!("the primary executed no GTID of {source}"));
    format!("{source}:{newest}")
}

/// The sequence number of a `uuid[:tag]:n` GTID.
fn number_of(gtid: &str) -> u64 {
    gtid.rsplit(':').next().unwrap().parse().unwrap()
}

/// Whether everything in `set` is in `server`'s `gtid_executed` or its
/// `RECEIVED_TRANSACTION_SET`, as the server itself computes it (read now: both only grow).
fn server_has(server: &MySql, set: &str) -> bool {
    let answer = server.sql(&format!(
        "SELECT GTID_SUBSET(GTID_SUBTRACT({}, @@global.gtid_executed), \
         (SELECT RECEIVED_TRANSACTION_SET FROM performance_schema.replication_connection_status \
          WHERE CHANNEL_NAME = ''))",
        sql_quote(set)
    ));
    answer == "1"
}

// === Tests ===

#[tokio::test(flavor = "multi_thread")]
async fn mysql_a_replica_reconnecting_with_two_source_uuids_is_credited_with_exactly_what_it_holds()
{
    // Quorum 2: each commit parks until both replicas hold it. A is away while three commit:
    // one it will hold without receiving it (the primary's GTID, committed on A by hand), and
    // two it lacks although it holds their numbers under another source — its own UUID, and
    // the primary's UUID without the tag. A credit that mixed sources up would release them
    // as A connects.
    let s = MySqlStrong::start_on(2, blocking(2));
    let uuid = primary_uuid(&s);
    let tag = "sometag";
    s.stop_io(0);
    s.wait_semisync(1);
    let held = s.park("INSERT INTO t (v) VALUES (1)", s.witnesses()).await;
    let g_held = newest_of(&s, &uuid);
    let other_uuid = s
        .park("INSERT INTO t (v) VALUES (2)", vec![s.witness(0)])
        .await;
    let g_other_uuid = newest_of(&s, &uuid);
    let mut tagged = s.client().await;
    tagged
        .run(format!("SET gtid_next = 'AUTOMATIC:{tag}'"))
        .await;
    let other_tag = spawn_watched(tagged, "INSERT INTO t (v) VALUES (3)", vec![s.witness(0)]);
    s.wait_parked(3);
    let g_other_tag = newest_of(&s, &format!("{uuid}:{tag}"));

    // A, on its own: the held commit's GTID as an empty transaction; its own UUID up to the
    // second commit's number, with a real write among them; a tagged write of its own; and the
    // primary's untagged number of the tagged commit, which it has already.
    let a = &s.topology.replicas[0];
    let a_uuid = a.sql("SELECT @@global.server_uuid");
    a.sql(&format!(
        "SET gtid_next = '{g_held}'; BEGIN; COMMIT; \
         SET gtid_next = '{a_uuid}:{n}'; BEGIN; COMMIT; \
         SET gtid_next = 'AUTOMATIC'; \
         CREATE TABLE sbtest.local_only (v INT PRIMARY KEY); \
         INSERT INTO sbtest.local_only VALUES (1); \
         SET gtid_next = 'AUTOMATIC:{tag}'; INSERT INTO sbtest.local_only VALUES (2); \
         SET gtid_next = 'AUTOMATIC'",
        n = number_of(&g_other_uuid)
    ));
    let a_holds = a.gtid_executed();
    assert!(gtid_set_holds(&a_holds, &g_held), "{a_holds}");
    assert!(gtid_set_holds(
        &a_holds,
        &format!("{a_uuid}:{}", number_of(&g_other_uuid))
    ));
    assert!(
        gtid_set_holds(&a_holds, &format!("{a_uuid}:{tag}:1")),
        "{a_holds}"
    );
    assert!(gtid_set_holds(
        &a_holds,
        &format!("{uuid}:{}", number_of(&g_other_tag))
    ));
    for lacked in [&g_other_uuid, &g_other_tag] {
        assert!(!gtid_set_holds(&a_holds, lacked), "{lacked} in {a_holds}");
        assert!(!gtid_set_holds(&a.received_transaction_set(), lacked));
    }
    assert!(!gtid_set_holds(&a.received_transaction_set(), &g_held));

    // A reconnects through the proxy, its stream slowed so that what the proxy credits on
    // connecting and what A receives later cannot be confused.
    let slow = TcpRelay::start(s.proxy.addr());
    slow.set_delay(Direction::FromTarget, Duration::from_millis(500));
    s.topology.point_replica_at(0, "127.0.0.1", slow.port());

    // The commit A holds goes by A's connect state: A never received it.
    let watched = answered(held).await;
    watched.result.expect("OK");
    assert!(
        !gtid_set_holds(&watched.received[0], &g_held),
        "A received {g_held}: {}",
        watched.received[0]
    );
    assert!(gtid_set_holds(&watched.received[1], &g_held), "B has it");
    let at_first_ok = admin::credited(s.proxy.admin_addr(), a.server_id());
    for gtid in [
        g_held.clone(),
        format!("{a_uuid}:{}", number_of(&g_other_uuid)),
        format!("{a_uuid}:{tag}:1"),
        format!("{uuid}:{}", number_of(&g_other_tag)),
    ] {
        assert!(
            gtid_set_holds(&at_first_ok, &gtid),
            "{gtid} not in {at_first_ok}"
        );
    }
    assert!(
        server_has(a, &at_first_ok),
        "A is credited with {at_first_ok}, more than it has"
    );

    // The commits A lacks go only once A itself has received them.
    for (commit, gtid) in [(other_uuid, &g_other_uuid), (other_tag, &g_other_tag)] {
        let watched = answered(commit).await;
        watched.result.expect("OK");
        assert!(
            gtid_set_holds(&watched.received[0], gtid),
            "A had received {} when the OK for {gtid} came",
            watched.received[0]
        );
    }
    assert_eq!(s.released("quorum"), 3);

    // What the proxy credits A with is what A itself says it holds, source by source.
    s.topology.wait_replicas_caught_up();
    let credit = admin::credited(s.proxy.admin_addr(), a.server_id());
    let executed = a.gtid_executed();
    assert_eq!(
        GtidPosition::parse_mysql(&credit).unwrap(),
        GtidPosition::parse_mysql(&executed).unwrap(),
        "credited {credit}, A holds {executed}"
    );
    assert!(a.gtid_subset(&credit, &executed) && a.gtid_subset(&executed, &credit));
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_status_shows_each_replicas_acked_gtid_set_and_the_failover_candidates() {
    let s = MySqlStrong::start_on(2, blocking(1));
    let uuid = primary_uuid(&s);
    let ids: Vec<u32> = s.topology.replicas.iter().map(MySql::server_id).collect();
    let mut conn = s.client().await;
    for v in 1..=3 {
        conn.run(format!("INSERT INTO t (v) VALUES ({v})")).await;
    }
    let newest = newest_of(&s, &uuid);
    wait_for(
        "both replicas to acknowledge every commit",
        PATIENCE,
        || {
            ids.iter()
                .all(|&id| gtid_set_holds(&admin::credited(s.proxy.admin_addr(), id), &newest))
        },
    );

    let status = admin::status(s.proxy.admin_addr());
    let executed = s.topology.primary.gtid_executed();
    assert_eq!(executed, format!("{uuid}:1-{}", number_of(&newest)));
    for (replica, &id) in s.topology.replicas.iter().zip(&ids) {
        let record = admin::replica_record(&status, id);
        let acked = record.acked_gtid_position.as_str();
        // A MySQL GTID set, in the server's own form: here, everything the primary executed.
        assert_eq!(acked, executed, "replica {id}: {record:#?}");
        assert!(
            server_has(replica, acked),
            "replica {id} lacks some of {acked}"
        );
        assert!(
            replica.gtid_subset(&newest, &replica.received_transaction_set()),
            "replica {id} acknowledged {newest} through the proxy: it received it"
        );
    }
    let acknowledged = status.watermark_gtid_position.as_str();
    assert!(gtid_set_holds(acknowledged, &newest), "{status:#?}");
    assert!(s.topology.primary.gtid_subset(acknowledged, &executed));
    assert_eq!(status.failover_candidates, ids);
    assert_eq!(status.not_failover_candidates, []);

    // B stops; a commit goes on A's acknowledgement alone. B no longer holds every
    // acknowledged commit, and B's own record agrees.
    s.stop_io(1);
    s.wait_semisync(1);
    conn.run("INSERT INTO t (v) VALUES (4)").await;
    let later = newest_of(&s, &uuid);
    let b = &s.topology.replicas[1];
    assert!(!gtid_set_holds(&b.received_transaction_set(), &later));
    assert!(gtid_set_holds(
        &s.topology.replicas[0].received_transaction_set(),
        &later
    ));
    let status = admin::status(s.proxy.admin_addr());
    assert!(gtid_set_holds(&status.watermark_gtid_position, &later));
    assert_eq!(status.failover_candidates, [ids[0]]);
    let not = &status.not_failover_candidates;
    assert_eq!(not.len(), 1, "{not:#?}");
    assert_eq!(not[0].server_id, ids[1]);
    assert!(not[0].reason.contains(&later), "{not:#?}");
    let b_record = admin::replica_record(&status, ids[1]);
    assert!(!b_record.connected);
    assert!(server_has(b, &b_record.acked_gtid_position));

    // B back: it catches up and is a candidate again.
    s.start_io(1);
    wait_for("B to acknowledge the commit it missed", PATIENCE, || {
        gtid_set_holds(&admin::credited(s.proxy.admin_addr(), ids[1]), &later)
    });
    let status = admin::status(s.proxy.admin_addr());
    assert_eq!(status.failover_candidates, ids);
}
