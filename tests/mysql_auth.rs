//! `caching_sha2_password` through strongsync to a MySQL 9.7 primary (MySQL 9 has no
//! server-side `mysql_native_password`): the fast path, full authentication in plain text with
//! the server's RSA key, and full authentication with TLS to strongsync — which MySQL takes in
//! clear only over a secure transport, so it works when strongsync reaches the primary over
//! its Unix socket and is refused over plain TCP.

use mysql_async::prelude::Queryable;
use support::certs::TestCerts;
use support::cli::mariadb;
use support::mysql::{MySql, MySqlOptions};
use support::mysql_topology::proxy_config;
use support::proxy::TestProxy;

const USER: &str = "fresh";
const PASSWORD: &str = "fresh-secret";

/// A primary with an account nobody has logged in as yet: its first login takes the full
/// authentication.
fn primary() -> MySql {
    let primary = MySql::start(MySqlOptions::default());
    primary.sql(&format!(
        "CREATE USER '{USER}'@'%' IDENTIFIED WITH caching_sha2_password BY '{PASSWORD}'"
    ));
    primary
}

#[tokio::test(flavor = "multi_thread")]
async fn full_authentication_with_the_servers_key_then_the_fast_path_work_in_plain_text() {
    let primary = primary();
    let proxy = TestProxy::start_with(proxy_config(&primary));
    // mysql_async asks the server for its RSA key and sends the password encrypted with it.
    let url = format!(
        "mysql://{USER}:{PASSWORD}@127.0.0.1:{}/?prefer_socket=false",
        proxy.port()
    );
    let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
        .await
        .expect("full authentication through strongsync");
    let who: String = conn
        .query_first("SELECT CURRENT_USER()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(who, format!("{USER}@%"));
    conn.disconnect().await.unwrap();
    // The server has cached the account: the mariadb CLI (libmariadb) takes the fast path.
    let out = mariadb(proxy.port(), USER, PASSWORD)
        .args(["--ssl=0", "--batch", "--skip-column-names"])
        .execute("SELECT CURRENT_USER()")
        .expect_success();
    assert_eq!(out.stdout.trim(), format!("{USER}@%"), "{out}");
}

#[test]
fn full_authentication_over_tls_to_strongsync_needs_a_secure_leg_to_the_primary() {
    let certs = TestCerts::generate(&["127.0.0.1"]);
    let primary = primary();
    let ca = format!("--ssl-ca={}", certs.ca.display());

    // Plain TCP to the primary: the client, on TLS, sends its password in clear; MySQL takes a
    // clear password only over a secure transport, and refuses the login.
    let mut config = proxy_config(&primary);
    config.tls = certs.tls_config();
    let over_tcp = TestProxy::start_with(config);
    let refused = mariadb(over_tcp.port(), USER, PASSWORD)
        .args(["--ssl", &ca, "--ssl-verify-server-cert", "--batch"])
        .execute("SELECT CURRENT_USER()")
        .expect_failure();
    assert!(refused.stderr.contains("ERROR 1045"), "{refused}");
    assert_eq!(
        primary.sql(&format!(
            "SELECT COUNT(*) FROM performance_schema.threads WHERE PROCESSLIST_USER = '{USER}'"
        )),
        "0"
    );

    // The primary's Unix socket is a secure transport: the same login works, and caches the
    // account for the fast path.
    let mut config = proxy_config(&primary);
    config.tls = certs.tls_config();
    config.primary = primary.socket().to_str().unwrap().to_owned();
    let over_socket = TestProxy::start_with(config);
    let out = mariadb(over_socket.port(), USER, PASSWORD)
        .args([
            "--ssl",
            &ca,
            "--ssl-verify-server-cert",
            "--batch",
            "--skip-column-names",
        ])
        .execute("SELECT CURRENT_USER()")
        .expect_success();
    assert_eq!(out.stdout.trim(), format!("{USER}@%"), "{out}");
    // Cached now: over plain TCP the fast path needs no secure transport.
    let out = mariadb(over_tcp.port(), USER, PASSWORD)
        .args([
            "--ssl",
            &ca,
            "--ssl-verify-server-cert",
            "--batch",
            "--skip-column-names",
        ])
        .execute("SELECT CURRENT_USER()")
        .expect_success();
    assert_eq!(out.stdout.trim(), format!("{USER}@%"), "{out}");
}
