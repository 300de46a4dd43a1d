"""Draws summary.csv as a PNG: queries per second against client threads, one line per mode,
one panel per (thread handling, replica delay, workload) measured. Run under a Python with
matplotlib."""

import csv
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

# Colour and line of each mode, in the order they are drawn (the modes of topology.py; this
# script runs under another interpreter, without the package).
STYLE = {"async": ("tab:gray", "--"), "semisync": ("tab:red", "-"),
         "semisync-after-commit": ("tab:orange", "-"),
         "strongsync": ("tab:blue", "-"), "passthrough": ("tab:green", ":"),
         "strongsync-q2": ("tab:purple", "-."), "haproxy": ("tab:brown", ":"),
         "strongsync-shared": ("tab:cyan", "-")}
COLUMNS = 3
# summary.csv from before the thread_handling column: MariaDB's default.
DEFAULT_THREAD_HANDLING = "one-thread-per-connection"
SHORT = {"one-thread-per-connection": "otpc", "pool-of-threads": "pool"}


def panel(row):
    return (row.get("thread_handling") or DEFAULT_THREAD_HANDLING, int(row["delay_ms"]),
            row["workload"])


def main(summary_csv, png):
    with open(summary_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    panels = sorted({panel(r) for r in rows}, key=lambda p: (p[0], -p[1], p[2]))
    several_handlings = len({p[0] for p in panels}) > 1
    columns = min(COLUMNS, len(panels))
    lines = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(lines, columns, squeeze=False,
                             figsize=(4.2 * columns, 3.3 * lines))
    for ax, this in zip(axes.flat, panels):
        handling, delay, workload = this
        mine = [r for r in rows if panel(r) == this]
        for mode in STYLE:
            points = sorted((int(r["threads"]), float(r["qps"])) for r in mine
                            if r["mode"] == mode)
            if points:
                color, style = STYLE[mode]
                ax.plot([p[0] for p in points], [p[1] for p in points], style, color=color,
                        marker="o", markersize=3, label=mode)
        ax.set_xscale("log")
        # Ticks at the thread counts measured, written plainly (not as powers of ten).
        threads = sorted({int(r["threads"]) for r in mine})
        ax.set_xticks(threads, [str(t) for t in threads])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        where = "replicas on the same host" if delay == 0 else f"replicas {delay} ms away"
        title = f"{workload}, {where}"
        if several_handlings:
            title += f", {SHORT.get(handling, handling)}"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("client threads", fontsize=8)
        ax.set_ylabel("queries/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
