//! Whether the primary's global session-tracking defaults give every new session what
//! strongsync needs to learn its commits from its responses alone, as the watch of the
//! primary last found them: strong sync holds it, the sessions' trackers read it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use thiserror::Error;
use tracing::{info, warn};

/// What the looks at the primary found of its session-tracking defaults.
#[derive(Debug)]
pub struct SessionDefaults {
    configured: AtomicBool,
    /// Looks that found them as needed, so far: a session set up from them notes the count.
    good_looks: AtomicU64,
    /// The count of good looks when a look last found them gone (`u64::MAX`: never): a
    /// session set up since the good look before may have started without them.
    suspect: AtomicU64,
    /// The last look's verdict; `None` before the first.
    found: Mutex<Option<Result<(), DefaultsLack>>>,
    /// The collation `SET NAMES` gives each character set on the primary.
    names: Mutex<Names>,
}

/// What `SET NAMES <charset>` gives a session's `collation_connection` on the primary, which
/// MariaDB does not report: the watch of the primary asks it on its own connection for the
/// character sets sessions asked about, at each look.
#[derive(Debug, Default)]
struct Names {
    /// Character sets a session's `SET NAMES` named, to be asked at the next look.
    wanted: BTreeSet<String>,
    /// What the last look found, by character set.
    known: BTreeMap<String, String>,
}

/// What the primary's session-tracking defaults lack of what strongsync needs, and the settings
/// that give it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "{} (set session_track_system_variables = '{}' (or add those to the list), \
     session_track_state_change = ON{} in the primary's configuration)",
    listed(lacks),
    required.join(","),
    if *gtids { ", session_track_gtids = OWN_GTID" } else { "" }
)]
pub struct DefaultsLack {
    /// What is lacking, at least one thing.
    pub lacks: Vec<Lack>,
    /// Every variable a session must track: the list to set.
    pub required: &'static [&'static str],
    /// The primary must also report a session's GTIDs (`session_track_gtids`, MySQL).
    pub gtids: bool,
}

/// One thing the primary's session-tracking defaults lack.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Lack {
    /// A variable a session must track is not in `session_track_system_variables`.
    #[error("session_track_system_variables lacks {variable}")]
    Untracked {
        /// The first such variable.
        variable: &'static str,
    },
    /// `session_track_state_change` is off.
    #[error("session_track_state_change is OFF")]
    StateChangeOff,
    /// `session_track_gtids` does not report a session's commits.
    #[error("session_track_gtids is {value}")]
    GtidsUnreported {
        /// Its value.
        value: String,
    },
    /// `init_connect` runs something that could change a new session's tracking.
    #[error("init_connect may change the session's tracking")]
    InitConnect,
}

