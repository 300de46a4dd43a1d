//! Sharing connections to the primary (`[sharing]`), on MariaDB 10.11 and MySQL 9.7: clients
//! without state of their own run on a pool of a few connections, and hold none while their
//! commits wait for the quorum; state pins a client to its connection; a pool with nothing
//! free for `sharing.max_wait` answers 1040. Counted on the primary itself (its process
//! list), the rows and the replicas' received GTIDs.

use std::time::Duration;

use mysql_async::prelude::*;
use strongsync::config::SharingConfig;
use support::each_server;
use support::failover_rounds::LedgerCluster;
use support::mariadb::{wait_for, APP_PASSWORD, APP_USER};
use support::rawclient::RawClient;
use support::sql::Statements;
use support::strong::{blocking, newest_gtid, ok_once_held, spawn_watched};
use support::strong::{Cluster, Strong, PATIENCE};
use support::topology::MySqlTopology;
use support::topology::Topology;

/// Quorum 1, waiting as long as it takes, two replicas, the probe (which finds the primary's
/// tracking defaults: a session tracked by them may share), and `[sharing]` as `sharing`
/// says, with `pool_size` and `max_wait`.
fn start<C: LedgerCluster>(sharing: bool, pool_size: usize, max_wait: Duration) -> Strong<C> {
    start_with(sharing, pool_size, max_wait, |_| {})
}

/// [`start`], with the rest of `[sharing]` as `more` sets it.
fn start_with<C: LedgerCluster>(
    sharing: bool,
    pool_size: usize,
    max_wait: Duration,
    more: impl FnOnce(&mut SharingConfig),
) -> Strong<C> {
    let s = Strong::<C>::launch(2, None, |config, topology| {
        config.durability = blocking(1);
        config.probe = topology.probe_account();
        config.sharing.enabled = sharing;
        config.sharing.pool_size = pool_size;
        config.sharing.max_wait = max_wait;
        more(&mut config.sharing);
    });
    let admin = s.proxy.admin_addr();
    wait_for("the primary's tracking defaults", PATIENCE, || {
        support::admin::status(admin).session_tracking == "configured"
    });
    if sharing {
        // The replicas logged in through the pool and pinned it while they set up: their
        // dumps are no sessions that keep a connection.
        assert_eq!(
            pinned_sessions(&s),
            0,
            "{:#?}",
            support::admin::status(admin)
        );
    }
    s
}

/// The application account's connections on the primary, from its process list.
fn app_connections<C: Cluster>(s: &Strong<C>) -> usize {
    s.topology
        .primary_sql(&format!(
            "SELECT COUNT(*) FROM information_schema.processlist WHERE user = '{APP_USER}'"
        ))
        .trim()
        .parse()
        .expect("a count")
}

/// Twenty clients commit while no replica receives: every commit is done on the primary and
/// parked, and the primary serves them on at most `pool_size` connections (without sharing,
/// one each: the control). Each OK comes only once the replica started again holds the
/// newest transaction.
async fn parked_commits_hold_no_connection<C: LedgerCluster>(sharing: bool) {
    const CLIENTS: usize = 20;
    const POOL: usize = 3;
    let s = start::<C>(sharing, POOL, Duration::from_secs(60));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(s.client().await);
    }
    s.stop_all();
    let before: usize = s
        .topology
        .primary_sql("SELECT COUNT(*) FROM sbtest.t")
        .trim()
        .parse()
        .unwrap();
    let watched: Vec<_> = clients
        .into_iter()
        .map(|conn| {
            spawn_watched(
                conn,
                "INSERT INTO sbtest.t (v) VALUES (1)",
                vec![s.witness(0)],
            )
        })
        .collect();
    s.wait_parked(CLIENTS);
    let committed: usize = s
        .topology
        .primary_sql("SELECT COUNT(*) FROM sbtest.t")
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        committed,
        before + CLIENTS,
        "every commit is done on the primary"
    );
    let expected = if sharing { POOL } else { CLIENTS };
    wait_for(
        &format!("at most {expected} connections of {APP_USER} on the primary"),
        PATIENCE,
        || app_connections(&s) <= expected,
    );
    if sharing {
        assert!(app_connections(&s) <= POOL);
    } else {
        assert_eq!(app_connections(&s), CLIENTS);
    }
    assert!(
        watched.iter().all(|w| !w.is_finished()),
        "no client has its answer while no replica holds its commit"
    );
    let newest = s.topology.newest_gtid();
    s.start_io(0);
    for w in watched {
        ok_once_held(w, 0, C::holds, &newest, "a commit").await;
    }
}

