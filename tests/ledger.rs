//! The acknowledged-commit ledger: the proof of strong sync's promise. Thirty-two clients write
//! through the proxy (autocommit, explicit transactions and XA) and record every id whose
//! commit, or XA PREPARE, came back OK. At a random moment the primary (or the proxy) is killed
//! with SIGKILL; each replica then applies what it received, and every acknowledged id must be on
//! at least `quorum` replicas (a prepared XA branch as prepared, or committed). The proxy's
//! `/status` must name a replica that alone holds every acknowledged commit, as a failover tool
//! would pick it. The same harness with the proxy's wait disabled must report losses.
//!
//! With `visibility = "quorum"` readers run beside the writers and record every row they
//! observed — by a plain `SELECT`, a locking read, or a duplicate-key error on a row a writer
//! had just committed — and after the failover every observed row must be on `quorum` replicas
//! too; with `visibility = "commit"` and the replicas fallen behind, readers observe rows that
//! the failover loses (the control).
//!
//! A longer run than CI's: `STRONGSYNC_LEDGER_KILLS=20 cargo test --test ledger -- --nocapture`
//! (each round prints what was acknowledged; `LEDGER_SEED` replays a run's random choices).

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strongsync::config::ProbeConfig;
use strongsync::config::{DurabilityConfig, OnTimeout, Visibility};
use support::ledger::{ids, row_id, Held, Ledger, Load, SharedLedger, Style, TABLE};
use support::mariadb::{sql_quote, wait_for, MariaDb, APP_PASSWORD, APP_USER};
use support::proxy::{free_port, ProxyProcess, TestProxy};
use support::replay;
use support::sql::Statements;
use support::topology::Topology;

/// Clients writing at once.
const WRITERS: u64 = 32;
/// Clients reading at once, when a round has readers (a third of each way of observing).
const READERS: u64 = 12;
/// Primary kills per quorum, unless `STRONGSYNC_LEDGER_KILLS` says how many.
const PRIMARY_KILLS: u64 = 5;
/// Proxy kills, unless `STRONGSYNC_LEDGER_KILLS` says how many.
const PROXY_KILLS: u64 = 3;
/// Generous bound for "eventually" (a guard against hangs, not a timing expectation).
const PATIENCE: Duration = Duration::from_secs(90);
/// How long writers get to hear their errors once the primary or the proxy is gone.
const GRACE: Duration = Duration::from_millis(500);
/// Every way of committing, XA too.
const STYLES: &[Style] = &[Style::Autocommit, Style::Explicit, Style::Xa];

/// How a reader observes the writers' rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// A plain (consistent) `SELECT` of a writer's newest rows.
    Select,
    /// The same, `LOCK IN SHARE MODE`: the newest committed rows.
    Locking,
    /// Inserting the id a writer commits next, in a transaction rolled back: a duplicate-key
    /// error reveals that the writer committed it.
    Duplicate,
    /// Several `SELECT`s and a locking read in one transaction, under
    /// `innodb_snapshot_isolation = ON`: the proxy bounds the snapshot once, not each read.
    Snapshot,
}

const LOOKS: [Look; 4] = [Look::Select, Look::Locking, Look::Duplicate, Look::Snapshot];

impl Look {
    fn name(self) -> &'static str {
        match self {
            Look::Select => "select",
            Look::Locking => "locking",
            Look::Duplicate => "duplicate_key",
            Look::Snapshot => "snapshot",
        }
    }
}

