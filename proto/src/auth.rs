//! What each client packet of an authentication exchange carries, where a password may be in it: so
//! that the proxy keeps a password off plain connections, and can take a password the client
//! encrypted for the proxy's own RSA key where the primary wants it in clear.

/// Auth switch request (followed by the plugin's name and its scramble).
const AUTH_SWITCH: u8 = 0xFE;
/// More data from the server's plugin.
pub const AUTH_MORE_DATA: u8 = 0x01;
/// `caching_sha2_password`: the server has no cached entry and wants the password itself.
const PERFORM_FULL_AUTHENTICATION: u8 = 0x04;
/// `caching_sha2_password`'s request for the server's public key.
const CACHING_SHA2_KEY_REQUEST: u8 = 0x02;
/// `sha256_password`'s request for the server's public key.
const SHA256_KEY_REQUEST: u8 = 0x01;
/// Length of the scramble a password is masked with.
pub const SCRAMBLE_LEN: usize = 20;

/// The plugins whose client may send a password.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plugin {
    CachingSha2,
    Sha256,
    /// `mysql_clear_password` and `dialog`: every answer is clear text.
    ClearText,
    /// Any other: scrambles only.
    Scrambled,
}

/// What a client packet of the exchange is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FromClient {
    /// Nothing a password is in: pass it on.
    Forward,
    /// A password in clear.
    ClearPassword,
    /// A request for the server's RSA public key.
    KeyRequest,
    /// The password, encrypted with the key the proxy sent (see [`PasswordWatch::key_sent`]).
    EncryptedForProxy,
    /// The password encrypted with a key the client had already, not the proxy's.
    EncryptedForServer,
}

/// Follows one authentication exchange (a login or a `COM_CHANGE_USER`) from the client's
/// first packet to the server's verdict.
///
/// Four plugins may send a password. `caching_sha2_password` sends it once the server asks for full
/// authentication (`01 04`), `sha256_password` on any packet, and `mysql_clear_password` and PAM's
/// `dialog` always do. Over what the client takes for plain TCP, a client of the first two asks for
/// the server's RSA key instead (`02`, `01`), or sends the password encrypted with a key it already
/// has: `RSA-OAEP(password NUL XOR scramble)`, as long as the key's modulus. Every other plugin
/// (`mysql_native_password`, `ed25519`, ...) sends only scrambles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordWatch {
    plugin: Plugin,
    /// What the client masks its password with: the greeting's, or the last switch's.
    scramble: [u8; SCRAMBLE_LEN],
    /// The server waits for the password itself, in one form or another.
    wants_password: bool,
    /// The proxy answered a key request with its own key.
    key_sent: bool,
}

impl PasswordWatch {
    /// An exchange whose client first answers `scramble` with `plugin` (as its response names
    /// it; a client that names none uses the server's choice, which the server then switches
    /// to).
    pub fn new(plugin: Option<&[u8]>, scramble: &[u8]) -> Self {
        let plugin = plugin.map_or(Plugin::Scrambled, Plugin::named);
        PasswordWatch {
            plugin,
            scramble: fixed(scramble),
            wants_password: plugin == Plugin::Sha256,
            key_sent: false,
        }
    }

    /// Notes a packet the server sent during the exchange.
    pub fn server_sent(&mut self, payload: &[u8]) {
        match payload {
            [AUTH_SWITCH, rest @ ..] if !rest.is_empty() => {
                let mut parts = rest.splitn(2, |&b| b == 0);
                self.plugin = Plugin::named(parts.next().unwrap_or_default());
                let data = parts.next().unwrap_or_default();
                self.scramble = fixed(data.strip_suffix(&[0]).unwrap_or(data));
                self.wants_password = self.plugin == Plugin::Sha256;
                self.key_sent = false;
            }
            [AUTH_MORE_DATA, PERFORM_FULL_AUTHENTICATION] if self.plugin == Plugin::CachingSha2 => {
                self.wants_password = true;
            }
            _ => {}
        }
    }

