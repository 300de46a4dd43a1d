"""What being one of a cluster costs a commit: strongsync alone, and strongsync as the leader of
a cluster (a one-member etcd on this machine), in turn in one run, strong sync at quorum 1 on
oltp_update_non_index. The commit path reads only the lease's deadline; etcd sees the state's
checkpoint at most every `failover.state_interval`. Per case the commits a second, the
proxy's CPU per commit and (in the cluster) etcd's, both on this machine's two cores."""

import os
import shutil
import statistics
import subprocess
import tempfile
import time

from . import sysbench
from .procs import BenchError, Process, free_port, wait_for
from .profile import cpu_window
from .report import write_side_by_side

MODE = "strongsync"
WORKLOAD = ["oltp_update_non_index"]
CASES = ("alone", "cluster")
PATIENCE = 60


def run(topology, args, out_dir):
    tables = sysbench.tables_for("update_non_index", args)
    log = os.path.join(out_dir, "sysbench.log")
    proxy = topology.proxy
    client_port, peer_port = free_port(), free_port()
    endpoint = f"http://127.0.0.1:{client_port}"
    data_dir = tempfile.mkdtemp(prefix="strongsync-bench-etcd-")
    etcd = Process("etcd", [
        "etcd", "--name=bench", f"--data-dir={data_dir}",
        f"--listen-client-urls={endpoint}", f"--advertise-client-urls={endpoint}",
        f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-cluster=bench=http://127.0.0.1:{peer_port}",
    ], os.path.join(out_dir, "etcd.log"))
    try:
        wait_for("etcd answering", lambda: subprocess.run(
            ["etcdctl", f"--endpoints={endpoint}", "endpoint", "health"],
            env={**os.environ, "ETCDCTL_API": "3"}, capture_output=True).returncode == 0,
            PATIENCE)
        runs = rounds(topology, args, tables, log, endpoint, etcd)
    finally:
        etcd.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
        proxy.cluster_endpoints = None
    return write_side_by_side(out_dir, runs, lambda r: summary(r, args))


def rounds(topology, args, tables, log, endpoint, etcd):
    proxy = topology.proxy
    runs = []
    initialised = False
    # Rounds outermost, the cases in turn and in alternating order, so that drift and the
    # second run's warmer caches hit both alike.
    for round_no in range(args.rounds):
        for case in CASES if round_no % 2 == 0 else reversed(CASES):
            proxy.cluster_endpoints = [endpoint] if case == "cluster" else None
            proxy.stop()
            if case == "cluster" and not initialised:
                proxy.write_config(1, "degrade", "60s", "commit")
                done = subprocess.run([proxy.binary, "init-state", "--config",
                                       proxy.config_path], capture_output=True, text=True)
                if done.returncode != 0:
                    raise BenchError(f"init-state: {done.stderr.strip()}")
                initialised = True
            proxy.start(1)
            # The replicas reconnect to the new process; it is ready once it leads (in a
            # cluster) and they are back.
            topology.mode = None
            topology.use(MODE, 0)
            wait_for(f"strongsync {case} ready", proxy.ready, PATIENCE)
            topology.wait_replicas_caught_up(args.catchup_timeout)
            argv = ["sysbench", *WORKLOAD, *sysbench.common_args(topology.client_port(MODE),
                                                                  tables),
                    f"--threads={args.threads}", f"--time={args.time + 2 * args.settle}",
                    "--report-interval=0", "--db-ps-mode=auto", "run"]
            etcd_before, started = etcd.cpu_seconds(), time.monotonic()
            figures = cpu_window(topology, MODE, argv, args.settle, args.time, log).figures()
            # etcd over the whole load (settling included): its work is not per commit.
            etcd_us = (etcd.cpu_seconds() - etcd_before) * 1e6 / (
                figures["qps"] * (time.monotonic() - started))
            figures["etcd_cpu_us_per_query"] = round(etcd_us, 2) if case == "cluster" else None
            # Whether this process led its cluster: one that did not would have refused every
            # login, but the record says so outright.
            figures["leader"] = int(proxy.metrics().get("strongsync_leader", 0))
            runs.append({"round": round_no, "case": case, **figures})
            print(f"bench: {case}: {figures}", flush=True)
    return runs


def summary(runs, args):
    """Medians per case, and the cluster's against alone."""
    def median(case, figure):
        return statistics.median(r[figure] for r in runs if r["case"] == case)

    figures = ("qps", "proxy_cpu_us_per_query")
    lines = [
        f"# What the cluster costs a commit ({args.threads} threads, {args.rounds} round(s) "
        f"of {args.time} s, medians; oltp_update_non_index, quorum 1)",
        "",
        "| case | commits/s | proxy CPU µs per commit | etcd CPU µs per commit |",
        "|---|---:|---:|---:|",
    ]
    for case in CASES:
        etcd = "–" if case == "alone" else f"{median(case, 'etcd_cpu_us_per_query'):.1f}"
        lines.append(f"| {case} | {median(case, 'qps'):,.0f} | "
                     f"{median(case, 'proxy_cpu_us_per_query'):.1f} | {etcd} |")
    ratios = [median("cluster", f) / median("alone", f) for f in figures]
    lines.append("| cluster ÷ alone | " + " | ".join(f"{r:.2f}" for r in ratios) + " | |")
    # The same ratio round by round: this machine's noise, next to the medians' ratio.
    pairs = sorted(
        c["qps"] / a["qps"] for a in runs for c in runs
        if a["case"] == "alone" and c["case"] == "cluster" and a["round"] == c["round"])
    lines += ["", f"Commits/s, cluster ÷ alone round by round: median "
              f"{statistics.median(pairs):.2f}, from {pairs[0]:.2f} to {pairs[-1]:.2f}."]
    return "\n".join(lines) + "\n"
