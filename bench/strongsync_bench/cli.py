"""`bench/run`: flags, profiles, set-up (packages, binaries, matplotlib) and the subcommands."""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile

from . import (cluster, compression, matrix, memory, orm, profile, report, servers, snapshot,
               sysbench, tls)
from .procs import BenchError, raise_open_files_limit
from .topology import MODES, THREAD_HANDLINGS, Topology

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALL_WORKLOADS = list(sysbench.WORKLOADS)
ALL_MODES = list(MODES)
PROXY_MODES = [m for m, spec in MODES.items() if spec["proxy"]]
OTPC = THREAD_HANDLINGS[0]

# Each profile is a set of defaults; any flag given wins.
PROFILES = {
    "full": dict(workloads=ALL_WORKLOADS, threads=[1, 16, 64, 256, 500, 1000], delays=[0, 1, 5],
                 modes=ALL_MODES, thread_handling=THREAD_HANDLINGS, rounds=3, time=30, warmup=5,
                 tables=8, table_size=100_000),
    # The cells the targets of docs/benchmarks.md and docs/benchmarks-history.md name, on one
    # thread handling: hot rows and point_select at 64 threads are the key ones, HAProxy the reference for the hop.
    "quick": dict(workloads=["update_non_index", "hot", "point_select"], threads=[64, 500],
                  delays=[5], modes=["async", "semisync", "semisync-after-commit", "strongsync",
                                     "passthrough", "haproxy"],
                  thread_handling=[OTPC], rounds=1, time=10, warmup=2, tables=4,
                  table_size=10_000),
    # The read barrier (visibility = quorum) beside the modes it is measured against.
    "visibility": dict(workloads=["read_write", "hot_mixed", "point_select"], threads=[64],
                       delays=[5], modes=["async", "semisync", "semisync-after-commit",
                                          "strongsync", "visibility-quorum"],
                       thread_handling=[OTPC], rounds=2, time=10, warmup=2, tables=4,
                       table_size=10_000),
    # Every mode, the new workloads and the primary's restart, as briefly as they can run.
    "smoke": dict(workloads=["update_non_index", "xa", "hot", "hot_mixed"], threads=[2],
                  delays=[1],
                  modes=ALL_MODES, thread_handling=THREAD_HANDLINGS, rounds=1, time=2,
                  warmup=0, tables=1, table_size=1_000),
}


