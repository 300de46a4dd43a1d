//! Whether a session holds state only its connection to the primary knows, from its commands
//! and what the primary reports of them.

// What no tracker reports on either server (user locks, the global read lock, `HANDLER`, user
// variables set by a `SELECT`, the last statement's diagnostics) is read from the words.

use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::collations::{Collation, CollationId};
use strongsync_proto::command::*;
use strongsync_proto::ok::{OkPacket, LAST_GTID};

/// Why a session keeps its connection to the primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Pin {
    /// A transaction is open, or its characteristics are set for the next one.
    Transaction,
    /// The primary reported a change of the session's state: a variable, the schema, a user
    /// variable, a temporary table, a prepared statement (`PREPARE`), `autocommit`.
    SessionState,
    /// A prepared statement's cursor, or parameters sent ahead of its execute
    /// (`COM_STMT_SEND_LONG_DATA`): both live on the connection.
    Prepared,
    /// A lock held by the session: `GET_LOCK`, `LOCK TABLES`, a backup lock.
    Lock,
    /// The statement just run left something the next one may ask of that connection: its
    /// warnings or error, `FOUND_ROWS()`, `LAST_INSERT_ID()`.
    LastStatement,
    /// A statement named the connection's own values (`CONNECTION_ID()`, `LAST_INSERT_ID()`
    /// in a larger statement), which must not change under the client.
    ConnectionId,
    /// A command that changes the connection wholesale: `COM_CHANGE_USER`, `COM_SET_OPTION`,
    /// `COM_INIT_DB`, or one strongsync does not know.
    Command,
    /// The session's commits are tracked by settings strongsync made on its connection, or
    /// the primary cannot report the session's state (a legacy EOF announced a change).
    Tracking,
}

/// A session's pins: those for good, the transaction's, and the one-command hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pins {
    /// Held for good. Not even `COM_RESET_CONNECTION` frees it: the reset keeps the schema
    /// and puts the character set and variables to the primary's defaults, which need not
    /// be the login's, so the connection would not be its pool's any more.
    sticky: Option<Pin>,
    /// The last OK or EOF said a transaction is open (or characteristics are set).
    transaction: bool,
    /// Held until the next command's response is over.
    next: Option<Pin>,
    /// The collation the login asked for (its handshake's id): what `SET NAMES` may restate.
    login_collation: u8,
    /// The command is `SET NAMES` and nothing else.
    set_names: bool,
}

/// Statement words (upper case) after which the session keeps its connection for good.
const LOCKS: &[&[u8]] = &[
    b"GET_LOCK",
    b"HANDLER",
    b"LOCK TABLE",
    b"LOCK INSTANCE",
    b"WITH READ LOCK",
    b"BACKUP STAGE",
    b"BACKUP LOCK",
];

/// Statement words that set a user variable without `SET` (`SELECT @v := …`,
/// `SELECT … INTO @v`), which the state tracker does not report.
const SETS_VARIABLE: &[&[u8]] = &[b":=", b"INTO @", b"INTO\t@", b"INTO\n@"];

/// Variables whose report says nothing about the session's own state: MariaDB's last commit,
/// and MySQL's count of statements (tracked under `session_track_system_variables = '*'`).
/// Besides them only commits (GTIDs) and the transaction's state (the status flags tell it)
/// are routine: an empty block under the flag (MariaDB's `SET TRANSACTION` for the next
/// transaction), a state-change item, a schema or any other variable is the session's state.
const ROUTINE_VARIABLES: &[&[u8]] = &[LAST_GTID, b"statement_id"];

/// What `SET NAMES` assigns. A report of each of them, the login's character set for the
/// first three and its collation for the last, says the statement left the session as its
/// login made it (C clients set their character set so after every login: libmariadb's and
/// libmysqlclient's `mysql_set_character_set`, so Python's mysqlclient and Django).
const CHARSET_VARIABLES: [&[u8]; 4] = [
    b"character_set_client",
    b"character_set_connection",
    b"character_set_results",
    b"collation_connection",
];

