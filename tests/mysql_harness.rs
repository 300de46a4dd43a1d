//! Tests of the MySQL 9.7 harness against real servers: replication with GTID auto-positioning,
//! semisync, restarts and kills, start-up options, and the current proxy relaying clients and a
//! semisync replica to a MySQL primary.

use std::time::Duration;

use mysql_async::{Conn, Opts};

use support::cli;
use support::mysql::{
    wait_for, MySql, MySqlOptions, APP_PASSWORD, APP_USER, REPL_PASSWORD, REPL_USER,
};
use support::mysql_gtid::gtid_set_holds;
use support::proxy::TestProxy;
use support::server_process::{assert_process_gone, rows};
use support::sql::Statements;
use support::topology::{proxy_config, MySqlTopology};

/// How long a test waits for something it expects to happen.
const PATIENCE: Duration = Duration::from_secs(60);

/// Waits until `server`'s global status `name` reads `value`.
fn wait_status(server: &MySql, name: &str, value: &str) {
    wait_for(&format!("{name} = {value}"), PATIENCE, || {
        server.status_var(name) == value
    });
}

#[test]
fn primary_and_two_replicas_replicate_with_gtid_auto_position() {
    let topology = MySqlTopology::start_with_three_rows();
    let primary = &topology.primary;
    let uuid = primary.sql("SELECT @@server_uuid");
    let executed = primary.gtid_executed();
    assert_eq!(
        executed,
        format!("{uuid}:1-2"),
        "one GTID each for CREATE and INSERT"
    );
    for (idx, replica) in topology.replicas.iter().enumerate() {
        assert_ne!(
            replica.sql("SELECT @@server_uuid"),
            uuid,
            "replica {idx}'s own UUID"
        );
        let status = topology.replica_status(idx);
        assert_eq!(status["Auto_Position"], "1", "replica {idx} auto-positions");
        assert_eq!(
            status["Source_SSL_Allowed"], "Yes",
            "replica {idx} over TLS"
        );
        let received = replica.received_transaction_set();
        assert!(
            gtid_set_holds(&received, &format!("{uuid}:2")),
            "replica {idx} received {received}, without the INSERT {uuid}:2"
        );
        assert!(
            replica.gtid_subset(&executed, &received),
            "replica {idx} received {received}, not all of {executed}"
        );
    }
}

#[test]
fn users_and_database_are_created_on_every_server() {
    let server = MySql::start(MySqlOptions::default());
    let plugins = server.query_rows(
        "SELECT user, plugin FROM mysql.user WHERE user IN ('app', 'repl') ORDER BY user",
    );
    assert_eq!(
        plugins,
        rows(&[
            &[APP_USER, "caching_sha2_password"],
            &[REPL_USER, "caching_sha2_password"]
        ])
    );
    server.cache_password(APP_USER, APP_PASSWORD);
    server.cache_password(REPL_USER, REPL_PASSWORD);
    assert_eq!(server.sql("SHOW DATABASES LIKE 'sbtest'"), "sbtest");
    assert_eq!(server.sql("SELECT @@gtid_mode, @@log_bin"), "ON\t1");
}

#[test]
fn a_replica_acknowledges_a_semisync_primary_once_its_io_thread_restarts() {
    let topology = MySqlTopology::start_with(
        MySqlOptions {
            semisync_source: true,
            ..MySqlOptions::default()
        },
        MySqlOptions::default(),
        1,
    );
    let primary = &topology.primary;
    let replica = &topology.replicas[0];
    primary.sql("SET GLOBAL rpl_semi_sync_source_enabled = ON");
    assert_eq!(replica.status_var("Rpl_semi_sync_replica_status"), "OFF");

    topology.set_semi_sync_replica(0, true);
    topology.wait_replica_running(0);
    wait_status(replica, "Rpl_semi_sync_replica_status", "ON");
    wait_status(primary, "Rpl_semi_sync_source_clients", "1");
    primary.sql("CREATE TABLE sbtest.t (id INT PRIMARY KEY)");
    assert_eq!(
        primary.status_var("Rpl_semi_sync_source_yes_tx"),
        "1",
        "the CREATE was acknowledged by the replica"
    );

    topology.set_semi_sync_replica(0, false);
    wait_status(replica, "Rpl_semi_sync_replica_status", "OFF");
}

#[test]
fn extra_arguments_load_the_thread_pool_and_set_binlog_compression() {
    let server = MySql::start(MySqlOptions {
        extra_args: vec![
            "--plugin-load-add=thread_pool.so".into(),
            "--binlog-transaction-compression=ON".into(),
        ],
        ..MySqlOptions::default()
    });
    assert_eq!(
        server.sql(
            "SELECT plugin_status FROM information_schema.plugins \
             WHERE plugin_name = 'thread_pool'"
        ),
        "ACTIVE"
    );
    assert_eq!(server.sql("SELECT @@binlog_transaction_compression"), "1");
}

