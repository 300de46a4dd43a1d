//! The MariaDB tracker without a socket: reading a check's answer, the client's own view,
//! and whole set-ups and checks against a primary leg that answers from a script.

use super::super::testing::{context, failed, ok, row, Scripted};
use super::*;
use crate::asked::{names_session_quorum, AskedQuorum};

fn tracker() -> Tracker {
    Tracker::new(context())
}

/// A check's row: last GTID, tracked list, state change, domain, server id, seq no, quorum.
fn check_row(last: &str, list: &str, quorum: Option<&str>) -> Answer {
    row(&[
        Some(last),
        Some(list),
        Some("1"),
        Some("0"),
        Some("1"),
        Some("0"),
        quorum,
    ])
}

const INTACT: &str = "autocommit,last_gtid,session_track_state_change";

/// An OK whose state block reports `last_gtid` (and nothing else).
fn ok_reporting(gtid: &str) -> Vec<u8> {
    super::super::testing::ok_with_state(&[super::super::testing::variable("last_gtid", gtid)])
}

fn g(text: &str) -> Gtid {
    text.parse().unwrap()
}

#[test]
fn recognises_tracker_lists_that_include_a_variable() {
    let table: [(&[u8], &[u8], bool); 7] = [
        (
            b"autocommit,character_set_client,time_zone",
            LAST_GTID,
            false,
        ),
        (b"last_gtid", LAST_GTID, true),
        (b"autocommit, LAST_GTID", LAST_GTID, true),
        (b"*", LAST_GTID, true),
        (b"", LAST_GTID, false),
        (b"last_gtid_x", LAST_GTID, false),
        (
            b"last_gtid,session_track_state_change",
            SESSION_TRACK_STATE_CHANGE_VAR,
            true,
        ),
    ];
    for (list, name, want) in table {
        assert_eq!(
            tracks(list, name),
            want,
            "{}",
            String::from_utf8_lossy(list)
        );
    }
}

#[test]
fn a_check_reads_the_row_and_knows_when_tracking_is_intact() {
    let row = |values: [&str; 6]| -> Vec<Option<Vec<u8>>> {
        values
            .iter()
            .map(|v| (*v != "NULL").then(|| v.as_bytes().to_vec()))
            .collect()
    };
    let intact = Check::from_row(&row([
        "0-1-9",
        "autocommit,last_gtid,session_track_state_change",
        "1",
        "0",
        "1",
        "0",
    ]));
    assert!(intact.intact(false));
    assert!(!intact.intact(true), "transaction tracking was not read");
    assert!(!intact.may_hide_next_commit(Some(g("0-1-9"))));
    assert!(
        intact.may_hide_next_commit(Some(g("1-1-9"))),
        "another domain"
    );
    assert!(
        intact.may_hide_next_commit(Some(g("0-2-9"))),
        "another server id"
    );
    assert!(
        !intact.may_hide_next_commit(None),
        "a first commit is always reported"
    );
    let off = Check::from_row(&row(["", "last_gtid", "0", "0", "1", "5"]));
    assert!(!off.intact(false));
    assert!(off.may_hide_next_commit(None), "a forced sequence number");
    let cleared = Check::from_row(&row(["NULL", "", "1", "0", "1", "0"]));
    assert!(!cleared.intact(false));
    assert_eq!(cleared.last_gtid, b"");
}

#[test]
fn the_clients_view_follows_what_it_set_itself() {
    let mut t = Tracker {
        set_list: b"last_gtid,session_track_state_change".to_vec(),
        ..tracker()
    };
    let checked = |list: &str, state_change: bool| Check {
        list: list.as_bytes().to_vec(),
        state_change,
        ..Check::default()
    };
    // Unchanged list, state change still on: the client's view stays.
    t.take_in(&checked("last_gtid,session_track_state_change", true));
    assert!(!t.common.filter.keep_last_gtid && !t.common.filter.keep_state_change);
    // The client set its own list, with last_gtid in it, and turned state changes on (which
    // relaying that statement's OK already took in).
    t.common.filter.keep_state_change = true;
    t.take_in(&checked("last_gtid", true));
    assert!(t.common.filter.keep_last_gtid && t.common.filter.keep_state_change);
    // It turned them off again.
    t.take_in(&checked("last_gtid", false));
    assert!(!t.common.filter.keep_state_change);
}

