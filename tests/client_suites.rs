//! Client libraries' own test suites, run through strongsync with `[sharing]` on.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use support::certs::TestCerts;
use support::failover_rounds::LedgerCluster;
use support::mariadb::{wait_for, MariaDbOptions};
use support::proxy::TestProxy;
use support::strong::{blocking, PATIENCE};
use support::topology::MySqlTopology;
use support::topology::Topology;

const ROOT_PASSWORD: &str = "suite-root-secret";

/// The suites, pinned: a suite's own expectations change with its release. Each is a source
/// distribution from PyPI, which holds its tests.
const AIOMYSQL: (&str, &str) = ("aiomysql", "0.3.2");
const MYSQLCLIENT: (&str, &str) = ("mysqlclient", "2.2.7");
/// What the suites need besides (mysqlclient builds against libmariadb-dev).
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

/// A venv under `target/` with pytest, the suites' dependencies and the two libraries from
/// PyPI, and each library's source distribution unpacked; made once (the tests of this file
/// run at once and wait for the first), kept for later runs. Returns the venv's python and the
/// directory the sources are unpacked in.
fn suites() -> (PathBuf, PathBuf) {
    static MADE: std::sync::OnceLock<(PathBuf, PathBuf)> = std::sync::OnceLock::new();
    MADE.get_or_init(make_suites).clone()
}

