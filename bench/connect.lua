-- What a login costs: each event opens a new connection (its TCP and TLS handshakes and the
-- authentication exchange) and runs one trivial query on it.

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
end

function thread_done()
   con:disconnect()
end

function event()
   con:disconnect()
   con = drv:connect()
   con:query("SELECT 1")
end
