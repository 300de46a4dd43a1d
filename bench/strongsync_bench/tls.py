"""What TLS costs on each leg, side by side in one run: connecting (a new connection per event,
`connect.lua`: the handshakes and the login) and point selects, straight to the primary plain
and with TLS (the reference), and through strongsync (passthrough) with its client leg and its
primary leg each plain or TLS. Per case the rate, and strongsync's CPU per query. Run it on
MySQL (`--server mysql`), whose primary offers TLS from its first start."""

import os
import shutil
import statistics
import subprocess
import tempfile

from . import sysbench
from .procs import BenchError
from .report import write_side_by_side
from .sysbench import BENCH_DIR

MODE = "passthrough"
CONNECT = os.path.join(BENCH_DIR, "connect.lua")
WORKLOADS = {"connect": [CONNECT], "point_select": ["oltp_point_select"]}
# name: (the client leg's TLS, strongsync's primary_tls; None: straight to the primary)
CASES = {
    "direct": (False, None),
    "direct-tls": (True, None),
    "plain": (False, "disabled"),
    "client-tls": (True, "disabled"),
    "primary-tls": (False, "required"),
    "both-tls": (True, "required"),
}
REFERENCE = "plain"


def run(topology, args, out_dir):
    tables = sysbench.tables_for("point_select", args)
    log = os.path.join(out_dir, "sysbench.log")
    proxy = topology.proxy
    # One authority for every certificate: MySQL's own, made at its first start (sysbench's
    # `--mysql-ssl` takes client-key.pem, client-cert.pem and cacert.pem from its working
    # directory). strongsync serves the primary's own certificate (RSA 2048) with `--server-key
    # rsa`, or an ECDSA P-256 one that authority signs, the kind strongsync makes itself.
    data = os.path.join(topology.primary.dir, "data")
    client_dir = tempfile.mkdtemp(prefix="strongsync-bench-tls-")
    for name, source in (("client-key.pem", "client-key.pem"),
                         ("client-cert.pem", "client-cert.pem"), ("cacert.pem", "ca.pem")):
        shutil.copy(os.path.join(data, source), os.path.join(client_dir, name))
    if args.server_key == "rsa":
        proxy.tls_files = (os.path.join(data, "server-cert.pem"),
                           os.path.join(data, "server-key.pem"))
    else:
        proxy.tls_files = ecdsa_certificate(data, client_dir)
    proxy.stop()
    proxy.start(None)
    topology.use(MODE, 0)
    try:
        runs = rounds(topology, args, tables, log, client_dir)
    finally:
        shutil.rmtree(client_dir, ignore_errors=True)
    return write_side_by_side(out_dir, runs, lambda r: summary(r, args))


def ecdsa_certificate(data, out):
    """An ECDSA P-256 certificate for 127.0.0.1 and its key, in `out`, signed by the authority
    in MySQL's data directory `data`."""
    key, csr, cert = (os.path.join(out, n) for n in ("ecdsa-key.pem", "ecdsa.csr", "ecdsa.pem"))
    # A version 3 certificate (rustls takes no other), for the address sysbench dials.
    ext = os.path.join(out, "ecdsa.ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n")
    steps = [
        ["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        ["openssl", "x509", "-req", "-in", csr, "-CA", os.path.join(data, "ca.pem"),
         "-CAkey", os.path.join(data, "ca-key.pem"), "-CAcreateserial", "-days", "2",
         "-extfile", ext, "-out", cert],
    ]
    for argv in steps:
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchError(f"{' '.join(argv[:2])}: {done.stderr.strip()}")
    return cert, key


def rounds(topology, args, tables, log, client_dir):
    """Every case and workload in turn, `args.rounds` times."""
    proxy = topology.proxy
    runs = []
    # Rounds outermost, the cases in turn, so that drift hits each alike.
    for round_no in range(args.rounds):
        for case, (client_tls, primary_tls) in CASES.items():
            if primary_tls is not None and primary_tls != proxy.primary_tls:
                proxy.primary_tls = primary_tls
                proxy.stop()
                proxy.start(None)
            port = topology.client_port(MODE) if primary_tls else topology.primary.port
            for workload, script in WORKLOADS.items():
                argv = ["sysbench", *script, *sysbench.common_args(port, tables),
                        f"--threads={args.threads}", f"--time={args.time}",
                        "--report-interval=0", "--db-ps-mode=auto",
                        f"--mysql-ssl={'on' if client_tls else 'off'}", "run"]
                cpu_before = proxy.process.cpu_seconds() if primary_tls else None
                done = subprocess.run(argv, capture_output=True, text=True, cwd=client_dir)
                with open(log, "a") as f:
                    f.write(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}\n")
                if done.returncode != 0:
                    raise BenchError(f"{case} {workload}: sysbench failed: see {log}")
                report = sysbench.parse(done.stdout)
                cpu_us = None
                if cpu_before is not None and report.queries:
                    cpu_us = (proxy.process.cpu_seconds() - cpu_before) * 1e6 / report.queries
                row = dict(round=round_no, case=case, workload=workload, qps=report.qps,
                           p95_ms=report.p95_ms, proxy_cpu_us_per_query=cpu_us)
                print(f"bench: {row}", flush=True)
                runs.append(row)
    return runs


def summary(runs, args):
    """Medians per case and workload, with each case's rate against strongsync in plain."""
    def median(case, workload, key):
        values = [r[key] for r in runs
                  if r["case"] == case and r["workload"] == workload and r[key] is not None]
        return statistics.median(values) if values else None

    lines = [
        f"# What TLS costs on each leg ({args.threads} threads, {args.rounds} round(s) of "
        f"{args.time} s, medians; strongsync's certificate: {args.server_key.upper()})",
        "",
        "*connect* opens a new connection per query (`bench/connect.lua`); its rate is logins "
        "a second. CPU is strongsync's, per query.",
        "",
        f"| workload | case | client leg | primary leg | per second | p95 ms "
        f"| strongsync CPU µs/query | ÷ {REFERENCE} |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for workload in WORKLOADS:
        reference = median(REFERENCE, workload, "qps")
        for case, (client_tls, primary_tls) in CASES.items():
            qps = median(case, workload, "qps")
            cpu = median(case, workload, "proxy_cpu_us_per_query")
            primary_leg = "—" if primary_tls is None else (
                "plain" if primary_tls == "disabled" else "TLS")
            lines.append(
                f"| {workload} | {case} | {'TLS' if client_tls else 'plain'} | {primary_leg} "
                f"| {qps:,.0f} | {median(case, workload, 'p95_ms'):.2f} "
                f"| {'—' if cpu is None else f'{cpu:.1f}'} | {qps / reference:.2f} |")
    return "\n".join(lines) + "\n"