/// A client of the application's account on `addr`, packet by packet, with no optional
/// capability.
fn app_client(addr: std::net::SocketAddr) -> RawClient {
    let none = mysql_common::constants::CapabilityFlags::empty();
    RawClient::connect(addr, APP_USER, APP_PASSWORD, none)
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_parked_commits_hold_no_connection_to_the_primary() {
    parked_commits_hold_no_connection::<Topology>(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_without_sharing_each_parked_commit_holds_its_connection() {
    parked_commits_hold_no_connection::<Topology>(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_parked_commits_hold_no_connection_to_the_primary() {
    parked_commits_hold_no_connection::<MySqlTopology>(true).await;
}

/// A client's variable, temporary table, transaction and connection id stay its own while
/// other clients churn through a pool of two connections; a client without state runs on any.
async fn state_pins_a_client_to_its_connection<C: LedgerCluster>() {
    let s = start::<C>(true, 2, Duration::from_secs(60));
    let mut pinned = s.client().await;
    pinned.run("SET @mine = 7").await;
    pinned
        .run("CREATE TEMPORARY TABLE sbtest.mine (v INT)")
        .await;
    let id: u32 = pinned.one("SELECT CONNECTION_ID()").await;
    let mut others = Vec::new();
    for _ in 0..6 {
        others.push(s.client().await);
    }
    // The others churn through the pool while the pinned client asks its connection,
    // statement by statement, what only that connection knows.
    let mut tasks = Vec::new();
    for mut other in others.drain(..) {
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                other.run("INSERT INTO sbtest.t (v) VALUES (2)").await;
                let _: Option<u64> = other
                    .query_first("SELECT COUNT(*) FROM sbtest.t")
                    .await
                    .unwrap();
            }
            other
        }));
    }
    pinned.run("BEGIN").await;
    pinned.run("INSERT INTO sbtest.t (v) VALUES (3)").await;
    pinned.run("COMMIT").await;
    for round in 0..20 {
        let mine: Option<u32> = pinned.query_first("SELECT @mine").await.unwrap();
        assert_eq!(
            mine,
            Some(7),
            "round {round}: the user variable stayed with its session"
        );
        let same: u32 = pinned.one("SELECT CONNECTION_ID()").await;
        assert_eq!(same, id, "round {round}: the session kept its connection");
    }
    for task in tasks {
        others.push(task.await.unwrap());
    }
    pinned.run("BEGIN").await;
    pinned.run("INSERT INTO sbtest.t (v) VALUES (3)").await;
    pinned.run("INSERT INTO sbtest.mine VALUES (1)").await;
    let in_transaction: u64 = pinned
        .one("SELECT COUNT(*) FROM sbtest.t WHERE v = 3")
        .await;
    assert!(in_transaction >= 1, "the open transaction sees its own row");
    pinned.run("COMMIT").await;
    // An insert's id is there to ask for on the same connection.
    let mut stateless = others.pop().unwrap();
    stateless.run("INSERT INTO sbtest.t (v) VALUES (4)").await;
    let last: u64 = stateless.one("SELECT LAST_INSERT_ID()").await;
    let newest: u64 = s
        .topology
        .primary_sql("SELECT MAX(id) FROM sbtest.t WHERE v = 4")
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        last, newest,
        "LAST_INSERT_ID() on the connection that inserted"
    );
    // Seven clients, two of them with a connection of their own at most beside the pool.
    wait_for(
        "the pool's connections and the pinned one",
        PATIENCE,
        || app_connections(&s) <= 3,
    );
}