fn make_suites() -> (PathBuf, PathBuf) {
    let dir = support::repo().join("target/client-suites");
    let python = dir.join("venv/bin/python");
    let ready = dir.join("ready");
    let wanted = format!("{AIOMYSQL:?} {MYSQLCLIENT:?} {PYTHON_PACKAGES:?}");
    if std::fs::read_to_string(&ready).is_ok_and(|made| made == wanted) {
        return (python, dir);
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
    for (name, version) in [AIOMYSQL, MYSQLCLIENT] {
        let pinned = format!("{name}=={version}");
        let downloads = downloads.to_str().unwrap();
        let pip = [
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            ":all:",
        ];
        run(&python, &[&pip[..], &["-d", downloads, &pinned]].concat());
        let sdist = format!("{downloads}/{name}-{version}.tar.gz");
        run(
            &python,
            &["-m", "pip", "install", "-q", "--no-deps", &sdist],
        );
        run(
            Path::new("tar"),
            &["-xzf", &sdist, "-C", dir.to_str().unwrap()],
        );
    }
    std::fs::write(&ready, wanted).unwrap();
    (python, dir)
}

/// The servers and strongsync a suite runs against: a primary, two replicas, a `root`
/// account over TCP, and strongsync in front with quorum one (every commit waits for a
/// replica) and a pool of two connections for all of a suite's clients.
struct Bed<C: LedgerCluster> {
    topology: C,
    proxy: TestProxy,
    _certs: Option<TestCerts>,
}

/// A MariaDB primary with TLS (aiomysql's suite checks that its connection to the server is
/// encrypted) and `LOAD DATA LOCAL`.
fn mariadb_bed() -> Bed<Topology> {
    let certs = TestCerts::generate(&["localhost", "127.0.0.1"]);
    let primary = MariaDbOptions {
        extra_cnf: vec![
            format!("ssl_cert = {}", certs.cert.display()),
            format!("ssl_key = {}", certs.key.display()),
            format!("ssl_ca = {}", certs.ca.display()),
        ],
        ..MariaDbOptions::default()
    };
    let topology = Topology::start_with(primary, MariaDbOptions::default(), 2);
    bed(topology, Some(certs))
}

/// A MySQL 9.7 primary, which makes its own TLS certificate.
fn mysql_bed() -> Bed<MySqlTopology> {
    bed(MySqlTopology::start(2), None)
}

fn bed<C: LedgerCluster>(topology: C, certs: Option<TestCerts>) -> Bed<C> {
    topology.primary_sql(&format!(
        "SET GLOBAL local_infile = ON; \
         DROP USER IF EXISTS 'root'@'127.0.0.1'; \
         CREATE USER 'root'@'127.0.0.1' IDENTIFIED BY '{ROOT_PASSWORD}'; \
         GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION"
    ));
    let mut config = topology.proxy_config();
    config.durability = blocking(1);
    config.probe = topology.probe_account();
    config.sharing.enabled = true;
    config.sharing.pool_size = 2;
    config.sharing.max_wait = Duration::from_secs(60);
    let proxy = TestProxy::start_with(config);
    for i in 0..2 {
        topology.set_semisync(i, true);
        topology.point_replica_at(i, "127.0.0.1", proxy.port());
        topology.wait_replica_running(i);
    }
    let admin = proxy.admin_addr();
    wait_for("the primary's tracking defaults", PATIENCE, || {
        support::admin::status(admin).session_tracking == "configured"
    });
    Bed {
        topology,
        proxy,
        _certs: certs,
    }
}

/// Runs `suite` while three clients of the same library and pool (`client_suites/churn.py`,
/// told which by `churn_env`) run stateless statements beside it, each checking that the
/// connection it was given is in a fresh login's state. The suite alone passes even when a
/// session's state leaks into the pool; the churn does not. Asserts that both pass and that
/// sessions ran on each other's connections at least `crossed` times.
async fn passes_beside_the_churn<C: LedgerCluster>(
    bed: &Bed<C>,
    python: &Path,
    mut suite: Command,
    churn_env: &[(&str, String)],
    crossed: f64,
) {
    let scratch = tempfile::tempdir().unwrap();
    let stop = scratch.path().join("stop");
    let churn: Child = Command::new(python)
        .arg(support::repo().join("tests/client_suites/churn.py"))
        .envs(churn_env.iter().map(|(k, v)| (*k, v)))
        .env("CHURNERS", "3")
        .env("STOP_FILE", &stop)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the churn starts");
    let output: Output = tokio::task::spawn_blocking(move || suite.output())
        .await
        .unwrap()
        .expect("the suite runs");
    std::fs::write(&stop, "").unwrap();
    let churned = tokio::task::spawn_blocking(move || churn.wait_with_output())
        .await
        .unwrap()
        .expect("the churn ends");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the suite failed through strongsync:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{}", stdout.lines().last().unwrap_or_default());
    eprint!("{}", String::from_utf8_lossy(&churned.stdout));
    assert!(
        churned.status.success(),
        "the churn beside the suite failed: {}",
        String::from_utf8_lossy(&churned.stderr)
    );
    let metrics = support::admin::metrics(bed.proxy.admin_addr());
    let other = metrics.get(r#"strongsync_pool_checkouts_total{connection="other"}"#);
    assert!(
        other >= crossed,
        "only {other} checkouts of another session's connection"
    );
}

fn pytest(python: &Path, dir: &Path) -> Command {
    let mut command = Command::new(python);
    command
        .current_dir(dir)
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-q"]);
    command
}

/// aiomysql's whole suite (PyMySQL's protocol, asyncio) through a pool of two.
async fn aiomysqls_suite_passes<C: LedgerCluster>(bed: Bed<C>) {
    let (python, dir) = suites();
    let port = bed.proxy.port().to_string();
    let mut suite = pytest(&python, &dir.join("aiomysql-0.3.2"));
    suite
        .env("MYSQL_ROOT_PASSWORD", ROOT_PASSWORD)
        .args(["--mysql-address", &format!("strongsync=127.0.0.1:{port}")])
        .arg("tests");
    let churn = [
        ("CHURN_LIBRARY", "aiomysql".to_owned()),
        ("MYSQL_HOST", "127.0.0.1".to_owned()),
        ("MYSQL_PORT", port),
        ("MYSQL_ROOT_PASSWORD", ROOT_PASSWORD.to_owned()),
        ("MYSQL_DB", "test_pymysql".to_owned()),
    ];
    passes_beside_the_churn(&bed, &python, suite, &churn, 50.0).await;
}

/// mysqlclient's whole suite (the C library, libmariadb) through a pool of two. Its sessions
/// name their character set with `SET NAMES` after each login; where that restates what the
/// login set (`restated`: the collation the primary gives it), they still share, at least
/// `crossed` times.
async fn mysqlclients_suite_passes<C: LedgerCluster>(
    bed: Bed<C>,
    restated: Option<&str>,
    crossed: f64,
) {
    let (python, dir) = suites();
    bed.topology
        .primary_sql("CREATE DATABASE mysqldb_test DEFAULT CHARACTER SET utf8mb4");
    let scratch = tempfile::tempdir().unwrap();
    let options = scratch.path().join("suite.cnf");
    std::fs::write(
        &options,
        format!(
            "[MySQLdb-tests]\nhost = 127.0.0.1\nport = {}\nuser = root\npassword = {ROOT_PASSWORD}\n\
             database = mysqldb_test\ndefault-character-set = utf8mb4\n",
            bed.proxy.port()
        ),
    )
    .unwrap();
    if let Some(collation) = restated {
        // MariaDB does not report the collation `SET NAMES` gives: the session pins until
        // the watch of the primary has found it. One login first.
        run(
            &python,
            &[
                "-c",
                "import sys, MySQLdb; MySQLdb.connect(read_default_file=sys.argv[1], \
                 read_default_group='MySQLdb-tests').close()",
                options.to_str().unwrap(),
            ],
        );
        let admin = bed.proxy.admin_addr();
        wait_for(
            "what SET NAMES utf8mb4 gives on the primary",
            PATIENCE,
            || {
                support::admin::status(admin).sharing.is_some_and(|s| {
                    s.set_names.get("utf8mb4").map(String::as_str) == Some(collation)
                })
            },
        );
    }
    let mut suite = pytest(&python, &dir.join("mysqlclient-2.2.7"));
    suite.env("TESTDB", &options).arg("tests");
    let churn = [
        ("CHURN_LIBRARY", "mysqlclient".to_owned()),
        ("TESTDB", options.display().to_string()),
    ];
    passes_beside_the_churn(&bed, &python, suite, &churn, crossed).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_aiomysqls_own_suite_passes_through_a_shared_pool() {
    aiomysqls_suite_passes(mariadb_bed()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_aiomysqls_own_suite_passes_through_a_shared_pool() {
    aiomysqls_suite_passes(mysql_bed()).await;
}

/// libmariadb logs in with utf8mb4_general_ci, which is what `SET NAMES utf8mb4` gives on
/// MariaDB 10.11: its sessions share.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_mysqlclients_own_suite_passes_through_a_shared_pool() {
    mysqlclients_suite_passes(mariadb_bed(), Some("utf8mb4_general_ci"), 50.0).await;
}

/// On MySQL 9.7 `SET NAMES utf8mb4` gives utf8mb4_0900_ai_ci, not the utf8mb4_general_ci
/// libmariadb logged in with: the statement changes the session, and its sessions keep their
/// connections (what strongsync must do).
#[tokio::test(flavor = "multi_thread")]
async fn mysql_mysqlclients_own_suite_passes_with_its_sessions_pinned() {
    mysqlclients_suite_passes(mysql_bed(), None, 0.0).await;
}
