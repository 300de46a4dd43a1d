"""Draws summary.csv as a PNG: queries per second against client threads, one line per mode,
one panel per workload, a row of panels per replica delay. Run under a Python with matplotlib."""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODE_ORDER = ["async", "semisync", "strongsync", "passthrough", "strongsync-q2"]
STYLE = {"async": ("tab:gray", "--"), "semisync": ("tab:red", "-"),
         "strongsync": ("tab:blue", "-"), "passthrough": ("tab:green", ":"),
         "strongsync-q2": ("tab:purple", "-.")}


def main(summary_csv, png):
    with open(summary_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    delays = sorted({int(r["delay_ms"]) for r in rows})
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(len(delays), len(workloads), squeeze=False,
                             figsize=(4.2 * len(workloads), 3.4 * len(delays)))
    for i, delay in enumerate(delays):
        for j, workload in enumerate(workloads):
            ax = axes[i][j]
            for mode in MODE_ORDER:
                points = sorted((int(r["threads"]), float(r["qps"])) for r in rows
                                if int(r["delay_ms"]) == delay and r["workload"] == workload
                                and r["mode"] == mode)
                if points:
                    color, style = STYLE[mode]
                    ax.plot([p[0] for p in points], [p[1] for p in points], style, color=color,
                            marker="o", markersize=3, label=mode)
            ax.set_xscale("log")
            ax.set_title(f"{workload}, replicas {delay} ms away", fontsize=9)
            ax.set_xlabel("client threads", fontsize=8)
            ax.set_ylabel("queries/s", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, alpha=0.3)
            ax.set_ylim(bottom=0)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