/// Reads until an error (the kill) ends it, recording every row observed in `ledger`.
async fn reader(url: String, round: u64, reader: u64, ledger: SharedLedger) {
    let look = LOOKS[(reader % LOOKS.len() as u64) as usize];
    let mut rng = StdRng::seed_from_u64(round << 8 | reader);
    // Per writer, the sequence number it commits next, as far as this reader has seen.
    let mut frontier = vec![2u64; WRITERS as usize];
    let observe = |seen: Vec<u64>| {
        let mut ledger = ledger.lock().unwrap();
        *ledger.observations.entry(look.name()).or_default() += seen.len() as u64;
        ledger.observed.extend(seen);
    };
    let newest = |writer: u64| {
        format!("SELECT id FROM ledger WHERE writer = {writer} ORDER BY id DESC LIMIT 4")
    };
    // Share locks meet the writers' inserts: a deadlock, a lock wait timeout or (under snapshot
    // isolation) a row changed since the snapshot only means the look saw nothing.
    let locking = |seen: mysql_async::Result<Vec<u64>>| match seen {
        Err(mysql_async::Error::Server(e)) if matches!(e.code, 1020 | 1205 | 1213) => {
            Ok(Vec::new())
        }
        seen => seen,
    };
    let _ = async {
        let mut conn = Conn::new(Opts::from_url(&url).unwrap()).await?;
        if look == Look::Snapshot {
            conn.query_drop("SET SESSION innodb_snapshot_isolation = ON")
                .await?;
        }
        loop {
            let writer = rng.random_range(0..WRITERS);
            match look {
                Look::Select => observe(conn.query(newest(writer)).await?),
                Look::Locking => observe(locking(
                    conn.query(format!("{} LOCK IN SHARE MODE", newest(writer)))
                        .await,
                )?),
                Look::Duplicate => {
                    let seq = &mut frontier[writer as usize];
                    let id = row_id(round, writer, *seq);
                    conn.query_drop("BEGIN").await?;
                    let insert = conn
                        .query_drop(format!("INSERT INTO ledger (id, writer) VALUES ({id}, -1)"))
                        .await;
                    let seen = match insert {
                        Ok(()) => Vec::new(),
                        Err(mysql_async::Error::Server(e)) if e.code == 1062 => {
                            *seq += 2;
                            vec![id]
                        }
                        Err(mysql_async::Error::Server(e)) if matches!(e.code, 1205 | 1213) => {
                            Vec::new()
                        }
                        Err(e) => return Err(e),
                    };
                    conn.query_drop("ROLLBACK").await?;
                    observe(seen);
                }
                Look::Snapshot => {
                    conn.query_drop("BEGIN").await?;
                    for _ in 0..3 {
                        let writer = rng.random_range(0..WRITERS);
                        observe(conn.query(newest(writer)).await?);
                    }
                    // Now and then a locking read too (bounded on its own: while the quorum
                    // is out of reach it holds the reader until the kill).
                    if rng.random_bool(0.25) {
                        observe(locking(
                            conn.query(format!("{} LOCK IN SHARE MODE", newest(writer)))
                                .await,
                        )?);
                    }
                    conn.query_drop("ROLLBACK").await?;
                }
            }
        }
        #[allow(unreachable_code)]
        Ok::<(), mysql_async::Error>(())
    }
    .await;
}

/// Writers and, with `readers`, readers through `url`.
fn load(url: &str, round: u64, readers: bool) -> Load {
    let mut load = Load::start(url, round, WRITERS, STYLES);
    if readers {
        for r in 0..READERS {
            load.spawn(reader(url.to_owned(), round, r, Arc::clone(load.ledger())));
        }
    }
    load
}

/// Waits until every way of observing has seen a row (the readers are really reading).
fn wait_observing(load: &Load) {
    wait_for("every kind of reader to observe a row", PATIENCE, || {
        let ledger = load.ledger().lock().unwrap();
        LOOKS
            .iter()
            .all(|l| ledger.observations.get(l.name()).copied().unwrap_or(0) > 0)
    });
}

/// Waits until replica `replica`'s SQL thread has applied all of its relay log (its I/O thread
/// cannot receive more: its source is dead or stopped), then reads what it holds.
fn applied(replica: &MariaDb) -> Held {
    let mut last = String::new();
    let mut stable = 0;
    wait_for("the replica to apply its relay log", PATIENCE, || {
        let status = replica.slave_status();
        let state = status
            .get("Slave_SQL_Running_State")
            .cloned()
            .unwrap_or_default();
        let exec = format!(
            "{:?}:{:?}",
            status.get("Relay_Log_File"),
            status.get("Relay_Log_Pos")
        );
        if state.contains("read all relay log") && exec == last {
            stable += 1;
        } else {
            stable = 0;
        }
        last = exec;
        stable >= 3
    });
    let ids = ids(&replica.sql("SELECT id FROM sbtest.ledger"));
    let prepared = replica
        .query_rows("XA RECOVER")
        .into_iter()
        .map(|row| row[3].clone())
        .collect();
    Held { ids, prepared }
}

