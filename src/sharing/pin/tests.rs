use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::command::*;
use strongsync_proto::ok::OkPacket;
use strongsync_proto::wire::put_lenenc_str;

use super::{Pin, Pins};

const AUTOCOMMIT: StatusFlags = StatusFlags::SERVER_STATUS_AUTOCOMMIT;
const IN_TRANS: StatusFlags = StatusFlags::SERVER_STATUS_IN_TRANS;

/// An OK with `status`, `warnings`, `insert_id` and a state block of `items`.
fn ok(status: StatusFlags, warnings: u16, insert_id: u8, items: &[(u8, &[u8])]) -> Vec<u8> {
    let mut state = Vec::new();
    for (kind, data) in items {
        state.push(*kind);
        put_lenenc_str(&mut state, data);
    }
    let mut status = status;
    status.set(StatusFlags::SERVER_SESSION_STATE_CHANGED, !items.is_empty());
    let mut payload = vec![0x00, 0, insert_id];
    payload.extend_from_slice(&status.bits().to_le_bytes());
    payload.extend_from_slice(&warnings.to_le_bytes());
    put_lenenc_str(&mut payload, b"");
    if !items.is_empty() {
        put_lenenc_str(&mut payload, &state);
    }
    payload
}

fn lenenc(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_lenenc_str(&mut out, text);
    out
}

fn variable(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = lenenc(name);
    put_lenenc_str(&mut out, value);
    out
}

fn query(sql: &str) -> Vec<u8> {
    let mut payload = vec![COM_QUERY];
    payload.extend_from_slice(sql.as_bytes());
    payload
}

/// Runs `command` and then the OK `answer` on `pins`; the verdict after.
fn after(pins: &mut Pins, command: &[u8], answer: &[u8]) -> Option<Pin> {
    pins.on_command(command);
    pins.on_ok(&OkPacket::parse(answer, true).expect("an OK"), |_, _| false);
    pins.verdict()
}

/// A case: its name, the command, the primary's OK, and the verdict after.
type Case = (&'static str, Vec<u8>, Vec<u8>, Option<Pin>);

#[test]
fn statements_and_what_the_primary_says_of_them_pin_or_free_the_session() {
    let commit_gtid = lenenc(b"last_gtid");
    let mut gtid_item = commit_gtid.clone();
    put_lenenc_str(&mut gtid_item, b"0-1-5");
    let user_var = [1u8, b'1'];
    let characteristics = lenenc(b"SET TRANSACTION ISOLATION LEVEL READ COMMITTED;");
    let cases: Vec<Case> = vec![
        ("a read", query("SELECT 1"), ok(AUTOCOMMIT, 0, 0, &[]), None),
        (
            "an autocommit write reporting its GTID",
            query("UPDATE t SET v = 1"),
            ok(AUTOCOMMIT, 0, 0, &[(0, &gtid_item)]),
            None,
        ),
        (
            "BEGIN",
            query("BEGIN"),
            ok(AUTOCOMMIT | IN_TRANS, 0, 0, &[]),
            Some(Pin::Transaction),
        ),
        (
            "autocommit off",
            query("SET autocommit = 0"),
            ok(StatusFlags::empty(), 0, 0, &[]),
            Some(Pin::Transaction),
        ),
        (
            "a user variable",
            query("SET @x = 1"),
            ok(AUTOCOMMIT, 0, 0, &[(2, &user_var)]),
            Some(Pin::SessionState),
        ),
        (
            "a changed variable",
            query("SET sql_mode = ''"),
            ok(AUTOCOMMIT, 0, 0, &[(0, &variable(b"sql_mode", b""))]),
            Some(Pin::SessionState),
        ),
        (
            "characteristics for the next transaction",
            query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED"),
            ok(AUTOCOMMIT, 0, 0, &[(4, &characteristics)]),
            Some(Pin::Transaction),
        ),
        (
            "GET_LOCK",
            query("select get_lock('a', 0)"),
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::Lock),
        ),
        (
            "LOCK TABLES",
            query("lock tables t read"),
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::Lock),
        ),
        (
            "CONNECTION_ID()",
            query("SELECT connection_id()"),
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::ConnectionId),
        ),
        (
            "a warning",
            query("SELECT 1/0"),
            ok(AUTOCOMMIT, 1, 0, &[]),
            Some(Pin::LastStatement),
        ),
        (
            "an insert id (SELECT LAST_INSERT_ID() is answered from the session's own)",
            query("INSERT INTO t VALUES ()"),
            ok(AUTOCOMMIT, 0, 9, &[]),
            None,
        ),
        (
            "LAST_INSERT_ID() inside another statement",
            query("INSERT INTO u VALUES (LAST_INSERT_ID())"),
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::ConnectionId),
        ),
        (
            "SQL_CALC_FOUND_ROWS",
            query("SELECT SQL_CALC_FOUND_ROWS * FROM t LIMIT 1"),
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::LastStatement),
        ),
        (
            "a binary prepare (the session's statements are prepared again where they run)",
            vec![COM_STMT_PREPARE, b'S'],
            ok(AUTOCOMMIT, 0, 0, &[]),
            None,
        ),
        (
            "an execute",
            vec![COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0],
            ok(AUTOCOMMIT, 0, 0, &[]),
            None,
        ),
        (
            "an execute that opens a cursor",
            vec![
                COM_STMT_EXECUTE,
                1,
                0,
                0,
                0,
                CURSOR_TYPE_READ_ONLY,
                1,
                0,
                0,
                0,
            ],
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::Prepared),
        ),
        (
            "parameters sent ahead of the execute",
            vec![COM_STMT_SEND_LONG_DATA, 1, 0, 0, 0, 0, 0, b'x'],
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::Prepared),
        ),
        (
            "a change of schema",
            vec![COM_INIT_DB, b'd'],
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::Command),
        ),
        ("a ping", vec![COM_PING], ok(AUTOCOMMIT, 0, 0, &[]), None),
        (
            "MySQL's statement count under '*'",
            query("SELECT 1"),
            ok(AUTOCOMMIT, 0, 0, &[(0, &variable(b"statement_id", b"7"))]),
            None,
        ),
        (
            "a user variable set by a SELECT (no tracker reports it)",
            query("SELECT @v := 2"),
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::SessionState),
        ),
        (
            "a user variable set by SELECT … INTO",
            query("SELECT 1 INTO @v"),
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::SessionState),
        ),
        (
            "HANDLER (no tracker reports it)",
            query("HANDLER t OPEN"),
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::Lock),
        ),
        (
            "the global read lock",
            query("FLUSH TABLES WITH READ LOCK"),
            ok(AUTOCOMMIT, 0, 0, &[]),
            Some(Pin::Lock),
        ),
    ];
    for (name, command, answer, expected) in cases {
        let mut pins = Pins::default();
        assert_eq!(after(&mut pins, &command, &answer), expected, "{name}");
    }
}