/// With one connection in the pool, busy with a long statement, another client's statement
/// gets 1040 after `max_wait` and its session goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_with_nothing_free_answers_1040_and_the_session_goes_on() {
    let s = start::<Topology>(true, 1, Duration::from_millis(300));
    let mut busy = s.client().await;
    let mut waiting = s.client().await;
    let sleeping = tokio::spawn(async move {
        busy.run("SELECT SLEEP(3)").await;
        busy
    });
    wait_for("the long statement on the primary", PATIENCE, || {
        s.topology
            .primary_sql("SELECT COUNT(*) FROM information_schema.processlist WHERE info = 'SELECT SLEEP(3)'")
            .trim()
            == "1"
    });
    let error = waiting.fails("SELECT 1").await;
    match error {
        mysql_async::Error::Server(e) => {
            assert_eq!(e.code, 1040, "{e:?}");
            assert!(e.message.contains("sharing.pool_size = 1"), "{}", e.message);
        }
        other => panic!("expected the server error 1040, got {other:?}"),
    }
    sleeping.await.unwrap();
    let one: u32 = waiting.one("SELECT 1").await;
    assert_eq!(one, 1);
}

/// A follow to a promoted replica, the old primary alive: the pool's connections to it close
/// with the epoch, every client that shared them gets 1927 at its next statement and writes
/// nothing to the old primary, and new clients run on the new primary.
#[tokio::test(flavor = "multi_thread")]
async fn a_follow_closes_the_pool_on_the_old_primary_and_its_clients_get_1927() {
    const TOKEN: &str = "sharing-follow-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let token = support::admin::token_file(dir.path(), TOKEN);
    let s = Strong::<Topology>::launch(2, None, |config, topology| {
        config.durability = blocking(1);
        config.probe = topology.probe_account();
        config.failover.admin_token_file = Some(token);
        config.failover.state_file = Some(support::admin::state_file(dir.path(), &config.primary));
        config.sharing.enabled = true;
        config.sharing.pool_size = 2;
    });
    let admin = s.proxy.admin_addr();
    wait_for("the primary's tracking defaults", PATIENCE, || {
        support::admin::status(admin).session_tracking == "configured"
    });
    let mut clients = Vec::new();
    for v in 0..6 {
        let mut client = s.client().await;
        client
            .run(format!("INSERT INTO sbtest.t (v) VALUES ({v})"))
            .await;
        clients.push(client);
    }
    wait_for(
        "the pool's two connections on the primary",
        PATIENCE,
        || app_connections(&s) <= 2,
    );
    assert!(
        app_connections(&s) >= 1,
        "the pool keeps its connections open"
    );
    let acknowledged = newest_gtid(&s.topology.primary, 0);
    let new_primary = &s.topology.replicas[0];
    assert_eq!(
        new_primary.sql(&format!("SELECT MASTER_GTID_WAIT('{acknowledged}', 60)")),
        "0"
    );
    new_primary.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0");
    let body = format!(r#"{{"primary": "{}"}}"#, new_primary.addr());
    let followed = support::admin::post(admin, "/follow", Some(TOKEN), &body);
    assert_eq!(followed.status, 200, "{}", followed.body);
    wait_for(
        "no connection of the pool left on the old primary",
        PATIENCE,
        || app_connections(&s) == 0,
    );
    let before = s.topology.primary.sql("SELECT COUNT(*) FROM sbtest.t");
    for mut client in clients {
        let error = client.fails("INSERT INTO sbtest.t (v) VALUES (50)").await;
        match error {
            mysql_async::Error::Server(e) => assert_eq!(e.code, 1927, "{e:?}"),
            other => panic!("expected error 1927, got {other:?}"),
        }
    }
    assert_eq!(
        s.topology.primary.sql("SELECT COUNT(*) FROM sbtest.t"),
        before,
        "the old primary got nothing"
    );
    let mut fresh = s.client().await;
    fresh.run("INSERT INTO sbtest.t (v) VALUES (60)").await;
    assert_eq!(
        new_primary.sql("SELECT COUNT(*) FROM sbtest.t WHERE v = 60"),
        "1"
    );
    assert_eq!(
        s.topology
            .primary
            .sql("SELECT COUNT(*) FROM sbtest.t WHERE v = 60"),
        "0"
    );
}

/// `SELECT LAST_INSERT_ID()` says the session's own last insert, though the one connection of
/// the pool ran another client's insert since.
async fn last_insert_id_is_the_sessions_own<C: LedgerCluster>() {
    let s = start::<C>(true, 1, Duration::from_secs(60));
    let mut a = s.client().await;
    let mut b = s.client().await;
    a.run("INSERT INTO sbtest.t (v) VALUES (70)").await;
    b.run("INSERT INTO sbtest.t (v) VALUES (71)").await;
    let id_of = |v: u32| -> u64 {
        s.topology
            .primary_sql(&format!("SELECT id FROM sbtest.t WHERE v = {v}"))
            .trim()
            .parse()
            .unwrap()
    };
    let (a_id, b_id) = (id_of(70), id_of(71));
    assert_ne!(a_id, b_id);
    let asked: u64 = a.one("select  last_insert_id()").await;
    assert_eq!(asked, a_id, "a's own insert, not b's ({b_id})");
    let asked: u64 = b.one("SELECT LAST_INSERT_ID()").await;
    assert_eq!(asked, b_id);
}

/// The primary ends every connection of the pool while its clients idle (as `wait_timeout`
/// would): each client's next statement ends its session with 1927, as a direct connection
/// would end, and its next login fills the pool again.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_the_primary_emptied_ends_its_sessions_and_a_new_login_refills_it() {
    let s = start::<Topology>(true, 2, Duration::from_secs(2));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let mut client = s.client().await;
        client.run("SELECT 1").await;
        clients.push(client);
    }
    wait_for("the pool's connections on the primary", PATIENCE, || {
        app_connections(&s) <= 2
    });
    let ids = s.topology.primary.sql(&format!(
        "SELECT GROUP_CONCAT(id) FROM information_schema.processlist WHERE user = '{APP_USER}'"
    ));
    for id in ids.trim().split(',').filter(|id| !id.is_empty()) {
        s.topology.primary.sql(&format!("KILL {id}"));
    }
    wait_for("no connection of the pool left", PATIENCE, || {
        app_connections(&s) == 0
    });
    for mut client in clients {
        match client.fails("SELECT 1").await {
            mysql_async::Error::Server(e) => {
                assert_eq!(e.code, 1927, "{e:?}");
                assert!(e.message.contains("reconnect"), "{}", e.message);
            }
            other => panic!("expected error 1927, got {other:?}"),
        }
    }
    let mut fresh = s.client().await;
    let one: u32 = fresh.one("SELECT 1").await;
    assert_eq!(one, 1);
}

