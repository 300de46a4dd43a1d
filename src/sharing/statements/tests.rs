use std::sync::Arc;

use strongsync_proto::command::{
    COM_STMT_EXECUTE, COM_STMT_FETCH, COM_STMT_RESET, COM_STMT_SEND_LONG_DATA,
};
use strongsync_proto::stmt::{PrepareOk, LAST_PREPARED};

use crate::sharing::pin::lives_on_connection;

use super::{ConnStatements, SessionStatements, StatementLimits, Text};

const LIMITS: StatementLimits = StatementLimits {
    per_connection: 128,
    per_session: 1024,
    bytes: 1 << 20,
};

fn prepare(session: &mut SessionStatements, conn: &mut ConnStatements, text: &str, id: u32) -> u32 {
    assert!(session.preparing(text.as_bytes(), true, LIMITS));
    session.prepared(PrepareOk { id, params: 1 }, conn, LIMITS)
}

fn execute(id: u32) -> Vec<u8> {
    let mut payload = vec![COM_STMT_EXECUTE];
    payload.extend_from_slice(&id.to_le_bytes());
    payload
}

#[test]
fn a_session_numbers_its_statements_itself_whatever_the_connections_call_them() {
    let (mut session, mut a, mut b) = Default::default();
    let first = prepare(&mut session, &mut a, "SELECT ?", 7);
    let second = prepare(&mut session, &mut b, "SELECT ? + 1", 7);
    assert_eq!(
        (first, second),
        (1, 2),
        "two statements the connections both call 7"
    );
    assert_eq!(
        session.close(first),
        None,
        "a shared statement closes nowhere"
    );
    assert_eq!(
        prepare(&mut session, &mut a, "SELECT ? + 2", 8),
        3,
        "a closed id is not given again at once"
    );
}

#[test]
fn the_last_prepared_id_names_the_sessions_last_statement() {
    let (mut session, mut conn): (SessionStatements, ConnStatements) = Default::default();
    prepare(&mut session, &mut conn, "SELECT 1", 3);
    session.preparing(b"SELECT CONNECTION_ID()", true, LIMITS);
    let last = session.prepared(PrepareOk { id: 4, params: 0 }, &mut conn, LIMITS);
    let words = session.words_of(&execute(LAST_PREPARED));
    assert_eq!(words, session.words_of(&execute(last)));
    assert_ne!(
        words,
        Some(0),
        "its words are the connection-id statement's"
    );
    session.close(last);
    assert_eq!(session.words_of(&execute(LAST_PREPARED)), None);
}

#[test]
fn a_statement_prepared_twice_on_a_connection_keeps_the_first_and_closes_the_second() {
    let (mut one, mut other, mut conn) = Default::default();
    prepare(&mut one, &mut conn, "SELECT ?", 5);
    assert!(conn.to_close.is_empty());
    prepare(&mut other, &mut conn, "SELECT ?", 6);
    assert_eq!(conn.to_close, [6]);
    assert_eq!(conn.touch(b"SELECT ?"), Some(5));
}

#[test]
fn past_its_limits_a_connection_closes_the_statements_used_least_recently() {
    let limits = StatementLimits {
        per_connection: 3,
        bytes: 10,
        ..LIMITS
    };
    let mut conn = ConnStatements::default();
    conn.insert(Arc::from(&b"a"[..]), 1, limits);
    conn.insert(Arc::from(&b"b"[..]), 2, limits);
    conn.insert(Arc::from(&b"c"[..]), 3, limits);
    conn.touch(b"a");
    assert!(conn.to_close.is_empty(), "at the limit, not past it");
    conn.insert(Arc::from(&b"d"[..]), 4, limits);
    assert_eq!(conn.to_close, [2], "b was used least recently");
    assert_eq!(conn.touch(b"b"), None);
    conn.to_close.clear();
    // Eight bytes more: four statements of 11 bytes, so the one used least recently goes.
    conn.insert(Arc::from(&b"eeeeeeee"[..]), 5, limits);
    assert_eq!(conn.to_close, [3]);
    assert_eq!(conn.bytes, 10);
    conn.to_close.clear();
    // A text past the bytes on its own stays; the others make what room they can.
    conn.insert(Arc::from(&b"fffffffffff"[..]), 6, limits);
    assert_eq!(conn.to_close, [1, 4, 5]);
    assert_eq!(conn.touch(b"fffffffffff"), Some(6));
}

