//! What tells the proxy that a transaction's answers all come from the consistent snapshot it
//! took when it started, so that one bound serves the whole snapshot.

use crate::reveals_nothing::normalized;

// Under InnoDB's `REPEATABLE READ` a transaction's plain reads see the snapshot taken when it
// started (`START TRANSACTION WITH CONSISTENT SNAPSHOT` takes it at once), and with
// `innodb_snapshot_isolation = ON` a locking read that meets a row newer than that snapshot
// fails (error 1020) instead of showing it.

/// What the proxy sends in place of a plain `BEGIN`: the same transaction, its snapshot taken
/// now rather than at its first read (which `REPEATABLE READ` allows).
pub const START_WITH_SNAPSHOT: &[u8] = b"START TRANSACTION WITH CONSISTENT SNAPSHOT";

/// The transaction characteristics MariaDB reports for [`START_WITH_SNAPSHOT`] when nothing
/// else (a one-shot isolation level, `READ ONLY`) was asked for the transaction.
pub const SNAPSHOT_CHARACTERISTICS: &[u8] = b"START TRANSACTION WITH CONSISTENT SNAPSHOT;";

/// The transaction-state report right after [`START_WITH_SNAPSHOT`]: an explicit transaction
/// that has read (the snapshot) and done nothing else.
pub const SNAPSHOT_TAKEN: &[u8] = b"T_R_____";

/// How a statement starts a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// `BEGIN`, `BEGIN WORK` or `START TRANSACTION`: the snapshot is taken at the first read.
    Plain,
    /// `START TRANSACTION WITH CONSISTENT SNAPSHOT`: the snapshot is taken now.
    WithSnapshot,
}

/// How `sql` (a `COM_QUERY`'s text) starts a transaction, if it is one of the plain forms.
/// Only blanks and letter case may differ.
pub fn transaction_start(sql: &[u8]) -> Option<Start> {
    normalized::<64, _>(sql, |norm| match norm {
        b"begin" | b"beginwork" | b"starttransaction" => Some(Start::Plain),
        b"starttransactionwithconsistentsnapshot" => Some(Start::WithSnapshot),
        _ => None,
    })
}

/// Whether `sql` is a single `SELECT` (or `WITH … SELECT`) that names no `information_schema`
/// table, no system variable and no function that reads the binlog or a file: every table it
/// reads, directly or through views and functions, shows in the transaction tracker's state.
/// Anything else — another statement, several, one that starts with a comment, or
/// parenthesised — may read what the tracker does not flag: `SHOW`, `CALL`,
/// `information_schema`, system variables such as `@@gtid_binlog_pos`, `LOAD_FILE()`, and
/// locking reads, which MariaDB checks against the snapshot only through the clustered index.
pub fn reads_snapshot_only(sql: &[u8]) -> bool {
    let start = sql.trim_ascii_start();
    let word_len = start.iter().take_while(|b| b.is_ascii_alphabetic()).count();
    let word = &start[..word_len];
    let after_word = start.get(word_len);
    (word.eq_ignore_ascii_case(b"select") || word.eq_ignore_ascii_case(b"with"))
        && after_word.is_some_and(|b| !(b.is_ascii_alphanumeric() || *b == b'_' || *b == b'$'))
        && !sql.contains(&b';')
        && !sql.windows(2).any(|w| w == b"@@")
        && ![
            &b"information_schema"[..],
            b"load_file",
            b"binlog_gtid_pos",
            // A locking read through a secondary index shows rows newer than the snapshot
            // without error 1020 (MariaDB 10.11.19): it is bounded like a write. The words
            // alone, wherever they are, so that no blank or comment between `FOR` and
            // `UPDATE` hides one (a column named `updated` costs a bound, nothing more).
            b"update",
            b"share",
        ]
        .iter()
        .any(|name| contains_ignore_case(sql, name))
}

