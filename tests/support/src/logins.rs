//! Real clients logging in with nothing but their defaults: the `mariadb` and `mysql`
//! command-line clients, sysbench, `mysql_async` and PyMySQL. Each answers who it logged in as
//! (`CURRENT_USER()`), or why it could not.

use std::fmt;
use std::process::{Command, Stdio};

use mysql_async::prelude::Queryable;

use crate::admin;
use crate::cli::mariadb;
use crate::failover_rounds::{launch_relayed, LedgerCluster, LedgerServer};
use crate::mariadb::{without_client_env, APP_PASSWORD, APP_USER};
use crate::mysql_root::chrooted;
use crate::nemesis::{by_id, call};
use crate::strong::PATIENCE;
use crate::tcp_relay::TcpRelay;

/// A client program or library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginClient {
    /// The `mariadb` CLI (libmariadb; asks for TLS by default, checks no certificate).
    MariadbCli,
    /// The `mysql` CLI of the MySQL root (`--ssl-mode=PREFERRED` by default).
    MysqlCli,
    /// sysbench 1.0 (libmariadb, no TLS options).
    Sysbench,
    /// `mysql_async` (no TLS unless asked).
    RustClient,
    /// PyMySQL (no TLS unless asked; `cryptography` for the RSA exchange).
    PyMySql,
}

impl LoginClient {
    /// Every client.
    pub const ALL: [LoginClient; 5] = [
        LoginClient::MariadbCli,
        LoginClient::MysqlCli,
        LoginClient::Sysbench,
        LoginClient::RustClient,
        LoginClient::PyMySql,
    ];

    /// Logs in at `127.0.0.1:port` as `user` with `password`, with the client's defaults,
    /// and asks `CURRENT_USER()`.
    ///
    /// # Errors
    /// What the client said.
    pub async fn login(self, port: u16, user: &str, password: &str) -> Result<String, String> {
        match self {
            LoginClient::MariadbCli => {
                let out = mariadb(port, user, password)
                    .args(["--batch", "--skip-column-names"])
                    .execute("SELECT CURRENT_USER()");
                if out.success() {
                    Ok(out.stdout.trim().to_owned())
                } else {
                    Err(out.stderr)
                }
            }
            LoginClient::MysqlCli => {
                let mut cmd = chrooted("/usr/bin/mysql");
                cmd.arg("--no-defaults")
                    .args(["--protocol=TCP", "--host=127.0.0.1"])
                    .arg(format!("--port={port}"))
                    .arg(format!("--user={user}"))
                    .arg(format!("--password={password}"))
                    .args(["--batch", "--skip-column-names"])
                    .args(["--execute", "SELECT CURRENT_USER()"]);
                run(&mut cmd).map(|out| out.trim().to_owned())
            }
            LoginClient::Sysbench => {
                let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
                let script = dir.path().join("login.lua");
                std::fs::write(&script, SYSBENCH_LOGIN).map_err(|e| e.to_string())?;
                let mut cmd = Command::new("sysbench");
                cmd.arg(&script)
                    .args(["--db-driver=mysql", "--mysql-host=127.0.0.1"])
                    .arg(format!("--mysql-port={port}"))
                    .arg(format!("--mysql-user={user}"))
                    .arg(format!("--mysql-password={password}"))
                    .args(["--threads=1", "--events=1", "run"]);
                let out = run(&mut cmd)?;
                out.lines()
                    .find_map(|l| l.strip_prefix("current_user="))
                    .map(str::to_owned)
                    .ok_or(out)
            }
            LoginClient::RustClient => {
                let url =
                    format!("mysql://{user}:{password}@127.0.0.1:{port}/?prefer_socket=false");
                let opts = mysql_async::Opts::from_url(&url).map_err(|e| e.to_string())?;
                let mut conn = mysql_async::Conn::new(opts)
                    .await
                    .map_err(|e| e.to_string())?;
                let who: Option<String> = conn
                    .query_first("SELECT CURRENT_USER()")
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = conn.disconnect().await;
                who.ok_or_else(|| "no row".to_owned())
            }
            LoginClient::PyMySql => {
                let mut cmd = Command::new("python3");
                cmd.args(["-c", PYMYSQL_LOGIN])
                    .arg(port.to_string())
                    .arg(user)
                    .arg(password);
                run(&mut cmd).map(|out| out.trim().to_owned())
            }
        }
    }
}

impl fmt::Display for LoginClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LoginClient::MariadbCli => "mariadb CLI",
            LoginClient::MysqlCli => "mysql CLI",
            LoginClient::Sysbench => "sysbench",
            LoginClient::RustClient => "mysql_async",
            LoginClient::PyMySql => "PyMySQL",
        })
    }
}

/// sysbench's login: one connection, one question, its answer printed.
const SYSBENCH_LOGIN: &str = r#"
function thread_init()
   local con = sysbench.sql.driver():connect()
   local rs = con:query("SELECT CURRENT_USER()")
   print("current_user=" .. rs:fetch_row()[1])
   con:disconnect()