/// The primary with the durable settings a strong-sync deployment runs, two replicas with
/// `sync_relay_log=1` replicating through the proxy with semisync, and the ledger table.
fn topology() -> Topology {
    let topology = Topology::start_durable(2);
    topology.primary.sql(TABLE);
    // The probe account, for the read barrier: it needs no privilege.
    topology
        .primary
        .sql("CREATE USER 'probe'@'%' IDENTIFIED BY 'probe-secret'");
    topology.wait_replicas_caught_up();
    for replica in &topology.replicas {
        replica.set_semi_sync_replica(true);
    }
    topology
}

fn point_replicas_at(topology: &Topology, port: u16) {
    for i in 0..topology.replicas.len() {
        topology.point_replica_at(i, "127.0.0.1", port);
    }
}

fn semisync_replicas(proxy: &TestProxy) -> usize {
    let status = proxy.durability().status();
    status.replicas.iter().filter(|r| r.semisync).count()
}

/// How a round ends.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Load before the kill.
    load: Duration,
    /// Stop these replicas' I/O threads a moment before the kill: the replicas fall behind,
    /// which is when asynchronous replication loses acknowledged commits.
    behind: &'static [usize],
}

fn random_plan(rng: &mut StdRng) -> Plan {
    const BEHIND: [&[usize]; 4] = [&[], &[], &[0], &[1]];
    Plan {
        load: Duration::from_millis(rng.random_range(300..2500)),
        behind: BEHIND[rng.random_range(0..BEHIND.len())],
    }
}

/// The outcome of one primary kill.
struct Round {
    ledger: Ledger,
    held: Vec<Held>,
    /// Each replica's `acked_gtid_position` from `/status` after the kill.
    status_positions: Vec<String>,
    /// The replicas (by index) `/status` names as failover candidates after the kill.
    candidates: Vec<usize>,
}

/// Runs the load, kills the primary as `plan` says, lets each replica apply what it received
/// and reads what everyone has. Leaves the primary restarted and the replicas back on their
/// source. Without a proxy, clients and replicas use the primary directly (plain asynchronous
/// replication) and there is no `/status` to read.
fn primary_kill_round(
    topology: &mut Topology,
    proxy: Option<&TestProxy>,
    round: u64,
    plan: Plan,
    readers: bool,
) -> Round {
    let url = match proxy {
        Some(proxy) => proxy.url(APP_USER, APP_PASSWORD),
        None => topology.primary.url(APP_USER, APP_PASSWORD),
    };
    let load = load(&url, round, readers);
    load.wait_running(3);
    if readers {
        wait_observing(&load);
    }
    thread::sleep(plan.load);
    for &i in plan.behind {
        topology.replicas[i].sql("STOP SLAVE IO_THREAD");
    }
    if !plan.behind.is_empty() {
        thread::sleep(Duration::from_millis(300));
    }
    topology.primary.kill();
    let ledger = load.finish(GRACE);
    let (status_positions, candidates) = match proxy {
        Some(proxy) => failover_data(topology, proxy),
        None => (Vec::new(), Vec::new()),
    };
    // As a failover tool would: no more from the old source, then apply what was received.
    for replica in &topology.replicas {
        replica.sql("STOP SLAVE IO_THREAD");
    }
    let held = topology.replicas.iter().map(applied).collect();

    // Back to a running system for the next round.
    topology.primary.restart();
    for replica in &topology.replicas {
        replica.sql("START SLAVE");
    }
    if let Some(proxy) = proxy {
        wait_for("both replicas back through the proxy", PATIENCE, || {
            semisync_replicas(proxy) == 2
        });
    }
    topology.wait_replicas_caught_up();
    Round {
        ledger,
        held,
        status_positions,
        candidates,
    }
}