/// `a, b, c`.
fn listed(lacks: &[Lack]) -> String {
    lacks
        .iter()
        .map(Lack::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Default for SessionDefaults {
    fn default() -> Self {
        SessionDefaults {
            configured: AtomicBool::new(false),
            good_looks: AtomicU64::new(0),
            suspect: AtomicU64::new(u64::MAX),
            found: Mutex::new(None),
            names: Mutex::new(Names::default()),
        }
    }
}

impl SessionDefaults {
    /// Takes in a look: `Ok` if the defaults hold what is needed, else what is missing.
    pub fn record(&self, verdict: Result<(), DefaultsLack>) {
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        let good = verdict.is_ok();
        if found.as_ref() != Some(&verdict) {
            match &verdict {
                Ok(()) => info!("the primary's session-tracking defaults hold what strongsync needs: new sessions get no statement of strongsync's"),
                Err(missing) => warn!(%missing, "the primary's session-tracking defaults lack what strongsync needs: new sessions have their tracking set up with statements of strongsync's own (strongsync_session_statements_total); see docs/compatibility.md"),
            }
        }
        if good {
            self.good_looks.fetch_add(1, Ordering::SeqCst);
        } else if self.configured.load(Ordering::SeqCst) {
            self.suspect
                .store(self.good_looks.load(Ordering::SeqCst), Ordering::SeqCst);
        }
        self.configured.store(good, Ordering::SeqCst);
        *found = Some(verdict);
    }

    /// The count of good looks if the defaults hold what is needed now: a session set up now
    /// learns from its responses alone, and notes it.
    pub fn configured(&self) -> Option<u64> {
        self.configured
            .load(Ordering::SeqCst)
            .then(|| self.good_looks.load(Ordering::SeqCst))
    }

    /// Whether a session set up at `count` good looks may have started without the defaults
    /// (they were gone at the next look). Read for every response of such a session.
    pub fn suspect(&self, count: u64) -> bool {
        self.suspect.load(Ordering::Relaxed) == count
    }

    fn names(&self) -> std::sync::MutexGuard<'_, Names> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the last look found that `SET NAMES charset` gives `collation` on the primary.
    /// Not known yet: `false`, and the next look asks.
    pub fn names_give(&self, charset: &str, collation: &str) -> bool {
        let mut names = self.names();
        match names.known.get(charset) {
            Some(given) => given.eq_ignore_ascii_case(collation),
            None => {
                names.wanted.insert(charset.to_owned());
                false
            }
        }
    }

    /// The character sets to ask about at the next look.
    pub fn names_wanted(&self) -> Vec<String> {
        self.names().wanted.iter().cloned().collect()
    }

    /// Takes in what a look found of `SET NAMES` (character set, collation given), replacing
    /// all that an earlier look found: a character set it could not ask about is unknown again.
    pub fn record_names(&self, found: BTreeMap<String, String>) {
        self.names().known = found;
    }

    /// What the last look found of `SET NAMES`, for `/status`.
    pub fn names_known(&self) -> BTreeMap<String, String> {
        self.names().known.clone()
    }

    /// What the last look found, for `/status`.
    pub fn describe(&self) -> String {
        match &*self.found.lock().unwrap_or_else(|e| e.into_inner()) {
            None => "not looked at yet (the watch of the primary needs a [probe] account)".into(),
            Some(Ok(())) => "configured".into(),
            Some(Err(missing)) => format!("set up per session: {missing}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DefaultsLack, Lack, SessionDefaults};

    #[test]
    fn set_names_is_unknown_until_a_look_asks_and_each_look_replaces_the_last() {
        let d = SessionDefaults::default();
        assert!(!d.names_give("utf8mb4", "utf8mb4_general_ci"));
        assert_eq!(d.names_wanted(), ["utf8mb4"]);
        d.record_names([("utf8mb4".into(), "utf8mb4_general_ci".into())].into());
        assert!(d.names_give("utf8mb4", "UTF8MB4_GENERAL_CI"));
        assert!(!d.names_give("utf8mb4", "utf8mb4_unicode_ci"));
        d.record_names(Default::default());
        assert!(!d.names_give("utf8mb4", "utf8mb4_general_ci"));
    }

    #[test]
    fn sessions_set_up_since_the_last_good_look_are_suspect_once_the_defaults_go() {
        let d = SessionDefaults::default();
        assert_eq!(d.configured(), None);
        d.record(Ok(()));
        let early = d.configured().unwrap();
        d.record(Ok(()));
        let late = d.configured().unwrap();
        assert!(!d.suspect(early) && !d.suspect(late));
        d.record(Err(DefaultsLack {
            lacks: vec![Lack::StateChangeOff],
            required: &["session_track_state_change"],
            gtids: false,
        }));
        assert_eq!(d.configured(), None);
        assert!(!d.suspect(early), "set up before the last good look");
        assert!(d.suspect(late), "set up after the last good look");
        assert!(d.describe().contains("OFF"));
        d.record(Ok(()));
        let again = d.configured().unwrap();
        assert!(!d.suspect(again) && d.suspect(late));
    }
}
