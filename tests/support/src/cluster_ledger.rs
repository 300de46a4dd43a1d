//! The acknowledged-commit ledger across a strongsync cluster, on either flavour: three
//! strongsync processes with one leader by an etcd lease (etcd of three members, each instance
//! reaching it through relays of its own), a primary and two replicas, and HAProxy as the one
//! address clients and replicas use, as `deploy/cluster/haproxy.cfg` ships it. Writers go through HAProxy and record each OK; the rounds
//! kill, pause and cut off the leader (and once the primary with it); one replica is slow. The
//! verdict comes from the servers' own rows and GTIDs, and from each instance's log of what it
//! released in which epoch.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::admin;
use crate::etcd::Etcd;
use crate::failover::PooledWriters;
use crate::failover_rounds::{ids, LedgerCluster, LedgerServer, TOKEN};
use crate::haproxy::{Backend, Haproxy};
use crate::mariadb::{wait_for, APP_PASSWORD, APP_USER};
use crate::ports::free_port;
use crate::proxy::{run_strongsync, ProxyProcess};
use crate::tcp_relay::{Direction, TcpRelay};

const PATIENCE: Duration = Duration::from_secs(90);
const TTL_SECS: u64 = 3;
const INSTANCES: usize = 3;
/// How late the slow replica's binlog reaches it.
const SLOW_REPLICA: Duration = Duration::from_millis(100);

/// One strongsync instance: its config, ports and etcd relays outlive its processes.
struct Instance {
    name: String,
    config: PathBuf,
    listen: SocketAddr,
    admin: SocketAddr,
    /// Its way to each etcd member: cut to partition it from etcd.
    etcd: Vec<TcpRelay>,
    process: Option<ProxyProcess>,
    /// SIGSTOPped: it answers nothing, not even its admin port.
    paused: bool,
    /// The logs of its processes so far, for the release check.
    logs: Vec<String>,
}

impl Instance {
    fn start(&mut self) {
        let (config, admin) = (self.config.display().to_string(), self.admin.to_string());
        self.process = Some(ProxyProcess::start_as_given(
            &["--config", &config, "--admin-listen", &admin],
            &[],
            self.listen,
        ));
    }

    fn process(&self) -> &ProxyProcess {
        self.process.as_ref().expect("a running instance")
    }

    fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.stop_with(Signal::SIGKILL);
            self.logs.push(process.log());
        }
    }

    fn leading(&self) -> bool {
        self.process.is_some() && !self.paused && admin::get(self.admin, "/leader").status == 200
    }

    fn pause(&mut self, paused: bool) {
        let signal = if paused {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        self.process().signal(signal);
        self.paused = paused;
    }

    fn status(&self) -> strongsync::status::Status {
        admin::status(self.admin)
    }

    fn all_logs(&self) -> Vec<String> {
        let mut logs = self.logs.clone();
        logs.extend(self.process.as_ref().map(ProxyProcess::log));
        logs
    }
}

/// How a round disrupts the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterRound {
    /// SIGKILL the leader alone.
    KillLeader,
    /// SIGKILL the primary and the leader together (the sidecar's host dies).
    KillPrimaryAndLeader,
    /// SIGSTOP the leader for twice its lease, then SIGCONT it.
    PauseLeader,
    /// Cut the leader off from etcd while clients and replicas still reach it.
    CutLeaderFromEtcd,
    /// SIGKILL one etcd member, then the leader.
    KillEtcdMemberThenLeader,
}

/// The five rounds of the issue, in its order.
pub const ROUNDS: [ClusterRound; 5] = [
    ClusterRound::KillLeader,
    ClusterRound::KillPrimaryAndLeader,
    ClusterRound::PauseLeader,
    ClusterRound::CutLeaderFromEtcd,
    ClusterRound::KillEtcdMemberThenLeader,
];

/// What a run found, for docs/failover.md.
#[derive(Debug)]
pub struct ClusterLedgerReport {
    pub acknowledged: usize,
    /// Per round: from the disruption to the first commit acknowledged again.
    pub recovered: Vec<(ClusterRound, Duration)>,
}

