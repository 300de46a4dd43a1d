//! What failover asks of a server that is to become (or is) the primary, by flavour (the asking
//! is `crate::failover`'s).

use std::fmt;

use strongsync_proto::gtid::{Domain, GtidPosition, Source};
use strongsync_proto::ProtoError;

use super::defaults::TrackingDefaults;
use super::Flavour;

/// Who a server is, whatever address it is reached by: MariaDB's `server_id` (unique in a
/// replication topology: replication needs it so), MySQL's `server_uuid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerIdentity {
    /// A MariaDB server.
    MariaDb {
        /// Its `@@server_id`.
        server_id: u32,
    },
    /// A MySQL server.
    MySql {
        /// Its `@@server_uuid`.
        server_uuid: [u8; 16],
    },
}

/// The one row of [`Flavour::inspect_query`], taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    /// Who it is.
    pub identity: ServerIdentity,
    /// `@@hostname:@@port`, as it names itself (for messages).
    pub name: String,
    /// Every GTID it holds: its binlog's (`gtid_binlog_state`, every server's newest; MySQL's
    /// `gtid_executed`) and, on MariaDB, what it applied as a replica (`gtid_slave_pos`).
    pub holds: GtidPosition,
    /// `read_only` or `super_read_only` is on.
    pub read_only: bool,
    /// MySQL: what keeps it from recording a GTID for every transaction, if anything.
    pub gtid_mode: Option<GtidModeProblem>,
    /// What its new sessions track.
    pub tracking: TrackingDefaults,
}

/// A MySQL server whose transactions may have no GTID: strong sync cannot follow what its
/// sessions commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GtidModeProblem {
    /// Its `@@global.gtid_mode`.
    pub gtid_mode: String,
    /// Its `@@global.enforce_gtid_consistency`.
    pub enforce_gtid_consistency: String,
}

/// What promote says to a replica of one flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromoteSql {
    /// Stops what it receives.
    pub stop_io: &'static str,
    /// Starts the SQL thread if it is stopped, so that the relay log is applied.
    pub start_sql: &'static str,
    /// Starts receiving again (a replica promote looked at and did not take).
    pub start_io: &'static str,
    /// `SELECT …(?, ?)`: 0 once it has applied a GTID position, within seconds.
    pub wait_applied: &'static str,
    /// Stops and forgets its replication and makes it writable.
    pub make_primary: &'static str,
}

// === impl Flavour (servers) ===

impl Flavour {
    /// The flavour of a server whose `VERSION()` is `version`.
    pub fn of_version(version: &str) -> Flavour {
        if version.contains("MariaDB") {
            Flavour::MariaDb
        } else {
            Flavour::MySql
        }
    }

    /// The flavour whose GTIDs `position` holds, if it holds any.
    pub fn of_position(position: &GtidPosition) -> Option<Flavour> {
        position.gtids().find_map(|gtid| match gtid.domain {
            Domain::Maria(_) => Some(Flavour::MariaDb),
            Domain::MySql(_) => Some(Flavour::MySql),
            Domain::Binlog(_) => None,
        })
    }

