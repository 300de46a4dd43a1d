//! What a session asks of strong sync itself, its own quorum (`@strongsync_quorum`), as its
//! flavour reads it.

/// The user variable a session sets to ask for its own quorum.
const SESSION_QUORUM_VAR: &[u8] = b"strongsync_quorum";

/// What a session's `@strongsync_quorum` says.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub enum AskedQuorum {
    /// NULL: never set (or set back to NULL).
    #[default]
    Unset,
    /// A count.
    Count(usize),
    /// Something else, as text.
    Invalid(String),
}

impl AskedQuorum {
    /// What the variable's value (`None` for NULL) asks.
    pub fn of(value: Option<Vec<u8>>) -> Self {
        match value {
            None => AskedQuorum::Unset,
            Some(value) => std::str::from_utf8(&value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .map_or_else(
                    || AskedQuorum::Invalid(String::from_utf8_lossy(&value).into_owned()),
                    AskedQuorum::Count,
                ),
        }
    }
}

/// Whether SQL text names the session quorum variable (in any case, as MariaDB's variable
/// names go): a scan for its `_`, then a comparison around each.
pub fn names_session_quorum(text: &[u8]) -> bool {
    const UNDERSCORE_AT: usize = 10;
    debug_assert_eq!(SESSION_QUORUM_VAR[UNDERSCORE_AT], b'_');
    memchr::memchr_iter(b'_', text).any(|at| {
        at.checked_sub(UNDERSCORE_AT)
            .and_then(|start| text.get(start..start + SESSION_QUORUM_VAR.len()))
            .is_some_and(|word| word.eq_ignore_ascii_case(SESSION_QUORUM_VAR))
    })
}
