//! Whether the primary's global session-tracking defaults give every new session what
//! strongsync needs to learn its commits from its responses alone, as the watch of the
//! primary last found them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

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
    found: Mutex<Option<Result<(), String>>>,
}

impl Default for SessionDefaults {
    fn default() -> Self {
        SessionDefaults {
            configured: AtomicBool::new(false),
            good_looks: AtomicU64::new(0),
            suspect: AtomicU64::new(u64::MAX),
            found: Mutex::new(None),
        }
    }
}

impl SessionDefaults {
    /// Takes in a look: `Ok` if the defaults hold what is needed, else what is missing.
    pub fn record(&self, verdict: Result<(), String>) {
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
    use super::SessionDefaults;

    #[test]
    fn sessions_set_up_since_the_last_good_look_are_suspect_once_the_defaults_go() {
        let d = SessionDefaults::default();
        assert_eq!(d.configured(), None);
        d.record(Ok(()));
        let early = d.configured().unwrap();
        d.record(Ok(()));
        let late = d.configured().unwrap();
        assert!(!d.suspect(early) && !d.suspect(late));
        d.record(Err("session_track_state_change is OFF".into()));
        assert_eq!(d.configured(), None);
        assert!(!d.suspect(early), "set up before the last good look");
        assert!(d.suspect(late), "set up after the last good look");
        assert!(d.describe().contains("OFF"));
        d.record(Ok(()));
        let again = d.configured().unwrap();
        assert!(!d.suspect(again) && d.suspect(late));
    }
}