/// Runs the five rounds on servers of kind `C` at quorum 1 and checks the ledger.
pub async fn five_rounds<C: LedgerCluster>() -> ClusterLedgerReport {
    let dir = tempfile::tempdir().unwrap();
    let mut topology = C::start(2);
    topology.primary_sql("CREATE TABLE sbtest.ledger (id BIGINT PRIMARY KEY)");
    let probe = topology.probe_account();
    let mut etcd = Etcd::start(3);
    let token = admin::token_file(dir.path(), TOKEN);
    let servers: Vec<(u32, String)> = topology
        .servers()
        .iter()
        .map(|s| (s.server_id(), s.addr()))
        .collect();
    let mut instances: Vec<Instance> = (0..INSTANCES)
        .map(|i| {
            let name = format!("s{i}");
            let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let relays: Vec<TcpRelay> = etcd
                .endpoints()
                .iter()
                .map(|e| TcpRelay::start(e.trim_start_matches("http://").parse().unwrap()))
                .collect();
            let config = dir.path().join(format!("{name}.toml"));
            std::fs::write(
                &config,
                instance_config(
                    &name,
                    listen,
                    admin,
                    &servers,
                    &relays,
                    &token,
                    probe.user.as_deref().unwrap_or_default(),
                    probe
                        .password
                        .as_ref()
                        .map(|p| p.0.as_str())
                        .unwrap_or_default(),
                ),
            )
            .unwrap();
            Instance {
                name,
                config,
                listen,
                admin,
                etcd: relays,
                process: None,
                paused: false,
                logs: Vec::new(),
            }
        })
        .collect();
    let created = run_strongsync(&[
        "init-state",
        "--config",
        instances[0].config.to_str().unwrap(),
    ]);
    assert!(created.success(), "{created}");
    for instance in &mut instances {
        instance.start();
    }
    // The shipped routing: clients and replicas to the instance whose /leader passes.
    let haproxy = Haproxy::shipped(
        &instances
            .iter()
            .map(|i| Backend {
                name: i.name.clone(),
                listen: i.listen,
                admin: i.admin,
            })
            .collect::<Vec<_>>(),
    );
    // The last replica is slow: its binlog reaches it SLOW_REPLICA late, so at quorum 1 the
    // other acknowledges most commits first, and a takeover that promotes must choose by what
    // each holds (a promote sabotaged to choose the one that received the least fails this:
    // the other, ahead of it, cannot follow it, and no commit is acknowledged again).
    let slow = TcpRelay::start(SocketAddr::from(([127, 0, 0, 1], haproxy.replication)));
    slow.set_delay(Direction::FromTarget, SLOW_REPLICA);
    let last = topology.replica_count() - 1;
    for i in 0..topology.replica_count() {
        topology.set_semisync(i, true);
        let port = if i == last {
            slow.port()
        } else {
            haproxy.replication
        };
        topology.point_replica_at(i, "127.0.0.1", port);
    }
    leader_of(&instances);
    let url = format!(
        "mysql://{APP_USER}:{APP_PASSWORD}@127.0.0.1:{}/?prefer_socket=false",
        haproxy.sql
    );
    let writers = PooledWriters::start(&url, 8);
    wait_for("200 acknowledged rows", PATIENCE, || {
        writers.acknowledged() >= 200
    });
    // The fixture does what it says: the slow replica is behind the other, even looked at
    // after it, nearly every time (replicas at par are each ahead about as often).
    let replica = |i: usize| topology.servers()[1 + i];
    wait_for("the slow replica replicating", PATIENCE, || {
        ids(replica(last)).len() >= 200
    });
    let mut behind = 0;
    for _ in 0..10 {
        let fast = ids(replica(0)).len();
        behind += usize::from(ids(replica(last)).len() < fast);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        behind >= 8,
        "the slow replica behind in {behind} of 10 looks"
    );

    let mut recovered = Vec::new();
    let mut dead = None;
    for (n, round) in ROUNDS.into_iter().enumerate() {
        let leader = leader_of(&instances);
        let phase = 10 + n as u32;
        let disrupted = Instant::now();
        match round {
            ClusterRound::KillLeader => instances[leader].kill(),
            ClusterRound::KillPrimaryAndLeader => {
                let primary = primary_id(&instances[leader], &servers);
                topology.server_mut(primary).kill();
                dead = Some(primary);
                instances[leader].kill();
            }
            ClusterRound::PauseLeader => instances[leader].pause(true),
            ClusterRound::CutLeaderFromEtcd => {
                for relay in &instances[leader].etcd {
                    relay.partition();
                }
            }
            ClusterRound::KillEtcdMemberThenLeader => {
                etcd.kill(2);
                instances[leader].kill();
            }
        }
        // Another instance leads (a leader cut off from etcd serves until its deadline).
        let mut next = leader;
        wait_for(&format!("{round:?}: another leader"), PATIENCE, || {
            next = leader_of(&instances);
            next != leader
        });
        // Statements sent from now on are this round's: the first of them acknowledged, by
        // the new leader, ends the outage (an OK sent before may still be on its way).
        writers.enter(phase);
        wait_for(
            &format!("{round:?}: commits acknowledged again"),
            PATIENCE,
            || {
                let ledger = writers.ledger.lock().unwrap();
                ledger
                    .sent
                    .iter()
                    .any(|s| s.phase == phase && s.acknowledged)
            },
        );
        let took = disrupted.elapsed();
        recovered.push((round, took));
        eprintln!("cluster ledger: {round:?}: first commit acknowledged {took:?} after");
        // Back to three instances before the next round.
        match round {
            ClusterRound::PauseLeader => {
                tokio::time::sleep(Duration::from_secs(2 * TTL_SECS)).await;
                instances[leader].pause(false);
            }
            ClusterRound::CutLeaderFromEtcd => {
                for relay in &instances[leader].etcd {
                    relay.heal();
                }
            }
            _ => instances[leader].start(),
        }
        let settled = writers.acknowledged();
        wait_for(&format!("{round:?}: writes going on"), PATIENCE, || {
            writers.acknowledged() >= settled + 100
        });
    }
    let ledger = writers.stop().await;
    let acknowledged = ledger.acknowledged();

    // The servers' own word: every acknowledged row on the final primary and on the replica
    // that lives, which holds nothing the primary lacks.
    let leader = leader_of(&instances);
    let primary = primary_id(&instances[leader], &servers);
    let alive: Vec<u32> = servers
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| Some(*id) != dead)
        .collect();
    let final_primary = by_id(&topology, primary);
    let executed = final_primary.executed();
    for id in &alive {
        if *id != primary {
            by_id(&topology, *id).assert_caught_up_without_errant(&executed);
        }
        let rows = ids(by_id(&topology, *id));
        let lost: Vec<&u64> = acknowledged.iter().filter(|i| !rows.contains(i)).collect();
        assert!(
            lost.is_empty(),
            "server {id} lacks acknowledged rows {lost:?}"
        );
    }
    check_releases(&instances);
    drop(slow);
    drop(haproxy);
    drop(etcd);
    ClusterLedgerReport {
        acknowledged: acknowledged.len(),
        recovered,
    }
}

