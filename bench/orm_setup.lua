-- An ORM's connection checkout, as a loop: each event opens a new connection (a pool that does
-- not keep them, or a reset), sends the four SETs ORMs send on every checkout, and runs one
-- transaction. What a proxy adds to it shows here: its login relay, and any statement of its
-- own in the session. Uses the tables `oltp_*` prepares.

require("oltp_common")

function prepare_statements()
   -- Plain queries, as an ORM without a statement cache sends them.
end

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
end

function thread_done()
   con:disconnect()
end

function event()
   -- sysbench 1.0.20's con:reconnect() crashes (SIGSEGV) on the MySQL driver: a new connection instead.
   con:disconnect()
   con = drv:connect()
   con:query("SET NAMES utf8mb4")
   con:query("SET autocommit = 1")
   con:query("SET sql_mode = 'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION'")
   con:query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
   con:query("BEGIN")
   con:query(string.format("UPDATE sbtest%d SET k = k + 1 WHERE id = %d",
                           sysbench.rand.uniform(1, sysbench.opt.tables),
                           sysbench.rand.default(1, sysbench.opt.table_size)))
   con:query("COMMIT")
end