/// Once the primary is dead: each replica's held position and the failover candidates, from
/// the proxy's status (after both replicas' dumps have ended).
fn failover_data(topology: &Topology, proxy: &TestProxy) -> (Vec<String>, Vec<usize>) {
    wait_for("both replica dumps to end", PATIENCE, || {
        proxy.durability().status().replicas.is_empty()
    });
    let status = proxy.durability().status();
    let positions = (0..topology.replicas.len())
        .map(|i| {
            let server_id = topology.replicas[i].server_id();
            status
                .departed
                .iter()
                .find(|r| r.server_id == server_id)
                .map(|r| r.held.to_string())
                .unwrap_or_default()
        })
        .collect();
    let candidates = topology
        .replicas
        .iter()
        .enumerate()
        .filter(|(_, r)| status.failover_candidates.contains(&r.server_id()))
        .map(|(i, _)| i)
        .collect();
    (positions, candidates)
}

/// strongsync's own account, for the probe the read barrier needs.
fn probe_account() -> ProbeConfig {
    ProbeConfig::account_of("probe", "probe-secret")
}

/// A proxy in front of `topology`'s primary; commits wait long enough never to time out here
/// (until their quorum has them, or the primary dies under them).
fn strong_proxy(
    topology: &Topology,
    quorum: usize,
    on_timeout: OnTimeout,
    visibility: Visibility,
) -> TestProxy {
    let mut config = TestProxy::config(&topology.primary);
    config.durability = DurabilityConfig {
        quorum,
        on_timeout,
        ack_timeout: Duration::from_secs(600),
        visibility,
        ..DurabilityConfig::default()
    };
    config.probe = probe_account();
    TestProxy::start_with(config)
}

/// Kills the primary [`PRIMARY_KILLS`] times under load (unless `STRONGSYNC_LEDGER_KILLS` says
/// otherwise); under `visibility = "quorum"` or `"snapshot"` readers run too and everything they
/// observed must survive as the acknowledged commits must.
fn primary_kills(quorum: usize, on_timeout: OnTimeout, visibility: Visibility) {
    let mut rng = StdRng::seed_from_u64(replay::seed("ledger"));
    let mut topology = topology();
    let readers = visibility != Visibility::Commit;
    let proxy = strong_proxy(&topology, quorum, on_timeout, visibility);
    point_replicas_at(&topology, proxy.port());
    wait_for("both replicas through the proxy", PATIENCE, || {
        semisync_replicas(&proxy) == 2
    });
    let mut total = 0;
    let kills = replay::kills(PRIMARY_KILLS);
    for round in 1..=kills {
        let plan = random_plan(&mut rng);
        let r = primary_kill_round(&mut topology, Some(&proxy), round, plan, readers);
        let acked = r.ledger.acknowledged();
        eprintln!(
            "ledger quorum {quorum} round {round} {plan:?}: {acked} acknowledged {:?} \
             ({} XA branches prepared, not committed), {} writers ended on errors, \
             replicas hold {:?}, candidates {:?}",
            r.ledger.oks,
            r.ledger.prepared.len(),
            r.ledger.errors.len(),
            r.status_positions,
            r.candidates
        );
        r.ledger.assert_every_style(STYLES, round);
        r.ledger
            .assert_survived(&r.held, &r.candidates, quorum, round);
        let held: Vec<&Held> = r.held.iter().collect();
        if readers {
            eprintln!(
                "ledger quorum {quorum} round {round}: {} rows observed {:?}",
                r.ledger.observed.len(),
                r.ledger.observations
            );
            let lost = r.ledger.lost_observations(&held, quorum);
            assert!(
                lost.is_empty(),
                "round {round} ({plan:?}): {} of {} observed rows are on fewer than {quorum} \
                 replica(s): {:?}",
                lost.len(),
                r.ledger.observed.len(),
                &lost[..lost.len().min(20)]
            );
            // What readers saw counts as acknowledged for a failover: every candidate has it.
            for &pick in &r.candidates {
                let lost_on_pick = r.ledger.lost_observations(&[&r.held[pick]], 1);
                assert!(
                    lost_on_pick.is_empty(),
                    "round {round}: replica {pick}, a failover candidate, lacks {:?}",
                    &lost_on_pick[..lost_on_pick.len().min(20)]
                );
            }
        }
        // And /status does not overstate: each replica has applied what it is said to hold.
        for (i, position) in r.status_positions.iter().enumerate() {
            assert_eq!(
                topology.replicas[i].sql(&format!(
                    "SELECT MASTER_GTID_WAIT({}, 0)",
                    sql_quote(position)
                )),
                "0",
                "replica {i} was said to hold {position}"
            );
        }
        total += acked;
    }
    eprintln!(
        "ledger quorum {quorum}: {total} acknowledged transactions over {kills} kills, none lost"
    );
    let status = proxy.durability().status();
    assert_eq!(status.parked, 0, "no waiter leaks");
    assert_eq!(status.reads_parked, 0, "no held read leaks");
    if readers {
        assert!(
            status.reads_in_snapshot > 0,
            "the snapshot readers' SELECTs were all bounded one by one: the ledger did not test \
             one bound per snapshot"
        );
    }
}

