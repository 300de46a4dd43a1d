"""Where a proxy's CPU goes: one sysbench load through strongsync (or HAProxy, the reference),
the proxy's and the primary's CPU time per query over a window in its middle, and (where `perf`
can sample) a profile of the proxy over the same window, split between kernel and user space."""

import json
import os
import re
import shutil
import subprocess
import time

from . import sysbench
from .procs import BenchError


def run(topology, args, out_dir):
    topology.use(args.mode, 0)
    argv = ["sysbench", sysbench.WORKLOADS[args.workload],
            *sysbench.common_args(topology.client_port(args.mode),
                                  sysbench.tables_for(args.workload, args)),
            f"--threads={args.threads}", f"--time={args.time + 2 * args.settle}",
            "--report-interval=0", f"--db-ps-mode={getattr(args, 'ps_mode', 'auto')}", "run"]
    perf_data = os.path.join(out_dir, "perf.data")
    parts = getattr(args, "parts", False)
    window = cpu_window(topology, args.mode, argv, args.settle, args.time,
                        os.path.join(out_dir, "sysbench.log"), perf_data, parts)
    result = {"workload": args.workload, "threads": args.threads, "mode": args.mode,
              **window.figures()}
    if window.sampled:
        proxy = topology.proxy_for(args.mode).process
        result.update(perf_summary(perf_data, out_dir, os.path.basename(proxy.popen.args[0])))
        if parts and args.mode != "haproxy":
            result["parts"] = part_summary(perf_data, out_dir,
                                           result["proxy_cpu_us_per_query"])
    with open(os.path.join(out_dir, "profile.json"), "w") as f:
        json.dump(result, f, indent=2)
    return result


class Window:
    """A load's steady middle: its query rate, the proxy's and the primary's CPU seconds over
    the window, and the proxy's bytes to its clients (strongsync's own count, when it is the
    proxy)."""

    def __init__(self, qps, seconds, proxy_cpu, primary_cpu, to_clients, sampled,
                 counted=None):
        self.qps, self.seconds = qps, seconds
        self.proxy_cpu, self.primary_cpu = proxy_cpu, primary_cpu
        self.to_clients, self.sampled = to_clients, sampled
        # The proxy's system calls and context switches a second (perf stat), if counted.
        self.counted = counted or {}

    def figures(self):
        queries = self.qps * self.seconds
        figures = {
            "qps": round(self.qps), "window_s": round(self.seconds, 1),
            "proxy_cpu_us_per_query": round(self.proxy_cpu / queries * 1e6, 1),
            "primary_cpu_us_per_query": round(self.primary_cpu / queries * 1e6, 1),
            "proxy_to_primary": round(self.proxy_cpu / self.primary_cpu, 2),
        }
        if self.to_clients is not None:
            figures["bytes_to_client_per_query"] = round(self.to_clients / queries)
        for event, name in COUNTED.items():
            if event in self.counted:
                figures[f"proxy_{name}_per_query"] = round(self.counted[event] / self.qps, 2)
        return figures


# What `perf stat` counts of the proxy beside a profile, and the figures' names.
COUNTED = {"raw_syscalls:sys_enter": "syscalls", "context-switches": "context_switches"}


