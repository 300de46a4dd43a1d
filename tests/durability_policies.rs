//! Durability policies beyond a count of replicas, each test run on MariaDB 10.11 and on MySQL
//! 9.7: quorum rules over zones, a quorum per session, and replicas without semisync held
//! behind the quorum. Every claim is read from the replicas themselves (`Gtid_IO_Pos`,
//! `RECEIVED_TRANSACTION_SET`), at the moment a client got its answer.

use std::time::Duration;

use strongsync::config::{AsyncReplicas, DurabilityConfig, OnTimeout, ReplicaConfig};
use strongsync::Config;
use support::admin;
use support::cluster::Cluster;
use support::each_server;
use support::mariadb::{wait_for, APP_PASSWORD, APP_USER};
use support::sql::Statements;
use support::strong::{answered, spawn_watched, Strong, Watched, PATIENCE};

const INSERT: &str = "INSERT INTO sbtest.t (v) VALUES (1)";

/// Commits wait for ever (under `block`): only the replicas release them.
fn blocking(quorum: usize) -> DurabilityConfig {
    DurabilityConfig {
        quorum,
        on_timeout: OnTimeout::Block,
        ack_timeout: Duration::from_secs(3600),
        ..DurabilityConfig::default()
    }
}

/// Replica `i` of `servers` named in `zones[i]` (`[[replica]]`, by the server id it
/// replicates with), labelled `host = replica-<server id>`.
fn named<C: Cluster>(servers: &C, zones: &[&str]) -> Vec<ReplicaConfig> {
    zones
        .iter()
        .enumerate()
        .map(|(i, zone)| ReplicaConfig {
            server_id: servers.replica_server_id(i),
            zone: Some((*zone).into()),
            labels: [(
                "host".to_owned(),
                format!("replica-{}", servers.replica_server_id(i)),
            )]
            .into(),
            address: None,
        })
        .collect()
}

/// Replica `i` of `servers` in `zones[i]`, the primary in `primary`.
fn zones<C: Cluster>(config: &mut Config, servers: &C, zones: &[&str], primary: &str) {
    config.replica = named(servers, zones);
    config.durability.primary_zone = Some(primary.into());
}

/// Starts replica `i` again and expects the parked commit's OK, with replica `i` holding `gtid`
/// when it came.
async fn released_once_it_has<C: Cluster>(
    s: &Strong<C>,
    parked: tokio::task::JoinHandle<Watched>,
    i: usize,
    gtid: &str,
) {
    s.start_io(i);
    let done = answered(parked).await;
    done.result.unwrap();
    assert!(
        C::holds(&done.received[i], gtid),
        "replica {i} had not received {gtid} when the client was told: {:?}",
        done.received
    );
}

/// Waits until each of `replicas` has received `gtid` (read from the replica itself).
fn wait_received<C: Cluster>(s: &Strong<C>, replicas: &[usize], gtid: &str) {
    for &i in replicas {
        let witness = s.witness(i);
        wait_for(&format!("replica {i} to receive {gtid}"), PATIENCE, || {
            C::holds(&witness.received(), gtid)
        });
    }
}

async fn two_zones_hold_a_commit_until_the_other_zone_has_it_and_a_reload_applies_to_the_next<
    C: Cluster,
>() {
    // Replicas 0 and 1 (server ids 2, 3) share the primary's zone "a"; replica 2 (server id 4)
    // is alone in "b".
    let mut s = Strong::<C>::launch(3, None, |config, servers| {
        config.durability = DurabilityConfig {
            quorum_zones: 2,
            ..blocking(2)
        };
        zones(config, servers, &["a", "a", "b"], "a");
    });
    let status = admin::status(s.proxy.admin_addr());
    assert_eq!(status.quorum_rule, "2 replica(s) in at least 2 zones");
    assert_eq!(status.replicas[2].zone.as_deref(), Some("b"));
    assert_eq!(status.replicas[2].labels["host"], "replica-4");

    s.stop_io(2);
    s.wait_semisync(2);
    let ready = admin::get(s.proxy.admin_addr(), "/readyz");
    assert_eq!(ready.status, 503);
    assert!(
        ready
            .body
            .contains("replicas in 1 zone(s) (a), the quorum needs 2"),
        "{}",
        ready.body
    );
    let parked = s.park(INSERT, s.witnesses()).await;
    let gtid = s.topology.newest_gtid();
    // Two replicas have it, both in zone a: the commit stays parked.
    wait_received(&s, &[0, 1], &gtid);
    assert!(!parked.is_finished());
    assert_eq!(s.parked(), 1);
    released_once_it_has(&s, parked, 2, &gtid).await;
    assert_eq!(admin::get(s.proxy.admin_addr(), "/readyz").status, 200);
    // Every replica holds the commit, but promoting the one in zone b leaves zone a alone.
    let status = admin::status(s.proxy.admin_addr());
    assert_eq!(status.failover_candidates, [2, 3]);
    assert_eq!(status.not_failover_candidates[0].server_id, 4);
    let why = &status.not_failover_candidates[0].reason;
    assert!(
        why.contains("the other replicas leave the rule unmet: replicas in 1 zone(s) (a)"),
        "{why}"
    );

    // Reloaded: replica 1 moves to zone b, replica 2 to zone a. Now replica 1 is the one the
    // next commit needs.
    let relabelled = named(&s.topology, &["a", "b", "a"]);
    let needs_restart = s.proxy.reload(|c| c.replica = relabelled);
    assert!(needs_restart.is_empty(), "{needs_restart:?}");
    s.stop_io(1);
    s.wait_semisync(2);
    let parked = s.park(INSERT, s.witnesses()).await;
    let gtid = s.topology.newest_gtid();
    wait_received(&s, &[0, 2], &gtid);
    assert!(!parked.is_finished(), "0 and 2 are now both in zone a");
    assert_eq!(s.parked(), 1);
    released_once_it_has(&s, parked, 1, &gtid).await;
}