#[test]
fn a_session_reads_only_its_snapshots_under_repeatable_read_with_snapshot_isolation() {
    let row = |values: [&str; 10]| -> Vec<Option<Vec<u8>>> {
        values.iter().map(|v| Some(v.as_bytes().to_vec())).collect()
    };
    let checked = |info: &str, isolation: &str, snapshot_isolation: &str| {
        Check::from_row(&row([
            "0-1-9",
            "last_gtid,session_track_state_change,session_track_transaction_info",
            "1",
            "0",
            "1",
            "0",
            "2",
            info,
            isolation,
            snapshot_isolation,
        ]))
    };
    let mut t = Tracker {
        snapshot_vars: true,
        ..tracker()
    };
    let ready = checked("CHARACTERISTICS", "REPEATABLE-READ", "1");
    assert!(ready.intact(true));
    assert_eq!(ready.quorum, AskedQuorum::Count(2));
    t.snapshot_settings(&ready, true);
    assert!(t.snapshot_ready);
    t.snapshot_settings(&ready, false);
    assert!(!t.snapshot_ready, "transactions not tracked");
    for (info, isolation, si) in [
        ("CHARACTERISTICS", "READ-COMMITTED", "1"),
        ("CHARACTERISTICS", "SERIALIZABLE", "1"),
        ("CHARACTERISTICS", "REPEATABLE-READ", "0"),
    ] {
        t.snapshot_settings(&checked(info, isolation, si), true);
        assert!(!t.snapshot_ready, "{isolation} {si}");
    }
    // The client switched transaction tracking to STATE: it sees state items, not
    // characteristics, and the proxy's tracking is not intact until put back.
    let state = checked("STATE", "REPEATABLE-READ", "1");
    assert!(!state.intact(true));
    t.take_in(&state);
    assert!(
        t.common.filter.keep_transaction_state && !t.common.filter.keep_transaction_characteristics
    );
    t.take_in(&checked("OFF", "REPEATABLE-READ", "1"));
    assert!(!t.common.filter.keep_transaction_state);
    // Without the snapshot variables (an older server) nothing is ever ready.
    let mut old = tracker();
    old.snapshot_settings(&ready, true);
    assert!(!old.snapshot_ready);
}

#[test]
fn the_session_quorum_is_a_count_or_nothing() {
    let with = |value: Option<&str>| {
        let mut row: Vec<Option<Vec<u8>>> = vec![Some(b"0".to_vec()); 6];
        row.push(value.map(|v| v.as_bytes().to_vec()));
        Check::from_row(&row).quorum
    };
    assert_eq!(with(None), AskedQuorum::Unset);
    assert_eq!(with(Some("3")), AskedQuorum::Count(3));
    assert_eq!(with(Some("0")), AskedQuorum::Count(0));
    for bad in ["2.5", "-1", "two", ""] {
        assert_eq!(with(Some(bad)), AskedQuorum::Invalid(bad.into()), "{bad}");
    }
}

#[test]
fn finds_the_session_quorum_variable_named_in_any_case() {
    for text in [
        &b"SET @strongsync_quorum = 2"[..],
        b"select 3 into @StrongSync_Quorum",
        b"SET @a=1,@strongsync_quorum:=0",
        b"strongsync_quorum",
    ] {
        assert!(
            names_session_quorum(text),
            "{}",
            String::from_utf8_lossy(text)
        );
    }
    for text in [
        &b"SET @strongsync_quorun = 2"[..],
        b"SELECT 1",
        b"_quorum",
        b"strongsync_",
        b"",
    ] {
        assert!(
            !names_session_quorum(text),
            "{}",
            String::from_utf8_lossy(text)
        );
    }
}

#[tokio::test]
async fn a_set_up_reads_the_clients_tracking_and_adds_the_proxys_in_one_round_trip() {
    let mut t = tracker();
    let mut primary = Scripted::answering([
        check_row("0-1-4", "autocommit", Some("2")),
        ok(),
        row(&[Some(INTACT)]),
    ]);
    t.set_up(&mut primary).await.unwrap();
    assert_eq!(primary.asked, [CHECK, ENABLE, READ_BACK]);
    assert_eq!(t.checks_every_response(), None, "tracking is on");
    assert_eq!(t.common.quorum, Some(2));
    assert!(
        !t.common.filter.keep_last_gtid,
        "the client's own list lacks last_gtid"
    );
    assert!(t.common.filter.keep_state_change);
    // The session's last commit is known: a late repeat of it is no news, the next one is.
    let repeat = ok_reporting("0-1-4");
    let repeat = OkPacket::parse(&repeat, true).unwrap();
    assert_eq!(t.on_ok(&repeat), OkNews::default());
    let next = ok_reporting("0-1-5");
    let next = OkPacket::parse(&next, true).unwrap();
    let news = t.on_ok(&next);
    assert_eq!(news.committed.as_slice(), [g("0-1-5")]);
    assert_eq!(news.check, None, "a bare last_gtid report is routine");
}