def csv_list(kind):
    def parse(text):
        items = [kind(x) for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        return items
    return parse


def choices(allowed):
    def check(items):
        unknown = [x for x in items if x not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {allowed}")
        return items
    return check


def server_option(text):
    name, eq, value = text.partition("=")
    if not eq or not name.strip() or any(c in text for c in "\n[]"):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return f"{name.strip()}={value.strip()}"


def parser():
    p = argparse.ArgumentParser(
        prog="bench/run",
        description="strongsync against the server's own semisync and async replication, "
                    "with sysbench, on a local primary and two replicas: MariaDB, or MySQL 9.7 "
                    "(--server mysql).")
    sub = p.add_subparsers(dest="command", required=True)

    def common(s):
        s.add_argument("--server", choices=list(servers.FLAVOURS), default="mariadb",
                       help="the primary and replicas: MariaDB from the host's packages, or "
                            "MySQL 9.7 from the Debian sid root deploy/mysql/root builds or "
                            "reuses, run under chroot (as root; its servers' files live in "
                            "the root's /tmp) [mariadb]")
        s.add_argument("--out", help="results directory [bench/results/<time>-<profile>]")
        s.add_argument("--strongsync-bin", help="strongsync binary [built: cargo build --release]")
        s.add_argument("--tools-dir", help="directory with delay-relay and park-sessions "
                       "[built: cargo build --release -p strongsync-bench]")
        s.add_argument("--workdir", help="where servers keep their data [a temporary directory; "
                       "MySQL: under the root's /tmp]")
        s.add_argument("--keep", action="store_true", help="leave the data directory behind")
        s.add_argument("--sync-binlog", type=int, default=0,
                       help="servers' sync_binlog (innodb_flush_log_at_trx_commit stays 1) [0]")
        s.add_argument("--primary-via", choices=["socket", "tcp"], default="socket",
                       help="how strongsync (and HAProxy) reach the primary: its Unix socket, "
                            "as a sidecar would, or TCP loopback [socket]")
        s.add_argument("--strongsync-workers", type=int,
                       help="strongsync's worker_threads [its default: one per four CPUs, at least one]")
        s.add_argument("--ps-mode", choices=["auto", "disable"], default="auto",
                       help="sysbench's --db-ps-mode: server-side prepared statements (auto), "
                            "or plain statements (disable) [auto]")
        s.add_argument("--pool-size", type=int, default=32,
                       help="sharing.pool_size of strongsync-shared [32]")
        s.add_argument("--server-option", action="append", default=[], type=server_option,
                       metavar="NAME=VALUE",
                       help="an option for every server's option file, after the bench's own, "
                            "which it overrides (innodb_buffer_pool_size=128M, "
                            "rpl_semi_sync_source_timeout=10000); repeatable")
        s.add_argument("--catchup-timeout", type=int, default=900,
                       help="seconds the replicas may take to apply a run's writes [900]")

    def hot(s):
        s.add_argument("--hot-tables", type=int, default=1,
                       help="tables of the hot workload, in its own database sbhot [1]")
        s.add_argument("--hot-rows", type=int, default=10,
                       help="rows per hot table: the fewer, the more commits queue on each "
                            "row's lock [10]")

    m = sub.add_parser("matrix", help="the sysbench matrix (see --profile)")
    common(m)
    m.add_argument("--profile", choices=list(PROFILES), default="full",
                   help="defaults for the flags below: full (many hours), quick (~10 min "
                        "on 2 cores: 3 workloads at 64 and 500 threads in 6 modes, replicas 5 "
                        "ms away), smoke (~2 min) [full]")
    m.add_argument("--workloads", type=csv_list(str), help=f"from {ALL_WORKLOADS}")
    m.add_argument("--threads", type=csv_list(int), help="client thread counts, e.g. 1,16,64")
    m.add_argument("--delays", type=csv_list(int),
                   help="one-way replica delays in ms, e.g. 0,1,5 (0: no relay)")
    m.add_argument("--modes", type=csv_list(str),
                   help=f"from {ALL_MODES} (MySQL: all but "
                        f"{', '.join(servers.Mysql.unsupported_modes)})")
    m.add_argument("--thread-handling", type=csv_list(str),
                   help=f"the primary's thread_handling, from {THREAD_HANDLINGS} (MySQL: "
                        f"pool-of-threads is its thread_pool.so); each value restarts the "
                        f"primary once [quick: {OTPC}; full and smoke: both]")
    m.add_argument("--rounds", type=int, help="repeats of each cell (modes interleaved)")
    m.add_argument("--mode-order", choices=["rotated", "fixed"], default="rotated",
                   help="each round starts with the next mode (rotated), or every round runs "
                        "the modes as --modes lists them (fixed) [rotated]")
    m.add_argument("--time", type=int, help="seconds measured per run")
    m.add_argument("--warmup", type=int, help="seconds run before measuring")
    m.add_argument("--tables", type=int, help="sysbench tables")
    m.add_argument("--table-size", type=int, help="rows per table")
    hot(m)
    m.add_argument("--no-chart", action="store_true", help="skip qps.png (needs matplotlib)")

    mem = sub.add_parser("memory", help="strongsync's memory with many commits parked at once")
    common(mem)
    mem.add_argument("--connections", type=int, default=10_000, help="commits parked [10000]")

    prof = sub.add_parser("profile", help="a proxy's CPU per query against the primary's, "
                          "and where it goes (perf)")
    common(prof)
    prof.add_argument("--workload", choices=ALL_WORKLOADS, default="point_select",
                      help="[point_select]")
    prof.add_argument("--threads", type=int, default=64, help="[64]")
    prof.add_argument("--mode", choices=PROXY_MODES, default="passthrough",
                      help="the proxy's mode: strongsync's, or haproxy [passthrough]")
    prof.add_argument("--time", type=int, default=10, help="seconds profiled [10]")
    prof.add_argument("--settle", type=int, default=3,
                      help="seconds of load before and after the window [3]")
    prof.add_argument("--parts", action="store_true",
                      help="sample call stacks too (DWARF, heavier) and split strongsync's CPU "
                      "by part of its work: parts.md (not for haproxy)")
    prof.add_argument("--tables", type=int, default=4)
    prof.add_argument("--table-size", type=int, default=10_000)
    hot(prof)

    snap = sub.add_parser("snapshot", help="read-only transactions beside writers through a "
                          "client with OK terminators: the read barrier bounding each read "
                          "or each snapshot, against AFTER_SYNC")
    common(snap)
    snap.add_argument("--threads", type=int, default=64, help="connections, half of them "
                      "readers [64]")
    snap.add_argument("--delay", type=int, default=5, help="one-way replica delay, ms [5]")
    snap.add_argument("--rounds", type=int, default=3, help="[3]")
    snap.add_argument("--time", type=int, default=10, help="seconds measured per run [10]")
    snap.add_argument("--warmup", type=int, default=2, help="[2]")
    snap.add_argument("--tables", type=int, default=4)
    snap.add_argument("--table-size", type=int, default=10_000)

    comp = sub.add_parser("compression", help="the compressed protocol's cost in the proxy: "
                          "CPU per query and bytes to clients, point selects and 1,000-row "
                          "ranges, compressed and not")
    common(comp)
    comp.add_argument("--threads", type=int, default=16, help="[16]")
    comp.add_argument("--rounds", type=int, default=3, help="[3]")
    comp.add_argument("--time", type=int, default=10, help="seconds measured per run [10]")
    comp.add_argument("--settle", type=int, default=3,
                      help="seconds of load before and after the window [3]")
    comp.add_argument("--tables", type=int, default=4)
    comp.add_argument("--table-size", type=int, default=10_000)

    clu = sub.add_parser("cluster", help="what being one of a cluster costs a commit: strongsync "
                         "alone and as the leader of a cluster (a one-member etcd), in turn")
    common(clu)
    clu.add_argument("--threads", type=int, default=64, help="[64]")
    clu.add_argument("--rounds", type=int, default=3, help="[3]")
    clu.add_argument("--time", type=int, default=10, help="seconds measured per run [10]")
    clu.add_argument("--settle", type=int, default=3,
                     help="seconds of load before and after the window [3]")
    clu.add_argument("--tables", type=int, default=4)
    clu.add_argument("--table-size", type=int, default=10_000)

    loop = sub.add_parser("orm", help="an ORM's connection set-up loop (connect, four SETs, a "
                          "transaction) direct, through HAProxy and through strongsync: latency "
                          "and the primary's statements per loop")
    common(loop)
    loop.add_argument("--threads", type=int, default=16, help="[16]")
    loop.add_argument("--rounds", type=int, default=3, help="[3]")
    loop.add_argument("--time", type=int, default=10, help="seconds measured per run [10]")
    loop.add_argument("--warmup", type=int, default=2, help="[2]")
    loop.add_argument("--tables", type=int, default=4)
    loop.add_argument("--table-size", type=int, default=10_000)

    t = sub.add_parser("tls", help="what TLS costs on each leg: connecting and point selects, "
                       "direct plain and TLS, through strongsync with each leg plain or TLS "
                       "(use --server mysql, whose primary offers TLS)")
    common(t)
    t.add_argument("--threads", type=int, default=16, help="[16]")
    t.add_argument("--rounds", type=int, default=3, help="[3]")
    t.add_argument("--time", type=int, default=10, help="seconds per run [10]")
    t.add_argument("--tables", type=int, default=4)
    t.add_argument("--table-size", type=int, default=10_000)
    t.add_argument("--server-key", choices=["ecdsa", "rsa"], default="ecdsa",
                   help="strongsync's certificate: ECDSA P-256 (the kind it makes itself) or the "
                        "primary's own RSA 2048 one [ecdsa]")
    # Over the primary's Unix socket strongsync needs (and uses) no TLS.
    t.set_defaults(primary_via="tcp")

    r = sub.add_parser("report", help="rebuild summary.md, summary.csv and qps.png of a run")
    r.add_argument("dir")
    r.add_argument("--no-chart", action="store_true")
    return p


def apply_profile(args, flavour):
    """The profile's defaults where no flag was given; a profile's modes leave out those the
    server does not have, a mode asked for by name is refused."""
    for key, value in PROFILES[args.profile].items():
        if getattr(args, key) is None:
            if key == "modes":
                value = [m for m in value if m not in flavour.unsupported_modes]
            setattr(args, key, value)
    choices(ALL_WORKLOADS)(args.workloads)
    choices([m for m in MODES if m not in flavour.unsupported_modes])(args.modes)
    choices(THREAD_HANDLINGS)(args.thread_handling)


def modes_of(args):
    """The modes a command runs in (the memory probe: strongsync's, not listed)."""
    if args.command == "matrix":
        return args.modes
    if args.command == "snapshot":
        return snapshot.MODES
    if args.command == "compression":
        return [compression.MODE]
    if args.command == "orm":
        return orm.MODES
    if args.command == "tls":
        return [tls.MODE]
    if args.command == "cluster":
        return [cluster.MODE]
    return [args.mode] if args.command == "profile" else []


def workloads_of(args):
    """The workloads whose tables a command needs."""
    if args.command == "matrix":
        return args.workloads
    if args.command in ("snapshot", "compression", "orm", "tls"):
        return ["point_select"]
    if args.command == "cluster":
        return ["update_non_index"]
    return [args.workload] if args.command == "profile" else []


def install_missing(modes, flavour):
    """The Debian packages the run needs: the server's (MySQL's come with its root), sysbench,
    HAProxy only where a mode uses it."""
    needed = [*flavour.packages, ("sysbench", "sysbench")]
    if "haproxy" in modes:
        needed.append(("haproxy", "haproxy"))
    missing = [package for command, package in needed
               if not (os.access(command, os.X_OK) if command.startswith("/")
                       else shutil.which(command))]
    if not missing:
        return
    print(f"bench: installing {' '.join(missing)} with apt-get", flush=True)
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        subprocess.run(sudo + argv, env=env, check=True)


def binaries(args):
    """strongsync, delay-relay and park-sessions: given, or built in release mode."""
    if args.strongsync_bin and args.tools_dir:
        strongsync, tools = args.strongsync_bin, args.tools_dir
    else:
        print("bench: building strongsync and the bench tools (release)", flush=True)
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "strongsync",
                        "-p", "strongsync-bench", "--bins"], cwd=REPO, check=True)
        built = os.path.join(REPO, "target", "release")
        strongsync = args.strongsync_bin or os.path.join(built, "strongsync")
        tools = args.tools_dir or built
    found = (strongsync, os.path.join(tools, "delay-relay"), os.path.join(tools, "park-sessions"))
    for path in found:
        if not os.access(path, os.X_OK):
            raise BenchError(f"no executable at {path}")
    return found


