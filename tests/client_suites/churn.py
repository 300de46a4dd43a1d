"""Clients without state that share the pool of a client library's test suite while it runs.

Each logs in as the suite's connections do (same library, account, schema and options), so its
connection joins their pool, and runs stateless statements until told to stop: the suite's
clients then run on connections these gave back, and these on the suite's. Each answer must be
the state its session started with; anything else is a session's state that leaked into the
pool. One more client changes its character set after its login (`CHANGES`): it must see its
change at every statement, and the others never. Exits 1 naming the first leak or error, 0 after `STOP_FILE` appears.

Environment: CHURN_LIBRARY (aiomysql or mysqlclient), CHURNERS, STOP_FILE; for aiomysql
MYSQL_HOST, MYSQL_PORT, MYSQL_ROOT_PASSWORD and MYSQL_DB, as its suite's conftest reads them;
for mysqlclient TESTDB, the option file its suite reads.
"""

import asyncio
import itertools
import os
import ssl
import sys
import threading
import time

# What a fresh connection sees; the suite changes each of these in some session of its own.
# (Read by names both servers know: the isolation level's differ.)
STATE = ("SELECT DATABASE(), @@session.autocommit, @@session.sql_mode, @@session.time_zone, "
         "@@session.character_set_results, @@session.sql_select_limit, @@session.max_join_size, "
         "@@session.collation_connection")


# Statements each client runs at least, stop or not: enough for the clients to cross each
# other's connections many times (a pool of two for five of them).
MINIMUM = 1000

# What one more client changes of its session after its login: it must keep a connection of
# its own (where it sees its change at every statement), and no other client may see it.
CHANGES = "SET NAMES latin1"


def aiomysql_params():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return dict(host=os.environ["MYSQL_HOST"], port=int(os.environ["MYSQL_PORT"]), user="root",
                password=os.environ["MYSQL_ROOT_PASSWORD"], db=os.environ["MYSQL_DB"],
                local_infile=True, use_unicode=True, ssl=ctx, autocommit=True)


async def aiomysql_connect():
    """Logs in once the suite has made its database (its first step drops and remakes it)."""
    import aiomysql
    while True:
        try:
            return await aiomysql.connect(**aiomysql_params())
        except aiomysql.OperationalError as e:
            if e.args[0] != 1049:  # unknown database: not made yet
                raise
            await asyncio.sleep(0.05)


def check(seen, fresh):
    if seen != fresh:
        raise AssertionError(f"a session's state leaked into the pool: {seen} after {fresh}")


async def aiomysql_churn(stop, counts, changes=None):
    conn = await aiomysql_connect()
    async with conn.cursor() as cur:
        if changes:
            await cur.execute(changes)
        await cur.execute(STATE)
        fresh = await cur.fetchone()
        for done in itertools.count():
            if done >= MINIMUM and os.path.exists(stop):
                break
            await cur.execute(STATE)
            check(await cur.fetchone(), fresh)
            counts[0] += 1
            await asyncio.sleep(0.002)
    conn.close()


def mysqlclient_churn(stop, counts, failures, changes=None):
    import MySQLdb
    try:
        conn = MySQLdb.connect(read_default_file=os.environ["TESTDB"],
                               read_default_group="MySQLdb-tests", autocommit=True)
        cur = conn.cursor()
        if changes:
            cur.execute(changes)
        cur.execute(STATE)
        fresh = cur.fetchone()
        for done in itertools.count():
            if done >= MINIMUM and os.path.exists(stop):
                break
            cur.execute(STATE)
            check(cur.fetchone(), fresh)
            counts[0] += 1
            time.sleep(0.002)
        conn.close()
    except Exception as e:  # noqa: BLE001: handed to the main thread
        failures.append(e)


async def main():
    counts = [0]
    stop = os.environ["STOP_FILE"]
    churners = int(os.environ["CHURNERS"])
    if os.environ["CHURN_LIBRARY"] == "mysqlclient":
        failures = []
        threads = [threading.Thread(target=mysqlclient_churn, args=(stop, counts, failures))
                   for _ in range(churners)]
        threads.append(threading.Thread(target=mysqlclient_churn,
                                        args=(stop, counts, failures, CHANGES)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failures:
            raise failures[0]
    else:
        await asyncio.gather(*(aiomysql_churn(stop, counts) for _ in range(churners)),
                             aiomysql_churn(stop, counts, CHANGES))
    print(f"churn: {counts[0]} statements, each client saw only its own state", flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001: any failure is the churn's verdict
        print(f"churn: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
