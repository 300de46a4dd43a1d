"""Processes the bench starts: started in their own session, stopped by pid, measured from /proc."""

import os
import signal
import subprocess
import time


class BenchError(Exception):
    """Something the bench needs did not happen; the message says what and where to look."""


class ProcessExited(BenchError):
    """A process the bench depends on has exited: no point waiting for it any longer."""


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def raise_open_files_limit(needed):
    """The proxy holds two descriptors per client (its side and the primary's); the servers
    one per connection. Raises the limit children inherit to `needed`, past the hard limit
    where the bench may (as root)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, needed)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Process:
    """A child process in its own session, its output in a log file."""

    def __init__(self, name, argv, log_path, env=None):
        self.name = name
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )

    @property
    def pid(self):
        return self.popen.pid

    def running(self):
        return self.popen.poll() is None

    def signal(self, sig):
        if self.running():
            os.kill(self.pid, sig)

    def stop(self, patience=60):
        """SIGTERM, then SIGKILL if it has not exited within `patience` seconds."""
        if not self.running():
            return
        os.kill(self.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=patience)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait()

    def cpu_seconds(self):
        """User plus system CPU time the process has used so far."""
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def memory_kib(self):
        """Resident set size now and at its peak (VmRSS, VmHWM), in KiB."""
        found = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    found[key] = int(value.split()[0])
        return found["VmRSS"], found["VmHWM"]

    def log_tail(self, lines=20):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


def wait_for(what, check, patience, interval=0.1):
    """Polls `check` until it returns a true value, which is returned; BenchError after `patience` s."""
    deadline = time.monotonic() + patience
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except ProcessExited:
            raise
        except (OSError, subprocess.SubprocessError, BenchError, ValueError) as e:
            last_error = e
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    raise BenchError(f"{what} did not happen within {patience}s{detail}")


PORT_TAKEN = "Address already in use"
# Start-ups on a port taken meanwhile, at most, before the bench gives up.
PORT_ATTEMPTS = 5


def free_port():
    """A loopback port nobody listens on now, chosen below the kernel's ephemeral range: the
    kernel hands ports in that range to outgoing connections, and one of those could take the
    port between its choice and its server's bind. Two choices can still meet (the smoke tests
    run benches side by side), so start-ups go through `on_a_free_port`."""
    import random
    import socket

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 0
    below = range(10000, ephemeral_low) if ephemeral_low > 11000 else range(0)
    for _ in range(100 if below else 0):
        port = random.choice(below)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def port_was_taken(log_path, since):
    """Whether the log, from offset `since` (where the last launch began), says a bind failed."""
    try:
        with open(log_path, "rb") as f:
            f.seek(since)
            return PORT_TAKEN.encode() in f.read()
    except OSError:
        return False


def on_a_free_port(what, wait, taken, again):
    """`wait` for a launched process; if it exited because a port chosen for it was taken,
    `again` (new ports, a new launch) and wait once more, up to PORT_ATTEMPTS launches."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        try:
            return wait()
        except ProcessExited:
            if attempt == PORT_ATTEMPTS or not taken():
                raise
        print(f"bench: {what} found its port taken; starting it on another", flush=True)
        again()