/// `n` clients, each logged in and done with one statement.
async fn clients_that_ran_a_statement<C: Cluster>(
    s: &Strong<C>,
    n: usize,
) -> Vec<mysql_async::Conn> {
    let mut clients = Vec::new();
    for _ in 0..n {
        let mut conn = s.client().await;
        conn.run("SELECT 1").await;
        clients.push(conn);
    }
    clients
}

/// `[sharing]` changes with a reload: turned on, the clients that log in next share a pool
/// (six run on two connections beside six unshared ones), and a lower `pool_size` closes
/// what is free above it; turned off, new clients keep a
/// connection each, those that logged in sharing go on running, and once they have gone the
/// pool's free connections are closed. Counted in the primary's process list.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_turns_sharing_on_for_the_next_logins_and_off_again() {
    const EACH: usize = 6;
    const POOL: usize = 2;
    let mut s = start::<Topology>(false, POOL, Duration::from_secs(60));
    let mut before = clients_that_ran_a_statement(&s, EACH).await;
    assert_eq!(app_connections(&s), EACH, "without sharing, one each");

    assert!(s.proxy.reload(|c| c.sharing.enabled = true).is_empty());
    let mut sharing = clients_that_ran_a_statement(&s, EACH).await;
    wait_for(
        &format!("{EACH} unshared and {POOL} pooled connections of {APP_USER}"),
        PATIENCE,
        || app_connections(&s) == EACH + POOL,
    );
    assert!(s.proxy.reload(|c| c.sharing.pool_size = 1).is_empty());
    wait_for(
        "the free connection above the lowered pool_size closed",
        PATIENCE,
        || app_connections(&s) == EACH + 1,
    );

    assert!(s.proxy.reload(|c| c.sharing.enabled = false).is_empty());
    let mut after = clients_that_ran_a_statement(&s, POOL).await;
    for conn in &mut sharing {
        let one: u32 = conn.one("SELECT 1").await;
        assert_eq!(one, 1, "a client that logged in sharing goes on");
    }
    assert_eq!(
        app_connections(&s),
        EACH + 1 + POOL,
        "the clients after the reload keep a connection each"
    );
    for conn in sharing {
        conn.disconnect().await.unwrap();
    }
    wait_for("the pool closed once no client shares it", PATIENCE, || {
        app_connections(&s) == EACH + POOL
    });
    for conn in before.iter_mut().chain(after.iter_mut()) {
        let one: u32 = conn.one("SELECT 1").await;
        assert_eq!(one, 1);
    }
}

