"""The sysbench matrix: every (thread handling, delay, workload, threads) cell run in every
mode, the modes interleaved within each cell and repeated, one CSV row per run."""

import csv
import os
import threading
import time

from . import sysbench
from .procs import BenchError
from .topology import MODES

FIELDS = ["thread_handling", "delay_ms", "workload", "threads", "mode", "round", "tps", "qps",
          "p95_ms", "queries", "transactions", "queries_with_warmup", "transactions_with_warmup",
          "errors", "reconnects", "proxy_cpu_s", "primary_cpu_s", "relay_cpu_s", "waited",
          "released_unwaited", "catchup_s", "primary_connections"]

# strongsync's commit outcomes that mean "released without its quorum".
UNWAITED_OUTCOMES = ("timeout", "degraded", "unresolved")


def rotated(modes, round_no, order="rotated"):
    """The modes in a different order each round, so none always runs first in its cell
    (unless `order` is "fixed": then as listed, to see what running first does)."""
    if order == "fixed":
        return list(modes)
    k = round_no % len(modes)
    return modes[k:] + modes[:k]


def counters(topology, mode):
    """What a run's deltas are computed from. proxy_cpu_s is the CPU of the proxy the mode's
    clients go through (strongsync or HAProxy), absent where they go to the primary."""
    proxy = topology.proxy_for(mode)
    snap = {
        "primary_cpu_s": topology.primary.process.cpu_seconds(),
        "relay_cpu_s": (topology.relay.process.cpu_seconds()
                        if topology.relay.process else 0.0),
    }
    if proxy:
        snap["proxy_cpu_s"] = proxy.process.cpu_seconds()
    if MODES[mode]["semisync"]:
        flavour = topology.flavour
        snap["waited"] = float(topology.primary.status(flavour.semisync_yes_tx))
        snap["released_unwaited"] = float(topology.primary.status(flavour.semisync_no_tx))
    elif MODES[mode]["quorum"] is not None:
        m = topology.proxy.metrics()
        released = lambda o: m.get(f'strongsync_commits_released_total{{outcome="{o}"}}', 0.0)
        snap["waited"] = released("quorum")
        snap["released_unwaited"] = sum(released(o) for o in UNWAITED_OUTCOMES)
    return snap


class ConnectionsSampler:
    """The most connections the primary had (`Threads_connected`, one thread each under one
    thread per connection) at looks while a run goes on, the first after `first` seconds and
    then every `every`: what sharing is to keep low."""

    def __init__(self, primary, first=1.0, every=2.0):
        self.primary = primary
        self.first = first
        self.every = every
        self.most = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self):
        wait = self.first
        while not self.done.wait(wait):
            wait = self.every
            try:
                self.most = max(self.most, int(self.primary.status("Threads_connected")))
            except (BenchError, TypeError, ValueError):
                pass  # a look that failed is one look fewer

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def run_cell(topology, settings, cell, round_no, mode, log):
    thread_handling, delay_ms, workload, threads = cell
    topology.use(mode, delay_ms)
    before = counters(topology, mode)
    with ConnectionsSampler(topology.primary) as connections:
        report = sysbench.run(workload, topology.client_port(mode), threads, settings.time,
                              settings.warmup, sysbench.tables_for(workload, settings), log,
                              getattr(settings, "ps_mode", "auto"))
    after = counters(topology, mode)
    # What the primary reported after its last (re)start, not merely what was asked for.
    row = {"thread_handling": topology.thread_handling, "delay_ms": delay_ms,
           "workload": workload, "threads": threads, "mode": mode, "round": round_no,
           "tps": report.tps, "qps": report.qps, "p95_ms": report.p95_ms,
           "queries": report.queries, "transactions": report.transactions,
           # The CPU and commit counters below are read around the whole run, warm-up included.
           "queries_with_warmup": report.queries_with_warmup,
           "transactions_with_warmup": report.transactions_with_warmup,
           "errors": report.errors, "reconnects": report.reconnects}
    for key in ("proxy_cpu_s", "primary_cpu_s", "relay_cpu_s", "waited", "released_unwaited"):
        row[key] = round(after[key] - before[key], 2) if key in after else ""
    row["catchup_s"] = round(topology.wait_replicas_caught_up(settings.catchup_timeout), 1)
    row["primary_connections"] = connections.most or ""
    return row


def cells(settings):
    """Thread handling outermost: each value restarts the primary once."""
    return [(h, d, w, t) for h in settings.thread_handling for d in settings.delays
            for w in settings.workloads for t in settings.threads]


def run(topology, settings, out_dir):
    """Runs the whole matrix, appending to runs.csv as it goes (a stopped run keeps its rows)."""
    log = os.path.join(out_dir, "sysbench.log")
    path = os.path.join(out_dir, "runs.csv")
    todo = cells(settings)
    total = len(todo) * settings.rounds * len(settings.modes)
    done = 0
    started = time.monotonic()
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for cell in todo:
            topology.set_thread_handling(cell[0])
            for round_no in range(settings.rounds):
                for mode in rotated(settings.modes, round_no,
                                    getattr(settings, "mode_order", "rotated")):
                    try:
                        row = run_cell(topology, settings, cell, round_no, mode, log)
                    except BenchError as e:
                        raise BenchError(f"{mode} at {cell}: {e}") from e
                    writer.writerow(row)
                    f.flush()
                    done += 1
                    elapsed = time.monotonic() - started
                    print(f"[{done}/{total} {elapsed / 60:.0f}m] {cell[0]} delay {cell[1]}ms "
                          f"{cell[2]} {cell[3]} threads {mode}: {row['qps']:.0f} qps, "
                          f"p95 {row['p95_ms']} ms", flush=True)
            topology.purge_binlogs()
    return path
