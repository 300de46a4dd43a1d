-- Two-phase XA non-index updates, in the spirit of Kunlun's XA write-up: each transaction is
-- XA START; UPDATE sbtestN SET c = ... WHERE id = ...; XA END; XA PREPARE; XA COMMIT.
-- Both XA PREPARE and XA COMMIT are binlogged with their own GTID, so a waiting commit waits
-- twice per transaction. Uses the tables `oltp_*` prepares (run oltp_update_non_index prepare).

require("oltp_common")

function prepare_statements()
   -- Plain queries: an XA id cannot be a statement parameter.
end

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
   xa_count = 0
end

function thread_done()
   con:disconnect()
end

function event()
   xa_count = xa_count + 1
   local xid = string.format("'sb-%d-%d'", sysbench.tid, xa_count)
   local table_num = sysbench.rand.uniform(1, sysbench.opt.tables)
   local id = sysbench.rand.default(1, sysbench.opt.table_size)
   con:query("XA START " .. xid)
   con:query(string.format("UPDATE sbtest%d SET c = '%s' WHERE id = %d",
                           table_num, get_c_value(), id))
   con:query("XA END " .. xid)
   con:query("XA PREPARE " .. xid)
   con:query("XA COMMIT " .. xid)
end