#[test]
fn every_acknowledged_commit_survives_primary_kills_at_quorum_1() {
    primary_kills(1, OnTimeout::Error, Visibility::Commit);
}

#[test]
fn every_acknowledged_commit_and_every_observed_row_survive_primary_kills_at_quorum_2() {
    primary_kills(2, OnTimeout::Block, Visibility::Snapshot);
}

/// The control for the observations: strong sync on, but `visibility = "commit"`. Both
/// replicas fall behind before the kill; the commits made meanwhile stay parked (none is
/// lost), yet readers saw their rows, and the failover loses them.
#[test]
fn with_visibility_commit_readers_observe_rows_that_a_failover_loses() {
    let mut topology = topology();
    let proxy = strong_proxy(&topology, 1, OnTimeout::Block, Visibility::Commit);
    point_replicas_at(&topology, proxy.port());
    wait_for("both replicas through the proxy", PATIENCE, || {
        semisync_replicas(&proxy) == 2
    });
    let behind = Plan {
        load: Duration::from_millis(500),
        behind: &[0, 1],
    };
    let r = primary_kill_round(&mut topology, Some(&proxy), 1, behind, true);
    let held: Vec<&Held> = r.held.iter().collect();
    let lost_observed = r.ledger.lost_observations(&held, 1);
    eprintln!(
        "ledger with visibility = commit: {} of {} observed rows on no replica ({:?})",
        lost_observed.len(),
        r.ledger.observed.len(),
        r.ledger.observations
    );
    assert!(
        r.ledger.lost(&held, 1).is_empty(),
        "strong sync still holds every commit"
    );
    assert!(
        !lost_observed.is_empty(),
        "readers observed nothing that the failover lost although both replicas had stopped: \
         the ledger cannot see what the read barrier prevents"
    );
}

/// The control: the same load and kills without the proxy's wait must find acknowledged
/// commits that no replica has. First plain asynchronous replication (clients and replicas on
/// the primary itself), then through the proxy in passthrough; in both the replicas merely lag
/// under the load (these usually lose hundreds; reported, not asserted, since it depends on how
/// far they lag). Before the last kill both replicas fall behind, as in the strong rounds that
/// draw it: that one must lose some.
#[test]
fn without_the_wait_the_ledger_finds_lost_commits() {
    let mut topology = topology();
    let lagging = Plan {
        load: Duration::from_millis(500),
        behind: &[],
    };
    let report = |how: &str, r: &Round| -> usize {
        let held: Vec<&Held> = r.held.iter().collect();
        let lost = r.ledger.lost(&held, 1).len();
        eprintln!(
            "ledger without the wait, {how}: {lost} of {} acknowledged transactions on no replica",
            r.ledger.acknowledged()
        );
        lost
    };
    let r = primary_kill_round(&mut topology, None, 1, lagging, false);
    report("plain asynchronous replication, replicas lagging", &r);

    let proxy = TestProxy::start(&topology.primary);
    point_replicas_at(&topology, proxy.port());
    wait_for("both replicas through the proxy", PATIENCE, || {
        semisync_replicas(&proxy) == 2
    });
    let r = primary_kill_round(&mut topology, Some(&proxy), 2, lagging, false);
    report("passthrough, replicas lagging", &r);
    let behind = Plan {
        behind: &[0, 1],
        ..lagging
    };
    let r = primary_kill_round(&mut topology, Some(&proxy), 3, behind, false);
    let lost = report("passthrough, both replicas fallen behind", &r);
    assert!(
        lost > 0,
        "asynchronous replication lost nothing although both replicas were stopped before \
         the crash: the ledger cannot see losses"
    );
}