#[test]
fn a_transaction_pins_until_its_end_and_a_hold_lasts_one_command() {
    let mut pins = Pins::default();
    assert_eq!(
        after(
            &mut pins,
            &query("BEGIN"),
            &ok(AUTOCOMMIT | IN_TRANS, 0, 0, &[])
        ),
        Some(Pin::Transaction)
    );
    assert_eq!(
        after(
            &mut pins,
            &query("UPDATE t SET v = 2"),
            &ok(AUTOCOMMIT | IN_TRANS, 1, 0, &[])
        ),
        Some(Pin::Transaction)
    );
    // The commit's warnings hold the connection for the next command only.
    assert_eq!(
        after(&mut pins, &query("COMMIT"), &ok(AUTOCOMMIT, 1, 0, &[])),
        Some(Pin::LastStatement)
    );
    assert_eq!(
        after(
            &mut pins,
            &query("SHOW WARNINGS"),
            &ok(AUTOCOMMIT, 0, 0, &[])
        ),
        None
    );
    // An error holds it for the next command too.
    pins.on_command(&query("SELECT nope"));
    pins.on_err();
    assert_eq!(pins.verdict(), Some(Pin::LastStatement));
    assert_eq!(
        after(&mut pins, &query("SHOW ERRORS"), &ok(AUTOCOMMIT, 0, 0, &[])),
        None
    );
}

