"""An ORM's connection set-up loop (`orm_setup.lua`: connect, four SETs, a transaction) direct,
through HAProxy and through strongsync, in one run: the latency per loop, and the statements
the primary ran per loop, and how many more than direct the primary ran in the same round. A
proxy that runs statements of its own in a client's session shows as more statements than
direct."""

import os
import statistics

from . import sysbench
from .procs import BenchError
from .report import write_side_by_side
from .sysbench import BENCH_DIR

SCRIPT = os.path.join(BENCH_DIR, "orm_setup.lua")
MODES = ["async", "haproxy", "passthrough", "strongsync"]
# The reference each mode's latency is divided by.
REFERENCE = "haproxy"


def run(topology, args, out_dir):
    tables = sysbench.tables_for("point_select", args)
    log = os.path.join(out_dir, "sysbench.log")
    rows = []
    # What two readings of `Questions` count between them with nothing else running: the
    # reading's own statement, its client's quit, and whatever else the CLI sends.
    first = int(topology.primary.status("Questions"))
    readings = int(topology.primary.status("Questions")) - first
    # Rounds outermost, the modes in turn, so that drift hits each alike.
    for rnd in range(args.rounds):
        for mode in MODES:
            topology.use(mode, 0)
            topology.wait_replicas_caught_up(args.catchup_timeout)
            before = int(topology.primary.status("Questions"))
            report = sysbench.run_script(SCRIPT, topology.client_port(mode), args.threads,
                                         args.time, args.warmup, tables, log)
            after = int(topology.primary.status("Questions"))
            if report.errors:
                raise BenchError(f"orm loop in {mode}: {report.errors} errors: see {log}")
            loops = report.transactions_with_warmup
            # `Questions` counts each connection's COM_QUIT: one per loop and one per thread's
            # first connection; the readings count what `readings` measured. What is left
            # (`others`) is sysbench's own start, the same in every mode, and anything of
            # strongsync's: `beyond_direct` sets it against direct's in the same round.
            client = report.queries_with_warmup + loops + args.threads
            ran = after - before - readings
            others = ran - client
            if mode == "async":
                direct_others = others
            row = dict(mode=mode, round=rnd, loops_per_s=report.tps,
                       ms_per_loop=args.threads * 1000 / report.tps if report.tps else 0.0,
                       p95_ms=report.p95_ms, loops=loops,
                       primary_statements=ran,
                       statements_per_loop=ran / loops if loops else 0.0,
                       others=others, beyond_direct=others - direct_others,
                       seconds=args.time + args.warmup)
            print(f"[{rnd + 1}/{args.rounds}] {mode}: {row}", flush=True)
            rows.append(row)
    return write_side_by_side(out_dir, rows, lambda r: summary(r, args))


def summary(rows, args):
    """Medians per mode, and each mode's latency per loop against HAProxy's, as markdown."""
    def median(mode, key):
        return statistics.median(r[key] for r in rows if r["mode"] == mode)

    lines = [
        f"# The ORM set-up loop ({args.threads} clients, {args.rounds} round(s) of "
        f"{args.time} s, medians)",
        "",
        "Each loop connects, sends four SETs and runs one transaction (`bench/orm_setup.lua`). "
        "*Beyond direct* are statements the primary ran in a run beyond the client's and "
        "direct's in the same round: strongsync's own, on its own connections.",
        "",
        "| mode | loops/s | ms per loop | p95 ms | statements per loop | beyond direct per run "
        f"| ms per loop ÷ {REFERENCE} |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    reference = median(REFERENCE, "ms_per_loop")
    for mode in MODES:
        ms = median(mode, "ms_per_loop")
        lines.append(f"| {mode} | {median(mode, 'loops_per_s'):,.0f} | {ms:.2f} | "
                     f"{median(mode, 'p95_ms'):.2f} | {median(mode, 'statements_per_loop'):.3f} "
                     f"| {median(mode, 'beyond_direct'):.0f} | {ms / reference:.2f} |")
    return "\n".join(lines) + "\n"
