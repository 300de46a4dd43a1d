//! Statements whose answers reveal no transaction, which the read barrier (`visibility =
//! "quorum"`) lets through without bounding them by the primary's binlog position.

/// Longest statement recognised, before blanks are dropped (a connect state lists one GTID per
/// replication domain).
const LONGEST: usize = 4096;

/// What a placeholder in [`STATEMENTS`] accepts.
const DIGITS: u8 = b'#';
const GTIDS: u8 = b'%';
const UUID: u8 = b'$';

/// The statements, lower case and without blanks; `#` stands for digits, `%` for a GTID list,
/// `$` for a UUID. They are what a MariaDB or MySQL replica sends before its binlog dump
/// (MariaDB's `sql/slave.cc`, MySQL's `sql/rpl_replica.cc`: the clock, the server id and UUID,
/// heartbeat period, checksum, capability, GTID mode and connect state), reading only constants,
/// system variables and the user variables such statements set; and the `KILL` a semisync
/// replica's `STOP SLAVE` sends on a connection of its own to end its dump.
const STATEMENTS: &[&[u8]] = &[
    b"selectunix_timestamp()",
    b"showvariableslike'server_id'",
    b"showvariableslike'server_uuid'",
    b"select@@global.server_id",
    b"set@master_heartbeat_period=#",
    b"set@master_binlog_checksum=@@global.binlog_checksum",
    b"select@master_binlog_checksum",
    b"setskip_replication=#",
    b"set@mariadb_slave_capability=#",
    b"select@@global.gtid_domain_id",
    b"set@slave_connect_state='%'",
    b"set@slave_gtid_strict_mode=#",
    b"set@slave_gtid_ignore_duplicates=#",
    b"set@slave_until_gtid='%'",
    // MySQL 8.0 and later, under both names of each variable.
    b"set@master_heartbeat_period=#,@source_heartbeat_period=#",
    b"set@master_binlog_checksum=@@global.binlog_checksum,@source_binlog_checksum=@@global.binlog_checksum",
    b"select@source_binlog_checksum",
    b"select@@global.gtid_mode",
    b"select@@global.server_uuid",
    b"set@slave_uuid='$'",
    b"set@slave_uuid='$',@replica_uuid='$'",
    b"kill#",
    b"killconnection#",
    b"killquery#",
];

/// The plain transaction-control statements, lower case and without blanks.
const TRANSACTION_CONTROL: &[&[u8]] = &[
    b"begin",
    b"beginwork",
    b"starttransaction",
    b"commit",
    b"commitwork",
    b"rollback",
    b"rollbackwork",
];

/// Whether `sql` (a `COM_QUERY`'s text) is one of the replica's setup statements (`STATEMENTS`).
/// Only blanks and letter case may differ; a comment or anything else makes it an ordinary
/// statement. The read barrier lets them through while a connection has sent nothing else: a
/// replica must be able to connect (and stop) while the quorum waits for it.
pub fn replica_setup(sql: &[u8]) -> bool {
    normalized::<LONGEST, _>(sql, |norm| {
        STATEMENTS.iter().any(|template| matches(template, norm))
    })
}

/// Whether `sql` is a plain `BEGIN`, `START TRANSACTION`, `COMMIT` or `ROLLBACK` (with or
/// without `WORK`). Only blanks and letter case may differ. Their OK says nothing about anyone's
/// data (a commit they make is waited for as a commit).
pub fn transaction_control(sql: &[u8]) -> bool {
    normalized::<32, _>(sql, |norm| TRANSACTION_CONTROL.contains(&norm))
}

/// `sql` in lower case without blanks (and without one trailing `;`), given to `check`; the
/// default answer (`false`, `None`) if it is longer than `N` bytes (longer than anything the
/// caller recognises).
pub(crate) fn normalized<const N: usize, R: Default>(
    sql: &[u8],
    check: impl FnOnce(&[u8]) -> R,
) -> R {
    if sql.len() > N {
        return R::default();
    }
    let mut norm = [0u8; N];
    let mut n = 0;
    for &b in sql.iter().filter(|b| !b.is_ascii_whitespace()) {
        norm[n] = b.to_ascii_lowercase();
        n += 1;
    }
    check(norm[..n].strip_suffix(b";").unwrap_or(&norm[..n]))
}

/// Whether `text` fits `template`: a placeholder takes the longest run of what it accepts
/// (at least one digit; any number of GTID characters).
fn matches(template: &[u8], mut text: &[u8]) -> bool {
    for &t in template {
        let accepts: fn(&u8) -> bool = match t {
            DIGITS => |b| b.is_ascii_digit(),
            GTIDS => |b| b.is_ascii_digit() || *b == b'-' || *b == b',',
            UUID => |b| b.is_ascii_hexdigit() || *b == b'-',
            literal => {
                match text.split_first() {
                    Some((&b, rest)) if b == literal => text = rest,
                    _ => return false,
                }
                continue;
            }
        };
        let run = text.iter().take_while(|b| accepts(b)).count();
        if t == DIGITS && run == 0 {
            return false;
        }
        text = &text[run..];
    }
    text.is_empty()
}