end

function event()
end
"#;

const PYMYSQL_LOGIN: &str = r#"
import sys
import pymysql
conn = pymysql.connect(host="127.0.0.1", port=int(sys.argv[1]), user=sys.argv[2], password=sys.argv[3])
with conn.cursor() as cur:
    cur.execute("SELECT CURRENT_USER()")
    print(cur.fetchone()[0])
conn.close()
"#;

fn run(cmd: &mut Command) -> Result<String, String> {
    cmd.stdin(Stdio::null());
    let out = without_client_env(cmd)
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{} {}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Whether `haystack` holds `needle` anywhere: a password in a packet capture.
pub fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every client logs in through strongsync with its defaults: after `FLUSH PRIVILEGES` on the
/// primary, and again right after `strongsync promote` (a new primary whose cache is cold, as
/// it is after every failover). Captures of every plain TCP leg (clients to strongsync,
/// strongsync to each server) never hold the password. Where the servers offer TLS (MySQL), every
/// account strongsync or its clients log in with may do so only over TLS (`REQUIRE SSL`): the
/// sessions of clients on plain TCP, the replicas' dumps after the follow, promote's looks and
/// the probe on the new primary all reach the servers over strongsync's TLS.
pub async fn every_client_logs_in_after_a_flush_and_a_promote<C: LedgerCluster>() {
    // MySQL offers TLS from its first start; the MariaDB the tests run has no certificate.
    let servers_offer_tls = C::MYSQL;
    let dir = tempfile::tempdir().unwrap();
    let (s, relays) = launch_relayed::<C>(1, dir.path(), |config| {
        config.failover.state_file = Some(admin::state_file(dir.path(), &config.primary));
    });
    let ids: Vec<u32> = s.topology.servers().iter().map(|x| x.server_id()).collect();
    if servers_offer_tls {
        for server in s.topology.servers() {
            server.sql(
                "SET sql_log_bin = 0; \
                 ALTER USER 'app'@'%', 'repl'@'%', 'probe'@'%' REQUIRE SSL",
            );
        }
    }
    // What a capture between the clients and strongsync would see.
    let front = TcpRelay::start(s.proxy.addr());
    front.capture();
    for id in &ids {
        relays.relay(*id).capture();
    }

    all_log_in(front.port(), "after FLUSH PRIVILEGES", || {
        s.topology.primary_sql("FLUSH LOCAL PRIVILEGES");
    })
    .await;

    let report = call(&s, "/promote", "{}");
    let chosen = report["server_id"].as_u64().unwrap() as u32;
    assert_ne!(chosen, ids[0], "promoted the old primary: {report}");
    // The other replica follows through strongsync, its dump on strongsync's TLS to the new
    // primary: a commit there waits for it (its ACK says it received the row; applying it
    // comes after, so the row is waited for).
    let mut conn = s.client().await;
    tokio::time::timeout(
        PATIENCE,
        conn.query_drop("INSERT INTO sbtest.ledger (id) VALUES (1)"),
    )
    .await
    .expect("the commit waits for the other replica, which never acknowledged")
    .unwrap();
    let other = *ids
        .iter()
        .find(|id| **id != ids[0] && **id != chosen)
        .unwrap();
    crate::mariadb::wait_for(
        &format!("server {other} to apply the acknowledged row"),
        PATIENCE,
        || crate::failover_rounds::ids(by_id(&s, other)).contains(&1),
    );
    // Cold: nobody logged in there as the application yet (promote used the account to look
    // at it, over TLS, which fills the cache: emptied again).
    all_log_in(front.port(), "after promote", || {
        by_id(&s, chosen).sql("FLUSH LOCAL PRIVILEGES");
    })
    .await;

    let password = APP_PASSWORD.as_bytes();
    let captured = front.captured();
    assert!(
        captured.len() > 10_000,
        "the capture between clients and strongsync holds the logins ({} bytes)",
        captured.len()
    );
    assert!(
        !holds(&captured, password),
        "the password crossed between a client and strongsync in clear"
    );
    for id in &ids {
        assert!(
            !holds(&relays.relay(*id).captured(), password),
            "the password crossed between strongsync and server {id} in clear"
        );
    }
}

/// Each client logs in, on a cold cache: `flush` empties the primary's before each.
async fn all_log_in(port: u16, when: &str, flush: impl Fn()) {
    let mut failed = Vec::new();
    for client in LoginClient::ALL {
        flush();
        match client.login(port, APP_USER, APP_PASSWORD).await {
            Ok(who) if who == format!("{APP_USER}@%") => {}
            Ok(who) => failed.push(format!("{client}: logged in as {who:?}")),
            Err(e) => failed.push(format!("{client}: {e}")),
        }
    }
    assert!(failed.is_empty(), "{when}: {failed:#?}");
}