def cpu_window(topology, mode, argv, settle, seconds, log, perf_data=None, stacks=False):
    """Runs the sysbench load `argv` (which must last `seconds + 2 * settle`) and measures a
    window of `seconds` in its middle, sampling the proxy with perf if `perf_data` is given
    and perf is there (and then counting its system calls and context switches too). With
    `stacks`, each sample keeps its call stack, unwound from a copy of the stack (DWARF): the
    release build keeps no frame pointers to walk."""
    load = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(settle)
    proxy_of_mode = topology.proxy_for(mode)
    proxy, primary = proxy_of_mode.process, topology.primary.process
    counts = getattr(proxy_of_mode, "metrics", None)
    sent = 'strongsync_relayed_bytes_total{direction="primary_to_client"}'
    sent_before = counts().get(sent) if counts else None
    proxy_before, primary_before = proxy.cpu_seconds(), primary.cpu_seconds()
    started = time.monotonic()
    sampled = False
    counting = None
    if perf_data and shutil.which("perf"):
        # Counted over the same window as the samples (both attach to the running proxy).
        counting = subprocess.Popen(
            ["perf", "stat", "-x", ",", "-e", ",".join(COUNTED), "-p", str(proxy.pid), "--",
             "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        call_graph = ["--call-graph", "dwarf,16384"] if stacks else ["-g"]
        recorded = subprocess.run(
            ["perf", "record", "-e", "cpu-clock", "-F", "999", *call_graph, "-p", str(proxy.pid),
             "-o", perf_data, "--", "sleep", str(seconds)], capture_output=True, text=True)
        sampled = recorded.returncode == 0
        if not sampled:
            print(f"bench: perf record failed, CPU times only: {recorded.stderr.strip()}")
    else:
        if perf_data:
            print("bench: no perf (Debian: linux-perf); CPU times only")
        time.sleep(seconds)
    # perf stat counted over its own `sleep seconds`, a little shorter than the window.
    counted = {e: n / seconds for e, n in perf_counts(counting).items()} if counting else None
    window = time.monotonic() - started
    proxy_cpu = proxy.cpu_seconds() - proxy_before
    primary_cpu = primary.cpu_seconds() - primary_before
    to_clients = counts().get(sent) - sent_before if sent_before is not None else None
    output, _ = load.communicate()
    with open(log, "a") as f:
        f.write(f"$ {' '.join(argv)}\n{output}\n")
    if load.returncode != 0:
        raise BenchError(f"sysbench failed: see {log}")
    # The window sits inside the run, at its steady rate.
    return Window(sysbench.parse(output).qps, window, proxy_cpu, primary_cpu, to_clients,
                  sampled, counted)


def perf_counts(counting):
    """The counts `perf stat -x ,` printed (value, unit, event, ...), by event; an event it
    could not count is left out."""
    _, err = counting.communicate()
    counts = {}
    for line in err.splitlines():
        fields = line.split(",")
        if len(fields) >= 3 and fields[2] in COUNTED:
            try:
                counts[fields[2]] = float(fields[0])
            except ValueError:
                print(f"bench: perf stat did not count {fields[2]}: {line}")
    if counting.returncode != 0:
        print(f"bench: perf stat failed: {err.strip()}")
    return counts


def perf_summary(perf_data, out_dir, binary):
    """Kernel and the proxy's own code's shares of its samples (`binary`: strongsync or
    haproxy, as perf names its dso); the top symbols go to perf-report.txt."""
    def report(*sort):
        return subprocess.run(["perf", "report", "-i", perf_data, "--no-children", "--stdio",
                               "--sort", *sort], capture_output=True, text=True).stdout
    by_dso = report("dso", "-g", "none")
    shares = {}
    for line in by_dso.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith("%"):
            shares[parts[1]] = float(parts[0].rstrip("%"))
    kernel = sum(v for k, v in shares.items() if k.startswith("[kernel"))
    with open(os.path.join(out_dir, "perf-report.txt"), "w") as f:
        f.write(by_dso)
        f.write(report("symbol", "-g", "none"))
    # perf names the proxy's own code after its binary (strongsync, haproxy, or whatever
    # --strongsync-bin is called).
    return {"kernel_share_pct": round(kernel, 1), "proxy_binary": binary,
            "proxy_code_share_pct": round(shares.get(binary, 0.0), 1)}


# The parts of strongsync a sample is counted to: the first whose frame is on its stack, in this
# order (a replica stream's work first, since it runs beside the sessions, then a statement's
# steps from the inside out).
PARTS = [
    ("ReplicaPipe", "replica streams: the binlog relayed, ACKs read"),
    ("ResponseRelay::release", "the response released to the client (a commit's wait included)"),
    ("ResponseRelay", "the primary's response relayed"),
    ("next_command", "the client's next command awaited and read"),
    ("next_primary_packet", "the primary's response awaited"),
    ("Session::dispatch", "the command sent to the primary"),
    ("Session", "a session's other work"),
    ("Context::park", "the runtime asleep and woken (epoll)"),
    ("tokio::runtime", "the runtime's other work"),
]
OTHER = "anything else"


def samples(script_text):
    """The samples of `perf script -F ip,sym,dso`: each a list of (symbol, dso), innermost
    frame first."""
    stacks, stack = [], []
    for line in script_text.splitlines():
        if not line.strip():
            if stack:
                stacks.append(stack)
            stack = []
            continue
        frame = re.match(r"\s*[0-9a-f]+ (.*) \((.*)\)$", line)
        if frame:
            stack.append((frame.group(1), frame.group(2)))
    if stack:
        stacks.append(stack)
    return stacks


def parts_of(stacks):
    """Per part, its samples and those of them in user space (the innermost frame not the
    kernel's)."""
    counts = {name: [0, 0] for _, name in PARTS + [(None, OTHER)]}
    for stack in stacks:
        symbols = [symbol for symbol, _ in stack]
        name = next((name for key, name in PARTS if any(key in s for s in symbols)), OTHER)
        counts[name][0] += 1
        if "kernel" not in stack[0][1]:
            counts[name][1] += 1
    return counts


def part_summary(perf_data, out_dir, us_per_query):
    """Each part's share of the proxy's samples and its µs per query, with its user-space
    share, written to parts.md; the shares by part are returned."""
    script = subprocess.run(["perf", "script", "-i", perf_data, "-F", "ip,sym,dso"],
                            capture_output=True, text=True).stdout
    stacks = samples(script)
    total = max(len(stacks), 1)
    counts = parts_of(stacks)
    lines = [f"{len(stacks)} samples, {us_per_query} µs of proxy CPU per query", "",
             "| part | share of the proxy's CPU | µs per query | of it user space, µs |",
             "|---|---:|---:|---:|"]
    shares = {}
    for name, (n, user) in sorted(counts.items(), key=lambda kv: -kv[1][0]):
        share = 100 * n / total
        shares[name] = round(share, 1)
        lines.append(f"| {name} | {share:.1f} % | {us_per_query * n / total:.1f} | "
                     f"{us_per_query * user / total:.1f} |")
    with open(os.path.join(out_dir, "parts.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return shares