/// Statement words after which the next statement runs on the same connection.
const ASKS_LAST: &[&[u8]] = &[b"SQL_CALC_FOUND_ROWS"];

/// Statement words that name the connection's own values. (`SELECT LAST_INSERT_ID()` alone
/// is answered from the session's own inserts: see [`asks_last_insert_id`].)
const NAMES_CONNECTION: &[&[u8]] = &[b"CONNECTION_ID", b"LAST_INSERT_ID"];

// === impl Pin ===

impl Pin {
    /// The label of the reason in metrics and `/status`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Pin::Transaction => "transaction",
            Pin::SessionState => "session_state",
            Pin::Prepared => "prepared_statement",
            Pin::Lock => "lock",
            Pin::LastStatement => "last_statement",
            Pin::ConnectionId => "connection_id",
            Pin::Command => "command",
            Pin::Tracking => "tracking",
        }
    }

    /// Every reason, in the order of the metrics' label values.
    #[cfg(test)]
    pub(crate) const ALL: [Pin; 8] = [
        Pin::Transaction,
        Pin::SessionState,
        Pin::Prepared,
        Pin::Lock,
        Pin::LastStatement,
        Pin::ConnectionId,
        Pin::Command,
        Pin::Tracking,
    ];
}

// === impl Pins ===

impl Pins {
    /// The pins of a session whose login asked for collation `login_collation`.
    pub(crate) fn for_login(login_collation: u8) -> Self {
        Pins {
            login_collation,
            ..Pins::default()
        }
    }

    /// Pins the session for good, for `why` (unless it already is, for another reason).
    pub(crate) fn fix(&mut self, why: Pin) {
        self.sticky.get_or_insert(why);
    }

    /// Why the session keeps its connection now, if it does.
    pub(crate) fn verdict(&self) -> Option<Pin> {
        self.sticky
            .or(self.transaction.then_some(Pin::Transaction))
            .or(self.next)
    }

    /// A command goes to the primary: what it is may pin the session.
    pub(crate) fn on_command(&mut self, payload: &[u8]) {
        self.next = None;
        self.set_names = false;
        let Some((&cmd, rest)) = payload.split_first() else {
            return;
        };
        match cmd {
            COM_QUERY => self.on_statement(rest),
            // The reset's OK says whether a transaction is still open; state pins for good.
            COM_PING | COM_STATISTICS | COM_PROCESS_KILL | COM_FIELD_LIST | COM_QUIT
            | COM_RESET_CONNECTION => {}
            // A session's prepared statements are its own, prepared again on whichever
            // connection runs them (see `super::statements`); an execute's text is judged by
            // `on_words` with the words found at its prepare.
            COM_STMT_PREPARE | COM_STMT_CLOSE | COM_STMT_RESET | COM_STMT_BULK_EXECUTE => {}
            // A cursor lives on the connection that opened it, and so do parameters sent
            // ahead of their execute.
            COM_STMT_EXECUTE | COM_STMT_SEND_LONG_DATA | COM_STMT_FETCH => {
                if lives_on_connection(payload) {
                    self.stick(Pin::Prepared);
                }
            }
            _ => self.stick(Pin::Command),
        }
    }

    fn on_statement(&mut self, sql: &[u8]) {
        if self.sticky.is_some() {
            // Held for good already: nothing a statement says changes that.
            return;
        }
        self.set_names = is_set_names(sql);
        self.on_words(words_in(sql));
    }

    /// A statement whose text holds the words `found` ([`words_in`]) runs: a prepared
    /// statement's, found when it was prepared.
    pub(crate) fn on_words(&mut self, found: u8) {
        if self.sticky.is_some() {
            return;
        }
        if found & 1 << LOCK_WORDS != 0 {
            self.stick(Pin::Lock);
        } else if found & 1 << VARIABLE_WORDS != 0 {
            self.stick(Pin::SessionState);
        } else if found & 1 << CONNECTION_WORDS != 0 {
            self.stick(Pin::ConnectionId);
        } else if found & 1 << LAST_WORDS != 0 {
            self.next = Some(Pin::LastStatement);
        }
    }

