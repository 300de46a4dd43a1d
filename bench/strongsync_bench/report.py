"""Turns runs.csv into summary.csv, summary.md (tables, ratios, the targets docs/benchmarks.md
and docs/benchmarks-history.md name) and a chart: medians over the rounds of each (thread handling, delay, workload, threads,
mode)."""

import csv
import json
import os
import statistics
import subprocess

from .topology import MODES, THREAD_HANDLINGS

MODE_ORDER = list(MODES)
OTPC, POOL = THREAD_HANDLINGS
# How targets name the thread handlings.
SHORT = {OTPC: "otpc", POOL: "pool"}
# The modes whose clients go through a proxy (strongsync or HAProxy), in report order.
PROXY_MODES = [m for m in MODE_ORDER if MODES[m]["proxy"]]
# The per-cell tables' ratio columns (qps of the first ÷ the second), each shown when the run
# has both modes.
RATIOS = [("strongsync", "semisync"), ("strongsync", "semisync-after-commit"),
          ("strongsync", "async"), ("strongsync-shared", "semisync"),
          ("strongsync-shared", "async"), ("strongsync-shared", "strongsync"), ("passthrough", "haproxy"), ("passthrough", "async"),
          ("visibility-quorum", "semisync"), ("visibility-quorum", "strongsync"),
          ("visibility-snapshot", "semisync"), ("visibility-snapshot", "strongsync"),
          ("visibility-snapshot", "visibility-quorum")]