async fn cross_zone_holds_a_commit_until_a_replica_outside_the_primarys_zone_has_it<C: Cluster>() {
    let s = Strong::<C>::launch(2, None, |config, servers| {
        config.durability = DurabilityConfig {
            cross_zone: true,
            ..blocking(1)
        };
        zones(config, servers, &["a", "b"], "a");
    });
    s.stop_io(1);
    s.wait_semisync(1);
    let parked = s.park(INSERT, s.witnesses()).await;
    let gtid = s.topology.newest_gtid();
    wait_received(&s, &[0], &gtid);
    assert!(!parked.is_finished(), "only the primary's zone has it");
    let status = admin::status(s.proxy.admin_addr());
    assert_eq!(
        status.quorum_unmet.as_deref(),
        Some("no replica outside the primary's zone \"a\", the quorum needs one")
    );
    released_once_it_has(&s, parked, 1, &gtid).await;
}

/// A connection to the proxy whose session runs `setup` first.
async fn session<C: Cluster>(s: &Strong<C>, setup: &str) -> mysql_async::Conn {
    let mut conn = s.client().await;
    conn.run(setup).await;
    conn
}

async fn a_session_raises_its_quorum_or_asks_for_none_and_starts_from_the_default<C: Cluster>() {
    let s = Strong::<C>::launch(2, None, |config, _| {
        config.durability = DurabilityConfig {
            session_quorum_floor: Some(0),
            ..blocking(1)
        };
    });
    s.topology
        .primary_sql("CREATE PROCEDURE sbtest.ask_two() SET @strongsync_quorum = 2");
    // Raised to two, by SET, by an assignment in a SELECT, and in a procedure whose call does
    // not name the variable (only the primary's state-change report tells).
    const SETUPS: [&str; 3] = [
        "SET @strongsync_quorum = 2",
        "SELECT 2 INTO @strongsync_quorum",
        "CALL sbtest.ask_two()",
    ];
    for setup in SETUPS {
        s.stop_io(1);
        s.wait_semisync(1);
        let conn = session(&s, setup).await;
        let before = s.parked();
        let parked = spawn_watched(conn, INSERT, s.witnesses());
        wait_for("the commit to park", PATIENCE, || s.parked() == before + 1);
        let gtid = s.topology.newest_gtid();
        wait_received(&s, &[0], &gtid);
        assert!(
            !parked.is_finished(),
            "{setup}: one replica of the two asked for"
        );
        released_once_it_has(&s, parked, 1, &gtid).await;
    }

    // None: released with no replica connected at all.
    s.stop_all();
    let mut none = session(&s, "SET @strongsync_quorum = 0").await;
    none.run(INSERT).await;
    let gtid = s.topology.newest_gtid();
    for i in 0..2 {
        let received = s.witness(i).received();
        assert!(!C::holds(&received, &gtid), "replica {i}: {received}");
    }
    assert_eq!(s.released("none_asked"), 1);
    let scrape = s.metrics();
    assert_eq!(
        scrape.get("strongsync_commits_by_quorum_total{quorum=\"0\"}"),
        1.0
    );
    assert!(scrape.get("strongsync_commits_by_quorum_total{quorum=\"2\"}") >= SETUPS.len() as f64);

    // COM_RESET_CONNECTION, COM_CHANGE_USER and a new connection start from the configured
    // quorum.
    assert!(none.reset().await.unwrap(), "COM_RESET_CONNECTION was sent");
    let mut changed = session(&s, "SET @strongsync_quorum = 0").await;
    changed
        .change_user(
            mysql_async::ChangeUserOpts::default()
                .with_user(Some(APP_USER.into()))
                .with_pass(Some(APP_PASSWORD.into())),
        )
        .await
        .unwrap();
    let before = s.parked();
    let mut waiting = Vec::new();
    for (what, conn) in [
        ("reset", none),
        ("changed user", changed),
        ("new", s.client().await),
    ] {
        waiting.push(spawn_watched(conn, INSERT, s.witnesses()));
        wait_for(
            &format!("the {what} session's commit to park"),
            PATIENCE,
            || s.parked() == before + waiting.len(),
        );
    }
    let gtid = s.topology.newest_gtid();
    s.start_io(0);
    for parked in waiting {
        let done = answered(parked).await;
        done.result.unwrap();
        assert!(C::holds(&done.received[0], &gtid), "{:?}", done.received);
    }
    assert_eq!(s.released("none_asked"), 1);
}