#[tokio::test]
async fn a_server_without_snapshot_isolation_is_set_up_again_without_it() {
    let mut t = Tracker::new(TrackerContext {
        snapshot_vars: true,
        ..context()
    });
    let mut primary = Scripted::answering([
        failed(ER_UNKNOWN_SYSTEM_VARIABLE),
        ok(),
        row(&[Some(INTACT)]),
        ok(),
        check_row("", "", None),
        ok(),
        row(&[Some(INTACT)]),
    ]);
    t.set_up(&mut primary).await.unwrap();
    assert_eq!(
        primary.asked,
        [
            CHECK_SNAPSHOT,
            ENABLE_SNAPSHOT,
            READ_BACK,
            DEFAULTS,
            CHECK,
            ENABLE,
            READ_BACK
        ]
    );
    assert_eq!(t.checks_every_response(), None);
    assert!(!t.snapshot_ready());
}

#[tokio::test]
async fn a_check_learns_an_unreported_commit_and_puts_back_what_the_client_took_away() {
    let mut t = tracker();
    t.set_up(&mut Scripted::answering([
        check_row("0-1-4", "", None),
        ok(),
        row(&[Some("last_gtid,session_track_state_change")]),
    ]))
    .await
    .unwrap();
    // The client cleared the tracked list in a procedure that also committed.
    let mut primary = Scripted::answering([
        check_row("0-1-5", "", None),
        ok(),
        row(&[Some("last_gtid,session_track_state_change")]),
    ]);
    let checked = t
        .check(CheckReason::StateChange, &mut primary)
        .await
        .unwrap();
    assert_eq!(checked.committed, Some(g("0-1-5")));
    assert_eq!(checked.unlearnt, None);
    assert_eq!(
        primary.asked,
        [CHECK, ENABLE, READ_BACK],
        "tracking put back"
    );
    assert_eq!(t.common.context.metrics.tracking_restored.get(), 1);
    // The same commit read again is not a second one.
    let mut again = Scripted::answering([check_row(
        "0-1-5",
        "last_gtid,session_track_state_change",
        None,
    )]);
    let checked = t.check(CheckReason::StateChange, &mut again).await.unwrap();
    assert_eq!(checked, Checked::default());
    assert_eq!(again.asked, [CHECK], "intact: nothing to put back");
}

#[tokio::test]
async fn a_check_that_cannot_read_what_the_session_committed_asks_for_a_bound() {
    let mut t = tracker();
    let mut primary = Scripted::answering([failed(1105)]);
    let checked = t.check(CheckReason::LegacyEof, &mut primary).await.unwrap();
    assert!(
        matches!(
            checked.unlearnt,
            Some(Unlearnt::Bound(Unresolved::BoundUnreadable(_)))
        ),
        "{checked:?}"
    );
    assert_eq!(t.checks_every_response(), Some(CheckReason::Untracked));
    let mut garbled = Scripted::answering([check_row("0-1-x", INTACT, None)]);
    let checked = t
        .check(CheckReason::StateChange, &mut garbled)
        .await
        .unwrap();
    assert!(
        matches!(checked.unlearnt, Some(Unlearnt::Bound(_))),
        "{checked:?}"
    );
}

// === Set up from the primary's defaults ===

/// A tracker whose primary's defaults hold what is needed, set up: no statement.
async fn from_defaults() -> Tracker {
    let mut t = tracker();
    t.common.context.proxy.session_defaults().record(Ok(()));
    let mut primary = Scripted::default();
    t.set_up(&mut primary).await.unwrap();
    assert!(primary.asked.is_empty(), "{:?}", primary.asked);
    t
}

fn said(t: &mut Tracker, command: &str, ok: &[u8]) -> OkNews {
    let mut payload = vec![COM_QUERY];
    payload.extend_from_slice(command.as_bytes());
    t.note_command(&payload);
    t.on_ok(&OkPacket::parse(ok, true).unwrap())
}

