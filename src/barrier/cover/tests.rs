//! The snapshot cover without a socket: which commands start a covered transaction, which read
//! only its snapshot, and when the quorum's hold on the snapshot lets a response go.

use super::*;
use crate::config::{DurabilityConfig, Visibility};
use crate::durability::Durability;

fn query(sql: &str) -> Vec<u8> {
    [&[COM_QUERY], sql.as_bytes()].concat()
}

fn with_id(command: u8, id: u32) -> Vec<u8> {
    [&[command][..], &id.to_le_bytes()].concat()
}

fn covered() -> SnapshotCover {
    SnapshotCover {
        bound: Some(Arc::new(GtidPosition::parse(b"0-1-7").unwrap())),
        ..SnapshotCover::default()
    }
}

#[test]
fn a_plain_begin_starts_with_a_snapshot_only_where_one_may_cover_it() {
    let mut cover = SnapshotCover::default();
    assert!(matches!(
        cover.note_command(&query("begin"), true, true),
        Replacement::StartWithSnapshot
    ));
    assert!(cover.starting);
    assert!(matches!(
        cover.note_command(&query("BEGIN"), true, false),
        Replacement::None
    ));
    assert!(!cover.starting);
    assert!(matches!(
        cover.note_command(
            &query("START TRANSACTION WITH CONSISTENT SNAPSHOT"),
            true,
            true
        ),
        Replacement::None
    ));
    assert!(cover.starting, "already one: sent as it is, and covered");
}

#[test]
fn single_selects_of_a_covered_transaction_read_its_snapshot_and_nothing_else_does() {
    let mut cover = covered();
    cover.note_command(&query("SELECT v FROM t WHERE id = 1"), true, false);
    assert!(cover.for_response().is_some());
    for other in [
        "UPDATE t SET v = 1",
        "SELECT v FROM t FOR UPDATE",
        "SELECT @@gtid_binlog_pos",
    ] {
        cover.note_command(&query(other), true, false);
        assert!(cover.for_response().is_none(), "{other}");
    }
    cover.note_command(&query("SELECT v FROM t"), false, false);
    assert!(
        cover.for_response().is_none(),
        "a statement of 16 MiB or more"
    );
    cover.note_command(&query("BEGIN"), true, false);
    assert!(cover.bound.is_none(), "a new transaction ends the cover");
}

#[test]
fn prepared_selects_are_remembered_until_closed_or_reset() {
    let mut cover = SnapshotCover::default();
    let prepare = [&[COM_STMT_PREPARE][..], b"SELECT v FROM t WHERE id = ?"].concat();
    cover.note_command(&prepare, true, true);
    // PREPARE_OK: status 0, then the statement id.
    cover.prepared(5);
    cover.bound = covered().bound;
    cover.note_command(&with_id(COM_STMT_EXECUTE, 5), true, false);
    assert!(cover.for_response().is_some());
    cover.note_command(&with_id(COM_STMT_EXECUTE, 6), true, false);
    assert!(cover.for_response().is_none(), "not a prepared SELECT");
    cover.note_command(&with_id(COM_STMT_CLOSE, 5), true, false);
    cover.note_command(&with_id(COM_STMT_EXECUTE, 5), true, false);
    assert!(cover.for_response().is_none(), "closed");
    cover.note_command(&prepare, true, true);
    cover.prepared(5);
    cover.note_command(&[COM_RESET_CONNECTION], true, false);
    assert!(cover.prepared_reads.is_empty() && cover.bound.is_none());
}

#[test]
fn a_response_goes_by_its_snapshot_once_the_quorum_holds_it() {
    let snapshot = DurabilityConfig {
        visibility: Visibility::Snapshot,
        ..DurabilityConfig::default()
    };
    let durability = Door::of(Durability::new(snapshot));
    // Held: nothing in the snapshot is beyond what the (empty) quorum holds.
    let bound = Arc::new(GtidPosition::default());
    let mut cover = SnapshotCover::default();
    assert!(cover.answers(Some(&bound), &durability));
    assert!(cover.held_under.is_some(), "remembered under the rule");
    assert!(
        !cover.answers(None, &durability),
        "not a read of the snapshot"
    );
    // Under visibility = "quorum" every response has a bound of its own.
    let quorum = Door::of(Durability::new(DurabilityConfig {
        visibility: Visibility::Quorum,
        ..DurabilityConfig::default()
    }));
    assert!(!SnapshotCover::default().answers(Some(&bound), &quorum));
}
