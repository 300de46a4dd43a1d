//! The MySQL tracker without a socket: set-ups and checks against a primary leg that answers
//! from a script, and what OK packets as MySQL 9.7 sends them tell it.

use strongsync_proto::ok::OkPacket;

use super::super::testing::{
    context, failed, gtids_item, ok, ok_with_state, row, state_change_item, variable, Scripted,
};
use super::*;

const UUID: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
const INTACT: &str = "time_zone,autocommit,session_track_gtids,session_track_state_change,session_track_system_variables";

fn tracker() -> Tracker {
    Tracker::new(context())
}

/// A check's row: session_track_gtids, the tracked list, state change, quorum.
fn check_row(gtids: &str, list: &str, state_change: bool, quorum: Option<&str>) -> Answer {
    row(&[
        Some(gtids),
        Some(list),
        Some(if state_change { "1" } else { "0" }),
        quorum,
    ])
}

async fn set_up() -> Tracker {
    let mut t = tracker();
    let mut primary = Scripted::answering([
        check_row("OFF", "time_zone,autocommit", false, None),
        ok(),
        check_row("OWN_GTID", INTACT, true, None),
    ]);
    t.set_up(&mut primary).await.unwrap();
    t
}

fn news(t: &mut Tracker, payload: &[u8]) -> OkNews {
    let ok = OkPacket::parse(payload, true).unwrap();
    t.on_ok(&ok)
}

fn gtid(n: u64) -> Gtid {
    Gtid::parse_mysql(&format!("{UUID}:{n}")).unwrap()
}

#[tokio::test]
async fn a_set_up_reads_the_clients_tracking_and_adds_the_proxys_in_one_round_trip() {
    let mut t = tracker();
    let mut primary = Scripted::answering([
        check_row("OFF", "time_zone,autocommit", false, Some("2")),
        ok(),
        check_row("OWN_GTID", INTACT, true, Some("2")),
    ]);
    t.set_up(&mut primary).await.unwrap();
    assert_eq!(primary.asked, [CHECK, ENABLE, CHECK]);
    assert!(t.common.active);
    assert_eq!(t.checks_every_response(), None);
    let filter = t.common.filter;
    assert!(!filter.keep_gtids && !filter.keep_state_change);
    assert!(!filter.keep_gtids_var && !filter.keep_list_var && !filter.keep_state_change_var);
    assert_eq!(t.common.quorum, Some(2));
}

#[tokio::test]
async fn tracking_that_does_not_take_leaves_every_response_checked() {
    let mut t = tracker();
    let mut primary = Scripted::answering([
        check_row("OFF", "", false, None),
        failed(1227),
        check_row("OFF", "", false, None),
    ]);
    t.set_up(&mut primary).await.unwrap();
    assert!(!t.common.active);
    assert_eq!(t.checks_every_response(), Some(CheckReason::Untracked));
    // Every check then bounds the response by the primary's position.
    let mut primary = Scripted::answering([
        check_row("OFF", "", false, None),
        failed(1227),
        check_row("OFF", "", false, None),
    ]);
    let checked = t.check(CheckReason::Untracked, &mut primary).await.unwrap();
    assert!(matches!(
        checked.unlearnt,
        Some(Unlearnt::Bound(Unresolved::Unreported { .. }))
    ));
}

#[tokio::test]
async fn a_commit_reports_its_own_gtids() {
    let mut t = set_up().await;
    let one = news(&mut t, &ok_with_state(&[gtids_item(&format!("{UUID}:23"))]));
    assert_eq!(one.committed.as_slice(), [gtid(23)]);
    assert_eq!(one.check, None, "a bare GTID report is routine");
    let two = news(
        &mut t,
        &ok_with_state(&[gtids_item(&format!("{UUID}:24-25"))]),
    );
    // A range is waited for by its last: the replica that holds it holds the rest.
    assert_eq!(two.committed.as_slice(), [gtid(25)]);
    let tagged = news(
        &mut t,
        &ok_with_state(&[gtids_item(&format!("{UUID}:batch:3"))]),
    );
    assert_eq!(tagged.committed[0].to_string(), format!("{UUID}:batch:3"));
}