/// The one instance that leads, once exactly one does.
fn leader_of(instances: &[Instance]) -> usize {
    let mut leader = None;
    wait_for("exactly one instance leading", PATIENCE, || {
        let leading: Vec<usize> = (0..instances.len())
            .filter(|&i| instances[i].leading())
            .collect();
        leader = (leading.len() == 1).then(|| leading[0]);
        leader.is_some()
    });
    leader.unwrap()
}

/// The server the leader follows.
fn primary_id(leader: &Instance, servers: &[(u32, String)]) -> u32 {
    let address = leader.status().primary.address;
    servers
        .iter()
        .find(|(_, a)| *a == address)
        .map(|(id, _)| *id)
        .unwrap_or_else(|| panic!("the leader follows {address}, none of the servers"))
}

fn by_id<C: LedgerCluster>(topology: &C, id: u32) -> &C::Server {
    topology
        .servers()
        .into_iter()
        .find(|s| s.server_id() == id)
        .expect("a server of the test")
}

/// No two instances released in the same epoch, and each released only in epochs it took
/// over (its own log says so): no commit was released by an instance without the lease.
fn check_releases(instances: &[Instance]) {
    let mut released_by: BTreeMap<u64, HashSet<String>> = BTreeMap::new();
    for instance in instances {
        let logs = instance.all_logs().join("\n");
        let led: HashSet<u64> = logs
            .lines()
            .filter(|l| {
                l.contains("takeover: following the primary in a new epoch")
                    || l.contains("FOLLOWING a new primary")
            })
            .filter_map(epoch_of)
            .collect();
        for line in logs.lines().filter(|l| l.contains("commit released")) {
            let epoch = epoch_of(line).expect("a release names its epoch");
            assert!(
                led.contains(&epoch),
                "{} released in epoch {epoch}, which it never took over: {line}",
                instance.name
            );
            released_by
                .entry(epoch)
                .or_default()
                .insert(instance.name.clone());
        }
    }
    assert!(!released_by.is_empty(), "no release logged at all");
    for (epoch, by) in &released_by {
        assert_eq!(by.len(), 1, "epoch {epoch} released by {by:?}");
    }
}

fn epoch_of(line: &str) -> Option<u64> {
    let at = line.find(" epoch=")? + " epoch=".len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[allow(clippy::too_many_arguments)]
fn instance_config(
    name: &str,
    listen: SocketAddr,
    admin: SocketAddr,
    servers: &[(u32, String)],
    etcd: &[TcpRelay],
    token: &Path,
    probe_user: &str,
    probe_password: &str,
) -> String {
    let mut text = format!(
        "listen = \"{listen}\"\nadmin_listen = \"{admin}\"\nprimary = \"{}\"\n\
         log_level = \"info,strongsync::release=debug\"\nshutdown_grace = \"2s\"\n\
         [timeouts]\nprimary_connect = \"2s\"\n\
         [durability]\nquorum = 1\nack_timeout = \"1h\"\non_timeout = \"block\"\n\
         [probe]\nuser = \"{probe_user}\"\npassword = \"{probe_password}\"\n\
         [failover]\nadmin_token_file = \"{}\"\nuser = \"{APP_USER}\"\npassword = \"{APP_PASSWORD}\"\n\
         [cluster]\nendpoints = [{}]\nname = \"{name}\"\nadvertise = \"{listen}\"\nlease_ttl = \"{TTL_SECS}s\"\nlease_margin = \"1s\"\n",
        servers[0].1,
        token.display(),
        etcd.iter()
            .map(|r| format!("\"http://{}\"", r.addr()))
            .collect::<Vec<_>>()
            .join(", "),
    );
    for (id, address) in servers {
        let _ = write!(
            text,
            "[[replica]]\nserver_id = {id}\naddress = \"{address}\"\n"
        );
    }
    text
}