/// A session keeps its login's connection until its first command: one that pins the session
/// then (a set-up statement) pins that connection, not one another session gave back. Two
/// logins into a pool of one: the first sets a variable, and the second still gets a
/// connection for its statement (given back at once after their logins, the second's would
/// have been closed as surplus and the first's pinned: 1040).
#[tokio::test(flavor = "multi_thread")]
async fn a_session_sets_up_on_its_own_connection_and_leaves_the_others_theirs() {
    let s = start::<Topology>(true, 1, Duration::from_secs(2));
    let addr = s.proxy.addr();
    tokio::task::spawn_blocking(move || {
        let (mut first, mut second) = (app_client(addr), app_client(addr));
        assert_eq!(first.query("SET @x = 1").error, None);
        assert_eq!(second.query("SELECT 1").error, None);
        assert_eq!(first.query("SELECT @x").first_values, [Some(b"1".to_vec())]);
    })
    .await
    .unwrap();
}

/// Logins that each bring a new pool key (a client may vary its capabilities) leave no pool
/// behind once they have gone: sixteen logins, each with other capabilities and gone before
/// the next, and `/status` counts at most the pool in use.
#[tokio::test(flavor = "multi_thread")]
async fn pools_no_login_uses_any_longer_are_dropped() {
    use mysql_common::constants::CapabilityFlags as Caps;
    let s = start::<Topology>(true, 2, Duration::from_secs(2));
    let (addr, admin) = (s.proxy.addr(), s.proxy.admin_addr());
    let flags = [
        Caps::CLIENT_FOUND_ROWS,
        Caps::CLIENT_IGNORE_SPACE,
        Caps::CLIENT_LOCAL_FILES,
        Caps::CLIENT_INTERACTIVE,
    ];
    let pools = tokio::task::spawn_blocking(move || {
        let mut most = 0;
        for combination in 0..16u32 {
            let extra = flags
                .iter()
                .enumerate()
                .filter(|(bit, _)| combination & 1 << bit != 0)
                .fold(Caps::empty(), |all, (_, flag)| all | *flag);
            let mut client = RawClient::connect(addr, APP_USER, APP_PASSWORD, extra);
            assert_eq!(client.query("SELECT 1").error, None);
            drop(client);
            most = most.max(
                support::admin::status(admin)
                    .sharing
                    .expect("sharing is on")
                    .pools,
            );
        }
        most
    })
    .await
    .unwrap();
    // The replicas' own pool besides, while they set up.
    assert!(pools <= 3, "{pools} pools kept for one login at a time");
}

/// The pinned sessions `/status` counts, all reasons together.
fn pinned_sessions<C: Cluster>(s: &Strong<C>) -> i64 {
    let status = support::admin::status(s.proxy.admin_addr());
    status
        .sharing
        .expect("sharing is on")
        .pinned_sessions
        .values()
        .sum()
}

/// The sessions `status` counts as pinned for `why`.
fn pinned_for(status: &strongsync::status::Status, why: &str) -> i64 {
    let sharing = status.sharing.as_ref().expect("sharing is on");
    sharing
        .pinned_sessions
        .get(why)
        .copied()
        .unwrap_or_default()
}

