//! Working around a client-library bug: mysql_async 0.37 (through mysql_common 0.37) strips a
//! trailing NUL byte from the plugin data of an AuthSwitchRequest, and an ed25519 nonce is 32
//! random bytes, so about one ed25519 login in 256 sends a signature over the wrong nonce and
//! is refused with 1045 — against MariaDB directly too (4 refusals in 1500 direct logins here).
//! Tests that log in as the ed25519 user through mysql_async retry such a refusal on a fresh
//! attempt; a real refusal repeats every time.

use std::future::Future;

/// Attempts before a refusal is believed.
const ED25519_ATTEMPTS: usize = 4;

/// Runs `attempt` until it does not end in a refused login (1045), at most a few times, and
/// returns the last result.
pub async fn retry_ed25519<T, Fut>(
    mut attempt: impl FnMut() -> Fut,
) -> Result<T, mysql_async::Error>
where
    Fut: Future<Output = Result<T, mysql_async::Error>>,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(mysql_async::Error::Server(e)) if e.code == 1045 && tries < ED25519_ATTEMPTS => {
                eprintln!("ed25519 login refused (client-library nonce bug?), retrying: {e}");
                tries += 1;
            }
            result => return result,
        }
    }
}