    /// One row: identity, `@@hostname`, `@@port`, the GTIDs of its binlog, the GTIDs it applied
    /// as a replica (empty on MySQL, whose `gtid_executed` has both), `read_only`,
    /// `super_read_only` (0 on MariaDB), `gtid_mode` and `enforce_gtid_consistency` (NULL on
    /// MariaDB, which always records GTIDs).
    pub fn inspect_query(self) -> &'static str {
        match self {
            Flavour::MariaDb => {
                "SELECT @@global.server_id, @@hostname, @@port, @@global.gtid_binlog_state, \
                 @@global.gtid_slave_pos, @@global.read_only, 0, NULL, NULL, \
                 @@global.session_track_system_variables, @@global.session_track_state_change, \
                 NULL, @@global.init_connect"
            }
            Flavour::MySql => {
                "SELECT @@global.server_uuid, @@hostname, @@port, @@global.gtid_executed, '', \
                 @@global.read_only, @@global.super_read_only, @@global.gtid_mode, \
                 @@global.enforce_gtid_consistency, @@global.session_track_system_variables, \
                 @@global.session_track_state_change, @@global.session_track_gtids, \
                 @@global.init_connect"
            }
        }
    }

    /// Takes apart the row of [`inspect_query`](Self::inspect_query) (`None` for NULL).
    ///
    /// # Errors
    /// [`ProtoError::Malformed`] for a value that is not what the query asks.
    pub fn inspected(self, row: &[Option<String>]) -> Result<Inspected, ProtoError> {
        let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let on = |i: usize| !matches!(text(i).as_str(), "" | "0" | "OFF");
        let identity = self.identity(&text(0)).ok_or(ProtoError::Malformed {
            what: "server identity",
        })?;
        let mut holds = self.parse_position(&text(3))?;
        holds.extend(&self.parse_position(&text(4))?);
        let gtid_mode = match self {
            Flavour::MariaDb => None,
            Flavour::MySql => {
                let (mode, enforce) = (text(7), text(8));
                let on = mode.eq_ignore_ascii_case("ON") && enforce.eq_ignore_ascii_case("ON");
                (!on).then_some(GtidModeProblem {
                    gtid_mode: mode,
                    enforce_gtid_consistency: enforce,
                })
            }
        };
        Ok(Inspected {
            identity,
            name: format!("{}:{}", text(1), text(2)),
            holds,
            read_only: on(5) || on(6),
            gtid_mode,
            tracking: TrackingDefaults {
                list: text(9),
                state_change: text(10),
                gtids: text(11),
                init_connect: text(12),
            },
        })
    }

    /// Reads an identity as the server shows it (`@@server_id`, `@@server_uuid`).
    pub fn identity(self, value: &str) -> Option<ServerIdentity> {
        match self {
            Flavour::MariaDb => value
                .trim()
                .parse()
                .ok()
                .map(|server_id| ServerIdentity::MariaDb { server_id }),
            Flavour::MySql => Source::parse_uuid(value.trim())
                .map(|server_uuid| ServerIdentity::MySql { server_uuid }),
        }
    }

    /// Lists the replication channels of a server that is to become the primary, and the
    /// columns saying whether each one's I/O and SQL threads run. On MariaDB reading them needs
    /// `SLAVE MONITOR`; on MySQL `REPLICATION CLIENT` covers them.
    pub fn channels_query(self) -> (&'static str, [&'static str; 2]) {
        match self {
            Flavour::MariaDb => (
                "SHOW ALL SLAVES STATUS",
                ["Slave_IO_Running", "Slave_SQL_Running"],
            ),
            Flavour::MySql => (
                "SHOW REPLICA STATUS",
                ["Replica_IO_Running", "Replica_SQL_Running"],
            ),
        }
    }

    /// The column of the channels' rows with what the channel received (MariaDB `Gtid_IO_Pos`,
    /// MySQL `Retrieved_Gtid_Set`, which is `RECEIVED_TRANSACTION_SET`), and the one naming
    /// the channel.
    pub fn channel_columns(self) -> (&'static str, &'static str) {
        match self {
            Flavour::MariaDb => ("Gtid_IO_Pos", "Connection_name"),
            Flavour::MySql => ("Retrieved_Gtid_Set", "Channel_Name"),
        }
    }

    /// What promote says to a replica of this flavour.
    pub fn promote_sql(self) -> PromoteSql {
        match self {
            Flavour::MariaDb => PromoteSql {
                stop_io: "STOP SLAVE IO_THREAD",
                start_sql: "START SLAVE SQL_THREAD",
                start_io: "START SLAVE IO_THREAD",
                wait_applied: "SELECT MASTER_GTID_WAIT(?, ?)",
                make_primary: "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0",
            },
            Flavour::MySql => PromoteSql {
                stop_io: "STOP REPLICA IO_THREAD",
                start_sql: "START REPLICA SQL_THREAD",
                start_io: "START REPLICA IO_THREAD",
                wait_applied: "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)",
                make_primary: "STOP REPLICA; RESET REPLICA ALL; SET GLOBAL super_read_only = 0; SET GLOBAL read_only = 0",
            },
        }
    }
}