#[test]
fn a_statement_with_a_cursor_or_long_data_is_never_closed_to_make_room() {
    let limits = StatementLimits {
        per_connection: 2,
        ..LIMITS
    };
    let mut conn = ConnStatements::default();
    conn.insert(Arc::from(&b"a"[..]), 1, limits);
    conn.hold(b"a");
    conn.insert(Arc::from(&b"b"[..]), 2, limits);
    conn.insert(Arc::from(&b"c"[..]), 3, limits);
    assert_eq!(conn.to_close, [2], "a is older, but its cursor lives on it");
    conn.to_close.clear();
    conn.hold(b"c");
    conn.insert(Arc::from(&b"d"[..]), 4, limits);
    assert!(
        conn.to_close.is_empty(),
        "past the limit rather than lose one"
    );
    assert_eq!((conn.touch(b"a"), conn.touch(b"c")), (Some(1), Some(3)));
}

#[test]
fn what_lives_on_a_connection_is_a_cursor_or_parameters_sent_ahead() {
    let mut cursor = execute(1);
    cursor.extend_from_slice(&[0x01, 1, 0, 0, 0]);
    let mut plain = execute(1);
    plain.extend_from_slice(&[0x00, 1, 0, 0, 0]);
    let fetch = [COM_STMT_FETCH, 1, 0, 0, 0, 10, 0, 0, 0];
    let long_data = [COM_STMT_SEND_LONG_DATA, 1, 0, 0, 0, 0, 0, b'x'];
    assert!(lives_on_connection(&cursor));
    assert!(lives_on_connection(&fetch));
    assert!(lives_on_connection(&long_data));
    assert!(!lives_on_connection(&plain));
    assert!(!lives_on_connection(&execute(1)), "too short to say");
    assert!(!lives_on_connection(&[COM_STMT_RESET, 1, 0, 0, 0]));
}

#[test]
fn a_session_keeps_text_within_its_bytes_and_the_rest_live_on_their_connection() {
    let limits = StatementLimits {
        bytes: 12,
        ..LIMITS
    };
    let (mut session, mut conn): (SessionStatements, ConnStatements) = Default::default();
    assert!(session.preparing(b"SELECT 1", true, limits));
    let kept = session.prepared(PrepareOk { id: 1, params: 0 }, &mut conn, limits);
    assert!(!session.preparing(b"SELECT 2", true, limits), "8 + 8 bytes");
    let own = session.prepared(PrepareOk { id: 2, params: 0 }, &mut conn, limits);
    assert!(matches!(session.by_id[&own].text, Text::Own(2)));
    session.close(kept);
    assert!(
        session.preparing(b"SELECT 3", true, limits),
        "its bytes are free again"
    );
}

#[test]
fn types_are_known_per_connection_until_an_error_or_a_reset() {
    let mut conn = ConnStatements::default();
    let text: Arc<[u8]> = Arc::from(&b"SELECT ?"[..]);
    conn.insert(Arc::clone(&text), 1, LIMITS);
    assert!(!conn.has_bound(&text, &[8, 0]), "nothing executed yet");
    conn.bound(&text, &[8, 0]);
    assert!(conn.has_bound(&text, &[8, 0]));
    assert!(!conn.has_bound(&text, &[253, 0]));
    conn.executing = Some(Arc::clone(&text));
    conn.failed();
    assert!(
        !conn.has_bound(&text, &[8, 0]),
        "an error leaves them in doubt"
    );
    conn.bound(&text, &[8, 0]);
    conn.forget();
    assert_eq!(
        conn.touch(&text),
        None,
        "a reset closes the connection's statements"
    );
}

#[test]
fn a_prepare_in_several_packets_lives_on_its_connection_only() {
    let (mut session, mut conn): (SessionStatements, ConnStatements) = Default::default();
    assert!(!session.preparing(b"SELECT ... (16 MiB)", false, LIMITS));
    let id = session.prepared(PrepareOk { id: 9, params: 0 }, &mut conn, LIMITS);
    assert!(matches!(session.by_id[&id].text, Text::Own(9)));
    assert_eq!(conn.touch(b"SELECT ... (16 MiB)"), None);
    assert_eq!(session.close(id), Some(9), "closed on its connection");
}

#[test]
fn a_reset_forgets_the_sessions_statements() {
    let (mut session, mut conn) = Default::default();
    let id = prepare(&mut session, &mut conn, "SELECT ?", 1);
    session.forget();
    assert_eq!(session.words_of(&execute(id)), None);
    let mut reset = vec![COM_STMT_RESET];
    reset.extend_from_slice(&id.to_le_bytes());
    assert_eq!(session.words_of(&reset), None);
    assert!(session.has_room(1), "and its count");
}
