//! `caching_sha2_password` through strongsync to a MySQL 9.7 primary (MySQL 9 has no
//! server-side `mysql_native_password`), on a cold cache: a client on a plain leg asks for the
//! server's RSA key and gets strongsync's, since strongsync's leg to the primary is TLS and the
//! primary wants the password itself there; a client on TLS sends it in clear, and it goes on
//! over strongsync's TLS. Where a leg is plain, a password in clear is refused, never passed
//! on: captures of both legs show where it went.

use mysql_async::prelude::Queryable;
use strongsync::config::PrimaryTls;
use support::certs::TestCerts;
use support::cli::mariadb;
use support::logins::holds;
use support::mysql::{MySql, MySqlOptions};
use support::mysql_root::inside;
use support::proxy::TestProxy;
use support::tcp_relay::TcpRelay;
use support::topology::proxy_config;

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

/// strongsync in front of `primary`, reaching it through a relay that captures what crosses,
/// and a relay in front of strongsync that does the same.
struct Captured {
    proxy: TestProxy,
    front: TcpRelay,
    back: TcpRelay,
}

impl Captured {
    fn start(primary: &MySql, adjust: impl FnOnce(&mut strongsync::Config)) -> Captured {
        let back = TcpRelay::start(primary.addr().parse().unwrap());
        back.capture();
        let mut config = proxy_config(primary);
        config.primary = back.addr().to_string();
        adjust(&mut config);
        let proxy = TestProxy::start_with(config);
        let front = TcpRelay::start(proxy.addr());
        front.capture();
        Captured { proxy, front, back }
    }

    fn password_in_front(&self) -> bool {
        holds(&self.front.captured(), PASSWORD.as_bytes())
    }

    fn password_behind(&self) -> bool {
        holds(&self.back.captured(), PASSWORD.as_bytes())
    }
}

async fn current_user(port: u16) -> mysql_async::Result<String> {
    let url = format!("mysql://{USER}:{PASSWORD}@127.0.0.1:{port}/?prefer_socket=false");
    let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap()).await?;
    let who: String = conn.query_first("SELECT CURRENT_USER()").await?.unwrap();
    conn.disconnect().await?;
    Ok(who)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_client_encrypts_for_strongsyncs_key_and_the_password_goes_on_over_tls() {
    let primary = primary();
    let c = Captured::start(&primary, |_| {});
    // mysql_async on plain TCP asks for the server's key and gets strongsync's.
    assert_eq!(
        current_user(c.front.port()).await.unwrap(),
        format!("{USER}@%")
    );
    // Cached now: the mariadb CLI without TLS takes the fast path.
    let out = mariadb(c.front.port(), USER, PASSWORD)
        .args(["--ssl=0", "--batch", "--skip-column-names"])
        .execute("SELECT CURRENT_USER()")
        .expect_success();
    assert_eq!(out.stdout.trim(), format!("{USER}@%"), "{out}");
    assert!(!c.password_in_front() && !c.password_behind());
    assert_eq!(
        support::admin::metrics(c.proxy.admin_addr())
            .get("strongsync_passwords_relayed_by_key_total"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_password_in_clear_is_never_passed_on_over_a_plain_leg() {
    let primary = primary();
    let login = |port| {
        mariadb(port, USER, PASSWORD)
            .args(["--batch", "--skip-column-names"])
            .execute("SELECT CURRENT_USER()")
    };

    // No TLS for clients: the mariadb CLI, which asked for TLS, goes on and sends its password
    // in clear anyway. The capture in front shows it (so a capture would see one that
    // crossed); strongsync refuses it, and nothing of it reaches the primary.
    let no_tls = Captured::start(&primary, |config| config.tls.disabled = true);
    let refused = login(no_tls.front.port()).expect_failure();
    assert!(
        refused.stderr.contains("ERROR 1045")
            && refused.stderr.contains("strongsync")
            && refused.stderr.contains("without TLS"),
        "{refused}"
    );
    assert!(
        no_tls.password_in_front(),
        "the control: the client sent it in clear"
    );
    assert!(!no_tls.password_behind(), "strongsync passed it on");

    // TLS for clients, none to the primary: the password comes over TLS, and stays.
    let plain_primary = Captured::start(&primary, |config| {
        config.primary_tls = PrimaryTls::Disabled;
    });
    let refused = login(plain_primary.front.port()).expect_failure();
    assert!(
        refused.stderr.contains("ERROR 1045") && refused.stderr.contains("primary_tls"),
        "{refused}"
    );
    assert!(!plain_primary.password_in_front() && !plain_primary.password_behind());
    assert_eq!(
        primary.sql(&format!(
            "SELECT COUNT(*) FROM performance_schema.threads WHERE PROCESSLIST_USER = '{USER}'"
        )),
        "0"
    );

    // The defaults: TLS on both legs, the same login goes through.
    let defaults = Captured::start(&primary, |_| {});
    let out = login(defaults.front.port()).expect_success();
    assert_eq!(out.stdout.trim(), format!("{USER}@%"), "{out}");
    assert!(!defaults.password_in_front() && !defaults.password_behind());
}

#[test]
fn a_password_encrypted_for_a_key_strongsync_lacks_is_refused_naming_the_fix() {
    let primary = primary();
    let c = Captured::start(&primary, |_| {});
    // The mysql CLI on plain TCP with the primary's own key pinned encrypts for it; the
    // primary wants the password in clear over strongsync's TLS, and strongsync cannot read it.
    let key = inside(&primary.datadir().join("public_key.pem"));
    let mut cmd = std::process::Command::new("chroot");
    cmd.arg(support::mysql_root::root())
        .args([
            "/usr/bin/mysql",
            "--no-defaults",
            "--protocol=TCP",
            "--host=127.0.0.1",
        ])
        .arg(format!("--port={}", c.front.port()))
        .arg(format!("--user={USER}"))
        .arg(format!("--password={PASSWORD}"))
        .arg("--ssl-mode=DISABLED")
        .arg(format!("--server-public-key-path={}", key.display()))
        .args(["--execute", "SELECT CURRENT_USER()"]);
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("1045") && stderr.contains("server-public-key-path"),
        "{stderr}"
    );
    assert!(!c.password_in_front() && !c.password_behind());
}

#[test]
fn over_the_primarys_unix_socket_tls_clients_send_their_password_in_clear_and_log_in() {
    let certs = TestCerts::generate(&["127.0.0.1"]);
    let primary = primary();
    let ca = format!("--ssl-ca={}", certs.ca.display());
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
}