#[test]
fn state_pins_for_good_even_through_a_reset() {
    let mut pins = Pins::default();
    let user_var = [1u8, b'1'];
    after(
        &mut pins,
        &query("SET @x = 1"),
        &ok(AUTOCOMMIT, 0, 0, &[(2, &user_var)]),
    );
    assert_eq!(
        after(&mut pins, &query("SELECT @x"), &ok(AUTOCOMMIT, 0, 0, &[])),
        Some(Pin::SessionState)
    );
    // The reset keeps the schema and takes the primary's defaults: not the pool's any more.
    assert_eq!(
        after(
            &mut pins,
            &[COM_RESET_CONNECTION],
            &ok(AUTOCOMMIT, 0, 0, &[])
        ),
        Some(Pin::SessionState)
    );
    // A reset ends a transaction, and a session with nothing else is free again.
    let mut open = Pins::default();
    after(
        &mut open,
        &query("BEGIN"),
        &ok(AUTOCOMMIT | IN_TRANS, 0, 0, &[]),
    );
    assert_eq!(
        after(
            &mut open,
            &[COM_RESET_CONNECTION],
            &ok(AUTOCOMMIT, 0, 0, &[])
        ),
        None
    );
    // A change of user: the connection is another account's.
    let mut other = Pins::default();
    assert_eq!(
        after(
            &mut other,
            &[COM_CHANGE_USER, b'u', 0],
            &ok(AUTOCOMMIT, 0, 0, &[])
        ),
        Some(Pin::Command)
    );
    assert_eq!(
        after(
            &mut other,
            &[COM_RESET_CONNECTION],
            &ok(AUTOCOMMIT, 0, 0, &[])
        ),
        Some(Pin::Command)
    );
}

#[test]
fn select_last_insert_id_alone_is_recognised() {
    let cases: &[(&str, Option<&str>)] = &[
        ("SELECT LAST_INSERT_ID()", Some("LAST_INSERT_ID()")),
        (
            "  select  last_insert_id ( ) ; ",
            Some("last_insert_id ( )"),
        ),
        ("SELECT\nLast_Insert_Id()", Some("Last_Insert_Id()")),
        ("SELECT LAST_INSERT_ID() AS id", None),
        ("SELECT LAST_INSERT_ID(5)", None),
        ("SELECTLAST_INSERT_ID()", None),
        ("SELECT LAST_INSERT_ID(), 1", None),
        ("SELECT 1", None),
        ("", None),
    ];
    for (sql, expected) in cases {
        assert_eq!(
            super::asks_last_insert_id(sql.as_bytes()),
            expected.map(str::as_bytes),
            "{sql:?}"
        );
    }
}

#[test]
fn every_reason_has_its_metric_label() {
    let labels: Vec<&str> = Pin::ALL.iter().map(|pin| pin.label()).collect();
    assert_eq!(labels, crate::metrics::PIN_REASONS);
}

#[test]
fn an_empty_state_block_under_the_flag_pins() {
    // MariaDB's answer to `SET TRANSACTION …` (for the next transaction only).
    let mut payload = ok(AUTOCOMMIT, 0, 0, &[]);
    let status = AUTOCOMMIT | StatusFlags::SERVER_SESSION_STATE_CHANGED;
    payload[3..5].copy_from_slice(&status.bits().to_le_bytes());
    payload.push(0);
    let mut pins = Pins::default();
    assert_eq!(
        after(&mut pins, &query("SET TRANSACTION READ ONLY"), &payload),
        Some(Pin::SessionState)
    );
}

#[test]
fn a_legacy_eof_that_announces_a_change_pins_for_good() {
    let mut pins = Pins::default();
    pins.on_command(&query("SELECT 1"));
    pins.on_eof(AUTOCOMMIT | StatusFlags::SERVER_SESSION_STATE_CHANGED, 0);
    assert_eq!(pins.verdict(), Some(Pin::Tracking));
    let mut plain = Pins::default();
    plain.on_command(&query("SELECT 1"));
    plain.on_eof(AUTOCOMMIT, 0);
    assert_eq!(plain.verdict(), None);
}

/// What `SET NAMES <name>` makes MariaDB report: the state-change flag and the four variables
/// it assigns, as `charset`, `charset` and `collation` say.
fn set_names_ok(
    charset: &[u8],
    collation: Option<&[u8]>,
    extra: Option<(&[u8], &[u8])>,
) -> Vec<u8> {
    let change = lenenc(b"1");
    let mut variables = vec![
        variable(b"character_set_client", charset),
        variable(b"character_set_connection", charset),
        variable(b"character_set_results", charset),
    ];
    if let Some(collation) = collation {
        variables.push(variable(b"collation_connection", collation));
    }
    if let Some((name, value)) = extra {
        variables.push(variable(name, value));
    }
    let mut items: Vec<(u8, &[u8])> = vec![(2, &change)];
    items.extend(variables.iter().map(|v| (0, v.as_slice())));
    ok(AUTOCOMMIT, 0, 0, &items)
}

