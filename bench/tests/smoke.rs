//! A tiny run of `bench/run` against real servers, proving the script works end to end: every
//! mode is wired as it claims (its commits waited where they should, and only there), on MariaDB
//! and on MySQL 9.7, the report and chart are written, and the memory probe parks and releases
//! its sessions. No figure is asserted: timing belongs to the benchmark itself.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// One `bench/run` at a time: each picks free ports for its servers by binding and releasing
/// them, so runs side by side can pick the same one (seen: "Address already in use"), and on
/// two cores they would only slow each other down.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The runner with this build's binaries: the bench tools from this package, strongsync from
/// the same target directory (`cargo test --workspace` builds it).
fn bench_run(args: &[&str]) -> std::process::Output {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let tools = Path::new(env!("CARGO_BIN_EXE_delay-relay"))
        .parent()
        .unwrap();
    let strongsync = tools.join("strongsync");
    assert!(
        strongsync.exists(),
        "no strongsync binary at {} (run the suite with `cargo test --workspace`)",
        strongsync.display()
    );
    let output = Command::new(repo().join("bench/run"))
        .args(args)
        .arg(format!("--strongsync-bin={}", strongsync.display()))
        .arg(format!("--tools-dir={}", tools.display()))
        .output()
        .expect("bench/run starts");
    assert!(
        output.status.success(),
        "bench/run {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn read_csv(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|line| {
            header
                .iter()
                .map(|h| h.to_string())
                .zip(line.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

#[test]
fn the_smoke_matrix_runs_every_mode_as_it_claims_and_writes_its_report() {
    let out = tempfile::tempdir().unwrap();
    let out_arg = format!("--out={}", out.path().display());
    bench_run(&["matrix", "--profile=smoke", &out_arg]);

    let runs = read_csv(&out.path().join("runs.csv"));
    let modes = [
        "async",
        "semisync",
        "semisync-after-commit",
        "strongsync",
        "passthrough",
        "strongsync-q2",
        "strongsync-shared",
        "visibility-quorum",
        "visibility-snapshot",
        "haproxy",
    ];
    assert_every_mode_as_it_claims(
        &runs,
        &modes,
        &["update_non_index", "xa", "hot", "hot_mixed"],
    );

    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    for expected in [
        "strongsync ÷ semisync",
        "strongsync ÷ semisync-after-commit",
        "strongsync-shared ÷ strongsync",
        "passthrough ÷ haproxy",
        "visibility-quorum ÷ semisync",
        "| xa | 2 |",
        "| hot_mixed | 2 |",
        "| update_non_index | 2 |",
        "| hot | 2 |",
        "quorum 2 of 2",
        "primary with `one-thread-per-connection`",
        "primary with `pool-of-threads`",
        // The CPU table: per query and per transaction, HAProxy's too.
        "| proxy µs/query | proxy µs/transaction | primary µs/query |",
        "| hot | 1 | 2 | haproxy |",
    ] {
        assert!(summary.contains(expected), "{expected} in:\n{summary}");
    }
    let png = std::fs::read(out.path().join("qps.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "qps.png is a PNG");
}

/// Every workload ran in every mode under each thread handling, each run as its mode claims:
/// queries and no errors; the commits of the waiting modes waited for their acknowledgement,
/// none given up on, and none elsewhere; the proxy's CPU only where clients go through one;
/// sysbench's connections among the primary's.
fn assert_every_mode_as_it_claims(
    runs: &[std::collections::HashMap<String, String>],
    modes: &[&str],
    workloads: &[&str],
) {
    // What the primary reported after each (re)start, not merely what was asked for: the
    // smoke profile restarts it once, into the thread pool.
    let thread_handlings = ["one-thread-per-connection", "pool-of-threads"];
    assert_eq!(
        runs.len(),
        thread_handlings.len() * workloads.len() * modes.len(),
        "every workload in every mode under each thread handling"
    );
    for handling in thread_handlings {
        for workload in workloads {
            for mode in modes {
                assert!(
                    runs.iter().any(|r| r["thread_handling"] == handling
                        && r["workload"] == *workload
                        && r["mode"] == *mode),
                    "{workload} in {mode} under {handling}"
                );
            }
        }
    }
    for run in runs {
        let (mode, workload) = (run["mode"].as_str(), run["workload"].as_str());
        let what = format!("{workload} in {mode}: {run:?}");
        assert!(run["qps"].parse::<f64>().unwrap() > 0.0, "{what}");
        assert!(run["transactions"].parse::<u64>().unwrap() > 0, "{what}");
        assert_eq!(run["errors"], "0", "{what}");
        assert_eq!(run["delay_ms"], "1", "{what}");
        // sysbench's own connections at least, through a proxy or not.
        let threads: f64 = run["threads"].parse().unwrap();
        assert!(
            run["primary_connections"].parse::<f64>().unwrap() >= threads,
            "{what}"
        );
        match mode {
            // Waited, each commit for its acknowledgement, none given up on.
            "semisync"
            | "semisync-after-commit"
            | "strongsync"
            | "strongsync-q2"
            | "strongsync-shared"
            | "visibility-quorum"
            | "visibility-snapshot" => {
                assert!(run["waited"].parse::<f64>().unwrap() > 0.0, "{what}");
                assert_eq!(
                    run["released_unwaited"].parse::<f64>().unwrap(),
                    0.0,
                    "{what}"
                );
            }
            _ => assert_eq!(run["waited"], "", "{what}"),
        }
        // The proxy's CPU is that of the proxy the mode goes through (strongsync or
        // HAProxy), and there is none where clients go to the primary.
        if matches!(mode, "async" | "semisync" | "semisync-after-commit") {
            assert_eq!(run["proxy_cpu_s"], "", "{what}");
        } else {
            assert!(
                run["proxy_cpu_s"].parse::<f64>().unwrap() > 0.0,
                "the proxy works in the modes that go through it: {what}"
            );
        }
    }
}

/// The same matrix on MySQL 9.7 (servers from the sid root under chroot, as the MySQL tests
/// run them): every mode it has (not `visibility-snapshot`: MySQL has no
/// innodb_snapshot_isolation) under one thread per connection and Oracle's thread pool, on
/// two workloads to keep it short.
#[test]
fn the_smoke_matrix_runs_every_mode_on_mysql_as_it_claims() {
    let out = tempfile::tempdir().unwrap();
    let out_arg = format!("--out={}", out.path().display());
    bench_run(&[
        "matrix",
        "--server=mysql",
        "--profile=smoke",
        "--workloads=update_non_index,hot",
        "--no-chart",
        &out_arg,
    ]);
    let runs = read_csv(&out.path().join("runs.csv"));
    let modes = [
        "async",
        "semisync",
        "semisync-after-commit",
        "strongsync",
        "passthrough",
        "strongsync-q2",
        "strongsync-shared",
        "visibility-quorum",
        "haproxy",
    ];
    assert_every_mode_as_it_claims(&runs, &modes, &["update_non_index", "hot"]);
    let settings = std::fs::read_to_string(out.path().join("settings.json")).unwrap();
    assert!(settings.contains("\"server\": \"mysql\""), "{settings}");
    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(
        summary.contains("primary with `pool-of-threads`"),
        "{summary}"
    );
}

#[test]
fn the_profile_measures_the_proxys_cpu_per_query_against_the_primarys() {
    let out = tempfile::tempdir().unwrap();
    let out_arg = format!("--out={}", out.path().display());
    bench_run(&[
        "profile",
        "--threads=4",
        "--time=3",
        "--settle=1",
        "--table-size=1000",
        "--parts",
        &out_arg,
    ]);
    let profile = std::fs::read_to_string(out.path().join("profile.json")).unwrap();
    for field in ["qps", "proxy_cpu_us_per_query", "primary_cpu_us_per_query"] {
        assert!(json_number(&profile, field) > 0.0, "{field} in {profile}");
    }
    // Where perf could sample the proxy (Debian: linux-perf), it counted its system calls and
    // context switches over the same window too, and unwound each sample's stack far enough
    // to tell the parts of a statement's path apart.
    if profile.contains("\"kernel_share_pct\"") {
        for field in [
            "proxy_syscalls_per_query",
            "proxy_context_switches_per_query",
            "the client's next command awaited and read",
            "the command sent to the primary",
        ] {
            assert!(json_number(&profile, field) > 0.0, "{field} in {profile}");
        }
        let parts = std::fs::read_to_string(out.path().join("parts.md")).unwrap();
        assert!(
            parts.contains("| the primary's response relayed |"),
            "{parts}"
        );
    }
}

#[test]
fn the_compression_bench_measures_both_legs_and_writes_its_summary() {
    let out = tempfile::tempdir().unwrap();
    let out_arg = format!("--out={}", out.path().display());
    bench_run(&[
        "compression",
        "--rounds=1",
        "--threads=4",
        "--time=2",
        "--settle=1",
        "--table-size=1000",
        &out_arg,
    ]);
    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    for row in [
        "| point_select | plain |",
        "| point_select | zlib |",
        "| range_1000 | zlib ÷ plain |",
    ] {
        assert!(summary.contains(row), "{row} in\n{summary}");
    }
    // A 1,000-row range reaches the client in fewer bytes compressed than plain.
    let runs = std::fs::read_to_string(out.path().join("runs.json")).unwrap();
    let bytes: Vec<f64> = runs
        .split('{')
        .filter(|run| run.contains("\"range_1000\""))
        .map(|run| json_number(run, "bytes_to_client_per_query"))
        .collect();
    assert_eq!(bytes.len(), 2, "{runs}");
    assert!(
        bytes[1] < bytes[0],
        "compressed {} against plain {}",
        bytes[1],
        bytes[0]
    );
}

/// A number field of a flat JSON object.
/// A side-by-side bench's runs.json (flat objects, one per run) and its runs, each told apart
/// by its `key` ("mode", "case").
fn runs_of(out: &Path, key: &str) -> (String, Vec<String>) {
    let rows = std::fs::read_to_string(out.join("runs.json")).unwrap();
    let runs = rows
        .split('}')
        .filter(|r| r.contains(&format!("\"{key}\"")))
        .map(|r| format!("{r}}}"))
        .collect();
    (rows, runs)
}

fn json_number(json: &str, name: &str) -> f64 {
    let at = json
        .find(&format!("\"{name}\":"))
        .unwrap_or_else(|| panic!("{name} in {json}"));
    json[at + name.len() + 3..]
        .trim_start()
        .split([',', '\n', '}'])
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{name} in {json}: {e}"))
}

#[test]
fn the_memory_probe_parks_every_session_and_releases_them_all() {
    let out = tempfile::tempdir().unwrap();
    let out_arg = format!("--out={}", out.path().display());
    bench_run(&["memory", "--connections=300", &out_arg]);

    let memory = std::fs::read_to_string(out.path().join("memory.json")).unwrap();
    let field = |name: &str| json_number(&memory, name);
    assert_eq!(field("connections"), 300.0);
    // Every parked client was connected through the proxy while its RSS was read.
    assert!(
        field("client_connections_while_parked") >= 300.0,
        "{memory}"
    );
    assert!(
        field("rss_parked_kib") > 0.0 && field("rss_idle_kib") > 0.0,
        "{memory}"
    );
}

#[test]
fn the_snapshot_bench_reads_in_transactions_and_bounds_them_once_only_where_it_should() {
    let out = tempfile::tempdir().unwrap();
    let out_arg = format!("--out={}", out.path().display());
    bench_run(&[
        "snapshot",
        "--rounds=1",
        "--time=2",
        "--warmup=0",
        "--threads=4",
        "--delay=1",
        "--tables=1",
        "--table-size=1000",
        &out_arg,
    ]);
    let rows = std::fs::read_to_string(out.path().join("read-transactions.json")).unwrap();
    // One flat object per run, in mode order.
    let runs: Vec<&str> = rows.split('}').filter(|r| r.contains("\"mode\"")).collect();
    let modes = [
        "semisync",
        "strongsync",
        "visibility-quorum",
        "visibility-snapshot",
    ];
    assert_eq!(runs.len(), modes.len(), "{rows}");
    for (run, mode) in runs.iter().zip(modes) {
        let run = format!("{run}}}");
        assert!(run.contains(&format!("\"mode\": \"{mode}\"")), "{run}");
        assert!(json_number(&run, "reader_tps") > 0.0, "{run}");
        assert!(json_number(&run, "writer_tps") > 0.0, "{run}");
        assert_eq!(json_number(&run, "reader_errors"), 0.0, "{run}");
        assert_eq!(json_number(&run, "writer_errors"), 0.0, "{run}");
        match mode {
            // Bounded read by read: no response went on its snapshot's bound.
            "visibility-quorum" => assert_eq!(json_number(&run, "reads_in_snapshot"), 0.0),
            "visibility-snapshot" => assert!(json_number(&run, "reads_in_snapshot") > 0.0),
            _ => {}
        }
    }
    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(summary.contains("| visibility-snapshot |"), "{summary}");
}

/// The ORM loop runs in each mode, and the primary runs the client's statements and nothing
/// of strongsync's in its sessions: beyond what direct's run made, strongsync's runs make only
/// its look at the primary on its own connection (two queries a second at most), however many
/// loops ran.
#[test]
fn the_orm_loop_counts_the_primarys_statements_and_strongsync_adds_none_per_loop() {
    let out = tempfile::tempdir().unwrap();
    let out_arg = format!("--out={}", out.path().display());
    let seconds = 2.0;
    bench_run(&[
        "orm",
        "--rounds=1",
        "--time=2",
        "--warmup=0",
        "--threads=2",
        "--tables=1",
        "--table-size=1000",
        &out_arg,
    ]);
    let (rows, runs) = runs_of(out.path(), "mode");
    let modes = ["async", "haproxy", "passthrough", "strongsync"];
    assert_eq!(runs.len(), modes.len(), "{rows}");
    for (run, mode) in runs.iter().zip(modes) {
        assert!(run.contains(&format!("\"mode\": \"{mode}\"")), "{run}");
        let loops = json_number(run, "loops");
        assert!(loops > 0.0, "{run}");
        let beyond = json_number(run, "beyond_direct");
        match mode {
            "async" | "haproxy" => assert_eq!(beyond, 0.0, "{run}"),
            _ => assert!(
                (0.0..=2.0 * (seconds + 1.0)).contains(&beyond) && beyond < loops,
                "{run}"
            ),
        }
    }
    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(summary.contains("| strongsync |"), "{summary}");
}

/// The cluster bench runs one instance alone and one leading a cluster of a real etcd: both
/// commit, the cluster's case as its leader, and only that case's figures count etcd's CPU.
#[test]
fn the_cluster_bench_commits_alone_and_as_the_leader_of_a_real_etcd() {
    let out = tempfile::tempdir().unwrap();
    let out_arg = format!("--out={}", out.path().display());
    bench_run(&[
        "cluster",
        "--rounds=1",
        "--time=2",
        "--settle=1",
        "--threads=2",
        "--tables=1",
        "--table-size=1000",
        &out_arg,
    ]);
    let (rows, runs) = runs_of(out.path(), "case");
    assert_eq!(runs.len(), 2, "{rows}");
    for (run, case) in runs.iter().zip(["alone", "cluster"]) {
        assert!(run.contains(&format!("\"case\": \"{case}\"")), "{run}");
        assert!(json_number(run, "qps") > 0.0, "{run}");
        match case {
            "alone" => {
                assert_eq!(json_number(run, "leader"), 0.0, "{run}");
                assert!(run.contains("\"etcd_cpu_us_per_query\": null"), "{run}");
            }
            _ => {
                assert_eq!(json_number(run, "leader"), 1.0, "{run}");
                assert!(json_number(run, "etcd_cpu_us_per_query") > 0.0, "{run}");
            }
        }
    }
    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(summary.contains("| cluster ÷ alone |"), "{summary}");
}