/// The primary's prepared statements, all connections together.
fn prepared_on_primary<C: Cluster>(s: &Strong<C>) -> usize {
    let row = s
        .topology
        .primary_sql("SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'");
    let (_, count) = row.trim().split_once('\t').expect("a name and a count");
    count.parse().expect("a count")
}

/// Eight clients of a pool of two run their prepared statements (the binary protocol, as
/// mysql_async's `exec` does) on whichever connection they take: each statement is prepared
/// again where it is not yet, every row each client inserted is there once with its value,
/// no session keeps a connection for its statements, and the primary holds each statement
/// once per connection (a client's prepare of one the connection has is closed again).
async fn prepared_statements_run_on_any_connection<C: LedgerCluster>() {
    const CLIENTS: u64 = 8;
    const ROUNDS: u64 = 15;
    const POOL: usize = 2;
    let s = start::<C>(true, POOL, Duration::from_secs(60));
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let mut conn = s.client().await;
        tasks.push(tokio::spawn(async move {
            let insert = conn
                .prep("INSERT INTO sbtest.t (v) VALUES (?)")
                .await
                .unwrap();
            let count = conn
                .prep("SELECT COUNT(*) FROM sbtest.t WHERE v = ?")
                .await
                .unwrap();
            let sum = conn.prep("SELECT CONCAT(?, '-', ?)").await.unwrap();
            for round in 0..ROUNDS {
                let v = 100_000 + client * 1000 + round;
                conn.exec_drop(&insert, (v,)).await.unwrap();
                let n: u64 = conn.exec_first(&count, (v,)).await.unwrap().unwrap();
                assert_eq!(n, 1, "client {client}, round {round}: its row {v}");
                let both: String = conn.exec_first(&sum, (v, round)).await.unwrap().unwrap();
                assert_eq!(both, format!("{v}-{round}"));
            }
            conn
        }));
    }
    let mut clients = Vec::new();
    for task in tasks {
        clients.push(task.await.unwrap());
    }
    let rows = s
        .topology
        .primary_sql("SELECT COUNT(*), COUNT(DISTINCT v) FROM sbtest.t WHERE v >= 100000");
    let expected = CLIENTS * ROUNDS;
    assert_eq!(rows.trim(), format!("{expected}\t{expected}"));
    let metrics = s.metrics();
    assert!(
        metrics.get(r#"strongsync_pool_checkouts_total{connection="other"}"#) > 0.0,
        "the clients ran on each other's connections"
    );
    assert!(metrics.get("strongsync_pool_statements_reprepared_total") > 0.0);
    // Connected and idle, with their statements open: nothing pins them.
    assert_eq!(pinned_sessions(&s), 0);
    wait_for(
        &format!("at most {POOL} connections of {APP_USER} on the primary"),
        PATIENCE,
        || app_connections(&s) <= POOL,
    );
    let prepared = prepared_on_primary(&s);
    assert!(
        prepared <= 3 * POOL,
        "{prepared} statements on the primary: three texts, each at most once on each of {POOL} connections"
    );
    drop(clients);
}

/// `COM_STMT_EXECUTE` of `INSERT INTO sbtest.t (v) VALUES (?)` as statement `id`: the value
/// as a `MYSQL_TYPE_LONGLONG` with its type sent (`Some(true)`) or left out, or as a string
/// with its type sent (`None`).
fn insert_execute(id: u32, value: i64, longlong: Option<bool>) -> Vec<u8> {
    let mut p = vec![0x17];
    p.extend_from_slice(&id.to_le_bytes());
    p.push(0);
    p.extend_from_slice(&1u32.to_le_bytes());
    p.push(0); // no NULLs
    match longlong {
        Some(true) => p.extend_from_slice(&[1, 8, 0]),
        Some(false) => p.push(0),
        None => p.extend_from_slice(&[1, 253, 0]),
    }
    match longlong {
        Some(_) => p.extend_from_slice(&value.to_le_bytes()),
        None => {
            let text = value.to_string();
            p.push(text.len() as u8);
            p.extend_from_slice(text.as_bytes());
        }
    }
    p
}

