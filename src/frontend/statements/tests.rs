use std::sync::Arc;

use strongsync_proto::command::{COM_STMT_EXECUTE, COM_STMT_RESET};
use strongsync_proto::stmt::{PrepareOk, LAST_PREPARED};

use super::{ConnStatements, SessionStatements, Text};

fn prepare(session: &mut SessionStatements, conn: &mut ConnStatements, text: &str, id: u32) -> u32 {
    session.preparing(text.as_bytes(), true);
    session.prepared(PrepareOk { id, params: 1 }, conn)
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
    session.preparing(b"SELECT CONNECTION_ID()", true);
    let last = session.prepared(PrepareOk { id: 4, params: 0 }, &mut conn);
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
    assert_eq!(conn.take_twice(), None);
    prepare(&mut other, &mut conn, "SELECT ?", 6);
    assert_eq!(conn.take_twice(), Some(6));
    assert_eq!(conn.touch(b"SELECT ?"), Some(5));
}

#[test]
fn the_least_recently_used_statement_makes_room() {
    let mut conn = ConnStatements::default();
    conn.insert(Arc::from(&b"a"[..]), 1);
    conn.insert(Arc::from(&b"b"[..]), 2);
    conn.insert(Arc::from(&b"c"[..]), 3);
    conn.touch(b"a");
    assert_eq!(conn.make_room(4), None, "below the limit");
    assert_eq!(conn.make_room(3), Some(2));
    assert_eq!(conn.touch(b"b"), None);
    assert_eq!(conn.make_room(2), Some(3));
}

#[test]
fn types_are_known_per_connection_until_an_error_or_a_reset() {
    let mut conn = ConnStatements::default();
    let text: Arc<[u8]> = Arc::from(&b"SELECT ?"[..]);
    conn.insert(Arc::clone(&text), 1);
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
    session.preparing(b"SELECT ... (16 MiB)", false);
    let id = session.prepared(PrepareOk { id: 9, params: 0 }, &mut conn);
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
}
