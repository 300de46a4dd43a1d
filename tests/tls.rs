//! TLS on both legs against MariaDB 10.11 servers with certificates of their own: each
//! `primary_tls` mode takes the certificate it should and names what it refuses; the sessions'
//! connections use it whatever the client's own leg is (proven by accounts that `REQUIRE SSL`
//! on the primary); and a replica replicates through strongsync over TLS, semisync on, commits
//! gated, its binlog unreadable to a capture in between.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use strongsync::config::PrimaryTls;
use strongsync::Config;
use support::certs::TestCerts;
use support::logins::holds;
use support::mariadb::{MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER};
use support::proxy::TestProxy;
use support::strong::{blocking, ok_once_held, position_holds, Strong};

/// A primary serving TLS with `certs`; the application account may log in only over TLS.
fn primary_with(certs: &TestCerts) -> MariaDb {
    let primary = MariaDb::start(MariaDbOptions {
        extra_cnf: vec![
            format!("ssl_cert = {}", certs.cert.display()),
            format!("ssl_key = {}", certs.key.display()),
            format!("ssl_ca = {}", certs.ca.display()),
        ],
        ..MariaDbOptions::default()
    });
    primary.sql(&format!("ALTER USER '{APP_USER}'@'%' REQUIRE SSL"));
    primary
}

fn config(primary: &MariaDb, mode: PrimaryTls, ca: Option<&TestCerts>) -> Config {
    let mut config = TestProxy::config(primary);
    config.primary_tls = mode;
    config.primary_tls_ca = ca.map(|c| c.ca.clone());
    config
}

/// Logs in through `proxy` as the application (plain TCP on the client's leg) and reads the
/// cipher of the primary's end of the session's connection.
async fn cipher_through(proxy: &TestProxy) -> Result<String, String> {
    let opts = Opts::from_url(&proxy.url(APP_USER, APP_PASSWORD)).unwrap();
    let mut conn = Conn::new(opts).await.map_err(|e| e.to_string())?;
    let row: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .await
        .map_err(|e| e.to_string())?;
    let _ = conn.disconnect().await;
    Ok(row.map(|(_, cipher)| cipher).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn each_mode_takes_the_certificate_it_should_and_names_what_it_refuses() {
    // A certificate for another host name, and one for the address strongsync dials, each from
    // its own CA.
    let elsewhere = TestCerts::generate(&["db.example"]);
    let here = TestCerts::generate(&["127.0.0.1"]);
    let primary = primary_with(&elsewhere);

    // Each mode, the CA it trusts, and what the client gets: served, or refused naming these.
    type Case<'a> = (PrimaryTls, Option<&'a TestCerts>, Result<(), &'a [&'a str]>);
    let cases: [Case; 6] = [
        (PrimaryTls::Preferred, None, Ok(())),
        (PrimaryTls::Required, None, Ok(())),
        (PrimaryTls::VerifyCa, Some(&elsewhere), Ok(())),
        (
            PrimaryTls::VerifyCa,
            Some(&here),
            Err(&["primary_tls = \"verify_ca\"", "invalid peer certificate"]),
        ),
        (
            PrimaryTls::VerifyIdentity,
            Some(&elsewhere),
            Err(&["primary_tls = \"verify_identity\"", "not valid for name"]),
        ),
        // The primary refuses the application's plain login itself (REQUIRE SSL).
        (PrimaryTls::Disabled, None, Err(&["1045"])),
    ];
    for (mode, ca, expected) in cases {
        let proxy = TestProxy::start_with(config(&primary, mode, ca));
        let got = cipher_through(&proxy).await;
        match expected {
            Ok(()) => {
                let cipher = got.unwrap_or_else(|e| panic!("{mode}: {e}"));
                assert!(!cipher.is_empty(), "{mode}: the session's leg is plain");
            }
            Err(words) => {
                let error = got.expect_err(&format!("{mode} with {ca:?} was served"));
                for word in words {
                    assert!(error.contains(word), "{mode}: {error} lacks {word}");
                }
            }
        }
    }

    // The certificate that names the address strongsync dials passes the strictest mode.
    let named = primary_with(&here);
    let proxy = TestProxy::start_with(config(&named, PrimaryTls::VerifyIdentity, Some(&here)));
    let cipher = cipher_through(&proxy).await.expect("verify_identity");
    assert!(!cipher.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_primary_without_tls_is_refused_under_required_and_used_plain_under_preferred() {
    let primary = MariaDb::start(MariaDbOptions::default());
    let required = TestProxy::start_with(config(&primary, PrimaryTls::Required, None));
    let error = cipher_through(&required)
        .await
        .expect_err("served without TLS");
    assert!(
        error.contains("offers no TLS") && error.contains("primary_tls = \"required\""),
        "{error}"
    );
    let preferred = TestProxy::start_with(config(&primary, PrimaryTls::Preferred, None));
    assert_eq!(cipher_through(&preferred).await.unwrap(), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_probe_logs_in_over_tls() {
    let certs = TestCerts::generate(&["127.0.0.1"]);
    let primary = primary_with(&certs);
    primary.sql("CREATE USER 'tlsprobe'@'%' IDENTIFIED BY 'probe-secret' REQUIRE SSL");
    let mut config = config(&primary, PrimaryTls::VerifyIdentity, Some(&certs));
    config.probe = strongsync::config::ProbeConfig::account_of("tlsprobe", "probe-secret");
    let proxy = TestProxy::start_with(config);
    // The probe reads the primary's identity at start: its server id is known only if the
    // account (which the primary lets in over TLS only) logged in.
    support::mariadb::wait_for("the primary's identity", Duration::from_secs(30), || {
        support::admin::status(proxy.admin_addr())
            .primary
            .identity
            .is_some_and(|id| id.contains("server_id"))
    });
    let status = support::admin::status(proxy.admin_addr());
    assert_eq!(status.tls.primary, "verify_identity", "{status:#?}");
    assert_eq!(status.tls.clients, "self-signed (this run only)");
    assert_eq!(status.tls.clients_sha256.unwrap().len(), 64);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_over_tls_acknowledges_through_strongsync_and_a_capture_reads_nothing() {
    let s = Strong::start_relayed(1, Some(0), |config, _| {
        config.durability = blocking(1);
    });
    // The replica asks strongsync for TLS and will not replicate without it.
    s.topology.replicas[0].sql(
        "STOP SLAVE; CHANGE MASTER TO MASTER_SSL = 1, MASTER_SSL_VERIFY_SERVER_CERT = 0; START SLAVE",
    );
    s.topology.wait_replica_running(0);
    s.wait_semisync(1);
    s.relay().capture();

    s.stop_io(0);
    s.wait_semisync(0);
    const MARKER: &str = "marker-read-by-nobody-between";
    let insert = s
        .park(
            &format!("INSERT INTO t (v) VALUES (LENGTH('{MARKER}'))"),
            vec![s.witness(0)],
        )
        .await;
    let gtid = s.topology.primary.gtid_binlog_pos();
    s.start_io(0);
    ok_once_held(insert, 0, position_holds, &gtid, "the insert").await;
    let status = s.topology.replica_status(0);
    assert_eq!(status["Master_SSL_Allowed"], "Yes", "{status:?}");
    let captured = s.relay().captured();
    assert!(
        captured.len() > 1_000,
        "the capture holds the dump ({} bytes)",
        captured.len()
    );
    assert!(
        !holds(&captured, MARKER.as_bytes()),
        "the binlog crossed to the replica in clear"
    );
}