#[test]
fn restart_keeps_the_data_and_drop_kills_the_server() {
    let mut server = MySql::start(MySqlOptions::default());
    server.sql("CREATE TABLE sbtest.t (id INT PRIMARY KEY); INSERT INTO sbtest.t VALUES (7)");
    let port = server.port();
    let first = server.pid();

    server.restart();
    assert_process_gone(first);
    assert_eq!(server.port(), port, "same port after a restart");
    assert_eq!(server.sql("SELECT id FROM sbtest.t"), "7");

    let second = server.pid();
    server.kill();
    assert!(!server.is_running());
    assert_process_gone(second);
    assert!(
        server.try_sql("SELECT 1").is_err(),
        "a killed server answers nothing"
    );

    server.restart();
    assert_eq!(
        server.sql("SELECT id FROM sbtest.t"),
        "7",
        "crash recovery kept the row"
    );
    let third = server.pid();
    let datadir = server.datadir();
    drop(server);
    assert_process_gone(third);
    assert!(!datadir.exists(), "{} removed on drop", datadir.display());
}

#[tokio::test]
async fn clients_log_in_and_query_a_mysql_primary_through_the_proxy() {
    let primary = MySql::start(MySqlOptions::default());
    let proxy = TestProxy::start_with(proxy_config(&primary));

    // Nothing is cached yet: caching_sha2_password's full authentication runs through the
    // proxy in plain text, the client asking for the server's RSA key.
    let cli = cli::mariadb(proxy.port(), APP_USER, APP_PASSWORD)
        .args(["--ssl=0", "--batch", "-N"])
        .execute("SELECT @@version, @@server_id")
        .expect_success();
    assert!(cli.stdout.starts_with("9.7."), "{cli}");

    // The cached password is dropped again: mysql_async, too, logs in the long way.
    primary.sql("FLUSH LOCAL PRIVILEGES");
    let mut conn = Conn::new(Opts::from_url(&proxy.url(APP_USER, APP_PASSWORD)).unwrap())
        .await
        .expect("mysql_async logs in through the proxy");
    let version: String = conn.one("SELECT @@version").await;
    assert!(version.starts_with("9.7."), "{version}");
    conn.run("CREATE TABLE t (id INT PRIMARY KEY)").await;
    conn.run("INSERT INTO t VALUES (1)").await;
    conn.disconnect().await.unwrap();
    assert_eq!(primary.sql("SELECT id FROM sbtest.t"), "1");

    // And on the fast path, once the account is cached.
    primary.cache_password(APP_USER, APP_PASSWORD);
    cli::mariadb(proxy.port(), APP_USER, APP_PASSWORD)
        .args(["--ssl=0"])
        .execute("SELECT 1")
        .expect_success();
}

#[tokio::test]
async fn a_replica_replicates_through_the_proxy_with_semisync() {
    let topology = MySqlTopology::start(1);
    let primary = &topology.primary;
    let replica = &topology.replicas[0];
    let proxy = TestProxy::start_with(proxy_config(primary));
    // The replica's first connection, straight to the primary, cached repl's password; dropped,
    // the replica's login through the proxy takes the RSA key (GET_SOURCE_PUBLIC_KEY).
    primary.sql("FLUSH LOCAL PRIVILEGES");

    replica.sql("SET GLOBAL rpl_semi_sync_replica_enabled = ON");
    topology.point_replica_at(0, "127.0.0.1", proxy.port());
    topology.wait_replica_running(0);
    wait_status(replica, "Rpl_semi_sync_replica_status", "ON");
    wait_for("the proxy to see a semisync replica", PATIENCE, || {
        let status = proxy.durability().status();
        status.replicas.iter().filter(|r| r.semisync).count() == 1
    });

    let mut conn = Conn::new(Opts::from_url(&proxy.url(APP_USER, APP_PASSWORD)).unwrap())
        .await
        .unwrap();
    conn.run("CREATE TABLE t (id INT PRIMARY KEY, v INT)").await;
    conn.run("INSERT INTO t VALUES (1, 10)").await;
    conn.disconnect().await.unwrap();

    topology.wait_replicas_caught_up();
    assert_eq!(replica.sql("SELECT id, v FROM sbtest.t"), "1\t10");
    let uuid = primary.sql("SELECT @@server_uuid");
    assert_eq!(primary.gtid_executed(), format!("{uuid}:1-2"));
    let received = replica.received_transaction_set();
    assert!(
        gtid_set_holds(&received, &format!("{uuid}:2")),
        "received {received} through the proxy, without the INSERT {uuid}:2"
    );
    assert_eq!(
        topology.replica_status(0)["Source_Port"],
        proxy.port().to_string()
    );
}
