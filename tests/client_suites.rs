//! Client libraries' own test suites, run through strongsync with `[sharing]` on.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use strongsync::config::OnTimeout;
use support::certs::TestCerts;
use support::mariadb::{wait_for, MariaDbOptions};
use support::proxy::TestProxy;
use support::strong::{durability, PATIENCE};
use support::topology::Topology;

const ROOT_PASSWORD: &str = "suite-root-secret";

/// The pinned versions: a suite's own expectations change with its release.
const AIOMYSQL: &str = "aiomysql==0.3.2";
const PYTHON_PACKAGES: &[&str] = &[
    "pytest==8.4.2",
    "PyMySQL==1.1.2",
    "uvloop==0.22.1",
    "SQLAlchemy==1.3.24",
];

/// Runs `program` with `args`, panicking with its output if it fails.
fn run(program: &Path, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{} cannot run: {e}", program.display()));
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}{}",
        program.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A venv under `target/` with pytest and the suite's dependencies from PyPI, and aiomysql's
/// source distribution (which holds its tests) unpacked; made once, kept for later runs.
/// Returns the venv's python and the unpacked source.
fn aiomysql_suite() -> (PathBuf, PathBuf) {
    let dir = support::repo().join("target/client-suites");
    let python = dir.join("venv/bin/python");
    let source = dir.join("aiomysql-0.3.2");
    let ready = dir.join("ready");
    let wanted = format!("{AIOMYSQL} {PYTHON_PACKAGES:?}");
    if std::fs::read_to_string(&ready).is_ok_and(|made| made == wanted) {
        return (python, source);
    }
    std::fs::create_dir_all(&dir).unwrap();
    run(
        Path::new("python3"),
        &["-m", "venv", dir.join("venv").to_str().unwrap()],
    );
    let mut install = vec!["-m", "pip", "install", "-q"];
    install.extend(PYTHON_PACKAGES);
    run(&python, &install);
    let downloads = dir.join("downloads");
    run(
        &python,
        &[
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            downloads.to_str().unwrap(),
            AIOMYSQL,
        ],
    );
    let sdist = downloads.join("aiomysql-0.3.2.tar.gz");
    run(
        &python,
        &[
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            sdist.to_str().unwrap(),
        ],
    );
    run(
        Path::new("tar"),
        &["-xzf", sdist.to_str().unwrap(), "-C", dir.to_str().unwrap()],
    );
    std::fs::write(&ready, wanted).unwrap();
    (python, source)
}

/// aiomysql's whole suite against MariaDB through strongsync: a primary with TLS (the suite
/// checks that its connection to the server is encrypted), two replicas, quorum one (every
/// commit waits for a replica), and a pool of two connections for all of the suite's clients.
/// Three more clients of the same pool (`client_suites/churn.py`) run beside it and check at
/// each statement that the connection they were given is in a fresh login's state: the suite
/// alone passes even when a session's state leaks into the pool (pins for session state taken
/// out), the churn does not.
#[tokio::test(flavor = "multi_thread")]
async fn aiomysqls_own_suite_passes_through_a_shared_pool() {
    let (python, source) = aiomysql_suite();
    let certs = TestCerts::generate(&["localhost", "127.0.0.1"]);
    let primary = MariaDbOptions {
        extra_cnf: vec![
            format!("ssl_cert = {}", certs.cert.display()),
            format!("ssl_key = {}", certs.key.display()),
            format!("ssl_ca = {}", certs.ca.display()),
            // The suite's LOAD DATA LOCAL tests.
            "local_infile = ON".to_owned(),
        ],
        ..MariaDbOptions::default()
    };
    let topology = Topology::start_with(primary, MariaDbOptions::default(), 2);
    topology.primary.sql(&format!(
        "CREATE OR REPLACE USER 'root'@'127.0.0.1' IDENTIFIED BY '{ROOT_PASSWORD}'; \
         GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION"
    ));
    let mut config = TestProxy::config(&topology.primary);
    config.durability = durability(1, OnTimeout::Block, Duration::from_secs(3600));
    config.probe = support::failover_rounds::LedgerCluster::probe_account(&topology);
    config.sharing.enabled = true;
    config.sharing.pool_size = 2;
    config.sharing.max_wait = Duration::from_secs(60);
    let proxy = TestProxy::start_with(config);
    for i in 0..2 {
        topology.replicas[i].sql("SET GLOBAL rpl_semi_sync_slave_enabled = ON");
        topology.point_replica_at(i, "127.0.0.1", proxy.port());
        topology.wait_replica_running(i);
    }
    let admin = proxy.admin_addr();
    wait_for("the primary's tracking defaults", PATIENCE, || {
        support::admin::status(admin)["session_tracking"] == "configured"
    });

    let scratch = tempfile::tempdir().unwrap();
    let stop = scratch.path().join("stop");
    let churn = Command::new(&python)
        .arg(support::repo().join("tests/client_suites/churn.py"))
        .env("MYSQL_HOST", "127.0.0.1")
        .env("MYSQL_PORT", proxy.port().to_string())
        .env("MYSQL_ROOT_PASSWORD", ROOT_PASSWORD)
        .env("MYSQL_DB", "test_pymysql")
        .env("CHURNERS", "3")
        .env("STOP_FILE", &stop)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the churn starts");
    let address = format!("strongsync=127.0.0.1:{}", proxy.port());
    let output = tokio::task::spawn_blocking(move || {
        Command::new(&python)
            .current_dir(&source)
            .env("MYSQL_ROOT_PASSWORD", ROOT_PASSWORD)
            .args([
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "--mysql-address",
                &address,
                "tests",
            ])
            .output()
            .expect("pytest runs")
    })
    .await
    .unwrap();
    std::fs::write(&stop, "").unwrap();
    let churned = tokio::task::spawn_blocking(move || churn.wait_with_output())
        .await
        .unwrap()
        .expect("the churn ends");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "aiomysql's suite failed through strongsync:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{}", stdout.lines().last().unwrap_or_default());
    eprint!("{}", String::from_utf8_lossy(&churned.stdout));
    assert!(
        churned.status.success(),
        "the churn beside the suite failed: {}",
        String::from_utf8_lossy(&churned.stderr)
    );
    // The suite's clients and the churn's ran on each other's connections.
    let crossed = support::admin::metrics(admin)
        .get(r#"strongsync_pool_checkouts_total{connection="other"}"#);
    assert!(
        crossed >= 50.0,
        "only {crossed} checkouts of another session's connection"
    );
}