/// An execute may leave its parameter types out: the server then uses those the statement
/// last ran with on that connection. Two sessions share one connection and one statement
/// text; the second runs it with a string, and the first's execute without types still
/// means its integer (strongsync adds them). A cursor keeps its session on its connection.
/// (The rows are the proof: a string's bytes read as an integer, or the integer's as a
/// string, would insert another value or fail.)
async fn types_left_out_are_the_sessions_own<C: LedgerCluster>() {
    let s = start::<C>(true, 1, Duration::from_secs(10));
    let (addr, admin) = (s.proxy.addr(), s.proxy.admin_addr());
    let insert = "INSERT INTO sbtest.t (v) VALUES (?)";
    // A full login first (over TLS to MySQL), so that the raw clients' fast one is known.
    drop(s.client().await);
    tokio::task::spawn_blocking(move || {
        let (mut first, mut second) = (app_client(addr), app_client(addr));
        let (mine, _) = first.prepare(insert);
        assert_eq!(
            first
                .command(&insert_execute(mine, 200_001, Some(true)))
                .error,
            None
        );
        // The second's login connection is closed as surplus once it has run a command: from
        // then on both run on the first's.
        let (theirs, _) = second.prepare(insert);
        assert_eq!(
            second.command(&insert_execute(theirs, 200_002, None)).error,
            None
        );
        assert_eq!(
            second.command(&insert_execute(theirs, 200_003, None)).error,
            None
        );
        assert_eq!(
            first
                .command(&insert_execute(mine, 200_004, Some(false)))
                .error,
            None
        );
        assert_eq!(
            second.command(&insert_execute(theirs, 200_005, None)).error,
            None
        );
        // A cursor lives on its connection: the session keeps it (and the pool's only one).
        let (select, columns) = first.prepare("SELECT v FROM sbtest.t WHERE v > 200000 ORDER BY v");
        first.execute_with_cursor(select, columns);
        let (rows, _) = first.fetch(select, 10);
        assert_eq!(rows, 5, "the cursor's rows");
        let status = support::admin::status(admin);
        assert_eq!(
            pinned_for(&status, "prepared_statement"),
            1,
            "the cursor's session keeps its connection: {status:#?}"
        );
    })
    .await
    .unwrap();
    let rows = s
        .topology
        .primary_sql("SELECT GROUP_CONCAT(v ORDER BY v) FROM sbtest.t WHERE v > 200000");
    assert_eq!(rows.trim(), "200001,200002,200003,200004,200005");
}

