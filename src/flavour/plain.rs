//! Whether a statement's text can change a session's tracking without the server saying so.

/// Of a session's statements: the tracked-variables list. Every other variable that decides
/// what the primary reports is in that list while strongsync trusts the session, so its change
/// is reported by value; the list's own change to one without itself is not.
pub(super) const IN_SESSION: &[&str] = &["session_track_system_variables"];

/// Of `init_connect`, whose changes no response reports: every variable that decides what
/// the primary reports of a session (and on MariaDB whether its next commit is reported).
pub(super) const AT_LOGIN: &[&str] = &[
    "session_track_system_variables",
    "session_track_state_change",
    "session_track_gtids",
    "session_track_transaction_info",
    "gtid_domain_id",
    "server_id",
    "gtid_seq_no",
    "last_gtid",
];

/// Names that may stand before `(` in a plain statement: built-in functions that run no
/// stored code, and keywords followed by a parenthesis.
const BUILTIN: &[&str] = &[
    "concat",
    "concat_ws",
    "replace",
    "if",
    "ifnull",
    "nullif",
    "coalesce",
    "upper",
    "lower",
    "trim",
    "substring",
    "length",
    "char_length",
    "now",
    "current_timestamp",
    "unix_timestamp",
    "from_unixtime",
    "cast",
    "convert",
    "greatest",
    "least",
    "abs",
    "round",
    "floor",
    "ceil",
    "lpad",
    "rpad",
    "left",
    "right",
    "find_in_set",
    "database",
    "user",
    "current_user",
    "connection_id",
    "version",
    "in",
    "and",
    "or",
    "not",
    "values",
    "charset",
    "collation",
];

/// Statement kinds (first words) that run no stored code of their own.
const PLAIN_KINDS: &[&[&str]] = &[
    &["set"],
    &["use"],
    &["begin"],
    &["start", "transaction"],
    &["commit"],
    &["rollback"],
    &["savepoint"],
    &["release", "savepoint"],
    &["create", "temporary", "table"],
    &["drop", "temporary", "table"],
    // XA moves a transaction along; its commits are reported like any other.
    &["xa"],
    // Preparing parses; only `EXECUTE` runs what was prepared.
    &["prepare"],
    &["deallocate", "prepare"],
    &["drop", "prepare"],
];

/// True if no statement of `text` (a `COM_QUERY`'s, possibly several separated by `;`) can
/// change the session's tracking unreported. Only a statement that names a protected variable,
/// or that can run stored code (a procedure, a function, a trigger, a prepared statement), can.
/// A plain one (`SET` of other variables to literals and built-in functions, `USE`, a
/// transaction's start or end, a temporary table's creation without a query) cannot, so a state
/// change it reports is its own.
/// `protected`: the variables it must not name ([`IN_SESSION`], [`AT_LOGIN`]).
pub(super) fn is_plain(text: &[u8], protected: &[&str]) -> bool {
    let Some(tokens) = tokens(text) else {
        return false;
    };
    tokens
        .split(|t| *t == Token::End)
        .all(|statement| plain_statement(statement, protected))
}

fn plain_statement(tokens: &[Token], protected: &[&str]) -> bool {
    if tokens.is_empty() {
        return true;
    }
    let words: Vec<&str> = tokens
        .iter()
        .take(3)
        .map_while(|t| match t {
            Token::Word(w) => Some(w.as_str()),
            _ => None,
        })
        .collect();
    let Some(kind) = PLAIN_KINDS
        .iter()
        .find(|kind| kind.len() <= words.len() && kind.iter().zip(&words).all(|(k, w)| k == w))
    else {
        return false;
    };
    // `SET STATEMENT ... FOR` runs another statement; `SET PASSWORD`, `SET ROLE` and the like
    // change no variable of the session's tracking, but nothing is gained by telling them
    // apart from what they are not.
    if kind == &["set"] && matches!(words.get(1), Some(&"statement")) {
        return false;
    }
    let table = kind.last() == Some(&"table");
    let mut previous: Option<&Token> = None;
    for token in tokens {
        match token {
            Token::Word(w) if protected.contains(&w.as_str()) => return false,
            // A temporary table made from a query runs what the query calls.
            Token::Word(w) if table && (w == "select" || w == "as") => return false,
            Token::Open if !table => {
                if let Some(Token::Word(name)) = previous {
                    if !BUILTIN.contains(&name.as_str()) {
                        return false;
                    }
                }
            }
            _ => {}
        }
        previous = Some(token);
    }
    true
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// An identifier, keyword or variable name part, lowercased.
    Word(String),
    /// `(`.
    Open,
    /// `;`: the end of a statement.
    End,
    /// Anything else: an operator, a literal, punctuation.
    Other,
}