/// The proxy killed with SIGKILL under load, three times: clients see errors, never a false
/// OK; what they were told before the kill is on the quorum; the replicas reconnect to the
/// restarted proxy by themselves and everything converges.
#[test]
fn every_acknowledged_commit_survives_proxy_kills_and_replicas_come_back_by_themselves() {
    let quorum = 2;
    let mut rng = StdRng::seed_from_u64(replay::seed("ledger"));
    let topology = topology();
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let listen_text = listen.to_string();
    let primary = topology.primary.addr();
    let args = [
        "--listen",
        &listen_text,
        "--primary",
        &primary,
        "--durability-quorum",
        "2",
        "--durability-on-timeout",
        "block",
        "--durability-ack-timeout",
        "10m",
    ];
    let mut proxy = ProxyProcess::start(&args, &[], listen);
    point_replicas_at(&topology, listen.port());
    let url = format!("mysql://{APP_USER}:{APP_PASSWORD}@{listen}/sbtest?prefer_socket=false");
    let replicas_connected = |proxy: &ProxyProcess| {
        let status = support::admin::status(proxy.admin_addr().unwrap());
        status
            .replicas
            .iter()
            .filter(|r| r.connected && r.semisync)
            .count()
            == 2
    };
    wait_for("both replicas through the proxy", PATIENCE, || {
        replicas_connected(&proxy)
    });
    for round in 1..=replay::kills(PROXY_KILLS) {
        let load = Load::start(&url, round, WRITERS, STYLES);
        load.wait_running(3);
        thread::sleep(Duration::from_millis(rng.random_range(300..2000)));
        proxy.stop_with(nix::sys::signal::Signal::SIGKILL);
        let ledger = load.finish(GRACE);
        assert_eq!(
            ledger.errors.len(),
            WRITERS as usize,
            "every writer hears of the kill: {:?}",
            ledger.errors
        );
        let held: Vec<Held> = topology.replicas.iter().map(applied).collect();
        let held_refs: Vec<&Held> = held.iter().collect();
        let lost = ledger.lost(&held_refs, quorum);
        eprintln!(
            "ledger proxy kill {round}: {} acknowledged {:?}, {} on fewer than {quorum} replicas",
            ledger.acknowledged(),
            ledger.oks,
            lost.len()
        );
        assert!(ledger.acknowledged() > 0, "the load ran");
        assert!(
            lost.is_empty(),
            "round {round}: {:?}",
            &lost[..lost.len().min(20)]
        );

        // Restarted on the same address: the replicas' I/O threads, retrying all along,
        // reconnect by themselves and resume from their GTID position.
        proxy = ProxyProcess::start(&args, &[], listen);
        wait_for("the replicas to reconnect by themselves", PATIENCE, || {
            replicas_connected(&proxy)
        });
        let status = support::admin::status(proxy.admin_addr().unwrap());
        assert_eq!(status.state, "strong", "{status:#?}");
    }
    // Everything the primary committed, acknowledged or not, reaches both replicas.
    topology.wait_replicas_caught_up();
    let checksum = |server: &MariaDb| server.sql("CHECKSUM TABLE sbtest.ledger EXTENDED");
    let want = checksum(&topology.primary);
    for replica in &topology.replicas {
        assert_eq!(
            checksum(replica),
            want,
            "replica converged with the primary"
        );
    }
    // And a client through the restarted proxy commits as before.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut conn = Conn::new(Opts::from_url(&url).unwrap()).await.unwrap();
        conn.run("INSERT INTO ledger (id, writer) VALUES (1, 0)")
            .await;
    });
}
