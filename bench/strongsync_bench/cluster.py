"""What being one of a cluster costs a commit: strongsync alone, and strongsync as the leader of
a cluster (a one-member etcd on this machine), in turn in one run, strong sync at quorum 1 on
oltp_update_non_index. The commit path reads only the lease's deadline; etcd sees the state's
checkpoint at most every `failover.state_interval`. Per case the commits a second and the
proxy's CPU per commit."""

import os
import statistics
import subprocess

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
    etcd = Process("etcd", [
        "etcd", "--name=bench", f"--data-dir={os.path.join(out_dir, 'etcd-data')}",
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
        runs = rounds(topology, args, tables, log, endpoint)
    finally:
        etcd.stop()
        proxy.cluster_endpoints = None
    return write_side_by_side(out_dir, runs, lambda r: summary(r, args))


def rounds(topology, args, tables, log, endpoint):
    proxy = topology.proxy
    runs = []
    initialised = False
    # Rounds outermost, the cases in turn, so that drift hits both alike.
    for round_no in range(args.rounds):
        for case in CASES:
            proxy.cluster_endpoints = [endpoint] if case == "cluster" else None
            proxy.stop()
            if case == "cluster" and not initialised:
                proxy.write_config(1, "degrade", "60s", "commit")
                done = subprocess.run([proxy.binary, "--config", proxy.config_path,
                                       "init-state"], capture_output=True, text=True)
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
            figures = cpu_window(topology, MODE, argv, args.settle, args.time, log).figures()
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
        "| case | commits/s | proxy CPU µs per commit |",
        "|---|---:|---:|",
    ]
    for case in CASES:
        lines.append(f"| {case} | {median(case, 'qps'):,.0f} | "
                     f"{median(case, 'proxy_cpu_us_per_query'):.1f} |")
    ratios = [median("cluster", f) / median("alone", f) for f in figures]
    lines.append("| cluster ÷ alone | " + " | ".join(f"{r:.2f}" for r in ratios) + " |")
    return "\n".join(lines) + "\n"