def chart_python():
    """A Python with matplotlib: this one, or a venv under target/ that gets it from PyPI."""
    try:
        import matplotlib  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    venv = os.path.join(REPO, "target", "bench-venv")
    python = os.path.join(venv, "bin", "python")
    probe = subprocess.run([python, "-c", "import matplotlib"], capture_output=True) \
        if os.path.exists(python) else None
    if probe is None or probe.returncode != 0:
        print(f"bench: installing matplotlib into {venv}", flush=True)
        for argv in ([sys.executable, "-m", "venv", venv],
                     [python, "-m", "pip", "install", "-q", "matplotlib"]):
            if subprocess.run(argv).returncode != 0:
                raise BenchError(
                    f"{' '.join(argv)} failed: the chart needs matplotlib (Debian: python3-venv "
                    "for the venv, or python3-matplotlib), or pass --no-chart")
    return python


def describe(args, strongsync, flavour):
    """The machine and settings a result came from."""
    def out(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True).stdout.strip()
        except OSError:
            return "?"
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_gib = int(f.readline().split()[1]) / 1024 / 1024
    rev = out(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    if out(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"]):
        rev += " (with uncommitted changes)"
    facts = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} CPUs ({cpu}), {mem_gib:.0f} GiB, Linux {platform.release()}",
        "server": flavour.name,
        flavour.name: flavour.version(),
        "sysbench": out(["sysbench", "--version"]),
        # A binary given with --strongsync-bin may come from any commit: say so rather than
        # claim the checkout's.
        "strongsync": (f"{rev}, {out([strongsync, '--version'])}" if not args.strongsync_bin
                       else f"{strongsync} (given; bench scripts at {rev}), "
                            f"{out([strongsync, '--version'])}"),
        "sync_binlog": args.sync_binlog,
        "strongsync_to_primary": args.primary_via,
        "strongsync_workers": args.strongsync_workers or "default (one per four CPUs, at least one)",
        "ps_mode": args.ps_mode,
        "pool_size": args.pool_size,
        "server_options": args.server_option,
    }
    if "haproxy" in modes_of(args):
        facts["haproxy"] = out(["haproxy", "-v"]).partition("\n")[0]
    for key in ("profile", "workload", "workloads", "mode", "threads", "delays", "modes",
                "thread_handling", "rounds", "time", "warmup", "tables", "table_size",
                "hot_tables", "hot_rows", "connections", "mode_order"):
        if hasattr(args, key):
            facts[key] = getattr(args, key)
    return facts