/// Whether a `SESSION_TRACK_TRANSACTION_STATE` value says the session is in an explicit
/// transaction that so far has read only transactional tables, written nothing and locked no
/// tables (a result set sent, or a statement unsafe for statement-based replication, is fine).
///
/// MariaDB's transaction tracker (`session_track_transaction_info`) reports this in each
/// response that changes it. It flags a read of a non-transactional table and a write (a unique
/// secondary index is checked against rows deleted after the snapshot, so a write's success is
/// not bounded by it). Its "unsafe" flag is no help: MariaDB sets it for anything unsafe for
/// statement-based replication, a `LIMIT` among them; what it adds beyond the statement's text
/// ([`reads_snapshot_only`]) is what a stored function reads of the server's own state (binlog
/// positions, files), which semisync `AFTER_SYNC` reveals as well, the binlog holding a
/// transaction before the replicas' ACKs.
pub fn state_reads_snapshot_only(state: &[u8]) -> bool {
    let &[explicit, non_trx_read, _read, non_trx_write, write, _unsafe, _result, locked] = state
    else {
        return false;
    };
    explicit == b'T'
        && [non_trx_read, non_trx_write, write, locked]
            .iter()
            .all(|&flag| flag == b'_')
}

fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_starts_are_recognised_and_nothing_else() {
        for (sql, start) in [
            ("BEGIN", Start::Plain),
            ("begin work;", Start::Plain),
            ("START  TRANSACTION", Start::Plain),
            (
                "start transaction with consistent snapshot",
                Start::WithSnapshot,
            ),
        ] {
            assert_eq!(transaction_start(sql.as_bytes()), Some(start), "{sql}");
        }
        for sql in [
            "START TRANSACTION READ ONLY",
            "START TRANSACTION READ WRITE",
            "BEGIN; SELECT 1",
            "/* x */ BEGIN",
            "XA START 'x'",
            "BEGIN NOT ATOMIC SELECT 1; END",
            "COMMIT",
            "",
        ] {
            assert_eq!(transaction_start(sql.as_bytes()), None, "{sql}");
        }
    }

    #[test]
    fn single_selects_read_only_the_snapshot_and_nothing_else_is_trusted_to() {
        for sql in [
            "SELECT c FROM sbtest1 WHERE id=?",
            "  select\n* from t order by id",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "SELECT(1)",
            "SELECT id FROM ledger WHERE writer = 3 ORDER BY id DESC LIMIT 4",
            "SELECT @x",
        ] {
            assert!(reads_snapshot_only(sql.as_bytes()), "{sql}");
        }
        for sql in [
            "SHOW BINLOG EVENTS",
            "CALL p()",
            "SELECT 1; SHOW MASTER STATUS",
            "SELECT * FROM INFORMATION_SCHEMA.TABLES",
            "select * from `information_schema`.innodb_trx",
            "SELECT @@global.gtid_binlog_pos",
            "SELECT v, @@gtid_current_pos FROM t",
            "SELECT LOAD_FILE('/var/lib/mysql/mysql-bin.000001')",
            "SELECT BINLOG_GTID_POS('mysql-bin.000001', 4)",
            "SELECT id FROM t WHERE k = 5 FOR UPDATE",
            "SELECT id FROM t WHERE k = 5 LOCK IN SHARE MODE",
            "select id from t where k = 5 for/**/update",
            "SELECT id FROM t WHERE k = 5 FOR\n SHARE",
            "/* hint */ SELECT 1",
            "(SELECT 1)",
            "SELECTED",
            "SELECT",
            "UPDATE t SET v = 1",
            "EXECUTE s",
            "",
        ] {
            assert!(!reads_snapshot_only(sql.as_bytes()), "{sql}");
        }
    }

    #[test]
    fn the_tracker_state_clears_only_reads_of_transactional_tables() {
        // `s` comes with a LIMIT as with UUID(): what it stands for is read from the text.
        for state in ["T_R_____", "T_R___S_", "T_______", "T_____S_", "T_R__sS_"] {
            assert!(state_reads_snapshot_only(state.as_bytes()), "{state}");
        }
        for state in [
            "________",
            "I_R_____",
            "TrR_____",
            "T_Rw____",
            "T_R_W___",
            "T_R____L",
            "T_R_____x",
            "T_R",
            "",
        ] {
            assert!(!state_reads_snapshot_only(state.as_bytes()), "{state}");
        }
    }
}
