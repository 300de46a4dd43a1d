-- Readers and writers on the same few hot rows: each event is, at random with equal odds, a
-- point select or an autocommit non-index update of one of them. Under semisync AFTER_SYNC a
-- writer keeps its row lock through the ACK round trip and the readers of the row see only
-- acknowledged data; under strongsync's visibility = "quorum" the locks go at once and each
-- response waits for the quorum instead. Uses the tables `oltp_*` prepares.

require("oltp_common")

function prepare_statements()
   -- Plain queries, as an application without a statement cache sends them.
end

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
end

function thread_done()
   con:disconnect()
end

function event()
   local table_num = sysbench.rand.uniform(1, sysbench.opt.tables)
   local id = sysbench.rand.default(1, sysbench.opt.table_size)
   if sysbench.rand.uniform(0, 1) == 0 then
      con:query(string.format("SELECT c FROM sbtest%d WHERE id = %d", table_num, id))
   else
      con:query(string.format("UPDATE sbtest%d SET c = '%s' WHERE id = %d",
                              table_num, get_c_value(), id))
   end
end
