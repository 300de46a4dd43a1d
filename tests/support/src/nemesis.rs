//! The failover nemesis, on either flavour (`tests/nemesis.rs` runs each against MariaDB and
//! MySQL): the old primary alive through a planned switch, a partition that heals, a paused
//! primary that wakes after the failover, a candidate whose history diverged, a replica
//! holding a fenced tail, a slow replica in the middle of a large transaction, the retired
//! primary under another name. Each proves what it claims from the servers themselves (the
//! rows, what each replica received), never from strongsync's counters.

use std::collections::HashSet;
use std::time::Duration;

use mysql_async::prelude::*;
use strongsync::config::ReplicaConfig;

use crate::admin;
use crate::failover::{phase, PooledWriters};
use crate::failover_rounds::{
    ids, launch_relayed, rejoin, replica_configs, start, start_with, LedgerCluster, LedgerServer,
    TOKEN,
};
use crate::mariadb::{wait_for, APP_PASSWORD, APP_USER};
use crate::sql::Statements;
use crate::strong::{blocking, Strong, PATIENCE};
use crate::tcp_relay::Direction;

/// Ids of rows written straight to a server, around strongsync.
const AROUND: u64 = 1 << 62;
const WRITERS: u64 = 8;

/// An admin call that must go through; its JSON answer.
pub(crate) fn call(s: &Strong<impl LedgerCluster>, path: &str, body: &str) -> serde_json::Value {
    let answer = admin::post(s.proxy.admin_addr(), path, Some(TOKEN), body);
    assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    serde_json::from_str(&answer.body).unwrap()
}

/// An admin call that must be refused; what strongsync said.
fn refused(s: &Strong<impl LedgerCluster>, path: &str, body: &str) -> String {
    let answer = admin::post(s.proxy.admin_addr(), path, Some(TOKEN), body);
    assert_eq!(
        answer.status, 409,
        "{path} was not refused: {}",
        answer.body
    );
    answer.body
}

