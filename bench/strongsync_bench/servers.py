"""What differs between the servers the bench runs on, behind one seam: MariaDB (the default,
from the host's packages) and MySQL 9.7 (from the Debian sid root deploy/mysql/root builds, run
under chroot). Each flavour says how a server's data directory is made, how it is started and
with which options, how SQL reaches it, and the statements and variable names of its
replication and semisync. Everything else (the topology, the modes, the matrix) is shared and
lives in topology.py."""

import os
import shutil
import subprocess

from .procs import BenchError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SANDBOX = os.path.join(REPO, "deploy", "sandbox")

# The primary's thread handling, a matrix dimension under the same names on both servers:
# MariaDB's own `thread_handling` values; on MySQL `pool-of-threads` is Oracle's thread pool
# (thread_pool.so, loaded at start).
THREAD_HANDLINGS = ["one-thread-per-connection", "pool-of-threads"]
OTPC, POOL = THREAD_HANDLINGS

# Reconnection attempts (one a second) of a MySQL replica's receiver: a day, so that a source
# that goes away for a while (the primary restarted for another thread handling) is reconnected
# to; MySQL's default of 10 gives up after ten seconds.
SOURCE_RETRY_COUNT = 86_400


def _user():
    return os.environ.get("USER") or subprocess.check_output(["id", "-un"], text=True).strip()


class Mariadb:
    """MariaDB from the host's packages: mariadbd, mariadb-install-db, the mariadb client."""

    name = "mariadb"
    MARIADBD = "/usr/sbin/mariadbd"
    # The options every local server shares (the sandbox's and the tests' too).
    SHARED_CNF = os.path.join(SANDBOX, "mariadb.cnf")
    socket_name = "mariadb.sock"
    # Not a mode of MySQL's: innodb_snapshot_isolation is MariaDB's.
    unsupported_modes = ()
    packages = [("/usr/sbin/mariadbd", "mariadb-server"), ("mariadb", "mariadb-client")]

    # Replication and semisync, by what they do.
    stop_replica = "STOP SLAVE"
    stop_receiver = "STOP SLAVE IO_THREAD"
    start_receiver = "START SLAVE IO_THREAD"
    show_replica_status = "SHOW SLAVE STATUS"
    receiver_running = "Slave_IO_Running"
    semisync_clients = "Rpl_semi_sync_master_clients"
    semisync_yes_tx = "Rpl_semi_sync_master_yes_tx"
    semisync_no_tx = "Rpl_semi_sync_master_no_tx"
    binlog_status = "SHOW MASTER STATUS"
    gtid_executed = "SELECT @@gtid_binlog_pos"

    def workdir_parent(self):
        return None  # the system's temporary directory

    def version(self):
        return _out([self.MARIADBD, "--version"])

    def install(self, server):
        # Bootstrap without a binlog, so that nothing from it reaches the replicas.
        install = subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={server.dir}/data",
             f"--user={_user()}", f"--tmpdir={server.dir}/tmp",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            capture_output=True, text=True)
        if install.returncode != 0:
            raise BenchError(f"mariadb-install-db failed for {server.name}: "
                             f"{install.stderr[-2000:]}")

    def config(self, server):
        """my.cnf, with the server's current thread handling. Under pool-of-threads MariaDB's
        defaults stand: thread_pool_max_threads is 65536 in 10.11, far above the bench's
        clients (`check_thread_handling` checks it)."""
        return f"""[mariadbd]
user={_user()}
port={server.port}
socket={server.socket}
datadir={server.dir}/data
tmpdir={server.dir}/tmp
pid-file={server.dir}/mariadb.pid
log_error={server.dir}/error.log
server_id={server.server_id}
!include {self.SHARED_CNF}
[mariadbd]
sync_binlog={server.sync_binlog}
innodb_buffer_pool_size=512M
innodb_log_file_size=256M
max_connections={server.max_connections}
thread_cache_size=1100
rpl_semi_sync_slave_enabled=ON
rpl_semi_sync_master_wait_point=AFTER_SYNC
rpl_semi_sync_master_wait_no_slave=ON
rpl_semi_sync_master_timeout=60000
thread_handling={server.thread_handling}
"""

    def server_argv(self, cnf):
        return [self.MARIADBD, f"--defaults-file={cnf}"]

    def client_argv(self, server, *args, user="root", password=None):
        return ["mariadb", "--no-defaults", f"--socket={server.socket}", f"--user={user}",
                *([f"--password={password}"] if password else []), *args]

    def thread_handling(self, server):
        """What the server reports, checked against what it was started with."""
        reported, max_threads = server.query(
            "SELECT @@thread_handling, @@thread_pool_max_threads").split("\t")
        if reported == POOL and int(max_threads) < server.max_connections:
            # Every client blocked in a wait (a lock, semisync's ACK) holds a pool thread.
            raise BenchError(f"{server.name}: thread_pool_max_threads {max_threads} is below "
                             f"max_connections {server.max_connections}; set it in my.cnf")
        return reported

    def create_accounts(self, app, repl, probe):
        return f"""
            CREATE USER '{app[0]}'@'%' IDENTIFIED BY '{app[1]}';
            GRANT ALL PRIVILEGES ON *.* TO '{app[0]}'@'%';
            CREATE USER '{repl[0]}'@'%' IDENTIFIED BY '{repl[1]}';
            CREATE USER '{probe[0]}'@'%' IDENTIFIED BY '{probe[1]}';
            GRANT REPLICATION SLAVE, REPLICATION CLIENT, SLAVE MONITOR ON *.* TO '{repl[0]}'@'%';"""

    def after_start(self, server, accounts):
        """Whatever a (re)started primary needs before clients log in: nothing here."""

    def set_semisync(self, enabled):
        return f"SET GLOBAL rpl_semi_sync_master_enabled = {'ON' if enabled else 'OFF'}"

    def set_wait_point(self, wait_point):
        return f"SET GLOBAL rpl_semi_sync_master_wait_point = {wait_point}"

    def set_snapshot_isolation(self, enabled):
        return f"SET GLOBAL innodb_snapshot_isolation = {'ON' if enabled else 'OFF'}"

    def replicate_from(self, port, user, password):
        return f"""CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {port},
            MASTER_USER = '{user}', MASTER_PASSWORD = '{password}',
            MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1; START SLAVE"""

    def wait_for_gtid(self, gtid, seconds):
        return f"SELECT MASTER_GTID_WAIT('{gtid}', {seconds})"


