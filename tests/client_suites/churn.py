"""Clients without state that share the pool of a client library's test suite while it runs.

Each logs in as the suite's connections do (same library, account, schema and options), so its
connection joins their pool, and runs stateless statements until told to stop: the suite's
clients then run on connections these gave back, and these on the suite's. Each answer must be
the state every fresh connection starts with; anything else is a session's state that leaked
into the pool. Exits 1 naming the first leak or error, 0 after `STOP_FILE` appears.

Environment: MYSQL_HOST, MYSQL_PORT, MYSQL_ROOT_PASSWORD, MYSQL_DB, CHURNERS, STOP_FILE.
"""

import asyncio
import os
import ssl
import sys

import aiomysql

# What a fresh connection sees; the suite changes each of these in some session of its own.
STATE = ("SELECT DATABASE(), @@session.autocommit, @@session.sql_mode, @@session.time_zone, "
         "@@session.character_set_results, @@session.sql_select_limit, @@session.max_join_size, "
         "@@session.tx_isolation")


def params():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return dict(host=os.environ["MYSQL_HOST"], port=int(os.environ["MYSQL_PORT"]), user="root",
                password=os.environ["MYSQL_ROOT_PASSWORD"], db=os.environ["MYSQL_DB"],
                local_infile=True, use_unicode=True, ssl=ctx, autocommit=True)


async def connect():
    """Logs in once the suite has made its database (its first step drops and remakes it)."""
    while True:
        try:
            return await aiomysql.connect(**params())
        except aiomysql.OperationalError as e:
            if e.args[0] != 1049:  # unknown database: not made yet
                raise
            await asyncio.sleep(0.05)


async def churn(stop, counts):
    conn = await connect()
    async with conn.cursor() as cur:
        await cur.execute(STATE)
        fresh = await cur.fetchone()
        while not os.path.exists(stop):
            await cur.execute(STATE)
            seen = await cur.fetchone()
            if seen != fresh:
                raise AssertionError(f"a session's state leaked into the pool: {seen} after {fresh}")
            counts[0] += 1
            await asyncio.sleep(0.002)
    conn.close()


async def main():
    counts = [0]
    stop = os.environ["STOP_FILE"]
    await asyncio.gather(*(churn(stop, counts) for _ in range(int(os.environ["CHURNERS"]))))
    print(f"churn: {counts[0]} statements, every answer a fresh connection's", flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001: any failure is the churn's verdict
        print(f"churn: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