fn follow_body(addr: &str) -> String {
    format!(r#"{{"primary": "{addr}"}}"#)
}

/// Inserts each of `ids` into the ledger through strongsync, each acknowledged.
async fn insert_all<C: LedgerCluster>(s: &Strong<C>, ids: impl IntoIterator<Item = u64>) {
    let mut client = s.client().await;
    for id in ids {
        client
            .run(format!("INSERT INTO sbtest.ledger (id) VALUES ({id})"))
            .await;
    }
}

/// The server of the test whose `server_id` is `id`.
pub(crate) fn by_id<C: LedgerCluster>(s: &Strong<C>, id: u32) -> &C::Server {
    s.topology
        .servers()
        .into_iter()
        .find(|x| x.server_id() == id)
        .expect("a server of the test")
}

/// The `server_id`s of the servers of the test, but those in `except`.
fn ids_but<C: LedgerCluster>(s: &Strong<C>, except: &[u32]) -> Vec<u32> {
    s.topology
        .servers()
        .iter()
        .map(|x| x.server_id())
        .filter(|id| !except.contains(id))
        .collect()
}

/// The rows on the old primary that the new one lacks, having checked that none of them was
/// acknowledged.
fn only_on_old(
    on_old: &HashSet<u64>,
    on_new: &HashSet<u64>,
    acknowledged: &HashSet<u64>,
) -> Vec<u64> {
    let only: Vec<u64> = on_old.difference(on_new).copied().collect();
    let stranded: Vec<_> = only.iter().filter(|id| acknowledged.contains(id)).collect();
    assert!(
        stranded.is_empty(),
        "acknowledged rows only on the old primary: {stranded:?}"
    );
    only
}

/// Every acknowledged id is on `primary` and on every server in `replicas` (once they have
/// applied what `primary` executed, holding nothing it lacks).
fn assert_everything_acknowledged_is_on<C: LedgerCluster>(
    s: &Strong<C>,
    acknowledged: &std::collections::HashSet<u64>,
    primary: u32,
    replicas: &[u32],
) {
    let servers = s.topology.servers();
    let server = |id: u32| {
        *servers
            .iter()
            .find(|s| s.server_id() == id)
            .expect("a server of the test")
    };
    let executed = server(primary).executed();
    for &id in replicas {
        server(id).assert_caught_up_without_errant(&executed);
    }
    for &id in std::iter::once(&primary).chain(replicas) {
        let on = ids(server(id));
        let lost: Vec<_> = acknowledged.iter().filter(|i| !on.contains(i)).collect();
        assert!(
            lost.is_empty(),
            "server {id} lacks acknowledged rows {lost:?}"
        );
    }
}

/// Nemesis 1: a planned switch with the old primary alive: eight writers on pooled connections go on
/// through strongsync across the fence, promote (which must pass over the old primary, listed
/// as a candidate and still writable) and the follow. The retired primary gets no row sent
/// after the fence; every row on it that the new primary lacks was never acknowledged; every
/// acknowledged row is on the new primary and the other replica.
pub async fn a_planned_switch_leaves_nothing_on_the_live_old_primary<C: LedgerCluster>() {
    let dir = tempfile::tempdir().unwrap();
    let (s, old) = start_persisted::<C>(dir.path());
    let writers = PooledWriters::start(&s.proxy.url(APP_USER, APP_PASSWORD), WRITERS);
    wait_for("200 acknowledged rows", PATIENCE, || {
        writers.acknowledged() >= 200
    });
    // Connections a pool keeps idle through the switch, each with its backend connection.
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(s.client().await);
    }
    call(&s, "/fence", r#"{"reason": "planned switch"}"#);
    writers.enter(phase::CUT);
    let report = call(&s, "/promote", "{}");
    writers.enter(phase::FOLLOWED);
    let chosen = report["server_id"].as_u64().unwrap() as u32;
    assert_ne!(chosen, old, "promoted the old primary: {report}");
    // Their next statement is refused, naming the epoch, and the connection is closed.
    let late_ids: Vec<u64> = (0..idle.len() as u64).map(|i| AROUND | 100 | i).collect();
    for (conn, id) in idle.iter_mut().zip(&late_ids) {
        let error = conn
            .query_drop(format!("INSERT INTO sbtest.ledger (id) VALUES ({id})"))
            .await
            .expect_err("a session of the retired epoch ran a statement");
        let text = error.to_string();
        assert!(
            matches!(&error, mysql_async::Error::Server(e) if e.code == 1927)
                && text.contains("epoch 1"),
            "{text}"
        );
        assert!(conn.ping().await.is_err(), "the connection stayed open");
    }
    let before = writers.acknowledged();
    wait_for("writers going on on the new primary", PATIENCE, || {
        writers.acknowledged() >= before + 200
    });
    let ledger = writers.stop().await;
    let retired = by_id(&s, old);
    wait_for(
        "no session of strongsync's left on the old primary",
        PATIENCE,
        || retired.app_sessions() == 0,
    );
    let on_old = ids(retired);
    ledger.assert_none_reached(phase::CUT, late_ids, &on_old, "the fence");
    let acknowledged = ledger.acknowledged();
    only_on_old(&on_old, &ids(by_id(&s, chosen)), &acknowledged);
    assert_everything_acknowledged_is_on(&s, &acknowledged, chosen, &ids_but(&s, &[old, chosen]));
    eprintln!(
        "planned switch: {} acknowledged, {} sent after the fence, none on the retired primary",
        acknowledged.len(),
        ledger.sent_from(phase::CUT).len()
    );
}

/// strongsync at quorum 1 with a state file in `dir` and the servers as `[[replica]]`s, the
/// replicas caught up; and the primary's server id.
fn start_persisted<C: LedgerCluster>(dir: &std::path::Path) -> (Strong<C>, u32) {
    let s = start::<C>(1, dir, true, |config| {
        config.failover.state_file = Some(admin::state_file(dir, &config.primary));
    });
    s.topology.wait_caught_up();
    let primary = s.topology.servers()[0].server_id();
    (s, primary)
}

/// Nemesis 2: a partition that heals: the old primary is cut off from strongsync (a relay between
/// them), takes a write of its own meanwhile, and comes back after the follow while the
/// sessions strongsync had opened to it are still open. It gets nothing sent after the cut,
/// and no replica gets its tail.
pub async fn a_healed_partition_leaves_nothing_on_the_old_primary<C: LedgerCluster>() {
    let dir = tempfile::tempdir().unwrap();
    let (s, relays) = launch_relayed::<C>(1, dir.path(), |config| {
        config.failover.state_file = Some(admin::state_file(dir.path(), &config.primary));
    });
    s.topology.wait_caught_up();
    let old = s.topology.servers()[0].server_id();
    let writers = PooledWriters::start(&s.proxy.url(APP_USER, APP_PASSWORD), WRITERS);
    wait_for("200 acknowledged rows", PATIENCE, || {
        writers.acknowledged() >= 200
    });
    relays.relay(old).partition();
    writers.enter(phase::CUT);
    let retired = || by_id(&s, old);
    let tail = retired().write_around(AROUND | 2);
    call(&s, "/fence", r#"{"reason": "partition"}"#);
    let report = call(&s, "/promote", "{}");
    writers.enter(phase::FOLLOWED);
    let chosen = report["server_id"].as_u64().unwrap() as u32;
    assert_ne!(chosen, old, "{report}");
    relays.relay(old).heal();
    let before = writers.acknowledged();
    wait_for("writers going on on the new primary", PATIENCE, || {
        writers.acknowledged() >= before + 200
    });
    let ledger = writers.stop().await;
    wait_for(
        "no session of strongsync's left on the healed old primary",
        PATIENCE,
        || retired().app_sessions() == 0,
    );
    let on_old = ids(retired());
    ledger.assert_none_reached(phase::CUT, [], &on_old, "the partition");
    let others = ids_but(&s, &[old]);
    for server in s.topology.servers() {
        if others.contains(&server.server_id()) {
            assert!(
                !server.logged(&tail) && !ids(server).contains(&(AROUND | 2)),
                "server {} holds the partitioned primary's tail {tail}",
                server.server_id()
            );
        }
    }
    let replicas: Vec<u32> = others.into_iter().filter(|id| *id != chosen).collect();
    assert_everything_acknowledged_is_on(&s, &ledger.acknowledged(), chosen, &replicas);
    eprintln!(
        "healed partition: {} acknowledged, {} sent after the cut, none on the old primary",
        ledger.acknowledged().len(),
        ledger.sent_from(phase::CUT).len()
    );
}

/// A server process stopped by SIGSTOP (a frozen VM, a stall of the host) until
/// [`resume`](Self::resume); its sockets stay open and what is sent to it piles up in the
/// kernel. Dropped paused (a failing test), it is sent SIGCONT, so that it can be stopped.
struct Paused(nix::unistd::Pid);

impl Paused {
    fn pause(pid: u32) -> Paused {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        Paused(pid)
    }

    fn resume(self) {}
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
    }
}

/// Nemesis 2b: a paused old primary (SIGSTOP, with statements of strongsync's sessions under
/// way on it) is fenced, passed over by promote and followed away from; then it wakes. What
/// it then commits of those statements was never acknowledged, it gets nothing sent after the
/// fence, and no replica gets what it commits after waking.
pub async fn a_paused_old_primary_that_wakes_gets_nothing<C: LedgerCluster>() {
    let dir = tempfile::tempdir().unwrap();
    let (s, old) = start_persisted::<C>(dir.path());
    let retired = || by_id(&s, old);
    let writers = PooledWriters::start(&s.proxy.url(APP_USER, APP_PASSWORD), WRITERS);
    wait_for("200 acknowledged rows", PATIENCE, || {
        writers.acknowledged() >= 200
    });
    let paused = Paused::pause(retired().pid());
    call(
        &s,
        "/fence",
        r#"{"reason": "the primary stopped answering"}"#,
    );
    writers.enter(phase::CUT);
    let report = call(&s, "/promote", "{}");
    writers.enter(phase::FOLLOWED);
    let chosen = report["server_id"].as_u64().unwrap() as u32;
    assert_ne!(chosen, old, "promoted the paused primary: {report}");
    let before = writers.acknowledged();
    wait_for("writers going on on the new primary", PATIENCE, || {
        writers.acknowledged() >= before + 200
    });
    paused.resume();
    wait_for(
        "no session of strongsync's left on the woken old primary",
        PATIENCE,
        || retired().app_sessions() == 0,
    );
    let tail = retired().write_around(AROUND | 3);
    let ledger = writers.stop().await;
    let on_old = ids(retired());
    ledger.assert_none_reached(phase::CUT, [], &on_old, "its fence");
    let acknowledged = ledger.acknowledged();
    let only_old = only_on_old(&on_old, &ids(by_id(&s, chosen)), &acknowledged);
    assert_everything_acknowledged_is_on(&s, &acknowledged, chosen, &ids_but(&s, &[old, chosen]));
    for server in s.topology.servers() {
        if server.server_id() != old {
            let got: Vec<_> = ids(server)
                .into_iter()
                .filter(|id| only_old.contains(id))
                .collect();
            assert!(
                got.is_empty() && !server.logged(&tail),
                "server {} holds what only the old primary committed: {got:?} {tail}",
                server.server_id()
            );
        }
    }
    eprintln!(
        "paused primary: {} acknowledged, {} rows only on it (none acknowledged, none \
         replicated)",
        acknowledged.len(),
        only_old.len()
    );
}

/// Nemesis 3: a candidate whose history diverged (made writable by hand without the last
/// acknowledged commits, then a write of its own: numbered far ahead on MariaDB, under a
/// foreign source on MySQL) is refused by follow, which names what it lacks, and passed over
/// by promote.
pub async fn a_diverged_candidate_is_refused_and_passed_over<C: LedgerCluster>() {
    let dir = tempfile::tempdir().unwrap();
    let s = start::<C>(1, dir.path(), true, |_| {});
    s.topology.wait_caught_up();
    let (diverged, good) = {
        let servers = s.topology.servers();
        (servers[1].server_id(), servers[2].server_id())
    };
    let server = |id: u32| by_id(&s, id);
    let mut client = s.client().await;
    let insert = |id: u64| format!("INSERT INTO sbtest.ledger (id) VALUES ({id})");
    for id in 1..=5 {
        client.run(insert(id)).await;
    }
    server(diverged).stop_io();
    s.wait_semisync(1);
    for id in 6..=10 {
        client.run(insert(id)).await;
    }
    drop(client);
    let acknowledged = admin::status(s.proxy.admin_addr()).watermark_gtid_position;
    server(diverged).make_primary_by_hand();
    let own = server(diverged).write_diverged(AROUND | 3);
    let body = refused(&s, "/follow", &follow_body(&server(diverged).addr()));
    let newest = acknowledged.split(',').next().unwrap_or_default();
    let newest = newest.rsplit_once(':').map_or(newest, |(source, _)| source);
    assert!(
        body.contains("of the watermark") && body.contains(newest),
        "the refusal names what {own} lacks ({acknowledged}): {body}"
    );
    let report = call(&s, "/promote", "{}");
    assert_eq!(
        report["server_id"].as_u64(),
        Some(u64::from(good)),
        "{report}"
    );
    let on = ids(server(good));
    assert!((1..=10).all(|id| on.contains(&id)), "{on:?}");
}

/// Nemesis 4: a replica holding the tail a fence cut off (received, never acknowledged) is not taken
/// as holding the next epoch's commits, whatever their numbers: follow refuses it and promote
/// chooses the replica that holds them.
pub async fn a_replica_with_a_fenced_tail_does_not_cover_the_next_epoch<C: LedgerCluster>() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start_with::<C>(2, dir.path(), |config, topology| {
        // The promote candidates at the end: the first primary (rejoined) and the replica
        // holding the tail.
        config.replica = replica_configs(topology.servers()[..2].iter().copied());
    });
    s.topology.wait_caught_up();
    let [first, tailed, next] = {
        let servers = s.topology.servers();
        [0, 1, 2].map(|i| servers[i].server_id())
    };
    let server = |s: &Strong<C>, id: u32| by_id(s, id).addr();
    insert_all(&s, 1..=5).await;
    // `next` stops receiving: at quorum 2 the next commits reach `tailed` and park.
    s.topology.server_mut(next).stop_io();
    s.wait_semisync(1);
    let mut parked = Vec::new();
    for id in 101..=105 {
        let sql = format!("INSERT INTO sbtest.ledger (id) VALUES ({id})");
        parked.push(s.park(&sql, Vec::new()).await);
    }
    call(&s, "/fence", r#"{"reason": "tail"}"#);
    for watched in parked {
        let answer = crate::strong::answered(watched).await;
        assert!(answer.result.is_err(), "a fenced commit was acknowledged");
    }
    // It keeps the tail: it receives nothing more.
    s.topology.server_mut(tailed).stop_io();
    // A manager promotes `next`, which has every acknowledged commit and none of the tail.
    s.topology.server_mut(next).make_primary_by_hand();
    call(&s, "/follow", &follow_body(&server(&s, next)));
    // The first primary rejoins (without its tail) and acknowledges the new epoch alone.
    rejoin(&mut s, first, next, dir.path()).await;
    call(&s, "/reinstate", &follow_body(&server(&s, first)));
    s.proxy.reload(|config| config.durability.quorum = 1);
    s.wait_semisync(1);
    insert_all(&s, 201..=203).await;
    s.topology.server_mut(next).kill();
    // Made a primary by hand (a manager's choice), the replica with the tail is refused.
    s.topology.server_mut(tailed).make_primary_by_hand();
    let body = refused(&s, "/follow", &follow_body(&server(&s, tailed)));
    assert!(body.contains("of the watermark"), "{body}");
    let report = call(&s, "/promote", "{}");
    assert_eq!(
        report["server_id"].as_u64(),
        Some(u64::from(first)),
        "promote chose the replica holding the fenced tail: {report}"
    );
    let on = ids(s.topology.server_mut(first));
    let lost: Vec<u64> = (1..=5)
        .chain(201..=203)
        .filter(|id| !on.contains(id))
        .collect();
    assert!(lost.is_empty(), "acknowledged rows lost: {lost:?}");
}

/// Nemesis 5: what the watermark holds of a primary that also takes writes straight from others (a
/// heartbeat writer, a DBA): every transaction the quorum held, so it has no gaps, and the
/// last acknowledged GTID is in it. Returns the GTID of the last commit through strongsync.
pub async fn interleaved_direct_writes<C: LedgerCluster>(s: &Strong<C>, pairs: u64) -> String {
    let primary_url = s.topology.servers()[0].copy_source().url;
    let mut direct = mysql_async::Conn::new(mysql_async::Opts::from_url(&primary_url).unwrap())
        .await
        .unwrap();
    let mut client = s.client().await;
    for n in 1..=pairs {
        client
            .run(format!("INSERT INTO sbtest.ledger (id) VALUES ({n})"))
            .await;
        direct
            .run(format!(
                "INSERT INTO sbtest.ledger (id) VALUES ({})",
                AROUND | n
            ))
            .await;
    }
    client
        .run(format!(
            "INSERT INTO sbtest.ledger (id) VALUES ({})",
            pairs + 1
        ))
        .await;
    s.topology.servers()[0].executed()
}

/// Nemesis 6: a slow replica (its stream throttled by a relay) in the middle of a large transaction
/// when the fence comes: from then on it receives nothing more of it, and after the follow it
/// never receives the old primary's binlog (its write after the fence).
pub async fn a_slow_replica_mid_transaction_stops_at_the_fence<C: LedgerCluster>() {
    let dir = tempfile::tempdir().unwrap();
    let token = admin::token_file(dir.path(), TOKEN);
    let s = Strong::<C>::launch(2, Some(1), |config, topology| {
        config.durability = blocking(1);
        // A write that waits is not cut short by its own limit while the test looks.
        config.timeouts.client_write = Duration::from_secs(3600);
        config.failover.admin_token_file = Some(token);
        config.probe = topology.probe_account();
        config.failover.user = Some(APP_USER.into());
        config.failover.password = Some(strongsync::config::Secret(APP_PASSWORD.into()));
        config.replica = replica_configs(topology.servers()[1..].iter().copied());
    });
    s.topology.primary_sql(
        "CREATE TABLE sbtest.ledger (id BIGINT PRIMARY KEY); \
         CREATE TABLE sbtest.digits (d INT); \
         INSERT INTO sbtest.digits VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9); \
         CREATE TABLE sbtest.big (id INT AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(1100))",
    );
    s.topology.wait_caught_up();
    let slow = s.topology.servers()[2].server_id();
    let slow_one = || by_id(&s, slow);
    // It does not give up on a stream that stalls while the test looks.
    slow_one().set_net_timeout(3600);
    s.wait_semisync(2);
    s.relay()
        .set_delay(Direction::FromTarget, Duration::from_millis(200));
    // About 50 MB of rows that do not compress, in one transaction.
    let pad = (0..8)
        .map(|_| "SHA2(RAND(), 512)")
        .collect::<Vec<_>>()
        .join(", ");
    let mut client = s.client().await;
    let started = s.relay().forwarded(Direction::FromTarget);
    client
        .run(format!(
            "INSERT INTO sbtest.big (pad) SELECT CONCAT({pad}) FROM sbtest.digits a, \
             sbtest.digits b, sbtest.digits c, sbtest.digits d, sbtest.digits e LIMIT 50000"
        ))
        .await;
    let big = s.topology.servers()[0].executed();
    let big = newest_of(&big);
    wait_for(
        "the slow replica to be in the middle of it",
        PATIENCE,
        || s.relay().forwarded(Direction::FromTarget) > started + (2 << 20),
    );
    assert!(
        !slow_one().received(&big),
        "the slow replica already has it"
    );
    // The replica takes nothing more for now: strongsync's write to it waits.
    s.relay().stall();
    let proxy_port = s.proxy.port();
    let peer = s
        .relay()
        .newest_target_port()
        .expect("the relay's connection");
    let pipe_socket = || socket_state(proxy_port, peer);
    assert_eq!(pipe_socket(), Some(ESTABLISHED));
    call(&s, "/fence", r#"{"reason": "slow replica"}"#);
    // Within one write of the fence, in the middle of its write, the pipe stops and closes
    // its end (FIN queued behind what the kernel holds), though the replica still takes
    // nothing.
    wait_for(
        "the pipe to close its end in the middle of its write",
        PATIENCE,
        || pipe_socket() != Some(ESTABLISHED),
    );
    s.relay().resume();
    wait_for(
        "the slow replica's old stream to end and a new one to be turned away",
        PATIENCE,
        || slow_one().io_error().contains("fenced"),
    );
    assert!(
        !slow_one().received(&big),
        "the slow replica received the rest of {big} after the fence"
    );
    let tail = s.topology.servers()[0].write_around(AROUND | 6);
    s.relay().set_delay(Direction::FromTarget, Duration::ZERO);
    let report = call(&s, "/promote", "{}");
    assert_ne!(
        report["server_id"].as_u64(),
        Some(u64::from(slow)),
        "{report}"
    );
    wait_for(
        "the slow replica to get it from the new primary",
        PATIENCE,
        || slow_one().received(&big),
    );
    let executed = s
        .topology
        .servers()
        .into_iter()
        .find(|x| u64::from(x.server_id()) == report["server_id"].as_u64().unwrap())
        .unwrap()
        .executed();
    slow_one().assert_caught_up_without_errant(&executed);
    assert!(
        !slow_one().received(&tail) && !slow_one().logged(&tail),
        "the slow replica received the old primary's {tail} after the follow"
    );
}

/// `/proc/net/tcp`'s state of an established connection.
const ESTABLISHED: u8 = 1;

/// The state of strongsync's end (on `proxy_port`) of the connection from `peer_port` (the
/// relay's), in `/proc/net/tcp`; `None` once it is gone.
fn socket_state(proxy_port: u16, peer_port: u16) -> Option<u8> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port = |field: &str| u16::from_str_radix(field.rsplit(':').next()?, 16).ok();
        (port(f.get(1)?)? == proxy_port && port(f.get(2)?)? == peer_port)
            .then(|| u8::from_str_radix(f.get(3)?, 16).ok())
            .flatten()
    })
}

