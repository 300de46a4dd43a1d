//! The state file: strongsync's epoch, the primary it follows and those it retired, the fence,
//! and strong sync's positions ([`Persisted`]), as JSON. Written whole to a temporary file,
//! synced and renamed over the old one, so a crash leaves the old file or the new one, never a
//! mix. A file that cannot be read stops strongsync from starting: forgetting a fence would
//! open the old primary again.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strongsync_proto::gtid::{GtidPosition, GtidSet};
use thiserror::Error;

use crate::durability::{Fence, Persisted, PersistedReplica};

/// The file's format version.
const VERSION: u32 = 1;

/// Largest state file read back (its sets are bounded; anything larger is not ours).
const MAX_LEN: u64 = 64 << 20;

/// Everything the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// Raised by every follow.
    pub epoch: u64,
    /// The primary followed in `epoch`.
    pub primary: String,
    /// Primaries followed before: never followed again without the operator saying so.
    pub retired: Vec<String>,
    /// Strong sync's part.
    pub durability: Persisted,
}

/// A state file that cannot be used.
#[derive(Debug, Error)]
pub enum StateError {
    /// Reading or writing failed.
    #[error("state file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Its contents are not a state file strongsync can read.
    #[error("state file {path} is unreadable: {problem} (move it away only if you know the fence and epoch it held)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OnDisk {
    version: u32,
    epoch: u64,
    primary: String,
    #[serde(default)]
    retired: Vec<String>,
    /// The epoch fenced, if the fence is up.
    fenced_epoch: Option<u64>,
    #[serde(default)]
    tail: String,
    #[serde(default)]
    acknowledged: String,
    #[serde(default)]
    released_without_quorum: String,
    #[serde(default)]
    replicas: Vec<ReplicaOnDisk>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplicaOnDisk {
    server_id: u32,
    address: String,
    semisync: bool,
    held: String,
}

// === impl State ===

impl State {
    /// Reads the file at `path`; `None` if there is none yet.
    ///
    /// # Errors
    /// [`StateError`] if it exists and cannot be read or understood.
    pub fn load(path: &Path) -> Result<Option<State>, StateError> {
        let io_error = |source| StateError::Io {
            path: path.to_owned(),
            source,
        };
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(e)),
        };
        let mut text = String::new();
        io::Read::read_to_string(&mut io::Read::take(file, MAX_LEN + 1), &mut text)
            .map_err(io_error)?;
        let corrupt = |problem: String| StateError::Corrupt {
            path: path.to_owned(),
            problem,
        };
        if text.len() as u64 > MAX_LEN {
            return Err(corrupt(format!("larger than {MAX_LEN} bytes")));
        }
        let disk: OnDisk = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
        State::from_disk(disk).map(Some).map_err(corrupt)
    }

    /// Writes the file at `path` (the temporary file beside it, synced, renamed over it, the
    /// directory synced).
    ///
    /// # Errors
    /// [`StateError::Io`].
    pub fn save(&self, path: &Path) -> Result<(), StateError> {
        let io_error = |source| StateError::Io {
            path: path.to_owned(),
            source,
        };
        let mut json =
            serde_json::to_vec_pretty(&self.to_disk()).map_err(|e| io_error(e.into()))?;
        json.push(b'\n');
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut file = std::fs::File::create(&tmp).map_err(io_error)?;
        file.write_all(&json).map_err(io_error)?;
        file.sync_all().map_err(io_error)?;
        std::fs::rename(&tmp, path).map_err(io_error)?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = std::fs::File::open(dir.unwrap_or(Path::new("."))).map_err(io_error)?;
        dir.sync_all().map_err(io_error)
    }

    fn to_disk(&self) -> OnDisk {
        let d = &self.durability;
        OnDisk {
            version: VERSION,
            epoch: self.epoch,
            primary: self.primary.clone(),
            retired: self.retired.clone(),
            fenced_epoch: d.fence.map(|fence| fence.epoch),
            tail: d.tail.to_string(),
            acknowledged: d.acknowledged.to_string(),
            released_without_quorum: d.released_without_quorum.to_string(),
            replicas: d
                .replicas
                .iter()
                .map(|r| ReplicaOnDisk {
                    server_id: r.server_id,
                    address: r.address.clone(),
                    semisync: r.semisync,
                    held: r.held.to_string(),
                })
                .collect(),
        }
    }

    fn from_disk(disk: OnDisk) -> Result<State, String> {
        if disk.version != VERSION {
            return Err(format!(
                "format version {} (this strongsync reads {VERSION})",
                disk.version
            ));
        }
        let set = |what: &str, text: &str| GtidSet::parse(text).map_err(|e| format!("{what}: {e}"));
        let replicas = disk
            .replicas
            .into_iter()
            .map(|r| {
                Ok(PersistedReplica {
                    server_id: r.server_id,
                    held: position(&r.held).map_err(|e| format!("replica {}: {e}", r.server_id))?,
                    address: r.address,
                    semisync: r.semisync,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(State {
            epoch: disk.epoch,
            primary: disk.primary,
            retired: disk.retired,
            durability: Persisted {
                acknowledged: position(&disk.acknowledged)
                    .map_err(|e| format!("acknowledged: {e}"))?,
                released_without_quorum: set(
                    "released_without_quorum",
                    &disk.released_without_quorum,
                )?,
                replicas,
                fence: disk.fenced_epoch.map(|epoch| Fence { epoch }),
                tail: set("tail", &disk.tail)?,
            },
        })
    }
}

/// A position as either flavour writes it (MySQL's has a `:`).
fn position(text: &str) -> Result<GtidPosition, strongsync_proto::ProtoError> {
    if text.contains(':') {
        GtidPosition::parse_mysql(text)
    } else {
        GtidPosition::parse(text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> State {
        let mut tail = GtidSet::default();
        tail.insert("0-1-12".parse().unwrap());
        tail.insert("0-1-13".parse().unwrap());
        let mut released = GtidSet::default();
        released.insert("0-1-7".parse().unwrap());
        State {
            epoch: 3,
            primary: "10.0.0.2:3306".into(),
            retired: vec!["10.0.0.1:3306".into()],
            durability: Persisted {
                acknowledged: GtidPosition::parse(b"0-1-11,1-1-4").unwrap(),
                released_without_quorum: released,
                replicas: vec![PersistedReplica {
                    server_id: 2,
                    address: "127.0.0.1:50000".into(),
                    semisync: true,
                    held: GtidPosition::parse(b"0-1-11").unwrap(),
                }],
                fence: Some(Fence { epoch: 3 }),
                tail,
            },
        }
    }

    #[test]
    fn reads_back_what_it_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(State::load(&path).unwrap(), None);
        let state = sample();
        state.save(&path).unwrap();
        assert_eq!(State::load(&path).unwrap(), Some(state.clone()));
        // Saved again over itself: the rename replaces it whole.
        let mut next = state;
        next.durability.fence = None;
        next.save(&path).unwrap();
        assert_eq!(State::load(&path).unwrap(), Some(next));
        assert!(!dir.path().join("state.json.tmp").exists());
    }

    #[test]
    fn a_file_it_cannot_read_is_an_error_not_a_fresh_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let cases = [
            "",
            "{",
            r#"{"version":2,"epoch":1,"primary":"p","fenced_epoch":null}"#,
            r#"{"version":1,"epoch":1,"primary":"p","fenced_epoch":null,"acknowledged":"x-y"}"#,
            r#"{"version":1,"epoch":1,"primary":"p","fenced_epoch":null,"surprise":1}"#,
        ];
        for text in cases {
            std::fs::write(&path, text).unwrap();
            assert!(
                matches!(State::load(&path), Err(StateError::Corrupt { .. })),
                "{text}"
            );
        }
    }
}
