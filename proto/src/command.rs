//! Command bytes of the command phase (the first payload byte of every client request).

/// `COM_QUIT`: no response; the server closes the connection.
pub const COM_QUIT: u8 = 0x01;
/// `COM_INIT_DB`: OK or ERR.
pub const COM_INIT_DB: u8 = 0x02;
/// `COM_QUERY`: OK, ERR, LOCAL INFILE request or result set(s).
pub const COM_QUERY: u8 = 0x03;
/// `COM_FIELD_LIST`: column definitions then EOF.
pub const COM_FIELD_LIST: u8 = 0x04;
/// `COM_STATISTICS`: one packet of text with no header byte.
pub const COM_STATISTICS: u8 = 0x09;
/// `COM_PROCESS_KILL`: OK or ERR.
pub const COM_PROCESS_KILL: u8 = 0x0C;
/// `COM_DEBUG`: EOF or ERR.
pub const COM_DEBUG: u8 = 0x0D;
/// `COM_PING`: OK.
pub const COM_PING: u8 = 0x0E;
/// `COM_CHANGE_USER`: an authentication exchange.
pub const COM_CHANGE_USER: u8 = 0x11;
/// `COM_BINLOG_DUMP`: the binlog event stream.
pub const COM_BINLOG_DUMP: u8 = 0x12;
/// `COM_REGISTER_SLAVE`: OK or ERR.
pub const COM_REGISTER_SLAVE: u8 = 0x15;
/// `COM_STMT_PREPARE`: PREPARE_OK with parameter and column definitions, or ERR.
pub const COM_STMT_PREPARE: u8 = 0x16;
/// `COM_STMT_EXECUTE`: OK, ERR or binary result set(s).
pub const COM_STMT_EXECUTE: u8 = 0x17;
/// `COM_STMT_SEND_LONG_DATA`: no response.
pub const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
/// `COM_STMT_CLOSE`: no response.
pub const COM_STMT_CLOSE: u8 = 0x19;
/// `COM_STMT_RESET`: OK or ERR.
pub const COM_STMT_RESET: u8 = 0x1A;
/// `COM_SET_OPTION`: EOF or ERR.
pub const COM_SET_OPTION: u8 = 0x1B;
/// `COM_STMT_FETCH`: binary rows of an open cursor, then a terminator.
pub const COM_STMT_FETCH: u8 = 0x1C;
/// `COM_BINLOG_DUMP_GTID` (MySQL): the binlog event stream.
pub const COM_BINLOG_DUMP_GTID: u8 = 0x1E;
/// `COM_RESET_CONNECTION`: OK or ERR.
pub const COM_RESET_CONNECTION: u8 = 0x1F;
/// `COM_STMT_BULK_EXECUTE` (MariaDB): OK, ERR or result set(s).
pub const COM_STMT_BULK_EXECUTE: u8 = 0xFA;

/// `COM_STMT_EXECUTE` flag: open a read-only cursor instead of sending the rows.
pub const CURSOR_TYPE_READ_ONLY: u8 = 0x01;

/// Human-readable name of a command byte, for logs.
pub fn name(command: u8) -> &'static str {
    match command {
        COM_QUIT => "COM_QUIT",
        COM_INIT_DB => "COM_INIT_DB",
        COM_QUERY => "COM_QUERY",
        COM_FIELD_LIST => "COM_FIELD_LIST",
        COM_STATISTICS => "COM_STATISTICS",
        COM_PROCESS_KILL => "COM_PROCESS_KILL",
        COM_DEBUG => "COM_DEBUG",
        COM_PING => "COM_PING",
        COM_CHANGE_USER => "COM_CHANGE_USER",
        COM_BINLOG_DUMP => "COM_BINLOG_DUMP",
        COM_REGISTER_SLAVE => "COM_REGISTER_SLAVE",
        COM_STMT_PREPARE => "COM_STMT_PREPARE",
        COM_STMT_EXECUTE => "COM_STMT_EXECUTE",
        COM_STMT_SEND_LONG_DATA => "COM_STMT_SEND_LONG_DATA",
        COM_STMT_CLOSE => "COM_STMT_CLOSE",
        COM_STMT_RESET => "COM_STMT_RESET",
        COM_SET_OPTION => "COM_SET_OPTION",
        COM_STMT_FETCH => "COM_STMT_FETCH",
        COM_BINLOG_DUMP_GTID => "COM_BINLOG_DUMP_GTID",
        COM_RESET_CONNECTION => "COM_RESET_CONNECTION",
        COM_STMT_BULK_EXECUTE => "COM_STMT_BULK_EXECUTE",
        _ => "COM_UNKNOWN",
    }
}