def main(argv=None):
    flags = parser()
    args = flags.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the servers the bench started are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if args.command == "report":
            print(report.write(args.dir))
            if not args.no_chart:
                print(report.chart(args.dir, chart_python()))
            return 0
        flavour = servers.flavour(args.server)
        if args.command == "matrix":
            try:
                apply_profile(args, flavour)
            except argparse.ArgumentTypeError as e:
                flags.error(str(e))
        elif args.command == "snapshot" and args.server == "mysql":
            flags.error("snapshot measures innodb_snapshot_isolation, which MySQL has not")
        return run(args, flavour)
    except BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 1


def run(args, flavour):
    install_missing(modes_of(args), flavour)
    strongsync, relay_bin, park_bin = binaries(args)
    python = chart_python() if args.command == "matrix" and not args.no_chart else None
    name = args.profile if args.command == "matrix" else args.command
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M")
    out_dir = args.out or os.path.join(REPO, "bench", "results", f"{stamp}-{name}")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "settings.json"), "w") as f:
        json.dump(describe(args, strongsync, flavour), f, indent=2)

    workdir = args.workdir or tempfile.mkdtemp(prefix="strongsync-bench-",
                                               dir=flavour.workdir_parent())
    max_connections = 2000
    if args.command == "memory":
        max_connections = max(max_connections, args.connections + 200)
    # strongsync holds two descriptors per client: the client's socket and the primary's.
    needed = 2 * max_connections + 200
    limit = raise_open_files_limit(needed)
    if limit < needed:
        if args.command == "memory":
            raise BenchError(
                f"this machine allows {limit} open files per process and the hard limit cannot "
                f"be raised here; {args.connections} parked sessions need about {needed - 400} "
                f"in strongsync (a client socket and a primary socket each): use --connections "
                f"{(limit - 600) // 2 // 100 * 100} or raise the limit (ulimit -Hn, as root)")
        print(f"bench: open files limited to {limit} (needs {needed})", flush=True)
    topology = Topology(flavour, workdir, strongsync, relay_bin, max_connections,
                        args.sync_binlog, args.primary_via, args.strongsync_workers,
                        args.server_option)
    topology.proxy.pool_size = args.pool_size
    print(f"bench: servers in {workdir}, results in {out_dir}", flush=True)
    try:
        topology.up()
        if args.command in ("matrix", "profile", "snapshot", "compression", "orm", "tls",
                            "cluster"):
            sysbench.prepare(topology.primary, workloads_of(args), args,
                             os.path.join(out_dir, "sysbench.log"))
        if args.command == "matrix":
            matrix.run(topology, args, out_dir)
        elif args.command == "profile":
            print(json.dumps(profile.run(topology, args, out_dir), indent=2))
        elif args.command == "snapshot":
            tool = os.path.join(os.path.dirname(park_bin), "read-transactions")
            print(snapshot.run(topology, tool, args, out_dir))
        elif args.command == "compression":
            print(compression.run(topology, args, out_dir))
        elif args.command == "orm":
            print(orm.run(topology, args, out_dir))
        elif args.command == "tls":
            print(tls.run(topology, args, out_dir))
        elif args.command == "cluster":
            print(cluster.run(topology, args, out_dir))
        else:
            result = memory.run(topology, park_bin, args.connections, out_dir,
                                args.catchup_timeout)
            print(json.dumps(result, indent=2))
    finally:
        topology.down()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.command == "matrix":
        print(report.write(out_dir))
        if python:
            print(report.chart(out_dir, python))
    return 0
