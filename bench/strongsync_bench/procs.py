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


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
