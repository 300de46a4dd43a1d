"""What the compressed protocol costs in the proxy: sysbench through strongsync (passthrough,
so that only the hop is measured) with its client compressing (`--mysql-compression=on`,
libmariadb's zlib) and not, on point selects and on range selects of 1,000 rows; per case the
throughput, the proxy's and the primary's CPU per query, and the bytes the proxy sent its
clients per query. The primary leg is plain in both: this is also the measurement behind
leaving it so."""

import os
import statistics

from . import sysbench
from .profile import cpu_window
from .report import write_side_by_side

MODE = "passthrough"

# sysbench scripts and their options: a point select, and a large result set.
CASES = {
    "point_select": ["oltp_point_select"],
    "range_1000": ["oltp_read_only", "--skip_trx=on", "--point_selects=0",
                   "--simple_ranges=1", "--range_size=1000", "--sum_ranges=0",
                   "--order_ranges=0", "--distinct_ranges=0"],
}

FIGURES = ("qps", "proxy_cpu_us_per_query", "primary_cpu_us_per_query",
           "bytes_to_client_per_query")


def run(topology, args, out_dir):
    topology.use(MODE, 0)
    port = topology.client_port(MODE)
    tables = sysbench.tables_for("point_select", args)
    log = os.path.join(out_dir, "sysbench.log")
    runs = []
    # Rounds outermost, compression alternating, so that drift hits both alike.
    for round_no in range(args.rounds):
        for case, script in CASES.items():
            for compressed in (False, True):
                argv = ["sysbench", *script, *sysbench.common_args(port, tables),
                        f"--threads={args.threads}", f"--time={args.time + 2 * args.settle}",
                        "--report-interval=0", "--db-ps-mode=auto",
                        f"--mysql-compression={'on' if compressed else 'off'}", "run"]
                figures = cpu_window(topology, MODE, argv, args.settle, args.time, log).figures()
                runs.append({"round": round_no, "case": case, "compressed": compressed,
                             **figures})
                print(f"bench: {case} compressed={compressed}: {figures}", flush=True)
    return write_side_by_side(out_dir, runs, lambda r: summarize(r, args))


def summarize(runs, args):
    """Medians per case and compression, side by side, with compressed ÷ plain."""
    def median(case, compressed, figure):
        return statistics.median(r[figure] for r in runs
                                 if r["case"] == case and r["compressed"] == compressed)

    lines = [
        f"# The compressed protocol's cost in the proxy ({args.threads} threads, "
        f"{args.rounds} round(s) of {args.time} s, medians)",
        "",
        "| case | client leg | qps | proxy CPU µs/query | primary CPU µs/query "
        "| bytes to client/query |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for case in CASES:
        for compressed in (False, True):
            cells = [f"{median(case, compressed, fig):,.1f}" for fig in FIGURES]
            lines.append(f"| {case} | {'zlib' if compressed else 'plain'} | "
                         + " | ".join(cells) + " |")
        ratios = [median(case, True, fig) / median(case, False, fig) for fig in FIGURES]
        lines.append(f"| {case} | zlib ÷ plain | " + " | ".join(f"{r:.2f}" for r in ratios)
                     + " |")
    return "\n".join(lines) + "\n"
