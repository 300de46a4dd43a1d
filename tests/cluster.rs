//! Several strongsync instances, one leader by a lease in a real etcd (three members on
//! loopback): only the leader is ready and serves; the others turn clients away naming it;
//! when the leader is killed, or paused past its lease, another takes over in an epoch of its
//! own, from the state the last leader left in etcd, and the paused one acts on nothing when
//! it wakes.

use std::net::SocketAddr;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use nix::sys::signal::Signal;
use strongsync::status::{ClusterStatus, Status};
use support::admin;
use support::etcd::Etcd;
use support::mariadb::{wait_for, MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER};
use support::ports::free_port;
use support::proxy::{run_strongsync, ProxyProcess};

const PATIENCE: Duration = Duration::from_secs(60);
const TTL_SECS: u64 = 3;
const TOKEN: &str = "cluster-admin-token-0123";

/// One instance of the cluster, in front of `primary`.
struct Instance {
    process: ProxyProcess,
    listen: SocketAddr,
}

impl Instance {
    fn start(primary: &MariaDb, etcd: &Etcd, name: &str, token: &std::path::Path) -> Instance {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let (listen_text, endpoints) = (listen.to_string(), etcd.endpoints().join(","));
        let name = name.to_owned();
        let process = ProxyProcess::start(
            &[
                "--listen",
                &listen_text,
                "--primary",
                &primary.addr(),
                "--durability-passthrough",
                "--cluster-endpoints",
                &endpoints,
                "--cluster-name",
                &name,
                "--cluster-advertise",
                &listen_text,
                "--cluster-lease-ttl",
                &format!("{TTL_SECS}s"),
                "--cluster-lease-margin",
                "1s",
                "--failover-admin-token-file",
                token.to_str().unwrap(),
            ],
            &[("STRONGSYNC_LOG_LEVEL", "info")],
            listen,
        );
        Instance { process, listen }
    }

    fn epoch(&self) -> u64 {
        self.status().epoch
    }

    fn admin(&self) -> SocketAddr {
        self.process.admin_addr().expect("an admin port")
    }

    fn ready(&self) -> bool {
        admin::get(self.admin(), "/readyz").status == 200
    }

    fn status(&self) -> Status {
        admin::status(self.admin())
    }

    /// Its part in the cluster, as `/status` says.
    fn cluster(&self) -> ClusterStatus {
        self.status().cluster.expect("an instance of a cluster")
    }

    async fn current_user(&self) -> Result<String, mysql_async::Error> {
        let url = format!(
            "mysql://{APP_USER}:{APP_PASSWORD}@{}/?prefer_socket=false",
            self.listen
        );
        let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap()).await?;
        let who: Option<String> = conn.query_first("SELECT CURRENT_USER()").await?;
        Ok(who.unwrap_or_default())
    }
}