#[cfg(test)]
mod tests {
    use super::{replica_setup as reveals_nothing, transaction_control};

    #[test]
    fn plain_transaction_control_is_recognised_and_nothing_more() {
        for sql in [
            "BEGIN",
            "begin work",
            "START TRANSACTION",
            "COMMIT;",
            "ROLLBACK",
        ] {
            assert!(transaction_control(sql.as_bytes()), "{sql}");
        }
        for sql in [
            "START TRANSACTION WITH CONSISTENT SNAPSHOT",
            "START TRANSACTION READ ONLY",
            "COMMIT; SELECT * FROM t",
            "ROLLBACK TO SAVEPOINT a",
            "BEGIN NOT ATOMIC SELECT 1; END",
            "/* x */ COMMIT",
            "SELECT 1",
        ] {
            assert!(!transaction_control(sql.as_bytes()), "{sql}");
        }
    }

    #[test]
    fn the_statements_a_mariadb_replica_sends_before_its_dump_are_recognised() {
        for sql in [
            "SELECT UNIX_TIMESTAMP()",
            "SHOW VARIABLES LIKE 'SERVER_ID'",
            "SET @master_heartbeat_period= 30000001024",
            "SET @master_binlog_checksum= @@global.binlog_checksum",
            "SELECT @master_binlog_checksum",
            "SET @mariadb_slave_capability=4",
            "SELECT @@GLOBAL.gtid_domain_id",
            "SET @slave_connect_state='0-1-2,1-1-7'",
            "SET @slave_connect_state=''",
            "SET @slave_gtid_strict_mode=0",
            "SET @slave_gtid_ignore_duplicates=1",
            "set @slave_connect_state = '0-1-2, 1-1-7' ;",
            "KILL 9",
        ] {
            assert!(reveals_nothing(sql.as_bytes()), "{sql}");
        }
    }

    /// As captured from a MySQL 9.7.4 replica (`fixtures/mysql97_dump_semisync.txt`).
    #[test]
    fn the_statements_a_mysql_replica_sends_before_its_dump_are_recognised() {
        for sql in [
            "SELECT UNIX_TIMESTAMP()",
            "SELECT @@GLOBAL.SERVER_ID",
            "SET @master_heartbeat_period = 2000000000, @source_heartbeat_period = 2000000000",
            "SET @master_binlog_checksum = @@global.binlog_checksum, @source_binlog_checksum = @@global.binlog_checksum",
            "SELECT @source_binlog_checksum",
            "SELECT @@GLOBAL.GTID_MODE",
            "SELECT @@GLOBAL.SERVER_UUID",
            "SET @slave_uuid = 'effcab61-ede8-11f1-9dec-02fc00000001', @replica_uuid = 'effcab61-ede8-11f1-9dec-02fc00000001'",
            "SET @slave_uuid= 'effcab61-ede8-11f1-9dec-02fc00000001'",
        ] {
            assert!(reveals_nothing(sql.as_bytes()), "{sql}");
        }
        for sql in [
            "SET @slave_uuid = (SELECT v FROM t)",
            "SET @slave_uuid = 'x', @replica_uuid = (SELECT v FROM t)",
            "SELECT @@GLOBAL.GTID_MODE, v FROM t",
        ] {
            assert!(!reveals_nothing(sql.as_bytes()), "{sql}");
        }
    }

    #[test]
    fn anything_that_could_read_data_is_not() {
        for sql in [
            "SELECT * FROM t",
            "SELECT UNIX_TIMESTAMP(), (SELECT v FROM t)",
            "SET @master_heartbeat_period= (SELECT v FROM t)",
            "SET @master_heartbeat_period= ",
            "SET @slave_connect_state=(SELECT GROUP_CONCAT(v) FROM t)",
            "SET @slave_connect_state='0-1-2' AND @x := (SELECT 1)",
            "SELECT @master_binlog_checksum, v FROM t",
            "SELECT UNIX_TIMESTAMP(); SELECT * FROM t",
            "/* x */ SELECT UNIX_TIMESTAMP()",
            "SELECT binlog_gtid_pos('mysql-bin.000001', 4)",
            "KILL (SELECT 1)",
            "",
        ] {
            assert!(!reveals_nothing(sql.as_bytes()), "{sql}");
        }
        assert!(!reveals_nothing(&vec![b' '; 5000]));
    }
}
