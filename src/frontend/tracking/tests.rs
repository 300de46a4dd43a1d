//! The tracking check's pure parts: reading its answer, and the client's own view.

use super::*;

fn g(text: &str) -> MariaGtid {
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
    let intact = Checked::from_row(&row([
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
    let off = Checked::from_row(&row(["", "last_gtid", "0", "0", "1", "5"]));
    assert!(!off.intact(false));
    assert!(off.may_hide_next_commit(None), "a forced sequence number");
    let cleared = Checked::from_row(&row(["NULL", "", "1", "0", "1", "0"]));
    assert!(!cleared.intact(false));
    assert_eq!(cleared.last_gtid, b"");
}

#[test]
fn the_clients_view_follows_what_it_set_itself() {
    let mut t = Tracking {
        filter: TrackingFilter {
            client_tracks: true,
            ..TrackingFilter::default()
        },
        set_list: b"last_gtid,session_track_state_change".to_vec(),
        ..Tracking::default()
    };
    let checked = |list: &str, state_change: bool| Checked {
        list: list.as_bytes().to_vec(),
        state_change,
        ..Checked::default()
    };
    // Unchanged list, state change still on: the client's view stays.
    t.take_in(&checked("last_gtid,session_track_state_change", true));
    assert!(!t.filter.keep_last_gtid && !t.filter.keep_state_change);
    // The client set its own list, with last_gtid in it, and turned state changes on (which
    // relaying that statement's OK already took in).
    t.filter.keep_state_change = true;
    t.take_in(&checked("last_gtid", true));
    assert!(t.filter.keep_last_gtid && t.filter.keep_state_change);
    // It turned them off again.
    t.take_in(&checked("last_gtid", false));
    assert!(!t.filter.keep_state_change);
}

#[test]
fn a_session_reads_only_its_snapshots_under_repeatable_read_with_snapshot_isolation() {
    let row = |values: [&str; 10]| -> Vec<Option<Vec<u8>>> {
        values.iter().map(|v| Some(v.as_bytes().to_vec())).collect()
    };
    let checked = |info: &str, isolation: &str, snapshot_isolation: &str| {
        Checked::from_row(&row([
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
    let mut t = Tracking {
        snapshot_vars: true,
        ..Tracking::default()
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
    assert!(t.filter.keep_transaction_state && !t.filter.keep_transaction_characteristics);
    t.take_in(&checked("OFF", "REPEATABLE-READ", "1"));
    assert!(!t.filter.keep_transaction_state);
    // Without the snapshot variables (an older server) nothing is ever ready.
    let mut old = Tracking::default();
    old.snapshot_settings(&ready, true);
    assert!(!old.snapshot_ready);
}

#[test]
fn the_session_quorum_is_a_count_or_nothing() {
    let with = |value: Option<&str>| {
        let mut row: Vec<Option<Vec<u8>>> = vec![Some(b"0".to_vec()); 6];
        row.push(value.map(|v| v.as_bytes().to_vec()));
        Checked::from_row(&row).quorum
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
