"""The parked-sessions memory probe: many commits parked in strongsync at once (no replica
acknowledging), the proxy's resident memory measured while they wait, then released."""

import json
import os
import subprocess
import time

from .procs import BenchError, Process, ProcessExited, wait_for
from .topology import APP_PASSWORD, APP_USER


def run(topology, park_bin, connections, out_dir, patience):
    proxy = topology.proxy
    topology.use("strongsync", 0)
    # Made before the replicas stop: a CREATE TABLE through the proxy would park too.
    topology.primary.query(
        "CREATE TABLE sbtest.parked (id INT AUTO_INCREMENT PRIMARY KEY, connection INT)")
    topology.wait_replicas_caught_up(patience)
    # Block, never time out: every commit stays parked until a replica returns.
    proxy.configure(1, on_timeout="block", ack_timeout="1h")
    for replica in topology.replicas:
        replica.query(topology.flavour.stop_receiver)
    wait_for("strongsync seeing no replica", lambda: proxy.metrics().get(
        'strongsync_replicas_connected{kind="semisync"}') == 0.0, patience)
    idle_kib, _ = proxy.process.memory_kib()

    url = (f"mysql://{APP_USER}:{APP_PASSWORD}@127.0.0.1:{proxy.port}/sbtest"
           "?prefer_socket=false")
    park_log = os.path.join(out_dir, "park-sessions.log")
    park = Process("park-sessions", [park_bin, f"--url={url}", f"--connections={connections}"],
                   park_log)
    started = time.monotonic()

    def all_parked():
        if not park.running():
            raise ProcessExited(f"park-sessions exited early: {park.log_tail()}")
        return proxy.metrics().get("strongsync_parked_sessions") == float(connections)
    wait_for(f"{connections} commits parked", all_parked, patience, interval=0.5)
    parked_after_s = time.monotonic() - started
    # Let the allocator settle, then read.
    time.sleep(2)
    rss_kib, hwm_kib = proxy.process.memory_kib()
    metrics = proxy.metrics()

    for replica in topology.replicas:
        replica.query(topology.flavour.start_receiver)
    try:
        park.popen.wait(timeout=patience)
    except subprocess.TimeoutExpired:
        park.stop()
        raise BenchError(f"parked commits not released within {patience}s: {park.log_tail()}")
    tail = park.log_tail()
    if park.popen.returncode != 0 or f"released {connections} ok {connections} failed 0" not in tail:
        raise BenchError(f"park-sessions did not see every commit succeed: {tail}")
    wait_for("no parked session left",
             lambda: proxy.metrics().get("strongsync_parked_sessions") == 0.0, patience)

    result = {
        "connections": connections,
        "rss_idle_kib": idle_kib,
        "rss_parked_kib": rss_kib,
        "rss_peak_kib": hwm_kib,
        "kib_per_parked_session": round((rss_kib - idle_kib) / connections, 2),
        "client_connections_while_parked": metrics.get("strongsync_client_connections"),
        "seconds_to_park_all": round(parked_after_s, 1),
    }
    with open(os.path.join(out_dir, "memory.json"), "w") as f:
        json.dump(result, f, indent=2)
    proxy.configure(1)
    return result
