//! The state file: strongsync's epoch, the primary it follows and those it retired, the fence,
//! and strong sync's positions ([`Persisted`]), as JSON.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strongsync_proto::gtid::{GtidPosition, GtidSet};
use thiserror::Error;

use crate::durability::{Fence, Persisted, PersistedReplica};
use crate::flavour::ServerIdentity;

/// The format version written; the one before (no identities) is still read.
const VERSION: u32 = 2;

/// Largest state file read back (its sets are bounded; anything larger is not ours).
const MAX_LEN: u64 = 64 << 20;

/// Everything the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// Raised by every follow.
    pub epoch: u64,
    /// The primary followed in `epoch`.
    pub primary: KnownPrimary,
    /// Primaries followed before: never followed again without the operator saying so.
    pub retired: Vec<KnownPrimary>,
    /// Strong sync's part.
    pub durability: Persisted,
}

/// A primary strongsync follows or followed: the address it was followed by, and who it is
/// (learnt from the server itself, so that another spelling of it is known too).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KnownPrimary {
    /// `HOST:PORT` or a Unix socket's path, as it was followed.
    pub address: String,
    /// Its identity, once it was asked.
    pub identity: Option<ServerIdentity>,
}

/// A state file that cannot be used.
#[derive(Debug, Error)]
pub enum StateError {
    /// It is configured and missing.
    #[error("state file {} does not exist: strongsync starts only from the state it kept (a fresh start could forget a fence, an epoch or a retired primary); for a new deployment create it with `strongsync init-state --config FILE`", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// `strongsync init-state` found one already.
    #[error("state file {} exists already: init-state creates only a new one", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// Reading or writing failed.
    #[error("state file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The cluster's state in etcd could not be read or written.
    #[error("cluster state: {0}")]
    Cluster(#[from] crate::cluster::StoreError),
    /// Its contents are not a state file strongsync can read.
    #[error("state file {path} is unreadable: {problem} (move it away only if you know the fence and epoch it held)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: Unreadable,
    },
}