/// The tokens of `text`, or `None` if it does not read as text the scanner understands (not
/// UTF-8, an unterminated quote or comment, an executable comment `/*! … */`).
fn tokens(text: &[u8]) -> Option<Vec<Token>> {
    let text = std::str::from_utf8(text).ok()?;
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' | '"' | '`' => {
                let mut closed = false;
                while let Some((_, d)) = chars.next() {
                    if d == '\\' && c != '`' {
                        chars.next();
                    } else if d == c {
                        if chars.peek().map(|&(_, e)| e) == Some(c) {
                            chars.next();
                        } else {
                            closed = true;
                            break;
                        }
                    }
                }
                if !closed {
                    return None;
                }
                // A quoted name may be a protected one: `session_track_gtids`.
                let quoted = &text[i + 1..chars.peek().map_or(text.len(), |&(j, _)| j) - 1];
                out.push(match c {
                    '`' => Token::Word(quoted.to_ascii_lowercase()),
                    _ => Token::Other,
                });
            }
            '-' if text[i..].starts_with("-- ") || text[i..].starts_with("--\t") => {
                skip_line(&mut chars)
            }
            '#' => skip_line(&mut chars),
            '/' if text[i..].starts_with("/*") => {
                if text[i..].starts_with("/*!") || text[i..].starts_with("/*M!") {
                    return None;
                }
                let end = text[i + 2..].find("*/")? + i + 4;
                while chars.peek().is_some_and(|&(j, _)| j < end) {
                    chars.next();
                }
            }
            '(' => out.push(Token::Open),
            ';' => out.push(Token::End),
            c if c.is_alphanumeric() || c == '_' || c == '$' => {
                let mut end = i + c.len_utf8();
                while let Some(&(j, d)) = chars.peek() {
                    if d.is_alphanumeric() || d == '_' || d == '$' {
                        end = j + d.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push(Token::Word(text[i..end].to_ascii_lowercase()));
            }
            c if c.is_whitespace() => {}
            _ => out.push(Token::Other),
        }
    }
    Some(out)
}

fn skip_line(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>) {
    for (_, c) in chars.by_ref() {
        if c == '\n' {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{is_plain, AT_LOGIN, IN_SESSION};

    #[test]
    fn plain_statements_and_the_rest() {
        let table: &[(&str, bool)] = &[
            ("SET @a = 1", true),
            ("SET NAMES utf8mb4", true),
            ("set autocommit=0", true),
            (
                "SET SESSION sql_mode = CONCAT(@@sql_mode, ',STRICT_ALL_TABLES')",
                true,
            ),
            (
                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                true,
            ),
            ("SET character_set_results = utf16", true),
            ("USE sbtest", true),
            ("BEGIN", true),
            ("START TRANSACTION WITH CONSISTENT SNAPSHOT", true),
            ("COMMIT", true),
            ("XA START 'x'", true),
            ("XA COMMIT 'x'", true),
            ("ROLLBACK", true),
            ("SET @a = 1; SET @b = 'x;y'", true),
            ("CREATE TEMPORARY TABLE tt (a INT, b VARCHAR(10))", true),
            ("DROP TEMPORARY TABLE tt", true),
            ("-- a comment\nSET @a = 1 /* and another */", true),
            ("", true),
            // A tracking variable, however it is spelt.
            ("SET session_track_system_variables = ''", false),
            ("SET @@session.session_track_gtids = OFF", false),
            ("SET `session_track_state_change` = 0", false),
            ("SET gtid_seq_no = 1000", false),
            ("SET SESSION server_id = 5", false),
            // Stored code.
            ("SET @a = f()", false),
            ("SET @a = (SELECT f())", false),
            ("SET @a = db.f(1)", false),
            ("SELECT f()", false),
            ("CALL p()", false),
            ("EXECUTE s", false),
            ("PREPARE s FROM 'CALL p()'", true),
            ("DEALLOCATE PREPARE s", true),
            ("INSERT INTO t VALUES (1)", false),
            ("SET @a = 1; CALL p()", false),
            ("SET STATEMENT max_statement_time = 1 FOR CALL p()", false),
            ("CREATE TEMPORARY TABLE tt AS SELECT f()", false),
            ("CREATE TEMPORARY TABLE tt SELECT 1", false),
            // What the scanner does not read is not plain.
            ("SET @a = 'unterminated", false),
            ("/*!50000 SET session_track_gtids = OFF */", false),
            ("/*M!100000 SET @a = 1 */", false),
        ];
        for (text, plain) in table {
            assert_eq!(is_plain(text.as_bytes(), AT_LOGIN), *plain, "{text}");
        }
        assert!(!is_plain(&[0xff, 0xfe], AT_LOGIN));
        // In a session, a change of any other tracking variable is reported by value.
        assert!(is_plain(b"SET gtid_domain_id = 1", IN_SESSION));
        assert!(is_plain(
            b"SET session_track_state_change = OFF",
            IN_SESSION
        ));
        assert!(!is_plain(
            b"SET session_track_system_variables = ''",
            IN_SESSION
        ));
    }
}