    /// An OK (or a result set's closing OK) from the primary, parsed with session tracking.
    /// `names_give(charset, collation)` says whether `SET NAMES charset` gives `collation` on
    /// the primary, for a report that does not name `collation_connection` (MariaDB's).
    pub(crate) fn on_ok(&mut self, ok: &OkPacket<'_>, names_give: impl Fn(&str, &str) -> bool) {
        self.on_status(ok.status);
        if ok
            .status
            .contains(StatusFlags::SERVER_SESSION_STATE_CHANGED)
            && !ok.reports_only_routine_state_and(ROUTINE_VARIABLES)
            && !(self.set_names && self.restates_login_charset(ok, names_give))
        {
            self.stick(Pin::SessionState);
        }
        if ok
            .transaction_characteristics()
            .is_some_and(|text| !text.is_empty())
        {
            self.transaction = true;
        }
        if ok.warnings > 0 {
            self.next.get_or_insert(Pin::LastStatement);
        }
    }

    /// A legacy EOF's status flags: it carries no state items, so a change it announces
    /// cannot be told from a commit's report.
    pub(crate) fn on_eof(&mut self, status: StatusFlags, warnings: u16) {
        self.on_status(status);
        if status.contains(StatusFlags::SERVER_SESSION_STATE_CHANGED) {
            self.stick(Pin::Tracking);
        }
        if warnings > 0 {
            self.next.get_or_insert(Pin::LastStatement);
        }
    }

    /// An ERR from the primary: `SHOW WARNINGS` or `GET DIAGNOSTICS` may ask about it next.
    pub(crate) fn on_err(&mut self) {
        self.next.get_or_insert(Pin::LastStatement);
    }

    /// Whether `ok` reports the character-set variables of [`CHARSET_VARIABLES`] at the
    /// login's values, and besides only routine state and the state-change flag: what `SET
    /// NAMES` of the login's own character set reports. MariaDB does not report
    /// `collation_connection`; then `names_give` says whether the login's is the one `SET
    /// NAMES` gives.
    fn restates_login_charset(
        &self,
        ok: &OkPacket<'_>,
        names_give: impl Fn(&str, &str) -> bool,
    ) -> bool {
        let id = CollationId::from(u16::from(self.login_collation));
        if id == CollationId::UNKNOWN_COLLATION_ID {
            return false;
        }
        let login = Collation::resolve(id);
        let mut seen = [false; CHARSET_VARIABLES.len()];
        let only = ok.reports_only_state(true, |name, value| {
            if ROUTINE_VARIABLES
                .iter()
                .any(|r| name.eq_ignore_ascii_case(r))
            {
                return true;
            }
            let Some(at) = CHARSET_VARIABLES
                .iter()
                .position(|v| name.eq_ignore_ascii_case(v))
            else {
                return false;
            };
            seen[at] = true;
            let login = if at == 3 {
                login.collation()
            } else {
                login.charset()
            };
            value.eq_ignore_ascii_case(login.as_bytes())
        });
        only && seen[..3].iter().all(|&s| s)
            && (seen[3] || names_give(login.charset(), login.collation()))
    }

    fn on_status(&mut self, status: StatusFlags) {
        self.transaction = status.contains(StatusFlags::SERVER_STATUS_IN_TRANS)
            || !status.contains(StatusFlags::SERVER_STATUS_AUTOCOMMIT);
    }

    fn stick(&mut self, why: Pin) {
        self.sticky.get_or_insert(why);
    }
}