async fn sessions_cannot_go_below_the_floor<C: Cluster>() {
    // The default floor: the configured quorum.
    let s = Strong::<C>::start_on(2, blocking(1));
    s.stop_all();
    let conn = session(&s, "SET @strongsync_quorum = 0").await;
    let parked = spawn_watched(conn, INSERT, s.witnesses());
    wait_for("the commit to park", PATIENCE, || s.parked() == 1);
    assert_eq!(
        s.metrics()
            .get("strongsync_session_quorum_refused_total{why=\"below_floor\"}"),
        1.0
    );
    let gtid = s.topology.newest_gtid();
    for i in 0..2 {
        let received = s.witness(i).received();
        assert!(!C::holds(&received, &gtid), "replica {i}: {received}");
    }
    released_once_it_has(&s, parked, 0, &gtid).await;
    assert_eq!(s.released("none_asked"), 0);
}

/// Replicas 0 and 1 with semisync, replica 2 without, through a proxy set up by `adjust`.
fn with_async_replica<C: Cluster>(adjust: impl FnOnce(&mut Config)) -> Strong<C> {
    let s = Strong::<C>::launch(3, None, |config, _| {
        config.durability = blocking(1);
        adjust(config);
    });
    s.attach(2, false);
    s.wait_semisync(2);
    s
}

fn held_bytes<C: Cluster>(s: &Strong<C>) -> f64 {
    s.metrics().get("strongsync_async_held_bytes")
}

/// A statement that inserts 20,000 rows (about 180 KiB of row events) in one transaction, the
/// same on both servers.
const BULK: &str = "INSERT INTO sbtest.t (v) \
     SELECT 1 FROM information_schema.columns a CROSS JOIN information_schema.columns b \
     LIMIT 20000";

async fn an_async_replica_never_passes_the_quorum_and_catches_up_when_it_moves<C: Cluster>() {
    let mut s = with_async_replica::<C>(|config| {
        config.limits.max_async_held_bytes = 64 * 1024;
    });
    let mut conn = s.client().await;
    conn.run(INSERT).await;
    let first = s.topology.newest_gtid();
    wait_received(&s, &[2], &first);

    s.stop_io(0);
    s.stop_io(1);
    s.wait_semisync(0);
    let parked = s.park(INSERT, vec![s.witness(2)]).await;
    let gtid = s.topology.newest_gtid();
    // The async replica's pipe has the transaction and holds it back.
    wait_for("the async replica's pipe to hold it", PATIENCE, || {
        held_bytes(&s) > 0.0
    });
    let received = s.witness(2).received();
    assert!(
        !C::holds(&received, &gtid),
        "the async replica received {gtid} before the quorum held it: {received}"
    );
    // More than the limit comes while the quorum stalls: the pipe stops reading its dump.
    let bulk = spawn_watched(s.client().await, BULK, vec![s.witness(2)]);
    wait_for("the pipe to fill up", PATIENCE, || {
        held_bytes(&s) >= 64.0 * 1024.0
    });
    assert!(
        held_bytes(&s) < 1024.0 * 1024.0,
        "held back: {} bytes",
        held_bytes(&s)
    );
    let received = s.witness(2).received();
    assert!(!C::holds(&received, &gtid), "{gtid} in {received}");

    // The quorum moves: the async replica catches up, never past it.
    s.start_io(0);
    let done = answered(parked).await;
    done.result.unwrap();
    answered(bulk).await.result.unwrap();
    let newest = s.topology.newest_gtid();
    wait_received(&s, &[2], &newest);
    wait_for("nothing held back", PATIENCE, || held_bytes(&s) == 0.0);

    // `immediate`: it runs ahead of the quorum, as a plain primary's async replicas do.
    s.proxy
        .reload(|c| c.durability.async_replicas = AsyncReplicas::Immediate);
    s.stop_io(0);
    s.wait_semisync(0);
    let parked = s.park(INSERT, vec![s.witness(2)]).await;
    let ahead = s.topology.newest_gtid();
    wait_received(&s, &[2], &ahead);
    assert!(!parked.is_finished());
    assert_eq!(s.parked(), 1);
    s.start_io(0);
    answered(parked).await.result.unwrap();
}

each_server!(
    two_zones_hold_a_commit_until_the_other_zone_has_it_and_a_reload_applies_to_the_next,
    cross_zone_holds_a_commit_until_a_replica_outside_the_primarys_zone_has_it,
    a_session_raises_its_quorum_or_asks_for_none_and_starts_from_the_default,
    sessions_cannot_go_below_the_floor,
    an_async_replica_never_passes_the_quorum_and_catches_up_when_it_moves,
);
