"""Where a proxy's CPU goes: one sysbench load through strongsync (or HAProxy, the reference),
the proxy's and the primary's CPU time per query over a window in its middle, and (where `perf`
can sample) a profile of the proxy over the same window, split between kernel and user space."""

import json
import os
import shutil
import subprocess
import time

from . import sysbench
from .procs import BenchError


def run(topology, args, out_dir):
    topology.use(args.mode, 0)
    log = os.path.join(out_dir, "sysbench.log")
    argv = ["sysbench", sysbench.WORKLOADS[args.workload],
            *sysbench.common_args(topology.client_port(args.mode),
                                  sysbench.tables_for(args.workload, args)),
            f"--threads={args.threads}", f"--time={args.time + 2 * args.settle}",
            "--report-interval=0", "--db-ps-mode=auto", "run"]
    load = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(args.settle)
    proxy, primary = topology.proxy_for(args.mode).process, topology.primary.process
    proxy_before, primary_before = proxy.cpu_seconds(), primary.cpu_seconds()
    started = time.monotonic()
    perf_data = os.path.join(out_dir, "perf.data")
    sampled = False
    if shutil.which("perf"):
        recorded = subprocess.run(
            ["perf", "record", "-e", "cpu-clock", "-F", "999", "-g", "-p", str(proxy.pid),
             "-o", perf_data, "--", "sleep", str(args.time)], capture_output=True, text=True)
        sampled = recorded.returncode == 0
        if not sampled:
            print(f"bench: perf record failed, CPU times only: {recorded.stderr.strip()}")
    else:
        print("bench: no perf (Debian: linux-perf); CPU times only")
        time.sleep(args.time)
    window = time.monotonic() - started
    proxy_cpu = proxy.cpu_seconds() - proxy_before
    primary_cpu = primary.cpu_seconds() - primary_before
    output, _ = load.communicate()
    with open(log, "a") as f:
        f.write(output)
    if load.returncode != 0:
        raise BenchError(f"sysbench failed: see {log}")
    report = sysbench.parse(output)
    # The window sits inside the run, at its steady rate.
    queries = report.qps * window
    result = {
        "workload": args.workload, "threads": args.threads, "mode": args.mode,
        "qps": round(report.qps), "window_s": round(window, 1),
        "proxy_cpu_us_per_query": round(proxy_cpu / queries * 1e6, 1),
        "primary_cpu_us_per_query": round(primary_cpu / queries * 1e6, 1),
        "proxy_to_primary": round(proxy_cpu / primary_cpu, 2),
    }
    if sampled:
        result.update(perf_summary(perf_data, out_dir, os.path.basename(proxy.popen.args[0])))
    with open(os.path.join(out_dir, "profile.json"), "w") as f:
        json.dump(result, f, indent=2)
    return result


def perf_summary(perf_data, out_dir, binary):
    """Kernel and the proxy's own code's shares of its samples (`binary`: strongsync or
    haproxy, as perf names its dso); the top symbols go to perf-report.txt."""
    def report(*sort):
        return subprocess.run(["perf", "report", "-i", perf_data, "--no-children", "--stdio",
                               "--sort", *sort], capture_output=True, text=True).stdout
    by_dso = report("dso", "-g", "none")
    shares = {}
    for line in by_dso.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith("%"):
            shares[parts[1]] = float(parts[0].rstrip("%"))
    kernel = sum(v for k, v in shares.items() if k.startswith("[kernel"))
    with open(os.path.join(out_dir, "perf-report.txt"), "w") as f:
        f.write(by_dso)
        f.write(report("symbol", "-g", "none"))
    # perf names the proxy's own code after its binary (strongsync, haproxy, or whatever
    # --strongsync-bin is called).
    return {"kernel_share_pct": round(kernel, 1), "proxy_binary": binary,
            "proxy_code_share_pct": round(shares.get(binary, 0.0), 1)}
