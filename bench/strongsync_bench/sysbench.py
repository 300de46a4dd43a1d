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
    # Non-index updates on a few hot rows: commits queue on the same row locks, so how long a
    # commit holds its locks while it waits for an ACK (semisync AFTER_SYNC: until the ACK;
    # AFTER_COMMIT and strongsync: not at all) decides the throughput.
    "hot": "oltp_update_non_index",
    # The same hot rows, half the events point selects: what readers pay for seeing only what
    # the quorum holds (semisync AFTER_SYNC, strongsync visibility = "quorum").
    "hot_mixed": os.path.join(BENCH_DIR, "hot_mixed.lua"),
}

# Workloads with tables of their own (name -> database), so that their few rows neither
# disturb the sbtest tables the others share nor depend on them.
OWN_DATABASE = {"hot": "sbhot", "hot_mixed": "sbhot"}


@dataclass(frozen=True)
class Tables:
    """The sysbench tables a workload runs on."""
    db: str
    count: int
    size: int


def tables_for(workload, settings):
    """`hot`'s few rows (--hot-tables, --hot-rows) in its own database, the shared sbtest
    tables (--tables, --table-size) for the others."""
    if workload in OWN_DATABASE:
        return Tables(OWN_DATABASE[workload], settings.hot_tables, settings.hot_rows)
    return Tables("sbtest", settings.tables, settings.table_size)


@dataclass
class Report:
    tps: float
    qps: float
    p95_ms: float
    queries: int
    transactions: int
    # Over the whole run, warm-up included: what CPU time read around the run covers.
    queries_with_warmup: int
    transactions_with_warmup: int
    errors: int
    reconnects: int


def common_args(port, tables):
    return ["--db-driver=mysql", "--mysql-host=127.0.0.1", f"--mysql-port={port}",
            f"--mysql-user={APP_USER}", f"--mysql-password={APP_PASSWORD}",
            f"--mysql-db={tables.db}", f"--tables={tables.count}", f"--table-size={tables.size}"]


def prepare(primary, workloads, settings, log):
    """Creates and fills the tables `workloads` use (each database once), on `primary`."""
    for tables in sorted({tables_for(w, settings) for w in workloads}, key=lambda t: t.db):
        primary.query(f"CREATE DATABASE IF NOT EXISTS {tables.db}")
        argv = ["sysbench", "oltp_update_non_index", *common_args(primary.port, tables),
                f"--threads={min(tables.count, 4)}", "prepare"]
        with open(log, "a") as f:
            if subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
                raise BenchError(f"sysbench prepare of {tables.db} failed: see {log}")


def run(workload, port, threads, seconds, warmup, tables, log, ps_mode="auto"):
    """One timed run on `tables` (see `tables_for`); its report, parsed."""
    try:
        return run_script(WORKLOADS[workload], port, threads, seconds, warmup, tables, log,
                          ps_mode)
    except BenchError as e:
        raise BenchError(f"sysbench {workload} at {threads} threads failed: {e}") from None


def run_script(script, port, threads, seconds, warmup, tables, log, ps_mode="auto"):
    """One timed run of a sysbench `script` (bundled, by name, or a file) on `tables`; its
    report, parsed."""
    argv = ["sysbench", script, *common_args(port, tables),
            f"--threads={threads}", f"--time={warmup + seconds}", "--report-interval=0",
            "--percentile=95", f"--db-ps-mode={ps_mode}", "run"]
    if warmup > 0:
        # sysbench 1.0 has no warm-up option: a checkpoint report at the end of the warm-up
        # resets every counter, and the final report covers only what came after it.
        argv.insert(-1, f"--report-checkpoints={warmup}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + warmup + 600)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}\n")
    if done.returncode != 0:
        raise BenchError(f"see {log}")
    return parse(done.stdout)


def parse(text):
    """The figures of a sysbench 1.0 report (the last one, after any checkpoint reports), and
    the counts of all of them together."""
    def numbers(pattern):
        found = re.findall(pattern, text, re.MULTILINE)
        if not found:
            raise BenchError(f"sysbench's report has no {pattern!r}:\n{text[-2000:]}")
        return [float(x) for x in found]

    def number(pattern):
        return numbers(pattern)[-1]

    # Each report counts from the previous one (a checkpoint resets the counters).
    def total(pattern):
        return int(sum(numbers(pattern)))

    return Report(
        tps=number(r"^\s+transactions:\s+\d+\s+\(([\d.]+) per sec"),
        qps=number(r"^\s+queries:\s+\d+\s+\(([\d.]+) per sec"),
        p95_ms=number(r"^\s+95th percentile:\s+([\d.]+)"),
        queries=int(number(r"^\s+queries:\s+(\d+)")),
        transactions=int(number(r"^\s+transactions:\s+(\d+)")),
        queries_with_warmup=total(r"^\s+queries:\s+(\d+)"),
        transactions_with_warmup=total(r"^\s+transactions:\s+(\d+)"),
        errors=int(number(r"^\s+ignored errors:\s+(\d+)")),
        reconnects=int(number(r"^\s+reconnects:\s+(\d+)")),
    )