/// Whether a statement is `SET NAMES` of one name and nothing else (any case and blanks, the
/// name bare or quoted, a final `;`): no `COLLATE`, no other assignment, no comment.
pub(crate) fn is_set_names(sql: &[u8]) -> bool {
    let sql = sql.trim_ascii();
    let sql = sql.strip_suffix(b";").unwrap_or(sql).trim_ascii_end();
    let mut words = sql
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty());
    let (Some(set), Some(names), Some(name), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return false;
    };
    let name = match name {
        [q, inner @ .., e] if q == e && matches!(q, b'\'' | b'"' | b'`') => inner,
        bare => bare,
    };
    set.eq_ignore_ascii_case(b"SET")
        && names.eq_ignore_ascii_case(b"NAMES")
        && !name.is_empty()
        && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// The expression of a statement that is `SELECT LAST_INSERT_ID()` and nothing else (any
/// case and blanks, a final `;`): a session that shares has it answered from its own last
/// insert, which the connection it would run on may not have made.
pub(crate) fn asks_last_insert_id(sql: &[u8]) -> Option<&[u8]> {
    let sql = sql.trim_ascii();
    let sql = sql.strip_suffix(b";").unwrap_or(sql).trim_ascii_end();
    let (select, rest) = sql.split_at_checked(6)?;
    if !select.eq_ignore_ascii_case(b"SELECT") || !rest.first()?.is_ascii_whitespace() {
        return None;
    }
    let expression = rest.trim_ascii();
    let squeezed: Vec<u8> = expression
        .iter()
        .filter(|b| !b.is_ascii_whitespace())
        .map(u8::to_ascii_uppercase)
        .collect();
    (squeezed == b"LAST_INSERT_ID()").then_some(expression)
}

/// Whether statement command `payload` leaves something on the connection that runs it: a
/// cursor (an execute that opens one, or a fetch from it) or parameters sent ahead of their
/// execute. Its session keeps that connection, and the connection its statement.
pub(crate) fn lives_on_connection(payload: &[u8]) -> bool {
    match payload.first() {
        Some(&COM_STMT_EXECUTE) => payload
            .get(5)
            .is_some_and(|flags| flags & CURSOR_TYPE_READ_ONLY != 0),
        Some(&(COM_STMT_SEND_LONG_DATA | COM_STMT_FETCH)) => true,
        _ => false,
    }
}

/// The lists of statement words, by their bit in [`words_in`]'s answer.
const WORD_LISTS: [&[&[u8]]; 4] = [LOCKS, SETS_VARIABLE, NAMES_CONNECTION, ASKS_LAST];
const LOCK_WORDS: usize = 0;
const VARIABLE_WORDS: usize = 1;
const CONNECTION_WORDS: usize = 2;
const LAST_WORDS: usize = 3;

/// The bytes some word of [`WORD_LISTS`] starts with (upper case, as the words are written).
const FIRST_BYTES: [bool; 256] = {
    let mut firsts = [false; 256];
    let mut list = 0;
    while list < WORD_LISTS.len() {
        let mut word = 0;
        while word < WORD_LISTS[list].len() {
            firsts[WORD_LISTS[list][word][0] as usize] = true;
            word += 1;
        }
        list += 1;
    }
    firsts
};

/// Which lists of [`WORD_LISTS`] `sql` holds a word of (bit `i` for list `i`), ignoring ASCII
/// case. One pass over the statement: words are compared only where a first letter is.
pub(crate) fn words_in(sql: &[u8]) -> u8 {
    const ALL: u8 = (1 << WORD_LISTS.len()) - 1;
    let mut found = 0;
    for at in 0..sql.len() {
        let first = sql[at].to_ascii_uppercase();
        if !FIRST_BYTES[usize::from(first)] {
            continue;
        }
        for (bit, words) in WORD_LISTS.iter().enumerate() {
            if found & 1 << bit == 0
                && words.iter().any(|word| {
                    word[0] == first
                        && sql
                            .get(at..at + word.len())
                            .is_some_and(|here| here.eq_ignore_ascii_case(word))
                })
            {
                found |= 1 << bit;
            }
        }
        if found == ALL {
            break;
        }
    }
    found
}

#[cfg(test)]
mod tests;