/// The newest GTID of a position as the server wrote it: MariaDB's first element (one
/// domain), or MySQL's `uuid:last` of the first source's last interval.
fn newest_of(executed: &str) -> String {
    let first = executed.split(',').next().unwrap_or_default().trim();
    match first.split_once(':') {
        None => first.to_owned(),
        Some((uuid, intervals)) => {
            let last = intervals.rsplit(':').next().unwrap_or_default();
            let n = last.rsplit('-').next().unwrap_or(last);
            format!("{uuid}:{n}")
        }
    }
}

/// Nemesis 8: the retired primary named another way (`localhost` for `127.0.0.1`, a short IPv4 form)
/// is refused, and promote does not choose the fenced primary listed as a candidate under
/// another name, though it lives, is writable and holds everything.
pub async fn the_retired_primary_is_refused_under_any_name<C: LedgerCluster>() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_with::<C>(1, dir.path(), |config, topology| {
        config.replica = topology
            .servers()
            .into_iter()
            .enumerate()
            .map(|(i, r)| ReplicaConfig {
                server_id: r.server_id(),
                // The primary under another spelling.
                address: Some(if i == 0 {
                    format!("localhost:{}", r.addr().rsplit(':').next().unwrap())
                } else {
                    r.addr()
                }),
                ..ReplicaConfig::default()
            })
            .collect();
    });
    s.topology.wait_caught_up();
    let old = s.topology.servers()[0];
    let (old_id, port) = (
        old.server_id(),
        old.addr().rsplit(':').next().unwrap().to_owned(),
    );
    let mut client = s.client().await;
    for id in 1..=5 {
        client
            .run(format!("INSERT INTO sbtest.ledger (id) VALUES ({id})"))
            .await;
    }
    drop(client);
    let report = call(&s, "/promote", "{}");
    assert_ne!(
        report["server_id"].as_u64(),
        Some(u64::from(old_id)),
        "promote chose the fenced primary under another name: {report}"
    );
    let passed = report["looked"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["server_id"].as_u64() == Some(u64::from(old_id)))
        .unwrap()["problem"]
        .to_string();
    assert!(passed.contains("followed"), "{report}");
    for spelling in [format!("localhost:{port}"), format!("127.1:{port}")] {
        let body = refused(&s, "/follow", &follow_body(&spelling));
        assert!(
            body.contains("followed before") || body.contains("fenced"),
            "{spelling}: {body}"
        );
    }
}