/// A `SET NAMES` case: its name, the login's collation, the statement, the OK, the verdict.
type NamesCase = (&'static str, u8, &'static str, Vec<u8>, Option<Pin>);

#[test]
fn set_names_of_the_logins_own_character_set_pins_nothing_and_any_other_does() {
    // 45 is utf8mb4_general_ci, which libmariadb asks for at login with utf8mb4.
    const UTF8MB4_GENERAL_CI: u8 = 45;
    let same = set_names_ok(b"utf8mb4", Some(b"utf8mb4_general_ci"), None);
    let cases: Vec<NamesCase> = vec![
        (
            "the login's own",
            UTF8MB4_GENERAL_CI,
            "SET NAMES utf8mb4",
            same.clone(),
            None,
        ),
        (
            "quoted, any case",
            UTF8MB4_GENERAL_CI,
            "set names 'UTF8MB4' ;",
            same.clone(),
            None,
        ),
        (
            "another character set",
            UTF8MB4_GENERAL_CI,
            "SET NAMES latin1",
            set_names_ok(b"latin1", Some(b"latin1_swedish_ci"), None),
            Some(Pin::SessionState),
        ),
        (
            "another collation",
            UTF8MB4_GENERAL_CI,
            "SET NAMES utf8mb4",
            set_names_ok(b"utf8mb4", Some(b"utf8mb4_uca1400_ai_ci"), None),
            Some(Pin::SessionState),
        ),
        (
            "collation_connection not tracked",
            UTF8MB4_GENERAL_CI,
            "SET NAMES utf8mb4",
            set_names_ok(b"utf8mb4", None, None),
            Some(Pin::SessionState),
        ),
        (
            "another variable reported besides",
            UTF8MB4_GENERAL_CI,
            "SET NAMES utf8mb4",
            set_names_ok(
                b"utf8mb4",
                Some(b"utf8mb4_general_ci"),
                Some((b"time_zone", b"+00:00")),
            ),
            Some(Pin::SessionState),
        ),
        (
            "a user variable set besides (no tracker names it)",
            UTF8MB4_GENERAL_CI,
            "SET NAMES utf8mb4, @x = 1",
            same.clone(),
            Some(Pin::SessionState),
        ),
        (
            "with a COLLATE",
            UTF8MB4_GENERAL_CI,
            "SET NAMES utf8mb4 COLLATE utf8mb4_general_ci",
            same.clone(),
            Some(Pin::SessionState),
        ),
        (
            "a login of unknown collation",
            0,
            "SET NAMES utf8mb4",
            same.clone(),
            Some(Pin::SessionState),
        ),
        (
            "another statement reporting the same",
            UTF8MB4_GENERAL_CI,
            "SET character_set_client = utf8mb4",
            same,
            Some(Pin::SessionState),
        ),
    ];
    for (name, login, sql, answer, expected) in cases {
        let mut pins = Pins::for_login(login);
        assert_eq!(after(&mut pins, &query(sql), &answer), expected, "{name}");
    }
}

#[test]
fn set_names_is_one_name_and_nothing_else() {
    for (sql, expected) in [
        ("SET NAMES utf8mb4", true),
        ("  set\tnames `latin1`;", true),
        ("SET NAMES \"utf8\"", true),
        ("SET NAMES", false),
        ("SET NAMES 'utf8mb4", false),
        ("SET NAMES utf8mb4 COLLATE utf8mb4_bin", false),
        ("SET NAMES utf8mb4, time_zone = '+00:00'", false),
        ("/* x */ SET NAMES utf8mb4", false),
        ("SET NAMES ''", false),
        ("SET CHARACTER SET utf8mb4", false),
    ] {
        assert_eq!(super::is_set_names(sql.as_bytes()), expected, "{sql}");
    }
}

#[test]
fn on_mariadb_set_names_is_judged_by_what_the_primary_was_found_to_give() {
    // MariaDB reports the character sets, never collation_connection.
    let reported = set_names_ok(b"utf8mb4", None, None);
    let ok = OkPacket::parse(&reported, true).expect("an OK");
    for (gives, expected) in [
        ("utf8mb4_general_ci", None),
        ("utf8mb4_uca1400_ai_ci", Some(Pin::SessionState)),
    ] {
        let mut pins = Pins::for_login(45);
        pins.on_command(&query("SET NAMES utf8mb4"));
        pins.on_ok(&ok, |charset, collation| {
            charset == "utf8mb4" && collation == gives
        });
        assert_eq!(pins.verdict(), expected, "SET NAMES gives {gives}");
    }
}