    /// What `payload`, the client's next packet (or the auth data of its first one), is.
    pub fn client_sent(&self, payload: &[u8]) -> FromClient {
        let key_request = match self.plugin {
            Plugin::ClearText if !matches!(payload, [] | [0]) => return FromClient::ClearPassword,
            Plugin::CachingSha2 | Plugin::Sha256 if self.wants_password => match self.plugin {
                Plugin::CachingSha2 => CACHING_SHA2_KEY_REQUEST,
                _ => SHA256_KEY_REQUEST,
            },
            _ => return FromClient::Forward,
        };
        match payload {
            [b] if *b == key_request => FromClient::KeyRequest,
            // An empty password has nothing to hide.
            [] | [0] => FromClient::Forward,
            _ if self.key_sent => FromClient::EncryptedForProxy,
            _ if looks_clear(payload) => FromClient::ClearPassword,
            _ => FromClient::EncryptedForServer,
        }
    }

    /// The proxy answered the client's key request with its own key: the client's next
    /// packet is the password encrypted with it.
    pub fn key_sent(&mut self) {
        self.key_sent = true;
    }

    /// The scramble the exchange ended with (the greeting's, or the last switch's): what a
    /// later `COM_CHANGE_USER` on the connection answers.
    pub fn scramble(&self) -> &[u8; SCRAMBLE_LEN] {
        &self.scramble
    }

    /// Undoes the client's mask on a password the proxy decrypted, in place: what is left is
    /// the password and its NUL, as a client on a secure connection sends it.
    pub fn unmask(&self, masked: &mut [u8]) {
        for (i, b) in masked.iter_mut().enumerate() {
            *b ^= self.scramble[i % SCRAMBLE_LEN];
        }
    }
}

impl Plugin {
    fn named(name: &[u8]) -> Plugin {
        match name {
            b"caching_sha2_password" => Plugin::CachingSha2,
            b"sha256_password" => Plugin::Sha256,
            b"mysql_clear_password" | b"dialog" => Plugin::ClearText,
            _ => Plugin::Scrambled,
        }
    }
}

fn fixed(scramble: &[u8]) -> [u8; SCRAMBLE_LEN] {
    let mut out = [0; SCRAMBLE_LEN];
    let n = scramble.len().min(SCRAMBLE_LEN);
    out[..n].copy_from_slice(&scramble[..n]);
    out
}

