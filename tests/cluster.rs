//! Several strongsync instances, one leader by a lease in a real etcd (three members on
//! loopback): only the leader is ready and serves; the others turn clients away naming it;
//! when the leader is killed, or paused past its lease, another takes over, and the paused one
//! acts on nothing when it wakes.

use std::net::SocketAddr;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use nix::sys::signal::Signal;
use support::admin;
use support::etcd::Etcd;
use support::mariadb::{wait_for, MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER};
use support::ports::free_port;
use support::proxy::ProxyProcess;

const PATIENCE: Duration = Duration::from_secs(60);
const TTL_SECS: u64 = 3;

/// One instance of the cluster, in front of `primary`.
struct Instance {
    process: ProxyProcess,
    listen: SocketAddr,
}

impl Instance {
    fn start(primary: &MariaDb, etcd: &Etcd, name: &str) -> Instance {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let (listen_text, endpoints) = (listen.to_string(), etcd.endpoints().join(","));
        let name = name.to_owned();
        let process = ProxyProcess::start(
            &[
                "--listen",
                &listen_text,
                "--primary",
                &primary.addr(),
                "--passthrough",
                "--cluster-endpoints",
                &endpoints,
                "--cluster-name",
                &name,
                "--cluster-lease-ttl",
                &format!("{TTL_SECS}s"),
                "--cluster-lease-margin",
                "1s",
            ],
            &[("STRONGSYNC_LOG_LEVEL", "info")],
            listen,
        );
        Instance { process, listen }
    }

    fn admin(&self) -> SocketAddr {
        self.process.admin_addr().expect("an admin port")
    }

    fn ready(&self) -> bool {
        admin::get(self.admin(), "/readyz").status == 200
    }

    fn status(&self) -> serde_json::Value {
        admin::status(self.admin())
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
    let mut instances: Vec<Instance> = ["a", "b", "c"]
        .iter()
        .map(|name| Instance::start(&primary, &etcd, name))
        .collect();
    let mut alive = vec![true; 3];

    let first = the_leader(&instances, &alive);
    let leader_name = instances[first].status()["cluster"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
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
        let refused = follower
            .current_user()
            .await
            .expect_err("a follower served");
        let text = refused.to_string();
        assert!(
            text.contains("does not lead") && text.contains(&instances[first].listen.to_string()),
            "instance {i}: {text}"
        );
        assert_eq!(follower.status()["cluster"]["standing"], "following");
        let not_ready = admin::get(follower.admin(), "/readyz");
        assert_eq!(not_ready.status, 503, "{}", not_ready.body);
    }

    // Killed: another takes over once its lease expires.
    instances[first].process.stop_with(Signal::SIGKILL);
    alive[first] = false;
    let second = the_leader(&instances, &alive);
    assert_ne!(second, first);
    assert_eq!(
        instances[second].current_user().await.unwrap(),
        format!("{APP_USER}@%")
    );

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
        woken.status()["cluster"]["standing"] == "following"
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
    drop(etcd);
}