#[tokio::test]
async fn an_unreadable_report_is_bounded_by_the_primarys_position() {
    for text in ["not a gtid".to_string(), format!("{UUID}:7-3")] {
        let mut t = set_up().await;
        let news = news(&mut t, &ok_with_state(&[gtids_item(&text)]));
        assert!(news.committed.is_empty());
        assert_eq!(news.check, Some(CheckReason::StateChange));
        let mut primary = Scripted::answering([check_row("OWN_GTID", INTACT, true, None)]);
        let checked = t
            .check(CheckReason::StateChange, &mut primary)
            .await
            .unwrap();
        assert!(
            matches!(
                checked.unlearnt,
                Some(Unlearnt::Bound(Unresolved::Unreported { .. }))
            ),
            "{text}: {checked:?}"
        );
    }
}

#[tokio::test]
async fn switching_tracking_off_is_seen_bounded_and_put_back() {
    let mut t = set_up().await;
    // SET session_track_gtids = OFF, directly or in a procedure or prepared statement: the
    // variable is tracked, so its OK names it.
    let payload = ok_with_state(&[variable("session_track_gtids", "OFF"), state_change_item()]);
    let news = news(&mut t, &payload);
    assert_eq!(news.check, Some(CheckReason::StateChange));
    assert!(!t.common.filter.keep_gtids, "the client asked for none");
    let mut primary = Scripted::answering([
        check_row("OFF", INTACT, true, None),
        ok(),
        check_row("OWN_GTID", INTACT, true, None),
    ]);
    let checked = t
        .check(CheckReason::StateChange, &mut primary)
        .await
        .unwrap();
    assert!(matches!(
        checked.unlearnt,
        Some(Unlearnt::Bound(Unresolved::Unreported { .. }))
    ));
    assert_eq!(
        primary.asked,
        [CHECK, ENABLE, CHECK],
        "tracking is put back"
    );
    assert!(t.common.active);
    // Switched off and on again in one response: still bounded, nothing to put back.
    let payload = ok_with_state(&[
        variable("session_track_gtids", "OWN_GTID"),
        state_change_item(),
    ]);
    news_then_bounded(&mut t, &payload).await;
}

async fn news_then_bounded(t: &mut Tracker, payload: &[u8]) {
    let news = news(t, payload);
    assert_eq!(news.check, Some(CheckReason::StateChange));
    let mut primary = Scripted::answering([check_row("OWN_GTID", INTACT, true, None)]);
    let checked = t
        .check(CheckReason::StateChange, &mut primary)
        .await
        .unwrap();
    assert!(
        matches!(checked.unlearnt, Some(Unlearnt::Bound(_))),
        "{checked:?}"
    );
    assert_eq!(primary.asked, [CHECK]);
}

#[tokio::test]
async fn changing_the_list_or_the_state_change_tracker_is_seen() {
    let mut t = set_up().await;
    let payload = ok_with_state(&[variable("session_track_system_variables", "autocommit")]);
    news_then_bounded(&mut t, &payload).await;
    assert!(!t.common.filter.keep_gtids_var);
    let payload = ok_with_state(&[variable("session_track_state_change", "OFF")]);
    news_then_bounded(&mut t, &payload).await;
    let payload = ok_with_state(&[variable("session_track_system_variables", "*")]);
    news_then_bounded(&mut t, &payload).await;
    assert!(t.common.filter.keep_gtids_var && t.common.filter.keep_list_var);
}

#[tokio::test]
async fn another_state_change_is_checked_and_bounds_nothing() {
    let mut t = set_up().await;
    let payload = ok_with_state(&[state_change_item()]);
    assert_eq!(news(&mut t, &payload).check, Some(CheckReason::StateChange));
    let mut primary = Scripted::answering([check_row("OWN_GTID", INTACT, true, Some("2"))]);
    let checked = t
        .check(CheckReason::StateChange, &mut primary)
        .await
        .unwrap();
    assert_eq!(checked, Checked::default());
    assert_eq!(t.common.quorum, Some(2));
}

#[tokio::test]
async fn a_legacy_eof_is_bounded() {
    let mut t = set_up().await;
    let mut primary = Scripted::answering([check_row("OWN_GTID", INTACT, true, None)]);
    let checked = t.check(CheckReason::LegacyEof, &mut primary).await.unwrap();
    assert!(matches!(
        checked.unlearnt,
        Some(Unlearnt::Bound(Unresolved::Unreported { .. }))
    ));
}