// === impl ServerIdentity ===

impl ServerIdentity {
    /// As the state file keeps it: `mariadb:7`, `mysql:3e11fa47-71ca-11e1-9e33-c80aa9429562`.
    pub fn key(&self) -> String {
        match self {
            ServerIdentity::MariaDb { server_id } => format!("mariadb:{server_id}"),
            ServerIdentity::MySql { server_uuid } => format!("mysql:{}", uuid_text(server_uuid)),
        }
    }

    /// Reads what [`key`](Self::key) writes.
    pub fn from_key(key: &str) -> Option<Self> {
        let (flavour, value) = key.split_once(':')?;
        match flavour {
            "mariadb" => Flavour::MariaDb.identity(value),
            "mysql" => Flavour::MySql.identity(value),
            _ => None,
        }
    }
}

impl fmt::Display for ServerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerIdentity::MariaDb { server_id } => write!(f, "server_id {server_id}"),
            ServerIdentity::MySql { server_uuid } => {
                write!(f, "server_uuid {}", uuid_text(server_uuid))
            }
        }
    }
}

fn uuid_text(uuid: &[u8; 16]) -> String {
    Source {
        uuid: *uuid,
        tag: None,
    }
    .to_string()
}

impl fmt::Display for GtidModeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gtid_mode is {} and enforce_gtid_consistency is {}: transactions without a GTID cannot be followed; set enforce_gtid_consistency = ON, then gtid_mode step by step (OFF_PERMISSIVE, ON_PERMISSIVE, ON) to ON, persisted (SET PERSIST)",
            self.gtid_mode, self.enforce_gtid_consistency
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(values: &[Option<&str>]) -> Vec<Option<String>> {
        values.iter().map(|v| v.map(str::to_owned)).collect()
    }

    #[test]
    fn a_mariadb_server_says_who_it_is_and_every_servers_newest() {
        let got = Flavour::MariaDb
            .inspected(&row(&[
                Some("7"),
                Some("db7"),
                Some("3306"),
                Some("0-1-105,0-7-110"),
                Some("0-7-110"),
                Some("1"),
                Some("0"),
                None,
                None,
            ]))
            .unwrap();
        assert_eq!(got.identity, ServerIdentity::MariaDb { server_id: 7 });
        assert_eq!(got.name, "db7:3306");
        assert_eq!(format!("{:#}", got.holds), "0-1-105,0-7-110");
        assert!(got.read_only && got.gtid_mode.is_none());
        assert_eq!(
            ServerIdentity::from_key(&got.identity.key()),
            Some(got.identity)
        );
    }

    #[test]
    fn a_mysql_server_without_gtids_everywhere_is_named() {
        const UUID: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let values = |mode: &str, enforce: &str| {
            row(&[
                Some(UUID),
                Some("db1"),
                Some("3306"),
                Some(""),
                Some(""),
                Some("0"),
                Some("0"),
                Some(mode),
                Some(enforce),
            ])
        };
        let ok = Flavour::MySql.inspected(&values("ON", "ON")).unwrap();
        assert_eq!(ok.gtid_mode, None);
        assert_eq!(ok.identity.to_string(), format!("server_uuid {UUID}"));
        for (mode, enforce) in [("OFF_PERMISSIVE", "ON"), ("ON", "WARN"), ("OFF", "OFF")] {
            let problem = Flavour::MySql
                .inspected(&values(mode, enforce))
                .unwrap()
                .gtid_mode
                .expect("a problem");
            let words = problem.to_string();
            assert!(words.contains(mode) && words.contains("set enforce_gtid_consistency = ON"));
        }
        assert!(Flavour::MySql
            .inspected(&row(&[Some("not-a-uuid")]))
            .is_err());
    }
}
