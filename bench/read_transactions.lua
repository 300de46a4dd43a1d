-- Read-only transactions under a write load: half the threads run transactions of ten point
-- selects (BEGIN ... COMMIT), the other half autocommit non-index updates of random rows. Under
-- strongsync's visibility = "quorum" each select of a transaction is bounded on its own, unless
-- the session runs with innodb_snapshot_isolation = ON, where the transaction's snapshot is
-- bounded once (its BEGIN). Uses the tables `oltp_*` prepares.

require("oltp_common")

function prepare_statements()
   -- Plain queries, as an application without a statement cache sends them.
end

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
   reader = sysbench.tid % 2 == 0
end

function thread_done()
   con:disconnect()
end

function event()
   local table_num = sysbench.rand.uniform(1, sysbench.opt.tables)
   if reader then
      con:query("BEGIN")
      for _ = 1, 10 do
         con:query(string.format("SELECT c FROM sbtest%d WHERE id = %d", table_num,
                                 sysbench.rand.default(1, sysbench.opt.table_size)))
      end
      con:query("COMMIT")
   else
      con:query(string.format("UPDATE sbtest%d SET c = '%s' WHERE id = %d", table_num,
                              get_c_value(), sysbench.rand.default(1, sysbench.opt.table_size)))
   end
end