#[tokio::test]
async fn a_report_is_waited_for_by_the_last_of_each_interval() {
    let mut t = set_up().await;
    // A CALL that committed ten thousand transactions reports them as one range.
    let one = news(
        &mut t,
        &ok_with_state(&[gtids_item(&format!("{UUID}:1-10000"))]),
    );
    assert_eq!(one.committed.as_slice(), [gtid(10000)]);
    assert_eq!(one.check, None);
    // Interleaved with other sessions' commits, every interval is waited for by its last.
    let gaps: Vec<String> = (0..5000).map(|n| (2 * n + 1).to_string()).collect();
    let report = format!("{UUID}:{}", gaps.join(":"));
    let many = news(&mut t, &ok_with_state(&[gtids_item(&report)]));
    assert_eq!(many.committed.len(), 5000);
    assert_eq!(many.committed.last(), Some(&gtid(9999)));
}

#[tokio::test]
async fn all_gtids_reports_are_waited_for_whole() {
    let mut t = tracker();
    let mut primary = Scripted::answering([
        check_row("ALL_GTIDS", INTACT, true, None),
        ok(),
        check_row("ALL_GTIDS", INTACT, true, None),
    ]);
    t.set_up(&mut primary).await.unwrap();
    assert!(t.common.filter.keep_gtids);
    let news = news(
        &mut t,
        &ok_with_state(&[gtids_item(&format!("{UUID}:1-900:1000"))]),
    );
    assert_eq!(news.committed.as_slice(), [gtid(900), gtid(1000)]);
}

// === Set up from the primary's defaults ===

async fn from_defaults() -> Tracker {
    let mut t = tracker();
    t.common.context.proxy.session_defaults().record(Ok(()));
    let mut primary = Scripted::default();
    t.set_up(&mut primary).await.unwrap();
    assert!(primary.asked.is_empty(), "{:?}", primary.asked);
    t
}

fn said(t: &mut Tracker, command: &str, ok: &[u8]) -> OkNews {
    let mut payload = vec![strongsync_proto::command::COM_QUERY];
    payload.extend_from_slice(command.as_bytes());
    t.note_command(&payload);
    news(t, ok)
}

#[tokio::test]
async fn from_the_defaults_a_session_learns_from_its_responses_and_asks_nothing() {
    let mut t = from_defaults().await;
    let commit = said(
        &mut t,
        "INSERT INTO t VALUES (1)",
        &ok_with_state(&[gtids_item(&format!("{UUID}:7"))]),
    );
    assert_eq!(commit.committed.as_slice(), [gtid(7)]);
    assert_eq!(commit.check, None);
    let state = ok_with_state(&[state_change_item()]);
    assert_eq!(
        said(&mut t, "SET @x = CAST('9x' AS UNSIGNED)", &state),
        OkNews::default()
    );
    assert_eq!(t.checks_every_response(), None);
}

#[tokio::test]
async fn switching_gtid_reports_off_or_stored_code_bounds_the_session() {
    let mut t = from_defaults().await;
    let off = ok_with_state(&[variable("session_track_gtids", "OFF")]);
    assert_eq!(
        said(&mut t, "SET session_track_gtids = OFF", &off).check,
        None
    );
    assert_eq!(t.checks_every_response(), Some(CheckReason::Untracked));
    said(
        &mut t,
        "INSERT INTO t VALUES (1)",
        &ok_with_state(&[state_change_item()]),
    );
    let mut primary = Scripted::default();
    let checked = t.check(CheckReason::Untracked, &mut primary).await.unwrap();
    assert!(matches!(checked.unlearnt, Some(Unlearnt::Bound(_))));
    assert!(primary.asked.is_empty());

    let mut t = from_defaults().await;
    let state = ok_with_state(&[state_change_item()]);
    assert_eq!(
        said(&mut t, "CALL p()", &state).check,
        Some(CheckReason::StateChange)
    );
    assert_eq!(t.checks_every_response(), Some(CheckReason::Untracked));
}
