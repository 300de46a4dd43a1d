//! What the trackers' tests share: a context, a primary leg that answers from a script, and
//! OK packets with a state block.

use std::collections::VecDeque;
use std::sync::Arc;

use strongsync_proto::capabilities::StatusFlags;
use strongsync_proto::wire::put_lenenc_str;

use super::{Answer, OwnQueries, ProxyState, TrackerContext};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::tracking_defaults::SessionDefaults;

pub(super) fn context() -> TrackerContext {
    TrackerContext {
        connection_id: 7,
        client_tracks: true,
        primary_tracks: true,
        snapshot_vars: false,
        metrics: Arc::new(Metrics::new()),
        proxy: Arc::new(Proxy::default()),
    }
}

/// The proxy's state as a tracker's test sets it: strong sync's defaults (no snapshot reads,
/// commits tracked) and the primary's session-tracking defaults as looks record them.
#[derive(Default)]
pub(super) struct Proxy {
    pub(super) defaults: SessionDefaults,
}

impl ProxyState for Proxy {
    fn snapshot_reads(&self) -> bool {
        false
    }

    fn commits_untracked(&self) -> bool {
        false
    }

    fn session_defaults(&self) -> &SessionDefaults {
        &self.defaults
    }
}

/// A primary leg that answers the queries it is asked from a script, and keeps them.
#[derive(Default)]
pub(super) struct Scripted {
    pub(super) answers: VecDeque<Answer>,
    pub(super) asked: Vec<String>,
}

impl Scripted {
    pub(super) fn answering(answers: impl IntoIterator<Item = Answer>) -> Self {
        Scripted {
            answers: answers.into_iter().collect(),
            asked: Vec::new(),
        }
    }
}

impl OwnQueries for Scripted {
    async fn ask(&mut self, queries: &[&str]) -> Result<Vec<Answer>, Error> {
        self.asked.extend(queries.iter().map(|q| q.to_string()));
        Ok(queries
            .iter()
            .map(|_| self.answers.pop_front().expect("an answer for every query"))
            .collect())
    }
}

pub(super) fn row(values: &[Option<&str>]) -> Answer {
    Answer {
        row: values
            .iter()
            .map(|v| v.map(|v| v.as_bytes().to_vec()))
            .collect(),
        ..Answer::default()
    }
}

pub(super) fn ok() -> Answer {
    Answer::default()
}

pub(super) fn failed(code: u16) -> Answer {
    Answer {
        error: Some(format!("{code} no")),
        code: Some(code),
        ..Answer::default()
    }
}

/// A state item naming `name` with `value` (`SESSION_TRACK_SYSTEM_VARIABLES`).
pub(super) fn variable(name: &str, value: &str) -> (u8, Vec<u8>) {
    let mut var = Vec::new();
    put_lenenc_str(&mut var, name.as_bytes());
    put_lenenc_str(&mut var, value.as_bytes());
    (0, var)
}

/// A MySQL GTIDs item reporting `text`.
pub(super) fn gtids_item(text: &str) -> (u8, Vec<u8>) {
    let mut data = vec![0u8];
    put_lenenc_str(&mut data, text.as_bytes());
    (3, data)
}

/// A state-change item.
pub(super) fn state_change_item() -> (u8, Vec<u8>) {
    (2, vec![1, b'1'])
}

/// An OK packet whose state block holds `items`.
pub(super) fn ok_with_state(items: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut state = Vec::new();
    for (kind, data) in items {
        let mut item = vec![*kind];
        put_lenenc_str(&mut item, data);
        state.extend_from_slice(&item);
    }
    let status = StatusFlags::SERVER_STATUS_AUTOCOMMIT | StatusFlags::SERVER_SESSION_STATE_CHANGED;
    let mut payload = vec![0x00, 1, 0];
    payload.extend_from_slice(&status.bits().to_le_bytes());
    payload.extend_from_slice(&[0, 0]); // warnings
    put_lenenc_str(&mut payload, b""); // info
    put_lenenc_str(&mut payload, &state);
    payload
}