/// What in a state (a file's, or the cluster's in etcd) strongsync cannot read.
#[derive(Debug, Error)]
pub enum Unreadable {
    /// Larger than any state strongsync writes.
    #[error("larger than {0} bytes")]
    TooLarge(u64),
    /// Not the JSON of a state.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A format this strongsync does not know.
    #[error("format version {0} (this strongsync reads 1 to {VERSION})")]
    Version(u32),
    /// A server's identity that does not read.
    #[error("server identity {key:?}")]
    Identity {
        /// The identity as the state holds it (`mariadb:<server_id>`, `mysql:<server_uuid>`).
        key: String,
    },
    /// A position or a GTID set that does not read.
    #[error("{what}: {source}")]
    Gtids {
        /// Which (`acknowledged`, `tail`, `replica 3`, …).
        what: String,
        /// Why.
        #[source]
        source: strongsync_proto::ProtoError,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OnDisk {
    version: u32,
    epoch: u64,
    primary: String,
    /// `mariadb:<server_id>` or `mysql:<server_uuid>`.
    #[serde(default)]
    primary_identity: Option<String>,
    #[serde(default)]
    retired: Vec<RetiredOnDisk>,
    /// The epoch fenced, if the fence is up.
    fenced_epoch: Option<u64>,
    #[serde(default)]
    tail: String,
    // The watermark, under the names the file had before the glossary: the file is read by
    // older and newer strongsync alike.
    #[serde(default, rename = "acknowledged")]
    watermark: String,
    #[serde(default, rename = "acknowledged_set")]
    watermark_set: String,
    #[serde(default, rename = "acknowledged_inexact")]
    watermark_inexact: bool,
    #[serde(default)]
    released_without_quorum: String,
    #[serde(default)]
    replicas: Vec<ReplicaOnDisk>,
}

/// A retired primary: an address (version 1), or an address and identity.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum RetiredOnDisk {
    Address(String),
    Known {
        address: String,
        identity: Option<String>,
    },
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
    /// A new deployment's state: epoch 1, following `primary`, nothing fenced or retired.
    pub fn fresh(primary: &str) -> State {
        State {
            epoch: 1,
            primary: KnownPrimary {
                address: primary.to_owned(),
                identity: None,
            },
            ..State::default()
        }
    }

    /// Writes a new deployment's state file at `path` (see [`fresh`](Self::fresh)).
    ///
    /// # Errors
    /// [`StateError::Exists`] if there is one already; [`StateError::Io`].
    pub fn create(path: &Path, primary: &str) -> Result<(), StateError> {
        if path.try_exists().map_err(|source| StateError::Io {
            path: path.to_owned(),
            source,
        })? {
            return Err(StateError::Exists {
                path: path.to_owned(),
            });
        }
        State::fresh(primary).save(path)
    }

    /// Reads the file at `path`. A configured file that is missing or cannot be read stops
    /// strongsync from starting: forgetting a fence would open the old primary again, and a
    /// fresh epoch 1 would follow a primary that may be retired.
    ///
    /// # Errors
    /// [`StateError::Missing`] if there is none; [`StateError`] if it cannot be read or
    /// understood.
    pub fn load(path: &Path) -> Result<State, StateError> {
        let io_error = |source| StateError::Io {
            path: path.to_owned(),
            source,
        };
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StateError::Missing {
                    path: path.to_owned(),
                })
            }
            Err(e) => return Err(io_error(e)),
        };
        let mut text = String::new();
        io::Read::read_to_string(&mut io::Read::take(file, MAX_LEN + 1), &mut text)
            .map_err(io_error)?;
        let corrupt = |problem: Unreadable| StateError::Corrupt {
            path: path.to_owned(),
            problem,
        };
        if text.len() as u64 > MAX_LEN {
            return Err(corrupt(Unreadable::TooLarge(MAX_LEN)));
        }
        let disk: OnDisk = serde_json::from_str(&text).map_err(|e| corrupt(Unreadable::Json(e)))?;
        State::from_disk(disk).map_err(corrupt)
    }

    /// Writes the file at `path` (the temporary file beside it, synced, renamed over it, the
    /// directory synced), so a crash leaves the old file or the new one, never a mix.
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

    /// The state as the JSON the file holds (and etcd, in a cluster).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.to_disk()).unwrap_or_default()
    }

    /// The state the JSON of [`to_json`](Self::to_json) holds.
    ///
    /// # Errors
    /// What is wrong with it.
    pub fn from_json(json: &[u8]) -> Result<State, Unreadable> {
        let disk: OnDisk = serde_json::from_slice(json)?;
        State::from_disk(disk)
    }

    fn to_disk(&self) -> OnDisk {
        let d = &self.durability;
        OnDisk {
            version: VERSION,
            epoch: self.epoch,
            primary: self.primary.address.clone(),
            primary_identity: self.primary.identity.map(|i| i.key()),
            retired: self
                .retired
                .iter()
                .map(|r| RetiredOnDisk::Known {
                    address: r.address.clone(),
                    identity: r.identity.map(|i| i.key()),
                })
                .collect(),
            fenced_epoch: d.fence.map(|fence| fence.epoch),
            tail: d.tail.to_string(),
            // Every MariaDB server's newest, not only each domain's: identities are kept.
            watermark: format!("{:#}", d.watermark),
            watermark_set: d.watermark_set.to_string(),
            watermark_inexact: d.watermark_inexact,
            released_without_quorum: d.released_without_quorum.to_string(),
            replicas: d
                .replicas
                .iter()
                .map(|r| ReplicaOnDisk {
                    server_id: r.server_id,
                    address: r.address.clone(),
                    semisync: r.semisync,
                    held: format!("{:#}", r.held),
                })
                .collect(),
        }
    }

    fn from_disk(disk: OnDisk) -> Result<State, Unreadable> {
        if !(1..=VERSION).contains(&disk.version) {
            return Err(Unreadable::Version(disk.version));
        }
        let identity = |key: Option<String>| {
            key.map(|key| ServerIdentity::from_key(&key).ok_or(Unreadable::Identity { key }))
                .transpose()
        };
        let set = |what: &str, text: &str| GtidSet::parse(text).map_err(gtids(what));
        let replicas = disk
            .replicas
            .into_iter()
            .map(|r| {
                Ok(PersistedReplica {
                    server_id: r.server_id,
                    held: position(&r.held).map_err(gtids(&format!("replica {}", r.server_id)))?,
                    address: r.address,
                    semisync: r.semisync,
                })
            })
            .collect::<Result<_, Unreadable>>()?;
        let retired = disk
            .retired
            .into_iter()
            .map(|r| match r {
                RetiredOnDisk::Address(address) => Ok(KnownPrimary {
                    address,
                    identity: None,
                }),
                RetiredOnDisk::Known {
                    address,
                    identity: key,
                } => Ok(KnownPrimary {
                    address,
                    identity: identity(key)?,
                }),
            })
            .collect::<Result<_, Unreadable>>()?;
        Ok(State {
            epoch: disk.epoch,
            primary: KnownPrimary {
                address: disk.primary,
                identity: identity(disk.primary_identity)?,
            },
            retired,
            durability: Persisted {
                watermark: position(&disk.watermark).map_err(gtids("acknowledged"))?,
                watermark_set: set("acknowledged_set", &disk.watermark_set)?,
                watermark_inexact: disk.watermark_inexact,
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

/// Makes a GTID that does not read the [`Unreadable`] of `what`.
fn gtids(what: &str) -> impl FnOnce(strongsync_proto::ProtoError) -> Unreadable + '_ {
    move |source| Unreadable::Gtids {
        what: what.to_owned(),
        source,
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
            primary: KnownPrimary {
                address: "10.0.0.2:3306".into(),
                identity: Some(ServerIdentity::MariaDb { server_id: 2 }),
            },
            retired: vec![KnownPrimary {
                address: "10.0.0.1:3306".into(),
                identity: Some(ServerIdentity::MariaDb { server_id: 1 }),
            }],
            durability: Persisted {
                watermark: GtidPosition::parse(b"0-1-11,0-2-14,1-1-4").unwrap(),
                watermark_set: GtidSet::parse("0-1-1..11,0-2-12..14,1-1-4").unwrap(),
                watermark_inexact: false,
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
        assert!(matches!(
            State::load(&path),
            Err(StateError::Missing { .. })
        ));
        let state = sample();
        state.save(&path).unwrap();
        assert_eq!(State::load(&path).unwrap(), state.clone());
        // Saved again over itself: the rename replaces it whole.
        let mut next = state;
        next.durability.fence = None;
        next.save(&path).unwrap();
        assert_eq!(State::load(&path).unwrap(), next);
        assert!(!dir.path().join("state.json.tmp").exists());
    }

    #[test]
    fn a_new_deployment_creates_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        State::create(&path, "db1:3306").unwrap();
        assert_eq!(State::load(&path).unwrap(), State::fresh("db1:3306"));
        assert!(matches!(
            State::create(&path, "db2:3306"),
            Err(StateError::Exists { .. })
        ));
        assert_eq!(State::load(&path).unwrap().primary.address, "db1:3306");
    }

    /// A state that does not read says which part, as a case of its own.
    #[test]
    fn an_unreadable_state_names_what_is_wrong() {
        let good = String::from_utf8(sample().to_json()).unwrap();
        let with = |from: &str, to: &str| {
            assert!(good.contains(from), "{from} in {good}");
            State::from_json(good.replacen(from, to, 1).as_bytes())
        };
        assert!(State::from_json(good.as_bytes()).is_ok());
        assert!(matches!(
            State::from_json(b"{\"version\":2"),
            Err(Unreadable::Json(_))
        ));
        assert!(matches!(
            with("\"version\":2", "\"version\":9"),
            Err(Unreadable::Version(9))
        ));
        assert!(matches!(
            with("\"mariadb:2\"", "\"nobody:2\""),
            Err(Unreadable::Identity { key }) if key == "nobody:2"
        ));
        assert!(matches!(
            with("\"tail\":\"0-1-12..13\"", "\"tail\":\"0-1-x\""),
            Err(Unreadable::Gtids { what, .. }) if what == "tail"
        ));
        assert!(matches!(
            with("\"held\":\"0-1-11\"", "\"held\":\"0-1\""),
            Err(Unreadable::Gtids { what, .. }) if what == "replica 2"
        ));
    }

    /// A file of the first format (retired primaries by address only) is still read.
    #[test]
    fn reads_the_first_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(
            &path,
            r#"{"version":1,"epoch":2,"primary":"db2:3306","retired":["db1:3306"],"fenced_epoch":null,"acknowledged":"0-1-40"}"#,
        )
        .unwrap();
        let state = State::load(&path).unwrap();
        assert_eq!(state.retired[0].address, "db1:3306");
        assert_eq!(
            (state.retired[0].identity, state.primary.identity),
            (None, None)
        );
        assert_eq!(state.durability.watermark.to_string(), "0-1-40");
    }

    #[test]
    fn a_file_it_cannot_read_is_an_error_not_a_fresh_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let cases = [
            "",
            "{",
            "garbage\n",
            r#"{"version":3,"epoch":1,"primary":"p","fenced_epoch":null}"#,
            r#"{"version":2,"epoch":1,"primary":"p","fenced_epoch":null,"primary_identity":"x"}"#,
            r#"{"version":1,"epoch":1,"primary":"p","fenced_epoch":null,"acknowledged":"x-y"}"#,
            r#"{"version":1,"epoch":1,"primary":"p","fenced_epoch":null,"surprise":1}"#,
        ];
        let whole = serde_json::to_string(&sample().to_disk()).unwrap();
        let truncated = &whole[..whole.len() / 2];
        for text in cases.into_iter().chain([truncated]) {
            std::fs::write(&path, text).unwrap();
            assert!(
                matches!(State::load(&path), Err(StateError::Corrupt { .. })),
                "{text}"
            );
        }
    }
}
