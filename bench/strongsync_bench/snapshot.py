"""Read-only transactions beside writers, through a client with OK terminators
(`read-transactions`, mysql_async): what strongsync's read barrier costs a transaction's reads,
bounded one by one (`visibility-quorum`) or once per snapshot (`visibility-snapshot`), beside
semisync AFTER_SYNC and `visibility = commit`. sysbench's MariaDB client ends result sets with
legacy EOF packets, which cannot carry the transaction's state, so it cannot show this."""

import json
import os
import subprocess

from .procs import BenchError
from .sysbench import tables_for
from .topology import APP_PASSWORD, APP_USER

MODES = ["semisync", "strongsync", "visibility-quorum", "visibility-snapshot"]


def run(topology, tool, args, out_dir):
    tables = tables_for("point_select", args)
    rows = []
    log = os.path.join(out_dir, "read-transactions.log")
    for rnd in range(args.rounds):
        for mode in MODES:
            topology.use(mode, args.delay)
            topology.wait_replicas_caught_up(args.catchup_timeout)
            port = topology.client_port(mode)
            url = (f"mysql://{APP_USER}:{APP_PASSWORD}@127.0.0.1:{port}/{tables.db}"
                   "?prefer_socket=false")
            before = topology.proxy.metrics() if mode.startswith("visibility") else {}
            argv = [tool, f"--url={url}", f"--readers={args.threads // 2}",
                    f"--writers={args.threads - args.threads // 2}", f"--seconds={args.time}",
                    f"--warmup={args.warmup}", f"--tables={tables.count}",
                    f"--table-size={tables.size}"]
            done = subprocess.run(argv, capture_output=True, text=True,
                                  timeout=args.time + args.warmup + 600)
            with open(log, "a") as f:
                f.write(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}\n")
            if done.returncode != 0:
                raise BenchError(f"read-transactions in {mode} failed: see {log}")
            row = dict(mode=mode, round=rnd, **json.loads(done.stdout))
            if before:
                after = topology.proxy.metrics()
                name = "strongsync_reads_in_snapshot_total"
                row["reads_in_snapshot"] = after.get(name, 0) - before.get(name, 0)
            print(f"[{rnd + 1}/{args.rounds}] {mode}: {row}", flush=True)
            rows.append(row)
    with open(os.path.join(out_dir, "read-transactions.json"), "w") as f:
        json.dump(rows, f, indent=2)
    return summary(rows, out_dir)


def summary(rows, out_dir):
    """Medians per mode, and ratios to semisync and to visibility-quorum, as markdown."""
    def median(values):
        values = sorted(values)
        return values[len(values) // 2] if values else 0.0
    med = {m: {k: median([r[k] for r in rows if r["mode"] == m])
               for k in ("reader_tps", "writer_tps", "reader_p95_ms")}
           for m in MODES if any(r["mode"] == m for r in rows)}
    lines = ["| mode | reader transactions/s | writer commits/s | reader p95 ms | "
             "readers ÷ semisync | readers ÷ visibility-quorum |",
             "|---|---:|---:|---:|---:|---:|"]
    for mode, m in med.items():
        vs = lambda other: (f"{m['reader_tps'] / med[other]['reader_tps']:.2f}"  # noqa: E731
                            if other in med and med[other]['reader_tps'] else "–")
        lines.append(f"| {mode} | {m['reader_tps']:.0f} | {m['writer_tps']:.0f} | "
                     f"{m['reader_p95_ms']:.1f} | {vs('semisync')} | {vs('visibility-quorum')} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(text)
    return text