/// The index of the one ready instance, once exactly one is.
fn the_leader(instances: &[Instance], alive: &[bool]) -> usize {
    let mut leader = None;
    wait_for("exactly one ready instance", PATIENCE, || {
        let ready: Vec<usize> = (0..instances.len())
            .filter(|&i| alive[i] && instances[i].ready())
            .collect();
        leader = (ready.len() == 1).then(|| ready[0]);
        leader.is_some()
    });
    leader.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn one_instance_leads_the_others_serve_nothing_and_a_killed_or_paused_leader_is_replaced() {
    let primary = MariaDb::start(MariaDbOptions::default());
    let etcd = Etcd::start(3);
    let dir = tempfile::tempdir().unwrap();
    let token = admin::token_file(dir.path(), TOKEN);
    let mut instances: Vec<Instance> = ["a", "b", "c"]
        .iter()
        .map(|name| Instance::start(&primary, &etcd, name, &token))
        .collect();
    let mut alive = vec![true; 3];

    // No state in etcd: whoever wins the lease cannot take over, and nobody serves.
    wait_for("a takeover refused for want of state", PATIENCE, || {
        instances
            .iter()
            .any(|i| i.process.log().contains("the cluster has no state in etcd"))
    });
    for i in &instances {
        let ready = admin::get(i.admin(), "/readyz");
        assert_eq!(ready.status, 503, "{}\n{}", ready.body, i.process.log());
    }
    let endpoints = etcd.endpoints().join(",");
    let init = [
        "--primary",
        &primary.addr(),
        "--cluster-endpoints",
        &endpoints,
        "init-state",
    ];
    let created = run_strongsync(&init);
    assert!(created.success(), "{created}");
    assert!(
        created
            .stdout
            .contains("etcd key /strongsync/default/state"),
        "{created}"
    );
    let again = run_strongsync(&init);
    assert!(
        !again.success() && again.stderr.contains("exists already"),
        "{again}"
    );

    let first = the_leader(&instances, &alive);
    // The takeover opened an epoch of the leader's own, and etcd keeps it.
    assert_eq!(instances[first].epoch(), 2);
    wait_for("etcd's state at epoch 2", PATIENCE, || {
        etcd.get("/strongsync/default/state")
            .is_some_and(|v| v.contains("\"epoch\":2"))
    });
    let leader_name = instances[first].cluster().name;
    assert!(
        etcd.get("/strongsync/default/leader")
            .is_some_and(|v| v.contains(&format!("\"name\":\"{leader_name}\""))),
        "etcd's leader key names {leader_name}"
    );
    assert_eq!(
        instances[first].current_user().await.unwrap(),
        format!("{APP_USER}@%")
    );
    for (i, follower) in instances.iter().enumerate().filter(|(i, _)| *i != first) {
        // A follower looks at the leader key every third of a lease.
        wait_for("the follower to know the leader", PATIENCE, || {
            follower
                .cluster()
                .leader
                .is_some_and(|l| l.name == leader_name)
        });
        let refused = follower
            .current_user()
            .await
            .expect_err("a follower served");
        let text = refused.to_string();
        assert!(
            text.contains("does not lead") && text.contains(&instances[first].listen.to_string()),
            "instance {i}: {text}"
        );
        assert_eq!(follower.cluster().standing, "following");
        let not_ready = admin::get(follower.admin(), "/readyz");
        assert_eq!(not_ready.status, 503, "{}", not_ready.body);
        // Only the leader changes anything.
        let fence = admin::post(follower.admin(), "/fence", Some(TOKEN), "{}");
        assert_eq!(fence.status, 409, "{}", fence.body);
        assert!(fence.body.contains("does not lead"), "{}", fence.body);
    }

    // Any instance names them all, and the leader with its lease.
    let listed = run_strongsync(&[
        "status",
        "--admin-listen",
        &instances[(first + 1) % 3].admin().to_string(),
    ]);
    assert!(listed.success(), "{listed}");
    let line = listed
        .stdout
        .lines()
        .find(|l| l.starts_with("cluster:"))
        .unwrap_or_default()
        .to_owned();
    assert!(
        line.contains(&format!("leader {leader_name}"))
            && ["a", "b", "c"]
                .iter()
                .all(|n| line.contains(&format!("{n} ("))),
        "{listed}"
    );
    let leader_status = instances[first].cluster();
    assert_eq!(leader_status.standing, "leading");
    assert!(leader_status.lease.is_some(), "{leader_status:#?}");

    // Killed: another takes over once its lease expires.
    instances[first].process.stop_with(Signal::SIGKILL);
    alive[first] = false;
    let second = the_leader(&instances, &alive);
    assert_ne!(second, first);
    assert_eq!(
        instances[second].current_user().await.unwrap(),
        format!("{APP_USER}@%")
    );
    assert_eq!(instances[second].epoch(), 3);

    // Paused past its lease: a third takes over; the paused one, woken, acts on nothing.
    instances[second].process.signal(Signal::SIGSTOP);
    let third = {
        let mut others = alive.clone();
        others[second] = false;
        the_leader(&instances, &others)
    };
    assert!(third != first && third != second);
    instances[second].process.signal(Signal::SIGCONT);
    let woken = &instances[second];
    wait_for("the woken one to say it follows", PATIENCE, || {
        woken.cluster().standing == "following"
    });
    assert!(!woken.ready());
    let refused = woken
        .current_user()
        .await
        .expect_err("the woken one served");
    assert!(refused.to_string().contains("does not lead"), "{refused}");
    assert!(
        woken
            .process
            .log()
            .contains("no longer leading the cluster"),
        "{}",
        woken.process.log()
    );
    assert_eq!(
        instances[third].current_user().await.unwrap(),
        format!("{APP_USER}@%")
    );
    assert_eq!(instances[third].epoch(), 4);

    // A fence outlives the leader that raised it: the next one reads it from etcd, finds no
    // replica to promote (none is configured) and stays fenced.
    let fenced = admin::post(
        instances[third].admin(),
        "/fence",
        Some(TOKEN),
        r#"{"reason": "test"}"#,
    );
    assert_eq!(fenced.status, 200, "{}", fenced.body);
    instances[third].process.stop_with(Signal::SIGKILL);
    let fourth = second;
    wait_for("the woken one to lead again, fenced", PATIENCE, || {
        instances[fourth].ready() || instances[fourth].status().fenced
    });
    let status = instances[fourth].status();
    assert!(status.fenced, "{status:#?}");
    let standing = status.cluster.as_ref().map(|c| c.standing.as_str());
    assert_eq!(standing, Some("leading"), "{status:#?}");
    let refused = instances[fourth]
        .current_user()
        .await
        .expect_err("served while fenced");
    assert!(refused.to_string().contains("fenced"), "{refused}");
    drop(etcd);
}

/// With etcd's authentication on, the account `[cluster]` gives leads; a wrong password
/// leaves an instance that cannot reach etcd, which serves nothing and says why.
#[tokio::test(flavor = "multi_thread")]
async fn with_etcd_authentication_only_the_account_given_takes_part() {
    let primary = MariaDb::start(MariaDbOptions::default());
    let etcd = Etcd::start(1);
    etcd.enable_auth("strongsync", "etcd-secret", "/strongsync/");
    let dir = tempfile::tempdir().unwrap();
    let config = |name: &str, password: &str| {
        let path = dir.path().join(format!("{name}.toml"));
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        std::fs::write(
            &path,
            format!(
                "listen = \"{listen}\"\nprimary = \"{}\"\n[durability]\npassthrough = true\n\
                 [cluster]\nendpoints = [\"{}\"]\nname = \"{name}\"\nadvertise = \"{listen}\"\n\
                 lease_ttl = \"{TTL_SECS}s\"\nlease_margin = \"1s\"\n\
                 user = \"strongsync\"\npassword = \"{password}\"\n",
                primary.addr(),
                etcd.endpoints()[0]
            ),
        )
        .unwrap();
        (path, listen)
    };
    let (good, bad) = (config("good", "etcd-secret"), config("bad", "not-it"));
    let created = run_strongsync(&["init-state", "--config", good.0.to_str().unwrap()]);
    assert!(created.success(), "{created}");
    let refused = run_strongsync(&["init-state", "--config", bad.0.to_str().unwrap()]);
    assert!(!refused.success(), "{refused}");
    let start = |(path, listen): &(std::path::PathBuf, SocketAddr)| Instance {
        process: ProxyProcess::start(&["--config", path.to_str().unwrap()], &[], *listen),
        listen: *listen,
    };
    let (good, bad) = (start(&good), start(&bad));
    wait_for("the instance with the account to lead", PATIENCE, || {
        good.ready()
    });
    wait_for("the other to find etcd closed to it", PATIENCE, || {
        bad.cluster().standing == "unreachable"
    });
    assert!(!bad.ready());
    let problem = bad.cluster().problem.unwrap_or_default();
    assert!(
        problem.to_lowercase().contains("auth") || problem.contains("password"),
        "{problem}"
    );
}

/// etcd over TLS: the instance that trusts its CA leads; one without the CA cannot reach it,
/// serves nothing and says why. The first serves clients a configured certificate; the second,
/// with none, warns that its own changes at each start (and so at each takeover).
#[tokio::test(flavor = "multi_thread")]
async fn with_etcd_over_tls_only_an_instance_that_trusts_it_takes_part() {
    let primary = MariaDb::start(MariaDbOptions::default());
    let certs = support::certs::TestCerts::generate(&["127.0.0.1"]);
    let etcd = Etcd::start_tls(1, &certs);
    let dir = tempfile::tempdir().unwrap();
    let config = |name: &str, ca: Option<&std::path::Path>| {
        let path = dir.path().join(format!("{name}.toml"));
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let (ca, tls) = ca
            .map(|ca| {
                (
                    format!("ca = \"{}\"\n", ca.display()),
                    format!(
                        "[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
                        certs.cert.display(),
                        certs.key.display()
                    ),
                )
            })
            .unwrap_or_default();
        std::fs::write(
            &path,
            format!(
                "listen = \"{listen}\"\nprimary = \"{}\"\n{tls}[durability]\npassthrough = true\n\
                 [cluster]\nendpoints = [\"{}\"]\nname = \"{name}\"\nadvertise = \"{listen}\"\n\
                 lease_ttl = \"{TTL_SECS}s\"\nlease_margin = \"1s\"\n{ca}",
                primary.addr(),
                etcd.endpoints()[0]
            ),
        )
        .unwrap();
        (path, listen)
    };
    let (trusting, blind) = (config("trusting", Some(&certs.ca)), config("blind", None));
    let created = run_strongsync(&["init-state", "--config", trusting.0.to_str().unwrap()]);
    assert!(created.success(), "{created}");
    let start = |(path, listen): &(std::path::PathBuf, SocketAddr)| Instance {
        process: ProxyProcess::start(&["--config", path.to_str().unwrap()], &[], *listen),
        listen: *listen,
    };
    let (trusting, blind) = (start(&trusting), start(&blind));
    wait_for(
        "the instance that trusts etcd's CA to lead",
        PATIENCE,
        || trusting.ready(),
    );
    wait_for("the other to find etcd unreachable", PATIENCE, || {
        blind.cluster().standing == "unreachable"
    });
    assert!(!blind.ready());
    let own = "serves a certificate of its own";
    assert!(blind.process.log().contains(own), "{}", blind.process.log());
    assert!(
        !trusting.process.log().contains(own),
        "{}",
        trusting.process.log()
    );
}

/// Through HAProxy as `deploy/cluster/haproxy.cfg` ships it, a leader whose replicas are all gone
/// keeps its clients under `on_timeout = "degrade"`, which exists to ride that out: a commit
/// that waits out its timeout on a session routed there is answered on that session, and new
/// sessions are routed too; `/readyz` stays 200 and says it is degraded. Under `block` (a
/// reload away) `/readyz` says it is not ready, and the clients are still routed to the leader:
/// their commits wait, as `block` says, until a replica is back.
#[tokio::test(flavor = "multi_thread")]
async fn through_the_shipped_haproxy_a_leader_without_replicas_keeps_its_clients() {
    use support::cluster::Cluster;
    use support::haproxy::{Backend, Haproxy};
    use support::sql::Statements;
    use support::topology::Topology;

    let topology = Topology::start(2);
    topology.primary_sql("CREATE TABLE sbtest.routed (id INT PRIMARY KEY)");
    let etcd = Etcd::start(1);
    let dir = tempfile::tempdir().unwrap();
    let (listen, admin) = (
        SocketAddr::from(([127, 0, 0, 1], free_port())),
        SocketAddr::from(([127, 0, 0, 1], free_port())),
    );
    // Longer than HAProxy's two failed checks a second apart: a commit that outlives its
    // timeout on a routed session shows the session was not cut meanwhile.
    let config = |on_timeout: &str| {
        format!(
            "listen = \"{listen}\"\nadmin_listen = \"{admin}\"\nprimary = \"127.0.0.1:{}\"\n\
             [durability]\nquorum = 1\nack_timeout = \"3s\"\non_timeout = \"{on_timeout}\"\n\
             [cluster]\nendpoints = [\"{}\"]\nname = \"a\"\nadvertise = \"{listen}\"\n\
             lease_ttl = \"{TTL_SECS}s\"\nlease_margin = \"1s\"\n",
            topology.primary_port(),
            etcd.endpoints()[0],
        )
    };
    let file = dir.path().join("strongsync.toml");
    std::fs::write(&file, config("degrade")).unwrap();
    let file_text = file.to_str().unwrap();
    let created = run_strongsync(&["init-state", "--config", file_text]);
    assert!(created.success(), "{created}");
    let instance = ProxyProcess::start_as_given(&["--config", file_text], &[], listen);
    let haproxy = Haproxy::shipped(&[Backend {
        name: "a".into(),
        listen,
        admin,
    }]);
    for i in 0..2 {
        topology.set_semisync(i, true);
        topology.point_replica_at(i, "127.0.0.1", haproxy.replication);
    }
    wait_for("ready with both replicas", PATIENCE, || {
        admin::get(admin, "/readyz").body == "ready\n"
    });
    let url = format!(
        "mysql://{APP_USER}:{APP_PASSWORD}@127.0.0.1:{}/sbtest?prefer_socket=false",
        haproxy.sql
    );
    let connect = || async {
        mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
            .await
            .unwrap()
    };
    let mut session = connect().await;
    session.run("INSERT INTO routed VALUES (1)").await;

    // Both replicas gone.
    topology.stop_io(0);
    topology.stop_io(1);
    wait_for("/readyz to say degraded", PATIENCE, || {
        let ready = admin::get(admin, "/readyz");
        ready.status == 200 && ready.body.starts_with("ready, degraded")
    });
    session.run("INSERT INTO routed VALUES (2)").await;
    let gtid = topology.newest_gtid();
    for i in 0..2 {
        assert!(
            !Topology::holds(&topology.witness(i).received(), &gtid),
            "replica {i} has {gtid}: the commit was not released without them"
        );
    }
    let status = admin::status(admin);
    assert_eq!(status.state, "degraded", "{status:#?}");
    let n: u64 = session.one("SELECT COUNT(*) FROM routed").await;
    assert_eq!(n, 2, "the same session, routed all along");
    let mut another = connect().await;
    let n: u64 = another.one("SELECT COUNT(*) FROM routed").await;
    assert_eq!(n, 2, "a new session is routed too");

    // Under block, not ready, yet still the leader: its clients keep their sessions.
    std::fs::write(&file, config("block")).unwrap();
    instance.signal(Signal::SIGHUP);
    wait_for("/readyz to say not ready under block", PATIENCE, || {
        let ready = admin::get(admin, "/readyz");
        ready.status == 503 && ready.body.contains("on_timeout = block")
    });
    let parked = tokio::spawn(async move {
        session.run("INSERT INTO routed VALUES (3)").await;
        session
    });
    topology.start_io(1);
    let mut session = tokio::time::timeout(PATIENCE, parked)
        .await
        .expect("the commit answered once a replica is back")
        .unwrap();
    let gtid = topology.newest_gtid();
    assert!(
        Topology::holds(&topology.witness(1).received(), &gtid),
        "replica 1 holds {gtid} once the commit is answered under block"
    );
    let n: u64 = session.one("SELECT COUNT(*) FROM routed").await;
    assert_eq!(n, 3);
    drop(haproxy);
    drop(instance);
}
