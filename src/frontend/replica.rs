//! What a replica says before it asks for the binlog: the semisync negotiation, which the
//! proxy answers itself (the proxy, not the primary, is the replica's semisync master), and the
//! GTID state it reconnects with, which tells the proxy what it already has.

use strongsync_proto::capabilities::MariadbCapabilities;
use strongsync_proto::command::COM_QUERY;
use strongsync_proto::gtid::MariaGtid;
use strongsync_proto::resultset::{self, Layout};
use strongsync_proto::semisync::Negotiation;
use tracing::debug;

use super::session::{Phase, Session};
use crate::error::Error;

/// Longest `SET @slave_connect_state` the proxy reads (a GTID per replication domain).
const MAX_CONNECT_STATE: usize = 64 * 1024;

/// A replica's setup, as far as the proxy cares.
#[derive(Debug, Default)]
pub(super) struct ReplicaSetup {
    /// It sent `SET @rpl_semi_sync_slave = 1`: it will acknowledge flagged events.
    pub semisync: bool,
    /// The GTIDs it said it has (`SET @slave_connect_state = '…'`).
    pub connect_state: Vec<MariaGtid>,
}

// === impl ReplicaSetup ===

impl ReplicaSetup {
    /// Recognises a semisync negotiation statement (to answer, not forward), and takes note
    /// of the replica's GTID state on the way.
    pub(super) fn negotiation(&mut self, payload: &[u8]) -> Option<Negotiation> {
        let sql = payload.strip_prefix(&[COM_QUERY])?;
        if let Some(state) = connect_state(sql) {
            self.connect_state = state;
            return None;
        }
        Negotiation::recognise(sql)
    }
}

/// The GTIDs of `SET @slave_connect_state='d-s-n,…'`, if that is what `sql` is.
fn connect_state(sql: &[u8]) -> Option<Vec<MariaGtid>> {
    const PREFIX: &[u8] = b"set @slave_connect_state";
    if sql.len() > MAX_CONNECT_STATE
        || sql.len() < PREFIX.len()
        || !sql[..PREFIX.len()].eq_ignore_ascii_case(PREFIX)
    {
        return None;
    }
    let rest = &sql[PREFIX.len()..];
    let open = rest.iter().position(|&b| b == b'\'')?;
    let close = open + 1 + rest[open + 1..].iter().position(|&b| b == b'\'')?;
    let list = std::str::from_utf8(&rest[open + 1..close]).ok()?;
    Some(
        list.split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .filter_map(|g| g.parse().ok())
            .collect(),
    )
}

// === impl Session (replica setup) ===

impl Session {
    /// Answers a semisync negotiation statement as a semisync-enabled primary would.
    pub(super) async fn answer_negotiation(
        &mut self,
        negotiation: Negotiation,
    ) -> Result<Phase, Error> {
        debug!(?negotiation, "semisync negotiation answered by the proxy");
        let seq = self.client_seq.advance();
        let status = self.last_status;
        let layout = Layout {
            deprecate_eof: self.deprecate_eof(),
            extended_metadata: self
                .client_ext_caps
                .is_some_and(|c| c.contains(MariadbCapabilities::MARIADB_CLIENT_EXTENDED_METADATA)),
        };
        self.client.queue(|buf| match negotiation {
            Negotiation::ShowMasterEnabled => resultset::put_text_result(
                buf,
                seq,
                layout,
                &["Variable_name", "Value"],
                &[&[Some("rpl_semi_sync_master_enabled"), Some("ON")]],
                status,
            ),
            Negotiation::SelectMasterEnabled => resultset::put_text_result(
                buf,
                seq,
                layout,
                &["@@global.rpl_semi_sync_master_enabled"],
                &[&[Some("1")]],
                status,
            ),
            Negotiation::SelectSourceEnabled => resultset::put_text_result(
                buf,
                seq,
                layout,
                &["@@global.rpl_semi_sync_source_enabled"],
                &[&[Some("1")]],
                status,
            ),
            Negotiation::ReplicaEnabled => resultset::put_ok(buf, seq, status),
        });
        if negotiation == Negotiation::ReplicaEnabled {
            self.replica.semisync = true;
        }
        self.flush_client().await?;
        Ok(Phase::Idle)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Whatever a replica (or anyone on the replica port) sends after the prefix: no panic,
        /// and only GTIDs that were written out in full.
        #[test]
        fn any_connect_state_text_is_read_without_panicking(
            tail in proptest::collection::vec(any::<u8>(), 0..256),
            gtids in proptest::collection::vec((0u32..4, 1u32..9, any::<u64>()), 0..8),
        ) {
            let mut sql = b"SET @slave_connect_state=".to_vec();
            sql.extend_from_slice(&tail);
            if let Some(read) = connect_state(&sql) {
                prop_assert!(read.len() * 5 <= tail.len());
            }
            let list: Vec<String> = gtids.iter().map(|(d, s, n)| format!("{d}-{s}-{n}")).collect();
            let text = format!("SET @slave_connect_state='{}'", list.join(","));
            let read = connect_state(text.as_bytes()).expect("well formed");
            let want: Vec<MariaGtid> = list.iter().map(|g| g.parse().unwrap()).collect();
            prop_assert_eq!(read, want);
        }
    }

    #[test]
    fn reads_the_gtid_state_a_replica_reconnects_with() {
        let g = |s: &str| s.parse::<MariaGtid>().unwrap();
        let table: [(&str, Option<Vec<MariaGtid>>); 5] = [
            ("SET @slave_connect_state=''", Some(vec![])),
            (
                "SET @slave_connect_state='1-1-1000,0-1-1029'",
                Some(vec![g("1-1-1000"), g("0-1-1029")]),
            ),
            ("set @slave_connect_state = '0-1-5'", Some(vec![g("0-1-5")])),
            ("SET @slave_gtid_strict_mode=1", None),
            ("SET @slave_connect_state='0-1-5", None),
        ];
        for (sql, want) in table {
            assert_eq!(connect_state(sql.as_bytes()), want, "{sql}");
        }
        let mut setup = ReplicaSetup::default();
        assert_eq!(
            setup.negotiation(b"\x03SET @slave_connect_state='0-1-7'"),
            None
        );
        assert_eq!(setup.connect_state, vec![g("0-1-7")]);
        assert_eq!(
            setup.negotiation(b"\x03SET @rpl_semi_sync_slave= 1"),
            Some(Negotiation::ReplicaEnabled)
        );
        assert_eq!(
            setup.negotiation(b"\x16SET @rpl_semi_sync_slave= 1"),
            None,
            "only COM_QUERY"
        );
    }
}