class Mysql:
    """MySQL 9.7 from the Debian sid root (deploy/mysql/root builds it or reuses it), run under
    chroot as root: the servers, their files and the client all live inside the root, and the
    paths they are given are paths inside it. GTID auto-positioning; every account
    caching_sha2_password (MySQL 9 has no server-side mysql_native_password)."""

    name = "mysql"
    MYSQLD = "/usr/sbin/mysqld"
    CLIENT = "/usr/bin/mysql"
    # The options every local MySQL server shares (the sandbox's; the tests' match them).
    SHARED_CNF = os.path.join(SANDBOX, "mysql.cnf")
    socket_name = "mysqld.sock"
    unsupported_modes = ("visibility-snapshot",)
    packages = []

    stop_replica = "STOP REPLICA"
    stop_receiver = "STOP REPLICA IO_THREAD"
    start_receiver = "START REPLICA IO_THREAD"
    show_replica_status = "SHOW REPLICA STATUS"
    receiver_running = "Replica_IO_Running"
    semisync_clients = "Rpl_semi_sync_source_clients"
    semisync_yes_tx = "Rpl_semi_sync_source_yes_tx"
    semisync_no_tx = "Rpl_semi_sync_source_no_tx"
    binlog_status = "SHOW BINARY LOG STATUS"
    # The batch client escapes the newline a set of several UUIDs has.
    gtid_executed = "SELECT REPLACE(@@GLOBAL.gtid_executed, '\\n', '')"

    def __init__(self):
        self._root = None
        self._template = None

    @property
    def root(self):
        """The sid root, built on first use (needs root, for debootstrap and chroot)."""
        if self._root is None:
            if os.geteuid() != 0:
                raise BenchError("MySQL runs under chroot from a Debian sid root: run bench/run "
                                 "--server mysql as root")
            done = subprocess.run([os.path.join(REPO, "deploy", "mysql", "root")],
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True)
            lines = done.stdout.strip().splitlines()
            if done.returncode != 0 or not lines:
                raise BenchError(f"deploy/mysql/root could not provide the MySQL 9.7 root: "
                                 f"{done.stderr[-2000:]}")
            root = os.path.realpath(lines[-1])
            if not os.access(root + self.MYSQLD, os.X_OK):
                raise BenchError(f"deploy/mysql/root printed {root}, which holds no {self.MYSQLD}")
            self._root = root
        return self._root

    def inside(self, host_path):
        """A host path under the root, as the chroot sees it."""
        path = os.path.realpath(host_path)
        if not path.startswith(self.root + "/"):
            raise BenchError(f"{host_path} is outside the MySQL root {self.root}: MySQL's "
                             f"files must be under it (--workdir {self.root}/tmp/...)")
        return path[len(self.root):]

    def chrooted(self, program, *args):
        return ["chroot", self.root, program, *args]

    def workdir_parent(self):
        return os.path.join(self.root, "tmp")

    def version(self):
        return _out(self.chrooted(self.MYSQLD, "--version"))

    def install(self, server):
        """A data directory (root@localhost without a password): one initialized once, then
        copied for each server without its auto.cnf (a server keeping another's UUID would be
        refused as its replica). Initialized without a binlog: nothing from it replicates."""
        parent = os.path.dirname(server.dir)
        if self._template is None:
            template = os.path.join(parent, "template")
            os.makedirs(os.path.join(template, "tmp"))
            done = subprocess.run(
                self.chrooted(self.MYSQLD, "--no-defaults", "--initialize-insecure",
                              "--user=root", f"--datadir={self.inside(template)}/data",
                              f"--tmpdir={self.inside(template)}/tmp",
                              "--innodb-redo-log-capacity=256M"),
                stdin=subprocess.DEVNULL, capture_output=True, text=True)
            if done.returncode != 0:
                raise BenchError(f"mysqld --initialize-insecure failed: {done.stderr[-2000:]}")
            os.remove(os.path.join(template, "data", "auto.cnf"))
            shutil.copy(self.SHARED_CNF, os.path.join(parent, "mysql.cnf"))
            self._template = template
        shutil.copytree(os.path.join(self._template, "data"), os.path.join(server.dir, "data"),
                        symlinks=True)

    def config(self, server):
        """my.cnf: the shared options, then the bench's; both semisync plugins on every server
        (the source side stays disabled until a mode enables it; a replica acknowledges
        whatever it replicates from when that asks), and Oracle's thread pool under
        pool-of-threads (it cannot be installed while the server runs)."""
        inside = self.inside(server.dir)
        pool = "plugin-load-add=thread_pool.so\n" if server.thread_handling == POOL else ""
        return f"""[mysqld]
user=root
port={server.port}
socket={inside}/{self.socket_name}
datadir={inside}/data
tmpdir={inside}/tmp
pid-file={inside}/mysqld.pid
log_error={inside}/error.log
server_id={server.server_id}
!include {os.path.dirname(inside)}/mysql.cnf
[mysqld]
sync_binlog={server.sync_binlog}
innodb_buffer_pool_size=512M
innodb_redo_log_capacity=256M
max_connections={server.max_connections}
thread_cache_size=1100
plugin-load-add=semisync_source.so
plugin-load-add=semisync_replica.so
rpl_semi_sync_replica_enabled=ON
rpl_semi_sync_source_wait_point=AFTER_SYNC
rpl_semi_sync_source_wait_no_replica=ON
rpl_semi_sync_source_timeout=60000
{pool}"""

    def server_argv(self, cnf):
        # chroot execs mysqld: the pid the bench holds is the server's.
        return self.chrooted(self.MYSQLD, f"--defaults-file={self.inside(cnf)}")

    def client_argv(self, server, *args, user="root", password=None):
        # The root's own client: --no-defaults must come first.
        return self.chrooted(self.CLIENT, "--no-defaults",
                             f"--socket={self.inside(server.socket)}", f"--user={user}",
                             *([f"--password={password}"] if password else []), *args)

    def thread_handling(self, server):
        """With thread_pool.so loaded MySQL reports `loaded-dynamically`; the plugin's status
        says whether the pool runs. Named as on MariaDB."""
        reported, pool, size = server.query(
            "SELECT @@thread_handling, (SELECT PLUGIN_STATUS FROM information_schema.PLUGINS "
            "WHERE PLUGIN_NAME = 'thread_pool'), "
            "(SELECT VARIABLE_VALUE FROM performance_schema.global_variables "
            "WHERE VARIABLE_NAME = 'thread_pool_size')").split("\t")
        if reported == "loaded-dynamically" and pool == "ACTIVE":
            print(f"bench: {server.name} runs MySQL's thread pool (thread_pool_size {size})",
                  flush=True)
            return POOL
        return reported

    def create_accounts(self, app, repl, probe):
        # The probe reads SHOW BINARY LOG STATUS for visibility = quorum: REPLICATION CLIENT.
        return f"""
            CREATE USER '{app[0]}'@'%' IDENTIFIED WITH caching_sha2_password BY '{app[1]}';
            GRANT ALL PRIVILEGES ON *.* TO '{app[0]}'@'%';
            CREATE USER '{repl[0]}'@'%' IDENTIFIED WITH caching_sha2_password BY '{repl[1]}';
            GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{repl[0]}'@'%';
            CREATE USER '{probe[0]}'@'%' IDENTIFIED WITH caching_sha2_password BY '{probe[1]}';
            GRANT REPLICATION CLIENT ON *.* TO '{probe[0]}'@'%';"""

    def after_start(self, server, accounts):
        """libmariadb (sysbench) cannot fetch the server's RSA key for a full caching_sha2_password
        login in plain text: one login of each account over the Unix socket (where the password
        may go in full) caches it, and the fast path then works over TCP, through strongsync
        too. The cache is lost when the server restarts."""
        for user, password in accounts:
            done = subprocess.run(self.client_argv(server, "-e", "SELECT 1", user=user,
                                                   password=password),
                                  capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise BenchError(f"{server.name}: {user} could not log in over the socket: "
                                 f"{done.stderr.strip()}")

    def set_semisync(self, enabled):
        return f"SET GLOBAL rpl_semi_sync_source_enabled = {'ON' if enabled else 'OFF'}"

    def set_wait_point(self, wait_point):
        return f"SET GLOBAL rpl_semi_sync_source_wait_point = {wait_point}"

    def set_snapshot_isolation(self, enabled):
        # MySQL has no innodb_snapshot_isolation; off is what it does.
        if enabled:
            raise BenchError("MySQL has no innodb_snapshot_isolation")
        return None

    def replicate_from(self, port, user, password):
        # Plain text (strongsync and the relay offer no TLS, and 9.7 asks for it by default);
        # the server's RSA key for caching_sha2_password's full login.
        return f"""CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = {port},
            SOURCE_USER = '{user}', SOURCE_PASSWORD = '{password}', SOURCE_AUTO_POSITION = 1,
            SOURCE_SSL = 0, GET_SOURCE_PUBLIC_KEY = 1, SOURCE_CONNECT_RETRY = 1,
            SOURCE_RETRY_COUNT = {SOURCE_RETRY_COUNT}; START REPLICA"""

    def wait_for_gtid(self, gtid, seconds):
        return f"SELECT WAIT_FOR_EXECUTED_GTID_SET('{gtid}', {seconds})"


FLAVOURS = {"mariadb": Mariadb, "mysql": Mysql}


def flavour(name):
    return FLAVOURS[name]()


def _out(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"