def load_runs(path):
    """The rows of a runs.csv; runs from before the thread_handling column ran with MariaDB's
    default."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["thread_handling"] = r.get("thread_handling") or OTPC
    return rows


def queries(r):
    """The queries a run's CPU columns cover: all of them, warm-up included. runs.csv from
    before that column has only the measured ones (after the warm-up), so its CPU per query
    comes out high by about (warm-up + time) ÷ time."""
    return int(r.get("queries_with_warmup") or r["queries"])


def transactions(r):
    """The transactions a run's CPU columns cover (see `queries`); for runs.csv from before
    the transaction columns, derived from the rates, which share one time base."""
    if r.get("transactions_with_warmup") or r.get("transactions"):
        return int(r.get("transactions_with_warmup") or r["transactions"])
    return round(int(r["queries"]) * float(r["tps"]) / float(r["qps"])) if float(r["qps"]) else 0


def cpu_us_per(rows, field, count):
    """Median over `rows` of `field` (CPU seconds) per `count(row)`, in µs; None where the
    field is blank (no proxy in that mode) or nothing was counted."""
    values = [float(r[field]) / count(r) * 1e6 for r in rows
              if r.get(field) not in (None, "") and count(r) > 0]
    return statistics.median(values) if values else None


def summarise(runs):
    """(thread handling, delay, workload, threads, mode) -> medians and totals of its rounds."""
    groups = {}
    for r in runs:
        key = (r["thread_handling"], int(r["delay_ms"]), r["workload"], int(r["threads"]),
               r["mode"])
        groups.setdefault(key, []).append(r)
    summary = {}
    for key, rows in sorted(groups.items()):
        # Runs from before proxy_cpu_s was left blank in direct modes recorded strongsync's
        # (idle) CPU there: no proxy, no figure.
        has_proxy = bool(MODES.get(key[4], {}).get("proxy"))
        summary[key] = {
            "rounds": len(rows),
            "qps": statistics.median(float(r["qps"]) for r in rows),
            "tps": statistics.median(float(r["tps"]) for r in rows),
            "p95_ms": statistics.median(float(r["p95_ms"]) for r in rows),
            "errors": sum(int(r["errors"]) for r in rows),
            "proxy_cpu_us_per_query":
                cpu_us_per(rows, "proxy_cpu_s", queries) if has_proxy else None,
            "proxy_cpu_us_per_transaction":
                cpu_us_per(rows, "proxy_cpu_s", transactions) if has_proxy else None,
            "primary_cpu_us_per_query": cpu_us_per(rows, "primary_cpu_s", queries),
            "released_unwaited": sum(float(r["released_unwaited"] or 0) for r in rows),
            # runs.csv from before the column has none.
            "primary_connections": median_of(rows, "primary_connections"),
        }
    return summary


def median_of(rows, field):
    """Median of `field` over the `rows` that have it; None if none does."""
    values = [float(r[field]) for r in rows if r.get(field) not in (None, "")]
    return statistics.median(values) if values else None


def rounded(value, digits=1):
    return "" if value is None else round(value, digits)


def write_summary_csv(summary, path):
    fields = ["thread_handling", "delay_ms", "workload", "threads", "mode", "rounds", "qps",
              "tps", "p95_ms", "errors", "proxy_cpu_us_per_query", "proxy_cpu_us_per_transaction",
              "primary_cpu_us_per_query", "released_unwaited", "primary_connections"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for key, s in summary.items():
            w.writerow([*key, s["rounds"], round(s["qps"], 1), round(s["tps"], 1), s["p95_ms"],
                        s["errors"], rounded(s["proxy_cpu_us_per_query"]),
                        rounded(s["proxy_cpu_us_per_transaction"]),
                        rounded(s["primary_cpu_us_per_query"]), s["released_unwaited"],
                        rounded(s["primary_connections"], 0)])


def ratio(summary, cell, a, b, field="qps"):
    """`field` of mode a ÷ `field` of mode b in `cell` (thread handling, delay, workload,
    threads), or None if either is missing."""
    x, y = summary.get((*cell, a)), summary.get((*cell, b))
    if not x or not y or x[field] is None or not y[field]:
        return None
    return x[field] / y[field]


def fmt_ratio(r):
    return "–" if r is None else f"{r:.2f}"


def modes_in(summary):
    return [m for m in MODE_ORDER if any(k[4] == m for k in summary)]


def thread_handlings_in(summary):
    found = {k[0] for k in summary}
    return [h for h in THREAD_HANDLINGS if h in found] + sorted(found - set(THREAD_HANDLINGS))


def tables(summary):
    """Queries per second of every cell, under a heading per thread handling and delay, with
    the ratios of RATIOS whose modes both ran."""
    modes = modes_in(summary)
    ratios = [(a, b) for a, b in RATIOS if a in modes and b in modes]
    cells = sorted({k[:4] for k in summary})
    lines = []
    for handling in thread_handlings_in(summary):
        lines += [f"### Queries per second, primary with `{handling}`", ""]
        for delay in sorted({c[1] for c in cells if c[0] == handling}):
            where = ("on the same host (no added delay)" if delay == 0
                     else f"{delay} ms away (one way)")
            lines += [f"#### Replicas {where}", ""]
            head = ["workload", "threads", *[f"{m} qps" for m in modes],
                    *[f"{a} ÷ {b}" for a, b in ratios], f"p95 ms ({' / '.join(modes)})"]
            lines.append("| " + " | ".join(head) + " |")
            lines.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
            for cell in [c for c in cells if c[:2] == (handling, delay)]:
                row = [cell[2], str(cell[3])]
                row += [f"{summary[(*cell, m)]['qps']:.0f}" if (*cell, m) in summary else "–"
                        for m in modes]
                row += [fmt_ratio(ratio(summary, cell, a, b)) for a, b in ratios]
                row.append(" / ".join(f"{summary[(*cell, m)]['p95_ms']:g}"
                                      if (*cell, m) in summary else "–" for m in modes))
                lines.append("| " + " | ".join(row) + " |")
            lines.append("")
    return lines


def met(ok):
    return "met" if ok else "not met"


def targets(summary, memory):
    """The targets of docs/benchmarks.md and docs/benchmarks-history.md, each with what this run measured (a row only where its cells ran)."""
    rows = []

    def at_least(cell, a, b, goal):
        r = ratio(summary, cell, a, b)
        if r is not None:
            handling, delay, workload, threads = cell
            rows.append((f"{SHORT.get(handling, handling)}, {workload}, {delay} ms, {threads} "
                         f"threads: {a} ≥ {goal:g} × {b}", f"{r:.2f}", met(r >= goal)))

    at_least((POOL, 5, "update_non_index", 500), "strongsync", "semisync", 6)
    at_least((POOL, 5, "update_non_index", 500), "strongsync", "async", 0.95)
    at_least((OTPC, 5, "hot", 64), "strongsync", "semisync", 5)
    at_least((OTPC, 5, "hot", 64), "strongsync", "semisync-after-commit", 0.95)
    points = sorted({k[:4] for k in summary
                     if k[0] == OTPC and k[2] == "point_select" and k[3] in (64, 256)})
    for cell in points:
        at_least(cell, "passthrough", "haproxy", 1.1)
        cpu = ratio(summary, cell, "passthrough", "haproxy", "proxy_cpu_us_per_query")
        if cpu is not None:
            rows.append((f"otpc, point_select, {cell[1]} ms, {cell[3]} threads: passthrough's "
                         "proxy CPU per query ≤ 0.9 × haproxy's", f"{cpu:.2f}", met(cpu <= 0.9)))
    at_least((OTPC, 5, "update_non_index", 500), "strongsync", "semisync", 1.1)
    # The read barrier against the mode with the same guarantee, and what it costs a reader
    # when nothing is being written.
    at_least((OTPC, 5, "read_write", 64), "visibility-quorum", "semisync", 1.0)
    at_least((OTPC, 5, "hot_mixed", 64), "visibility-quorum", "semisync", 3)
    p95 = ratio(summary, (OTPC, 5, "point_select", 64), "visibility-quorum", "strongsync",
                "p95_ms")
    if p95 is not None:
        rows.append(("otpc, point_select, 5 ms, 64 threads: visibility-quorum's p95 ≤ 1.2 × "
                     "strongsync's (visibility = commit)", f"{p95:.2f}", met(p95 <= 1.2)))
    for handling in thread_handlings_in(summary):
        s = summary.get((handling, 5, "update_non_index", 64, "strongsync"))
        if s and s["proxy_cpu_us_per_transaction"] is not None:
            rows.append((f"{SHORT.get(handling, handling)}, update_non_index, 5 ms, 64 threads: "
                         "strongsync's CPU per commit (reported, no goal here)",
                         f"{s['proxy_cpu_us_per_transaction']:.1f} µs", "–"))
    if memory:
        n = memory["connections"]
        mib = memory["rss_parked_kib"] / 1024
        measured = f"{mib:.0f} MiB with {n:,} parked"
        if n < 10_000:
            # Linear in sessions: what the parked ones cost each, on top of the idle proxy.
            mib = (memory["rss_idle_kib"] + memory["kib_per_parked_session"] * 10_000) / 1024
            measured += f"; {mib:.0f} MiB at 10,000 (extrapolated)"
        rows.append(("10,000 parked sessions: RSS ≤ 300 MiB", measured, met(mib <= 300)))
    q2 = [ratio(summary, k[:4], "strongsync-q2", "strongsync")
          for k in summary if k[4] == "strongsync-q2"]
    q2 = [r for r in q2 if r is not None]
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
PER_PART = ("profile", "workloads", "threads", "delays", "modes", "thread_handling",
            "connections", "strongsync", "strongsync_workers")


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


def fmt_us(value):
    return "–" if value is None else f"{value:.1f}"


def fmt_count(value):
    return "–" if value is None else f"{value:.0f}"


def cpu_table(summary):
    """The proxy's CPU per query and per transaction in every mode that has one, the primary's
    per query beside it, and the primary's when clients go to it directly (`async`)."""
    lines = []
    for handling in thread_handlings_in(summary):
        lines += [f"### CPU per query and per transaction, primary with `{handling}`", "",
                  "The proxy is strongsync, or HAProxy in `haproxy`. In `update_non_index` and "
                  "`hot` one transaction is one statement and one commit, so µs/transaction "
                  "is the CPU per commit.", "",
                  "Primary connections: the most `Threads_connected` at looks every two "
                  "seconds during the run (under one thread per connection, its threads).", "",
                  "| workload | delay ms | threads | mode | proxy µs/query "
                  "| proxy µs/transaction | primary µs/query | proxy ÷ primary "
                  "| primary µs/query, direct | primary connections |",
                  "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
        for (h, delay, workload, threads, mode), s in summary.items():
            if h != handling or mode not in PROXY_MODES:
                continue
            direct = summary.get((h, delay, workload, threads, "async"))
            proxy_us, primary_us = s["proxy_cpu_us_per_query"], s["primary_cpu_us_per_query"]
            share = proxy_us / primary_us if proxy_us is not None and primary_us else None
            lines.append(
                f"| {workload} | {delay} | {threads} | {mode} "
                f"| {fmt_us(s['proxy_cpu_us_per_query'])} "
                f"| {fmt_us(s['proxy_cpu_us_per_transaction'])} "
                f"| {fmt_us(s['primary_cpu_us_per_query'])} | {fmt_ratio(share)} "
                f"| {fmt_us(direct['primary_cpu_us_per_query'] if direct else None)} "
                f"| {fmt_count(s['primary_connections'])} |")
        lines.append("")
    return lines


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
              "second). Modes: `async`, `semisync` (the server's own, MariaDB's or MySQL's as "
              "`server` says, waiting `AFTER_SYNC`) and "
              "`semisync-after-commit` (waiting `AFTER_COMMIT`) have clients and replicas "
              "straight on the primary (so `async` is also the direct baseline); `strongsync` "
              "(quorum 1), `strongsync-q2` (quorum 2 of 2), `strongsync-shared` (quorum 1, "
              "`[sharing]` on with `pool_size` connections per pool) and `passthrough` (no "
              "waiting) have both going through strongsync; `haproxy` has clients going through HAProxy (TCP "
              "mode, the same leg to the primary as strongsync) and replicas replicating "
              "asynchronously from the primary. Targets name the primary's thread handling "
              "`otpc` (one-thread-per-connection) or `pool` (pool-of-threads: on MySQL, its "
              "thread_pool.so); delays are one way.", ""]
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
        lines += tables(summary) + cpu_table(summary)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines))
    return os.path.join(out_dir, "summary.md")


def chart(out_dir, python):
    """qps.png, drawn by chart.py under a Python that has matplotlib."""
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([python, os.path.join(here, "chart.py"), os.path.join(out_dir, "summary.csv"),
                    os.path.join(out_dir, "qps.png")], check=True)
    return os.path.join(out_dir, "qps.png")


def write_side_by_side(out_dir, runs, summary):
    """Writes a side-by-side bench's `runs.json` and `summary.md` (`summary(runs)` makes the
    latter) in `out_dir`, and returns the summary."""
    with open(os.path.join(out_dir, "runs.json"), "w") as f:
        json.dump(runs, f, indent=2)
    text = summary(runs)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(text)
    return text
