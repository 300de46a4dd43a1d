"""The benchmark's servers: a primary and two replicas (MariaDB, or MySQL 9.7: servers.py holds
what differs), strongsync, HAProxy (where a mode needs it) and the delay relay, and how they are
wired for each mode."""

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

from .procs import (BenchError, Process, ProcessExited, free_port, log_size, on_a_free_port,
                    port_was_taken, wait_for)
from .servers import THREAD_HANDLINGS

APP_USER, APP_PASSWORD = "app", "app-secret"
REPL_USER, REPL_PASSWORD = "repl", "repl-secret"
# strongsync's own account (the probe), no privileges.
PROBE_USER, PROBE_PASSWORD = "strongsync_probe", "probe-secret"
PATIENCE = 120

# What each mode is. `proxy`: what clients connect to (None: the primary itself);
# `replicas_via_proxy`: replicas replicate from strongsync; `semisync`: the server's own semisync
# on the primary, waiting at `wait_point`; `quorum`: commits wait for this many replicas in
# strongsync (None: never wait); `visibility`: strongsync's `visibility` (default "commit");
# `snapshot_isolation`: the primary's `innodb_snapshot_isolation` (default OFF, MariaDB's).
# Reports list the modes in this order.
MODES = {
    "async": dict(proxy=None, replicas_via_proxy=False, semisync=False, wait_point=None,
                  quorum=None),
    "semisync": dict(proxy=None, replicas_via_proxy=False, semisync=True,
                     wait_point="AFTER_SYNC", quorum=None),
    "semisync-after-commit": dict(proxy=None, replicas_via_proxy=False, semisync=True,
                                  wait_point="AFTER_COMMIT", quorum=None),
    "strongsync": dict(proxy="strongsync", replicas_via_proxy=True, semisync=False,
                       wait_point=None, quorum=1),
    "passthrough": dict(proxy="strongsync", replicas_via_proxy=True, semisync=False,
                        wait_point=None, quorum=None),
    "strongsync-q2": dict(proxy="strongsync", replicas_via_proxy=True, semisync=False,
                          wait_point=None, quorum=2),
    # Strong sync with `[sharing]` on: clients without state share a pool of connections to
    # the primary (docs/sharing.md). Prepared statements pin a session: run it with
    # `--ps-mode disable` to measure the sharing.
    "strongsync-shared": dict(proxy="strongsync", replicas_via_proxy=True, semisync=False,
                              wait_point=None, quorum=1, sharing=True),
    # strongsync's read barrier: no response reveals what the quorum does not hold, the
    # guarantee of semisync AFTER_SYNC.
    "visibility-quorum": dict(proxy="strongsync", replicas_via_proxy=True, semisync=False,
                              wait_point=None, quorum=1, visibility="quorum"),
    # The same with innodb_snapshot_isolation = ON: a transaction's reads are bounded once, by
    # its snapshot.
    "visibility-snapshot": dict(proxy="strongsync", replicas_via_proxy=True, semisync=False,
                                wait_point=None, quorum=1, visibility="snapshot",
                                snapshot_isolation=True),
    # A plain TCP proxy on the same leg to the primary: what the hop costs without strongsync's
    # protocol work. Replicas replicate from the primary, asynchronously, as in `async`.
    "haproxy": dict(proxy="haproxy", replicas_via_proxy=False, semisync=False, wait_point=None,
                    quorum=None),
}


