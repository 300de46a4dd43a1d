"""Turns runs.csv into summary.csv, summary.md (tables, ratios, the issue's targets) and a
chart: medians over the rounds of each (delay, workload, threads, mode)."""

import csv
import json
import os
import statistics
import subprocess

from .topology import MODES

MODE_ORDER = list(MODES)


def load_runs(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def summarise(runs):
    """(delay, workload, threads, mode) -> medians and totals of its rounds."""
    groups = {}
    for r in runs:
        key = (int(r["delay_ms"]), r["workload"], int(r["threads"]), r["mode"])
        groups.setdefault(key, []).append(r)
    summary = {}
    for key, rows in sorted(groups.items()):
        per_query = lambda field: statistics.median(
            float(r[field]) / int(r["queries"]) * 1e6 for r in rows if int(r["queries"]) > 0)
        summary[key] = {
            "rounds": len(rows),
            "qps": statistics.median(float(r["qps"]) for r in rows),
            "tps": statistics.median(float(r["tps"]) for r in rows),
            "p95_ms": statistics.median(float(r["p95_ms"]) for r in rows),
            "errors": sum(int(r["errors"]) for r in rows),
            "proxy_cpu_us_per_query": per_query("proxy_cpu_s"),
            "primary_cpu_us_per_query": per_query("primary_cpu_s"),
            "released_unwaited": sum(float(r["released_unwaited"] or 0) for r in rows),
        }
    return summary


def write_summary_csv(summary, path):
    fields = ["delay_ms", "workload", "threads", "mode", "rounds", "qps", "tps", "p95_ms",
              "errors", "proxy_cpu_us_per_query", "primary_cpu_us_per_query", "released_unwaited"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for (delay, workload, threads, mode), s in summary.items():
            w.writerow([delay, workload, threads, mode, s["rounds"], round(s["qps"], 1),
                        round(s["tps"], 1), s["p95_ms"], s["errors"],
                        round(s["proxy_cpu_us_per_query"], 1),
                        round(s["primary_cpu_us_per_query"], 1), s["released_unwaited"]])


def ratio(summary, cell, a, b):
    """qps of mode a ÷ qps of mode b in `cell`, or None if either is missing."""
    x, y = summary.get((*cell, a)), summary.get((*cell, b))
    if not x or not y or y["qps"] == 0:
        return None
    return x["qps"] / y["qps"]


def fmt_ratio(r):
    return "–" if r is None else f"{r:.2f}"


def tables(summary):
    modes = [m for m in MODE_ORDER if any(k[3] == m for k in summary)]
    cells = sorted({k[:3] for k in summary})
    lines = []
    for delay in sorted({c[0] for c in cells}):
        where = "on the same host (no added delay)" if delay == 0 else f"{delay} ms away (one way)"
        lines += [f"#### Replicas {where}", ""]
        head = ["workload", "threads", *[f"{m} qps" for m in modes],
                "strongsync ÷ semisync", "strongsync ÷ async", "passthrough ÷ async",
                f"p95 ms ({' / '.join(modes)})"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
        for cell in [c for c in cells if c[0] == delay]:
            row = [cell[1], str(cell[2])]
            row += [f"{summary[(*cell, m)]['qps']:.0f}" if (*cell, m) in summary else "–"
                    for m in modes]
            row += [fmt_ratio(ratio(summary, cell, "strongsync", "semisync")),
                    fmt_ratio(ratio(summary, cell, "strongsync", "async")),
                    fmt_ratio(ratio(summary, cell, "passthrough", "async"))]
            row.append(" / ".join(f"{summary[(*cell, m)]['p95_ms']:g}" if (*cell, m) in summary
                                  else "–" for m in modes))
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return lines


def targets(summary, memory):
    """The issue's targets, each with what this run measured."""
    rows = []

    def cell_target(name, cell, a, b, goal):
        r = ratio(summary, cell, a, b)
        if r is not None:
            rows.append((name, f"{r:.2f}", "met" if r >= goal else "not met"))

    for delay in (5,):
        cell_target("5 ms, update_non_index, 500 threads: strongsync ≥ 1.25 × semisync",
                    (delay, "update_non_index", 500), "strongsync", "semisync", 1.25)
        cell_target("5 ms, update_non_index, 500 threads: strongsync ≥ 0.9 × async",
                    (delay, "update_non_index", 500), "strongsync", "async", 0.9)
        cell_target("5 ms, update_non_index, 64 threads: strongsync ≥ 1.2 × semisync",
                    (delay, "update_non_index", 64), "strongsync", "semisync", 1.2)
    cells = sorted({k[:3] for k in summary if k[2] >= 16})
    compared = [(c, ratio(summary, c, "strongsync", "semisync")) for c in cells]
    compared = [(c, r) for c, r in compared if r is not None]
    if compared:
        short = [f"{c[1]}@{c[2]}/{c[0]}ms {r:.2f}" for c, r in compared if r < 1.0]
        rows.append(("every cell at ≥ 16 threads: strongsync ≥ semisync",
                     f"{len(compared) - len(short)} of {len(compared)} cells"
                     + (f"; below: {', '.join(short)}" if short else ""),
                     "met" if not short else "not met"))
    points = [(c, ratio(summary, c, "passthrough", "async")) for c in cells
              if c[1] == "point_select" and 32 <= c[2] <= 256]
    points = [(c, r) for c, r in points if r is not None]
    if points:
        worst = min(r for _, r in points)
        rows.append(("point_select, 32–256 threads: passthrough ≥ 0.8 × direct",
                     f"lowest {worst:.2f} over {len(points)} cells",
                     "met" if worst >= 0.8 else "not met"))
    cpu = [s["proxy_cpu_us_per_query"] / s["primary_cpu_us_per_query"]
           for k, s in summary.items()
           if k[1] == "point_select" and k[3] == "passthrough" and s["primary_cpu_us_per_query"]]
    if cpu:
        mid = statistics.median(cpu)
        rows.append(("proxy CPU per point-select query ≤ 0.25 × the primary's",
                     f"median {mid:.2f} over {len(cpu)} cells", "met" if mid <= 0.25 else "not met"))
    if memory:
        n = memory["connections"]
        mib = memory["rss_parked_kib"] / 1024
        measured = f"{mib:.0f} MiB with {n:,} parked"
        if n < 10_000:
            # Linear in sessions: what the parked ones cost each, on top of the idle proxy.
            mib = (memory["rss_idle_kib"] + memory["kib_per_parked_session"] * 10_000) / 1024
            measured += f"; {mib:.0f} MiB at 10,000 (extrapolated)"
        rows.append(("10,000 parked sessions: RSS ≤ 300 MiB", measured,
                     "met" if mib <= 300 else "not met"))
    q2 = [(k[:3], ratio(summary, k[:3], "strongsync-q2", "strongsync"))
          for k in summary if k[3] == "strongsync-q2"]
    q2 = [r for _, r in q2 if r is not None]
    if q2:
        rows.append(("quorum 2 of 2 ÷ quorum 1 (reported, no target)",
                     f"median {statistics.median(q2):.2f}, range {min(q2):.2f}–{max(q2):.2f}", "–"))
    if not rows:
        return []
    lines = ["| target | measured | |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return lines + [""]


def parts(out_dir):
    """The directories whose runs make up this result: out_dir itself if it holds runs.csv or
    memory.json, and its subdirectories that do (a run made of several invocations)."""
    found = []
    for d in [out_dir] + sorted(os.path.join(out_dir, n) for n in os.listdir(out_dir)):
        if os.path.isdir(d) and any(os.path.exists(os.path.join(d, f))
                                    for f in ("runs.csv", "memory.json")):
            found.append(d)
    return found


def read_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


# Settings that say what was run, by part; the rest (machine, versions) are shared.
PER_PART = ("profile", "workloads", "threads", "delays", "modes", "connections")


def describe_parts(dirs, out_dir):
    lines = []
    shared = {}
    for d in dirs:
        settings = read_json(os.path.join(d, "settings.json")) or {}
        for k, v in settings.items():
            if k not in PER_PART:
                shared.setdefault(k, v)
        own = ", ".join(f"{k} {v}" for k, v in settings.items() if k in PER_PART)
        if len(dirs) > 1 and own:
            lines.append(f"- part `{os.path.relpath(d, out_dir)}`: {own}")
    return [f"- {k}: {v}" for k, v in shared.items()] + lines


def cpu_table(summary):
    """Proxy and primary CPU per query where clients go through the proxy, and the primary's
    own when clients go to it directly."""
    lines = ["| workload | delay ms | threads | mode | proxy µs/query | primary µs/query "
             "| proxy ÷ primary | primary µs/query, direct |",
             "|---|---:|---:|---|---:|---:|---:|---:|"]
    for (delay, workload, threads, mode), s in summary.items():
        if mode not in ("passthrough", "strongsync") or not s["primary_cpu_us_per_query"]:
            continue
        direct = summary.get((delay, workload, threads, "async"))
        lines.append(
            f"| {workload} | {delay} | {threads} | {mode} | {s['proxy_cpu_us_per_query']:.1f} "
            f"| {s['primary_cpu_us_per_query']:.1f} "
            f"| {s['proxy_cpu_us_per_query'] / s['primary_cpu_us_per_query']:.2f} "
            f"| {direct['primary_cpu_us_per_query']:.1f} |" if direct else "| – |")
    return lines + [""]


def write(out_dir):
    """summary.csv and summary.md from the runs.csv (and memory.json) of out_dir or of its
    parts (see `parts`)."""
    dirs = parts(out_dir)
    runs = []
    for d in dirs:
        if os.path.exists(os.path.join(d, "runs.csv")):
            runs += load_runs(os.path.join(d, "runs.csv"))
    memory = next((m for m in (read_json(os.path.join(d, "memory.json")) for d in dirs) if m),
                  None)
    summary = summarise(runs)
    write_summary_csv(summary, os.path.join(out_dir, "summary.csv"))
    lines = ["# strongsync benchmark", ""] + describe_parts(dirs, out_dir) + [""]
    lines += ["Medians over the rounds of each cell; ratios are of those medians (queries per "
              "second). Modes: `async` and `semisync` have clients and replicas straight on the "
              "primary (so `async` is also the direct baseline); `strongsync` (quorum 1), "
              "`strongsync-q2` (quorum 2 of 2) and `passthrough` (no waiting) have both going "
              "through strongsync.", ""]
    target_lines = targets(summary, memory)
    if target_lines:
        lines += ["### Targets", ""] + target_lines
    if memory:
        lines += ["### Parked sessions", "",
                  f"{memory['connections']:,} commits parked at once: strongsync's RSS "
                  f"{memory['rss_parked_kib'] / 1024:.0f} MiB (idle {memory['rss_idle_kib'] / 1024:.0f} MiB, "
                  f"{memory['kib_per_parked_session']} KiB per parked session, both sockets "
                  f"included).", ""]
    if summary:
        lines += ["### Queries per second", ""] + tables(summary)
        lines += ["### CPU per query", ""] + cpu_table(summary)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines))
    return os.path.join(out_dir, "summary.md")


def chart(out_dir, python):
    """qps.png, drawn by chart.py under a Python that has matplotlib."""
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([python, os.path.join(here, "chart.py"), os.path.join(out_dir, "summary.csv"),
                    os.path.join(out_dir, "qps.png")], check=True)
    return os.path.join(out_dir, "qps.png")
