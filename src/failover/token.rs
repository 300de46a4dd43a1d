//! The admin token: read from a file at start, compared in constant time, never logged. The
//! admin calls that change anything (fence, follow, promote) need it; without a token file
//! they are refused, since a call that redirects the proxy must never be open to whoever can
//! reach the admin port.

use std::fmt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use subtle::ConstantTimeEq;

use crate::config::ConfigError;

/// Shortest token accepted: a guessable one protects nothing.
const MIN_LEN: usize = 16;

/// The admin token.
#[derive(Clone)]
pub struct AdminToken(Vec<u8>);

/// Why a call's credential was refused (the labels of `strongsync_admin_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No token file is configured: nothing that changes state is allowed.
    NoTokenConfigured,
    /// The call carried no `Authorization: Bearer` header.
    MissingToken,
    /// It carried another token.
    WrongToken,
}

// === impl AdminToken ===

impl AdminToken {
    /// Reads the token from `path` (a trailing newline is ignored).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a file that cannot be read, that others may read or write,
    /// that its group may write, or may read without root owning it (anyone on the host could
    /// take the token, as ssh refuses such a private key), or a token shorter than 16 bytes.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let invalid = |problem: String| ConfigError::Invalid {
            key: "failover.admin_token_file",
            problem,
        };
        let meta = std::fs::metadata(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        let mode = meta.permissions().mode();
        // As PostgreSQL takes its key: a group may read a file root owns (root:strongsync
        // 0640, or a Kubernetes Secret mounted with the pod's fsGroup), never write it, and
        // others may do neither.
        let group_may = meta.uid() == 0 && mode & 0o070 == 0o040;
        if mode & 0o007 != 0 || (mode & 0o070 != 0 && !group_may) {
            return Err(invalid(format!(
                "{} is open to its group or others (mode {:04o}, owner uid {}): anyone on the host could take the token; make it readable by strongsync's user only (chmod 600), or owned by root and readable by strongsync's group only (chmod 640)",
                path.display(),
                mode & 0o7777,
                meta.uid()
            )));
        }
        let text = std::fs::read(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        let token = text
            .strip_suffix(b"\n")
            .map(|t| t.strip_suffix(b"\r").unwrap_or(t))
            .unwrap_or(&text);
        if token.len() < MIN_LEN || token.iter().any(|b| b.is_ascii_whitespace()) {
            return Err(invalid(format!(
                "{} must hold one token of at least {MIN_LEN} bytes without blanks",
                path.display()
            )));
        }
        Ok(AdminToken(token.to_vec()))
    }

    /// Checks the `Authorization` header a call carried against `expected` (none configured:
    /// every call is refused).
    pub fn check(expected: Option<&AdminToken>, header: Option<&[u8]>) -> Result<(), Refusal> {
        let expected = expected.ok_or(Refusal::NoTokenConfigured)?;
        let presented = header
            .and_then(|h| h.strip_prefix(b"Bearer "))
            .ok_or(Refusal::MissingToken)?;
        // Constant time in the contents; only the length can show, as the length of the
        // header already does.
        if bool::from(presented.ct_eq(&expected.0)) {
            Ok(())
        } else {
            Err(Refusal::WrongToken)
        }
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

// === impl Refusal ===

impl Refusal {
    /// Label of the refusal metric.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::NoTokenConfigured => "no_token_configured",
            Refusal::MissingToken => "missing_token",
            Refusal::WrongToken => "wrong_token",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::NoTokenConfigured => {
                "refused: no admin token is configured (failover.admin_token_file), so nothing may be changed through the admin port"
            }
            Refusal::MissingToken => "refused: this call needs `Authorization: Bearer <token>`",
            Refusal::WrongToken => "refused: wrong admin token",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `text` to a file only its owner may read.
    fn private(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    #[test]
    fn only_the_configured_token_passes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        private(&path, "s3cret-token-0123456789\n");
        let token = AdminToken::read(&path).unwrap();
        assert_eq!(format!("{token:?}"), "AdminToken(..)");
        type Case<'a> = (
            Option<&'a AdminToken>,
            Option<&'a [u8]>,
            Result<(), Refusal>,
        );
        let cases: [Case; 7] = [
            (
                Some(&token),
                Some(b"Bearer s3cret-token-0123456789"),
                Ok(()),
            ),
            (
                Some(&token),
                Some(b"Bearer s3cret-token-012345678"),
                Err(Refusal::WrongToken),
            ),
            (
                Some(&token),
                Some(b"Bearer s3cret-token-0123456789x"),
                Err(Refusal::WrongToken),
            ),
            (Some(&token), Some(b"Bearer "), Err(Refusal::WrongToken)),
            (
                Some(&token),
                Some(b"Basic s3cret-token-0123456789"),
                Err(Refusal::MissingToken),
            ),
            (Some(&token), None, Err(Refusal::MissingToken)),
            (
                None,
                Some(b"Bearer s3cret-token-0123456789"),
                Err(Refusal::NoTokenConfigured),
            ),
        ];
        for (expected, header, want) in cases {
            assert_eq!(AdminToken::check(expected, header), want, "{header:?}");
        }
    }

    #[test]
    fn a_short_or_blank_token_is_a_configuration_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        for text in ["short\n", "", "two tokens-0123456789\n"] {
            private(&path, text);
            assert!(AdminToken::read(&path).is_err(), "{text:?}");
        }
        assert!(AdminToken::read(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn a_token_file_others_may_read_is_refused_and_root_may_share_it_with_a_group() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        private(&path, "s3cret-token-0123456789\n");
        assert!(AdminToken::read(&path).is_ok());
        let me = std::fs::metadata(&path).unwrap().uid();
        // (owner, mode, taken): a group may read only what root owns.
        let mut cases = vec![
            (me, 0o600, true),
            (me, 0o400, true),
            (me, 0o644, false),
            (me, 0o604, false),
            (me, 0o620, false),
            (0, 0o660, false),
            (0, 0o644, false),
            (0, 0o440, true),
            (0, 0o640, true),
        ];
        if me == 0 {
            // The suite runs as root: a file owned by someone else must not share it.
            cases.extend([
                (65534, 0o640, false),
                (65534, 0o440, false),
                (65534, 0o600, true),
            ]);
        } else {
            cases.retain(|(owner, ..)| *owner == me);
            cases.push((me, 0o640, false));
        }
        for (owner, mode, taken) in cases {
            std::os::unix::fs::chown(&path, Some(owner), None).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let read = AdminToken::read(&path);
            assert_eq!(read.is_ok(), taken, "owner {owner}, mode {mode:04o}");
            if let Err(error) = read {
                let error = error.to_string();
                assert!(
                    error.contains(&format!("mode {mode:04o}")) && error.contains("chmod 600"),
                    "{error}"
                );
            }
        }
    }
}