/// MariaDB's clients may send a prepare and its execute together, the execute naming "the
/// statement prepared last" (id 0xFFFFFFFF): that is the session's last, wherever it runs. An
/// id the session never gave gets the server's error, and the session goes on.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_the_last_prepared_statement_is_the_sessions_own() {
    let s = start::<Topology>(true, 1, Duration::from_secs(10));
    let addr = s.proxy.addr();
    tokio::task::spawn_blocking(move || {
        let (mut first, mut second) = (app_client(addr), app_client(addr));
        assert_eq!(second.query("SELECT 1").error, None);
        let (_, _) = first.prepare("INSERT INTO sbtest.t (v) VALUES (300001)");
        // The other session prepares on the same connection after it.
        let (_, _) = second.prepare("INSERT INTO sbtest.t (v) VALUES (300002)");
        let reply = first.command(&[0x17, 0xFF, 0xFF, 0xFF, 0xFF, 0, 1, 0, 0, 0]);
        assert_eq!(reply.error, None);
        let reply = first.command(&[0x17, 77, 0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(reply.error.map(|(code, _)| code), Some(1243));
        assert_eq!(first.query("SELECT 1").error, None);
    })
    .await
    .unwrap();
    let rows = s
        .topology
        .primary_sql("SELECT GROUP_CONCAT(v ORDER BY v) FROM sbtest.t WHERE v > 300000");
    assert_eq!(rows.trim(), "300001");
}

/// A client that prepares, runs and closes one new statement after another leaves the
/// connection at most `sharing.statements_per_connection` of them on the primary (the least
/// recently used are closed there), and a statement past `sharing.statement_bytes` keeps its
/// session on its connection.
async fn a_connection_keeps_at_most_its_statements<C: LedgerCluster>() {
    let s = start_with::<C>(true, 1, Duration::from_secs(10), |sharing| {
        sharing.statements_per_connection = 4;
        sharing.statement_bytes = 4096;
    });
    let mut conn = s.client().await;
    for i in 0..20u32 {
        let statement = conn.prep(format!("SELECT {i} AS n")).await.unwrap();
        let n: u32 = conn.exec_first(&statement, ()).await.unwrap().unwrap();
        assert_eq!(n, i);
        conn.close(statement).await.unwrap();
    }
    let prepared = prepared_on_primary(&s);
    assert!(prepared <= 4, "{prepared} statements on the primary");
    assert_eq!(pinned_sessions(&s), 0);
    let long = format!("SELECT 7 AS n /* {} */", "x".repeat(5000));
    let statement = conn.prep(long).await.unwrap();
    let n: u32 = conn.exec_first(&statement, ()).await.unwrap().unwrap();
    assert_eq!(n, 7);
    let status = support::admin::status(s.proxy.admin_addr());
    assert_eq!(
        pinned_for(&status, "prepared_statement"),
        1,
        "a statement whose text is not kept holds its session to its connection: {status:#?}"
    );
    drop(conn);
}

/// A cursor and parameters sent ahead live on the connection, with the statement they belong
/// to: a session that opens a cursor and sends a parameter ahead, then prepares and runs more
/// statements than `sharing.statements_per_connection`, still reads the cursor to its end and
/// inserts the parameter it sent (the connection closes others to make room, never those).
async fn a_cursor_and_parameters_sent_ahead_outlast_the_connections_limit<C: LedgerCluster>() {
    let s = start_with::<C>(true, 1, Duration::from_secs(10), |sharing| {
        sharing.statements_per_connection = 4;
    });
    let addr = s.proxy.addr();
    drop(s.client().await);
    s.topology
        .primary_sql("INSERT INTO sbtest.t (v) VALUES (400001), (400002), (400003), (400004)");
    tokio::task::spawn_blocking(move || {
        let mut client = app_client(addr);
        let (select, columns) =
            client.prepare("SELECT v FROM sbtest.t WHERE v > 400000 ORDER BY v");
        client.execute_with_cursor(select, columns);
        assert_eq!(client.fetch(select, 1).0, 1);
        let (insert, _) = client.prepare("INSERT INTO sbtest.t (v) VALUES (?)");
        // COM_STMT_SEND_LONG_DATA of parameter 0; it has no response.
        let mut long_data = vec![0x18];
        long_data.extend_from_slice(&insert.to_le_bytes());
        long_data.extend_from_slice(&[0, 0]);
        long_data.extend_from_slice(b"400005");
        client.send(&long_data);
        for i in 0..8 {
            let (other, _) = client.prepare(&format!("SELECT {i} AS n"));
            let mut execute = vec![0x17];
            execute.extend_from_slice(&other.to_le_bytes());
            execute.extend_from_slice(&[0, 1, 0, 0, 0]);
            assert_eq!(client.command(&execute).error, None, "statement {i}");
        }
        let (rows, _) = client.fetch(select, 10);
        assert_eq!(rows, 3, "the cursor's other rows");
        // The execute of the insert sends its parameter's type and no value: that came ahead.
        let mut execute = vec![0x17];
        execute.extend_from_slice(&insert.to_le_bytes());
        execute.extend_from_slice(&[0, 1, 0, 0, 0, 0, 1, 253, 0]);
        assert_eq!(client.command(&execute).error, None);
    })
    .await
    .unwrap();
    let rows = s
        .topology
        .primary_sql("SELECT GROUP_CONCAT(v ORDER BY v) FROM sbtest.t WHERE v > 400000");
    assert_eq!(rows.trim(), "400001,400002,400003,400004,400005");
}

each_server!(
    state_pins_a_client_to_its_connection,
    last_insert_id_is_the_sessions_own,
    prepared_statements_run_on_any_connection,
    types_left_out_are_the_sessions_own,
    a_connection_keeps_at_most_its_statements,
    a_cursor_and_parameters_sent_ahead_outlast_the_connections_limit,
);
