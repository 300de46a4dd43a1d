"""sysbench 1.0: the workloads, one run, and what its report says."""

import os
import re
import subprocess
from dataclasses import dataclass

from .procs import BenchError
from .topology import APP_PASSWORD, APP_USER

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Workload name -> sysbench script (a bundled one by name, or a file of ours).
WORKLOADS = {
    "update_non_index": "oltp_update_non_index",
    "write_only": "oltp_write_only",
    "read_write": "oltp_read_write",
    "point_select": "oltp_point_select",
    "xa": os.path.join(BENCH_DIR, "xa_update_non_index.lua"),
}


@dataclass
class Report:
    tps: float
    qps: float
    p95_ms: float
    queries: int
    errors: int
    reconnects: int


def common_args(port, tables, table_size):
    return [f"--db-driver=mysql", "--mysql-host=127.0.0.1", f"--mysql-port={port}",
            f"--mysql-user={APP_USER}", f"--mysql-password={APP_PASSWORD}", "--mysql-db=sbtest",
            f"--tables={tables}", f"--table-size={table_size}"]


def prepare(port, tables, table_size, log):
    """Creates and fills the tables every workload uses."""
    argv = ["sysbench", "oltp_update_non_index", *common_args(port, tables, table_size),
            f"--threads={min(tables, 4)}", "prepare"]
    with open(log, "a") as f:
        if subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
            raise BenchError(f"sysbench prepare failed: see {log}")


def run(workload, port, threads, seconds, warmup, tables, table_size, log):
    """One timed run; its report, parsed."""
    argv = ["sysbench", WORKLOADS[workload], *common_args(port, tables, table_size),
            f"--threads={threads}", f"--time={warmup + seconds}", "--report-interval=0",
            "--percentile=95", "--db-ps-mode=auto", "run"]
    if warmup > 0:
        # sysbench 1.0 has no warm-up option: a checkpoint report at the end of the warm-up
        # resets every counter, and the final report covers only what came after it.
        argv.insert(-1, f"--report-checkpoints={warmup}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + warmup + 600)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}\n")
    if done.returncode != 0:
        raise BenchError(f"sysbench {workload} at {threads} threads failed: see {log}")
    return parse(done.stdout)


def parse(text):
    """The figures of a sysbench 1.0 report (the last one, after any checkpoint reports)."""
    def number(pattern):
        found = re.findall(pattern, text, re.MULTILINE)
        if not found:
            raise BenchError(f"sysbench's report has no {pattern!r}:\n{text[-2000:]}")
        return float(found[-1])

    return Report(
        tps=number(r"^\s+transactions:\s+\d+\s+\(([\d.]+) per sec"),
        qps=number(r"^\s+queries:\s+\d+\s+\(([\d.]+) per sec"),
        p95_ms=number(r"^\s+95th percentile:\s+([\d.]+)"),
        queries=int(number(r"^\s+queries:\s+(\d+)")),
        errors=int(number(r"^\s+ignored errors:\s+(\d+)")),
        reconnects=int(number(r"^\s+reconnects:\s+(\d+)")),
    )