class Server:
    """One server (its flavour says which kind: servers.py) in its own directory, on its own
    port."""

    def __init__(self, flavour, root, name, server_id, max_connections, sync_binlog,
                 options=()):
        self.flavour = flavour
        self.name = name
        self.dir = os.path.join(root, name)
        self.server_id = server_id
        self.port = free_port()
        self.socket = os.path.join(self.dir, flavour.socket_name)
        self.max_connections = max_connections
        self.sync_binlog = sync_binlog
        # NAME=VALUE lines written after the bench's own options (--server-option).
        self.options = list(options)
        self.thread_handling = THREAD_HANDLINGS[0]
        # Accounts to prepare after every (re)start (`Flavour.after_start`).
        self.accounts = []
        self.process = None

    def start(self):
        # Each server its own tmpdir: a server started after a crash deletes every #sql* file
        # in its tmpdir, other servers' temporary tables included (deploy/sandbox/mariadb.cnf).
        os.makedirs(os.path.join(self.dir, "tmp"))
        self.flavour.install(self)
        self.launch()

    def launch(self):
        cnf = os.path.join(self.dir, "my.cnf")
        with open(cnf, "w") as f:
            f.write(self.flavour.config(self))
            # Later lines of a section win: the caller's options override the bench's.
            f.write("".join(f"{option}\n" for option in self.options))
        self.log_offset = log_size(self.error_log)
        self.process = Process(self.name, self.flavour.server_argv(cnf),
                               os.path.join(self.dir, "stderr.log"))

    @property
    def error_log(self):
        return os.path.join(self.dir, "error.log")

    def wait_started(self):
        """`wait_ready` after the first launch, which may find its port taken: then on another
        port. (A restart keeps its port: replicas point at it.)"""
        def again():
            self.port = free_port()
            self.launch()
        on_a_free_port(self.name, self.wait_ready,
                       lambda: port_was_taken(self.error_log, self.log_offset), again)

    def restart(self, thread_handling):
        """Stops the server (SIGTERM, by pid) and starts it again with `thread_handling`, which
        cannot be changed while it runs. Returns the thread handling the server reports."""
        self.stop()
        self.thread_handling = thread_handling
        self.launch()
        self.wait_ready()
        self.flavour.after_start(self, self.accounts)
        reported = self.flavour.thread_handling(self)
        if reported != thread_handling:
            raise BenchError(f"{self.name} restarted with thread_handling={thread_handling} "
                             f"but reports {reported}: {self.error_log_tail()}")
        return reported

    def wait_ready(self):
        def answers():
            if not self.process.running():
                raise ProcessExited(f"{self.name} exited: {self.error_log_tail()}")
            return self.query("SELECT 1") == "1"
        wait_for(f"{self.name} accepting connections", answers, PATIENCE)

    def error_log_tail(self):
        try:
            with open(self.error_log, errors="replace") as f:
                return "".join(f.readlines()[-10:])
        except OSError:
            return "(no error log)"

    def query(self, sql, timeout=PATIENCE):
        """Runs `sql` as root over the socket; the output, tab-separated, without headers."""
        done = subprocess.run(
            self.flavour.client_argv(self, "--batch", "--skip-column-names", "-e", sql),
            capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise BenchError(f"{self.name}: {sql!r} failed: {done.stderr.strip()}")
        return done.stdout.strip()

    def status(self, variable):
        out = self.query(f"SHOW GLOBAL STATUS LIKE '{variable}'")
        return out.split("\t")[1] if out else None

    def replica_status(self, field):
        """One field of SHOW SLAVE STATUS (MySQL: SHOW REPLICA STATUS)."""
        done = subprocess.run(
            self.flavour.client_argv(self, "--vertical", "-e", self.flavour.show_replica_status),
            capture_output=True, text=True, timeout=PATIENCE)
        for line in done.stdout.splitlines():
            key, _, value = line.strip().partition(": ")
            if key == field:
                return value
        return None

    def stop(self):
        if self.process:
            self.process.stop()


class Strongsync:
    """The proxy under test, configured by a file it re-reads on SIGHUP."""

    def __init__(self, root, binary, primary_address, max_connections, workers=None):
        self.binary = binary
        self.workers = workers
        self.port = free_port()
        self.admin_port = free_port()
        self.primary_address = primary_address
        self.max_connections = max_connections
        self.config_path = os.path.join(root, "strongsync.toml")
        self.log_path = os.path.join(root, "strongsync.log")
        self.process = None
        self.settings = None
        self.primary_tls = "disabled"
        # (certificate, key) for the client leg; None: the one strongsync makes.
        self.tls_files = None
        # etcd endpoints: strongsync as one of a cluster (`bench/run cluster`).
        self.cluster_endpoints = None
        # sharing.pool_size when `[sharing]` is on (a reload turns it on for the logins that
        # follow).
        self.pool_size = 32

    def write_config(self, quorum, on_timeout, ack_timeout, visibility, sharing=False):
        passthrough = quorum is None
        with open(self.config_path, "w") as f:
            f.write(f"""listen = "127.0.0.1:{self.port}"
primary = "{self.primary_address}"
admin_listen = "127.0.0.1:{self.admin_port}"
log_level = "warn"
# Like for like: the references (direct, HAProxy) reach the primary in plain TCP. `bench/run
# tls` measures what TLS costs.
primary_tls = "{self.primary_tls}"
{f"worker_threads = {self.workers}" if self.workers else ""}
shutdown_grace = "5s"

[durability]
quorum = {quorum or 1}
passthrough = {str(passthrough).lower()}
ack_timeout = "{ack_timeout}"
on_timeout = "{on_timeout}"
visibility = "{visibility}"

[limits]
max_connections = {self.max_connections}

[probe]
user = "{PROBE_USER}"
password = "{PROBE_PASSWORD}"

[sharing]
enabled = {str(sharing).lower()}
pool_size = {self.pool_size}
""")
            if self.cluster_endpoints:
                endpoints = ", ".join(f'"{e}"' for e in self.cluster_endpoints)
                f.write(f"""
[cluster]
endpoints = [{endpoints}]
prefix = "/strongsync/bench"
name = "bench"
advertise = "127.0.0.1:{self.port}"
""")
            if self.tls_files:
                f.write(f"""
[tls]
cert = "{self.tls_files[0]}"
key = "{self.tls_files[1]}"
""")
        self.settings = (quorum, on_timeout, ack_timeout, visibility, sharing)

    def start(self, quorum, on_timeout="degrade", ack_timeout="60s", visibility="commit",
              sharing=False):
        self.write_config(quorum, on_timeout, ack_timeout, visibility, sharing)
        self.launch()

        def again():
            self.port, self.admin_port = free_port(), free_port()
            self.write_config(quorum, on_timeout, ack_timeout, visibility, sharing)
            self.launch()
        on_a_free_port("strongsync", lambda: wait_for("strongsync's admin port answering",
                                                      lambda: self.metrics() is not None,
                                                      PATIENCE),
                       lambda: port_was_taken(self.log_path, self.log_offset), again)

    def launch(self):
        self.log_offset = log_size(self.log_path)
        # Only the bench's file configures it: a STRONGSYNC_* variable of the caller's
        # (STRONGSYNC_SHARING_ENABLED, say) would override it and measure another mode.
        env = {k: v for k, v in os.environ.items() if not k.startswith("STRONGSYNC_")}
        self.process = Process("strongsync", [self.binary, "--config", self.config_path],
                               self.log_path, env=env)

    def configure(self, quorum, on_timeout="degrade", ack_timeout="60s", visibility="commit",
                  sharing=False):
        """Applies new durability and sharing settings through a reload (SIGHUP), waiting
        until they show."""
        if self.settings == (quorum, on_timeout, ack_timeout, visibility, sharing):
            return
        self.write_config(quorum, on_timeout, ack_timeout, visibility, sharing)
        self.process.signal(signal.SIGHUP)
        passthrough = 1.0 if quorum is None else 0.0
        barrier = 0.0 if visibility == "commit" else 1.0

        def applied():
            m = self.metrics()
            return (m.get("strongsync_passthrough") == passthrough
                    and m.get("strongsync_visibility_quorum") == barrier
                    and (quorum is None or m.get("strongsync_quorum") == float(quorum))
                    and self.sharing_on() == sharing)
        wait_for("strongsync applying the reloaded configuration", applied, PATIENCE)

    def get(self, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metrics(self):
        """The /metrics samples, by name with labels as written, e.g.
        'strongsync_commits_released_total{outcome="quorum"}'."""
        if not self.process.running():
            raise ProcessExited(f"strongsync exited: {self.process.log_tail()}")
        try:
            _, text = self.get("/metrics")
        except OSError:
            return None
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def sharing_on(self):
        """Whether logins share connections now (`/status` has a `sharing` object then)."""
        status, body = self.get("/status")
        return status == 200 and json.loads(body).get("sharing") is not None

    def ready(self):
        status, _ = self.get("/readyz")
        return status == 200

    def stop(self):
        if self.process:
            self.process.stop()


class Haproxy:
    """HAProxy in TCP mode: the reference for what a proxy hop costs when it only moves bytes.
    Same leg to the primary as strongsync, two threads (HAProxy's own default here: one per
    CPU), no logging, timeouts no run reaches."""

    def __init__(self, root, primary_address, maxconn):
        self.port = free_port()
        self.primary_address = primary_address
        self.maxconn = maxconn
        self.config_path = os.path.join(root, "haproxy.cfg")
        self.log_path = os.path.join(root, "haproxy.log")
        self.process = None

    def write_config(self):
        # An absolute path in a server line is a Unix socket.
        with open(self.config_path, "w") as f:
            f.write(f"""global
    nbthread 2
    maxconn {self.maxconn}

defaults
    mode tcp
    maxconn {self.maxconn}
    timeout connect 5s
    timeout client 1h
    timeout server 1h

listen mariadb
    bind 127.0.0.1:{self.port}
    server primary {self.primary_address}
""")

    def start(self):
        def launch():
            self.write_config()
            self.log_offset = log_size(self.log_path)
            self.process = Process("haproxy", ["haproxy", "-db", "-f", self.config_path],
                                   self.log_path)

        def listening():
            if not self.process.running():
                raise ProcessExited(f"haproxy exited: {self.process.log_tail()}")
            return _listening(self.port)

        def again():
            self.port = free_port()
            launch()
        launch()
        on_a_free_port("haproxy", lambda: wait_for("haproxy listening", listening, PATIENCE),
                       lambda: port_was_taken(self.log_path, self.log_offset), again)

    def running(self):
        return self.process is not None and self.process.running()

    def stop(self):
        if self.process:
            self.process.stop()


class Relay:
    """The delay relay (bench/src/relay.rs): one process, a route per upstream."""

    def __init__(self, root, binary):
        self.binary = binary
        self.log_path = os.path.join(root, "delay-relay.log")
        self.process = None
        self.delay_ms = None
        self.ports = {}

    def start(self, delay_ms, upstreams):
        """Relays to each of `upstreams` (name -> port) with `delay_ms` each way."""
        self.stop()

        def launch():
            self.ports = {name: free_port() for name in upstreams}
            argv = [self.binary, f"--delay={delay_ms}ms"]
            for name, upstream in upstreams.items():
                argv.append(f"--route=127.0.0.1:{self.ports[name]}=127.0.0.1:{upstream}")
            self.log_offset = log_size(self.log_path)
            self.process = Process("delay-relay", argv, self.log_path)

        def listening(port):
            if not self.process.running():
                raise ProcessExited(f"the delay relay exited: {self.process.log_tail()}")
            return _listening(port)

        def all_listening():
            for port in self.ports.values():
                wait_for(f"the delay relay listening on {port}", lambda p=port: listening(p),
                         PATIENCE)
        launch()
        on_a_free_port("the delay relay", all_listening,
                       lambda: port_was_taken(self.log_path, self.log_offset), launch)
        self.delay_ms = delay_ms

    def stop(self):
        if self.process:
            self.process.stop()
        self.process = None
        self.delay_ms = None


def _listening(port):
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Topology:
    """Primary, two replicas, strongsync, HAProxy (started on first use) and (with a delay) the
    relay between the replicas and whatever they replicate from."""

    def __init__(self, flavour, root, strongsync_bin, relay_bin, max_connections=2000,
                 sync_binlog=0, primary_via="socket", strongsync_workers=None,
                 server_options=()):
        self.root = root
        self.flavour = flavour
        self.primary = Server(flavour, root, "primary", 1, max_connections, sync_binlog,
                              server_options)
        self.replicas = [Server(flavour, root, f"replica{i}", 1 + i, max_connections,
                                sync_binlog, server_options) for i in (1, 2)]
        # strongsync is a sidecar: beside the primary it reaches it over its Unix socket.
        self.primary_via = primary_via
        primary_address = self.primary_address()
        self.proxy = Strongsync(root, strongsync_bin, primary_address, max_connections + 100,
                                strongsync_workers)
        self.haproxy = Haproxy(root, primary_address, max_connections + 100)
        self.relay = Relay(root, relay_bin)
        self.mode = None
        self.delay_ms = None
        self.wait_point = None
        self.snapshot_isolation = None
        # What the primary reports, read after every (re)start.
        self.thread_handling = None

    def primary_address(self):
        return (self.primary.socket if self.primary_via == "socket"
                else f"127.0.0.1:{self.primary.port}")

    @property
    def servers(self):
        return [self.primary, *self.replicas]

    def up(self):
        for server in self.servers:
            server.start()
        for server in self.servers:
            server.wait_started()
        if self.primary_via != "socket":  # the primary's port is known now
            self.proxy.primary_address = self.haproxy.primary_address = self.primary_address()
        accounts = [(APP_USER, APP_PASSWORD), (REPL_USER, REPL_PASSWORD),
                    (PROBE_USER, PROBE_PASSWORD)]
        self.primary.query(self.flavour.create_accounts(*accounts) + "CREATE DATABASE sbtest;")
        self.primary.accounts = accounts
        self.flavour.after_start(self.primary, accounts)
        self.thread_handling = self.flavour.thread_handling(self.primary)
        self.proxy.start(quorum=1)

    def down(self):
        for part in (self.proxy, self.haproxy, self.relay, *self.servers):
            try:
                part.stop()
            except Exception as e:  # keep stopping the others
                print(f"bench: stopping {part}: {e}")

    def proxy_for(self, mode):
        """The proxy clients go through in `mode` (strongsync or HAProxy), or None."""
        return {"strongsync": self.proxy, "haproxy": self.haproxy, None: None}[
            MODES[mode]["proxy"]]

    def client_port(self, mode):
        proxy = self.proxy_for(mode)
        return proxy.port if proxy else self.primary.port

    def set_thread_handling(self, thread_handling):
        """Restarts the primary if it runs with another thread handling. Replicas (connect retry
        1 s) and strongsync reconnect by themselves; the semisync settings made with SET GLOBAL
        are gone, so the next `use` wires everything again."""
        if thread_handling == self.thread_handling:
            return
        print(f"bench: restarting the primary with thread_handling={thread_handling}",
              flush=True)
        self.thread_handling = self.primary.restart(thread_handling)
        self.mode = None
        self.wait_point = None
        self.snapshot_isolation = None

    def use(self, mode, delay_ms):
        """Wires everything for `mode` with replicas `delay_ms` away, and waits until the
        replicas are connected the way the mode needs."""
        spec = MODES[mode]
        if delay_ms != self.delay_ms:
            if delay_ms > 0:
                self.relay.start(delay_ms, {"primary": self.primary.port, "proxy": self.proxy.port})
            else:
                self.relay.stop()
            self.delay_ms = delay_ms
            self.mode = None  # the replicas' upstream ports changed
        if spec["proxy"] == "strongsync":
            self.proxy.configure(spec["quorum"], visibility=spec.get("visibility", "commit"),
                                 sharing=spec.get("sharing", False))
        elif spec["proxy"] == "haproxy" and not self.haproxy.running():
            self.haproxy.start()
        previous = MODES[self.mode] if self.mode else None
        rewire = (previous is None or previous["replicas_via_proxy"] != spec["replicas_via_proxy"]
                  or previous["semisync"] != spec["semisync"])
        if rewire:
            for replica in self.replicas:
                replica.query(self.flavour.stop_replica)
            self.primary.query(self.flavour.set_semisync(spec["semisync"]))
            upstream = "proxy" if spec["replicas_via_proxy"] else "primary"
            if delay_ms > 0:
                port = self.relay.ports[upstream]
            else:
                port = self.proxy.port if upstream == "proxy" else self.primary.port
            for replica in self.replicas:
                replica.query(self.flavour.replicate_from(port, REPL_USER, REPL_PASSWORD))
        if spec["wait_point"] and spec["wait_point"] != self.wait_point:
            # Dynamic: applies from the next commit on.
            self.primary.query(self.flavour.set_wait_point(spec["wait_point"]))
            self.wait_point = spec["wait_point"]
        snapshot_isolation = spec.get("snapshot_isolation", False)
        if snapshot_isolation != self.snapshot_isolation:
            # Sessions take it when they connect: every run connects anew.
            sql = self.flavour.set_snapshot_isolation(snapshot_isolation)
            if sql:
                self.primary.query(sql)
            self.snapshot_isolation = snapshot_isolation
        self.mode = mode
        self.wait_replicas_connected(spec)

    def wait_replicas_connected(self, spec):
        if spec["replicas_via_proxy"]:
            semisync_replicas = 'strongsync_replicas_connected{kind="semisync"}'
            wait_for("both replicas connected to strongsync with semisync",
                     lambda: self.proxy.metrics().get(semisync_replicas) == 2.0
                     and self.proxy.ready(), PATIENCE)
        elif spec["semisync"]:
            wait_for("both replicas connected to the primary with semisync",
                     lambda: self.primary.status(self.flavour.semisync_clients) == "2", PATIENCE)
        else:
            for replica in self.replicas:
                wait_for(f"{replica.name} replicating from the primary",
                         lambda r=replica: r.replica_status(self.flavour.receiver_running) == "Yes",
                         PATIENCE)

    def wait_replicas_caught_up(self, patience):
        """Waits until both replicas have applied everything the primary has (so a run starts
        on a quiet machine), and returns how long that took."""
        started = time.monotonic()
        gtid = self.primary.query(self.flavour.gtid_executed)
        for replica in self.replicas:
            if replica.query(self.flavour.wait_for_gtid(gtid, patience),
                             timeout=patience + 30) != "0":
                raise BenchError(f"{replica.name} did not apply up to {gtid} within {patience}s")
        return time.monotonic() - started

    def purge_binlogs(self):
        """Keeps the primary's disk use bounded; called when every replica has caught up."""
        self.primary.query("FLUSH BINARY LOGS")
        current = self.primary.query(self.flavour.binlog_status).split("\t")[0]
        self.primary.query(f"PURGE BINARY LOGS TO '{current}'")