#[tokio::test]
async fn from_the_defaults_a_session_learns_from_its_responses_and_asks_nothing() {
    let mut t = from_defaults().await;
    assert_eq!(t.checks_every_response(), None);
    let commit = said(&mut t, "INSERT INTO t VALUES (1)", &ok_reporting("0-1-5"));
    assert_eq!(commit.committed.as_slice(), [g("0-1-5")]);
    assert_eq!(commit.check, None);
    // A plain statement's change of state is its own.
    let state = super::super::testing::ok_with_state(&[super::super::testing::state_change_item()]);
    for plain in [
        "SET @a = 1",
        "SET NAMES utf8mb4",
        "USE sbtest",
        "CREATE TEMPORARY TABLE tt (a INT)",
    ] {
        assert_eq!(said(&mut t, plain, &state), OkNews::default(), "{plain}");
    }
    assert_eq!(t.checks_every_response(), None);
    // The client sees every item the server sends: the defaults are its own.
    assert!(t.common.filter.keep_last_gtid && t.common.filter.keep_state_change);
}

#[tokio::test]
async fn stored_code_that_changes_the_state_bounds_the_session_until_it_is_reset() {
    let mut t = from_defaults().await;
    let state = super::super::testing::ok_with_state(&[super::super::testing::state_change_item()]);
    let news = said(&mut t, "CALL p()", &state);
    assert_eq!(news.check, Some(CheckReason::StateChange));
    let mut primary = Scripted::default();
    let checked = t
        .check(CheckReason::StateChange, &mut primary)
        .await
        .unwrap();
    assert!(matches!(
        checked.unlearnt,
        Some(Unlearnt::Bound(Unresolved::Unreported { .. }))
    ));
    assert!(primary.asked.is_empty(), "{:?}", primary.asked);
    // Every later response is bounded too, even a bare commit report.
    assert_eq!(t.checks_every_response(), Some(CheckReason::Untracked));
    said(&mut t, "INSERT INTO t VALUES (2)", &ok_reporting("0-1-6"));
    let checked = t.check(CheckReason::Untracked, &mut primary).await.unwrap();
    assert!(checked.unlearnt.is_some());
    // A reset sets it up from the defaults again.
    t.note_command(&[strongsync_proto::command::COM_RESET_CONNECTION]);
    assert!(t.common.reset);
    t.set_up(&mut primary).await.unwrap();
    assert_eq!(t.checks_every_response(), None);
    assert!(primary.asked.is_empty(), "{:?}", primary.asked);
}

#[tokio::test]
async fn a_reported_list_without_what_is_needed_or_a_domain_switch_is_bounded() {
    let mut t = from_defaults().await;
    let list = super::super::testing::ok_with_state(&[super::super::testing::variable(
        "session_track_system_variables",
        "last_gtid,session_track_system_variables",
    )]);
    // A SET of literals commits nothing: its own response goes; every later one is bounded.
    let news = said(&mut t, "SET session_track_system_variables = 'x'", &list);
    assert_eq!(news.check, None);
    assert_eq!(t.checks_every_response(), Some(CheckReason::Untracked));

    let mut t = from_defaults().await;
    said(&mut t, "INSERT INTO t VALUES (1)", &ok_reporting("0-1-5"));
    let domain = super::super::testing::ok_with_state(&[super::super::testing::variable(
        "gtid_domain_id",
        "1",
    )]);
    // Reported by value: the session stays trusted, and its responses are bounded until its
    // next commit is reported.
    assert_eq!(said(&mut t, "SET gtid_domain_id = 1", &domain).check, None);
    assert_eq!(t.checks_every_response(), Some(CheckReason::DomainSwitch));
    said(&mut t, "INSERT INTO t VALUES (2)", &ok_reporting("1-1-6"));
    assert_eq!(t.checks_every_response(), None);
}

#[tokio::test]
async fn the_quorum_it_asks_for_is_the_one_statement_it_gets() {
    let mut t = from_defaults().await;
    let mut payload = vec![COM_QUERY];
    payload.extend_from_slice(b"SET @strongsync_quorum = 2");
    assert_eq!(t.note_command(&payload), Some(CheckReason::SessionQuorum));
    let mut primary = Scripted::answering([row(&[Some("2")])]);
    let checked = t
        .check(CheckReason::SessionQuorum, &mut primary)
        .await
        .unwrap();
    assert_eq!(checked, Checked::default());
    assert_eq!(primary.asked.len(), 1);
    assert_eq!(t.common.quorum, Some(2));
}

#[tokio::test]
async fn a_session_set_up_after_the_last_good_look_at_defaults_that_went_is_bounded() {
    let t = from_defaults().await;
    assert_eq!(t.checks_every_response(), None);
    t.common
        .context
        .proxy
        .session_defaults()
        .record(Err(crate::tracking_defaults::DefaultsLack {
            lacks: vec![crate::tracking_defaults::Lack::StateChangeOff],
            required: &["session_track_state_change"],
            gtids: false,
        }));
    assert_eq!(t.checks_every_response(), Some(CheckReason::Untracked));
}
