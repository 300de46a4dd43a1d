//! What a primary's global session-tracking settings give every new session, and whether that
//! is all strongsync needs to learn a session's commits from its responses alone (then no
//! session gets a statement of strongsync's).

use super::{plain, tracks, Flavour};
use crate::tracking_defaults::{DefaultsLack, Lack};

/// The variables a session must track by name: MariaDB reports its commits as `last_gtid`,
/// and a change of domain, server id or forced sequence number by value; both servers report
/// the trackers' own changes, so that a session switching them off is seen doing so.
fn required(flavour: Flavour) -> &'static [&'static str] {
    match flavour {
        Flavour::MariaDb => &[
            "last_gtid",
            "session_track_system_variables",
            "session_track_state_change",
            "gtid_domain_id",
            "server_id",
            "gtid_seq_no",
        ],
        Flavour::MySql => &[
            "session_track_gtids",
            "session_track_system_variables",
            "session_track_state_change",
        ],
    }
}

/// The first variable `list` (a `session_track_system_variables` value) lacks of those a
/// session must track, if any.
pub(super) fn lacks(flavour: Flavour, list: &[u8]) -> Option<&'static str> {
    required(flavour)
        .iter()
        .find(|name| !tracks(list, name.as_bytes()))
        .copied()
}

/// Whether a `session_track_gtids` value reports a session's commits.
pub(super) fn reports_gtids(value: &[u8]) -> bool {
    value.eq_ignore_ascii_case(b"OWN_GTID") || value.eq_ignore_ascii_case(b"ALL_GTIDS")
}

/// Whether a `session_track_state_change` value is on.
pub(super) fn on(value: &[u8]) -> bool {
    value.eq_ignore_ascii_case(b"ON") || value == b"1"
}

/// The primary's global session-tracking settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrackingDefaults {
    /// `@@global.session_track_system_variables`.
    pub list: String,
    /// `@@global.session_track_state_change`.
    pub state_change: String,
    /// `@@global.session_track_gtids` (MySQL).
    pub gtids: String,
    /// `@@global.init_connect`: run for every new session, it could change them.
    pub init_connect: String,
}

impl TrackingDefaults {
    /// `Ok` if every new session of a `flavour` primary starts with what strongsync needs;
    /// otherwise what it lacks, and the settings that give it.
    pub fn verdict(&self, flavour: Flavour) -> Result<(), DefaultsLack> {
        let mut found = Vec::new();
        if let Some(variable) = lacks(flavour, self.list.as_bytes()) {
            found.push(Lack::Untracked { variable });
        }
        if !on(self.state_change.as_bytes()) {
            found.push(Lack::StateChangeOff);
        }
        let gtids = flavour == Flavour::MySql;
        if gtids && !reports_gtids(self.gtids.as_bytes()) {
            found.push(Lack::GtidsUnreported {
                value: self.gtids.clone(),
            });
        }
        if !plain::is_plain(self.init_connect.as_bytes(), plain::AT_LOGIN) {
            found.push(Lack::InitConnect);
        }
        if found.is_empty() {
            return Ok(());
        }
        Err(DefaultsLack {
            lacks: found,
            required: required(flavour),
            gtids,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Flavour, Lack, TrackingDefaults};

    fn defaults(list: &str, state_change: &str, gtids: &str) -> TrackingDefaults {
        TrackingDefaults {
            list: list.into(),
            state_change: state_change.into(),
            gtids: gtids.into(),
            init_connect: String::new(),
        }
    }

    #[test]
    fn what_each_primary_needs() {
        let maria = "last_gtid,session_track_system_variables,session_track_state_change,\
                     gtid_domain_id,server_id,gtid_seq_no";
        let table: &[(Flavour, TrackingDefaults, bool)] = &[
            (Flavour::MariaDb, defaults(maria, "ON", ""), true),
            (Flavour::MariaDb, defaults("*", "ON", ""), true),
            (Flavour::MariaDb, defaults(maria, "OFF", ""), false),
            (Flavour::MariaDb, defaults("last_gtid", "ON", ""), false),
            // MariaDB's default.
            (Flavour::MariaDb, defaults("autocommit,character_set_client,character_set_connection,character_set_results,time_zone", "OFF", ""), false),
            (
                Flavour::MySql,
                defaults("session_track_gtids,session_track_system_variables,session_track_state_change", "ON", "OWN_GTID"),
                true,
            ),
            (Flavour::MySql, defaults("*", "ON", "ALL_GTIDS"), true),
            (Flavour::MySql, defaults("*", "ON", "OFF"), false),
            (Flavour::MySql, defaults("time_zone,autocommit", "ON", "OWN_GTID"), false),
        ];
        for (flavour, d, ok) in table {
            assert_eq!(d.verdict(*flavour).is_ok(), *ok, "{flavour:?} {d:?}");
        }
        let mut with_init = defaults("*", "ON", "");
        with_init.init_connect = "SET NAMES utf8mb4".into();
        assert!(with_init.verdict(Flavour::MariaDb).is_ok());
        with_init.init_connect = "SET session_track_state_change = OFF".into();
        let why = with_init.verdict(Flavour::MariaDb).unwrap_err();
        assert_eq!(why.lacks, [Lack::InitConnect]);
        assert!(why.to_string().contains("init_connect"), "{why}");
    }

    #[test]
    fn what_is_lacking_is_said_with_the_settings_that_give_it() {
        let why = defaults("time_zone", "OFF", "OFF")
            .verdict(Flavour::MySql)
            .unwrap_err();
        assert_eq!(
            why.to_string(),
            "session_track_system_variables lacks session_track_gtids, \
             session_track_state_change is OFF, session_track_gtids is OFF \
             (set session_track_system_variables = \
             'session_track_gtids,session_track_system_variables,session_track_state_change' \
             (or add those to the list), session_track_state_change = ON, \
             session_track_gtids = OWN_GTID in the primary's configuration)"
        );
    }
}