/// A NUL-terminated password, not an RSA ciphertext (as long as the key's modulus: a multiple
/// of 64 bytes from 1024-bit keys up).
fn looks_clear(data: &[u8]) -> bool {
    let rsa = data.len() >= 128 && data.len() % 64 == 0;
    data.last() == Some(&0) && !rsa
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA2: &[u8] = b"caching_sha2_password";
    const SCRAMBLE: [u8; SCRAMBLE_LEN] = *b"abcdefghijklmnopqrst";

    fn switch_to(plugin: &str, scramble: &[u8]) -> Vec<u8> {
        let mut p = vec![AUTH_SWITCH];
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
        p.extend_from_slice(scramble);
        p.push(0);
        p
    }

    fn cipher(len: usize) -> Vec<u8> {
        let mut c = vec![0x33; len];
        *c.last_mut().unwrap() = 0;
        c
    }

    #[test]
    fn caching_sha2_sends_its_password_only_after_full_authentication_is_asked() {
        let mut watch = PasswordWatch::new(Some(SHA2), &SCRAMBLE);
        let password = b"app-secret\0";
        // The fast path's scramble, then the same bytes before the server asked.
        assert_eq!(watch.client_sent(&[0x5a; 32]), FromClient::Forward);
        assert_eq!(watch.client_sent(password), FromClient::Forward);
        watch.server_sent(&[AUTH_MORE_DATA, 0x03]);
        assert_eq!(watch.client_sent(password), FromClient::Forward);
        watch.server_sent(&[AUTH_MORE_DATA, PERFORM_FULL_AUTHENTICATION]);
        // The packet log of research/mysql-auth-tls.md: `61 70 70 2d 73 65 63 72 65 74 00`.
        assert_eq!(watch.client_sent(password), FromClient::ClearPassword);
        assert_eq!(watch.client_sent(&[0x02]), FromClient::KeyRequest);
        // Encrypted with a 2048- or 4096-bit key the client had.
        assert_eq!(
            watch.client_sent(&cipher(256)),
            FromClient::EncryptedForServer
        );
        assert_eq!(
            watch.client_sent(&cipher(512)),
            FromClient::EncryptedForServer
        );
        assert_eq!(watch.client_sent(&[0]), FromClient::Forward);
        // Once the proxy sent its key, what comes is for the proxy.
        watch.key_sent();
        assert_eq!(
            watch.client_sent(&cipher(256)),
            FromClient::EncryptedForProxy
        );
    }

    #[test]
    fn a_switch_decides_the_plugin_and_its_scramble_and_starts_afresh() {
        let mut watch = PasswordWatch::new(Some(b"mysql_native_password"), &SCRAMBLE);
        assert_eq!(watch.client_sent(b"secret\0"), FromClient::Forward);
        watch.server_sent(&switch_to("caching_sha2_password", b"01234567890123456789"));
        assert_eq!(watch.client_sent(b"secret\0"), FromClient::Forward);
        watch.server_sent(&[AUTH_MORE_DATA, PERFORM_FULL_AUTHENTICATION]);
        watch.key_sent();
        watch.server_sent(&switch_to("sha256_password", b"ABCDEFGHIJKLMNOPQRST"));
        // The key sent belonged to the exchange before the switch.
        assert_eq!(watch.client_sent(&[0x01]), FromClient::KeyRequest);
        assert_eq!(watch.client_sent(b"secret\0"), FromClient::ClearPassword);
        let mut masked = *b"x\0";
        watch.unmask(&mut masked);
        assert_eq!(&masked, &[b'x' ^ b'A', b'B']);
        watch.server_sent(&switch_to("mysql_native_password", b"01234567890123456789"));
        assert_eq!(watch.client_sent(b"secret\0"), FromClient::Forward);
        watch.server_sent(&switch_to("mysql_clear_password", b""));
        assert_eq!(watch.client_sent(b"secret\0"), FromClient::ClearPassword);
        assert_eq!(watch.client_sent(b"secret"), FromClient::ClearPassword);
        watch.server_sent(&switch_to("client_ed25519", b"01234567890123456789"));
        assert_eq!(watch.client_sent(&[1; 64]), FromClient::Forward);
    }

    #[test]
    fn each_plugin_as_the_first_answer() {
        let table: [(&[u8], &[u8], FromClient); 9] = [
            (b"sha256_password", b"secret\0", FromClient::ClearPassword),
            (b"sha256_password", &[0x01], FromClient::KeyRequest),
            (b"sha256_password", &[0], FromClient::Forward),
            (
                b"mysql_clear_password",
                b"secret\0",
                FromClient::ClearPassword,
            ),
            (b"mysql_clear_password", &[0], FromClient::Forward),
            (b"dialog", b"123456\0", FromClient::ClearPassword),
            (
                b"mysql_native_password",
                b"01234567890123456789",
                FromClient::Forward,
            ),
            (b"client_ed25519", &[0; 64], FromClient::Forward),
            (b"caching_sha2_password", &[0x5a; 32], FromClient::Forward),
        ];
        for (plugin, data, expected) in table {
            assert_eq!(
                PasswordWatch::new(Some(plugin), &SCRAMBLE).client_sent(data),
                expected,
                "{}: {data:?}",
                String::from_utf8_lossy(plugin)
            );
        }
        assert_eq!(
            PasswordWatch::new(None, &SCRAMBLE).client_sent(b"secret\0"),
            FromClient::Forward
        );
    }

    #[test]
    fn unmasking_undoes_the_clients_mask() {
        let watch = PasswordWatch::new(Some(SHA2), &SCRAMBLE);
        // Longer than the scramble: the mask repeats.
        let password = b"a password longer than twenty bytes\0".to_vec();
        let mut masked: Vec<u8> = password
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ SCRAMBLE[i % SCRAMBLE_LEN])
            .collect();
        watch.unmask(&mut masked);
        assert_eq!(masked, password);
    }

    #[test]
    fn a_short_or_odd_switch_request_changes_nothing_it_cannot_read() {
        let mut watch = PasswordWatch::new(Some(SHA2), &SCRAMBLE);
        // A lone 0xFE is the old-password switch of pre-4.1 servers: no plugin name.
        watch.server_sent(&[AUTH_SWITCH]);
        watch.server_sent(&[AUTH_MORE_DATA, PERFORM_FULL_AUTHENTICATION]);
        assert_eq!(watch.client_sent(b"x\0"), FromClient::ClearPassword);
    }
}
