//! The RSA key strongsync gives a client that asks for the server's key on a plain connection
//! while strongsync's own connection to the primary is secure.

use std::sync::Arc;

use rsa::pkcs8::{EncodePublicKey, LineEnding};
use rsa::{Oaep, RsaPrivateKey};
use tokio::sync::OnceCell;

/// Bits of the key: MySQL's own default.
const BITS: usize = 2048;

/// The key, made on first use and kept in memory for the life of the process. The primary wants
/// the password in clear on a secure connection, which only strongsync can hand it, once it has
/// decrypted what the client encrypted for this key.
#[derive(Default)]
pub struct PasswordKey {
    key: OnceCell<Arc<Made>>,
}

struct Made {
    private: RsaPrivateKey,
    /// The public key as PEM (SubjectPublicKeyInfo), as MySQL sends its own.
    pem: Vec<u8>,
}

/// Why the key could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum PasswordKeyError {
    /// Making the key failed.
    #[error("cannot make strongsync's RSA key: {0}")]
    Make(#[source] rsa::Error),
    /// Writing its public half as PEM failed.
    #[error("cannot make strongsync's RSA key: {0}")]
    Pem(#[source] rsa::pkcs8::spki::Error),
    /// The blocking task that makes or uses it did not finish (it panicked, or the runtime
    /// is stopping).
    #[error("cannot make strongsync's RSA key: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// What the client sent does not decrypt with strongsync's key.
    #[error("the password does not decrypt with strongsync's RSA key")]
    Decrypt,
}

impl PasswordKey {
    /// The public key, as PEM; made now if it was not yet (off the async threads).
    ///
    /// # Errors
    /// [`PasswordKeyError::Make`].
    pub async fn public_pem(&self) -> Result<&[u8], PasswordKeyError> {
        Ok(&self.made().await?.pem)
    }

    /// Decrypts `ciphertext` (RSA-OAEP with SHA-1, as MySQL's clients encrypt).
    ///
    /// # Errors
    /// [`PasswordKeyError`].
    pub async fn decrypt(&self, ciphertext: &[u8]) -> Result<Vec<u8>, PasswordKeyError> {
        let made = Arc::clone(self.made().await?);
        let ciphertext = ciphertext.to_vec();
        tokio::task::spawn_blocking(move || {
            made.private
                .decrypt(Oaep::new::<sha1::Sha1>(), &ciphertext)
                .map_err(|_| PasswordKeyError::Decrypt)
        })
        .await
        .map_err(PasswordKeyError::Task)?
    }

    async fn made(&self) -> Result<&Arc<Made>, PasswordKeyError> {
        self.key
            .get_or_try_init(|| async {
                tokio::task::spawn_blocking(make)
                    .await
                    .map_err(PasswordKeyError::Task)?
            })
            .await
    }
}

fn make() -> Result<Arc<Made>, PasswordKeyError> {
    let private =
        RsaPrivateKey::new(&mut rsa::rand_core::OsRng, BITS).map_err(PasswordKeyError::Make)?;
    let pem = private
        .to_public_key()
        .to_public_key_pem(LineEnding::LF)
        .map_err(PasswordKeyError::Pem)?
        .into_bytes();
    tracing::debug!("made the RSA key for passwords of clients on plain connections");
    Ok(Arc::new(Made { private, pem }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_a_mysql_client_encrypts_for_the_key_decrypts_to_the_masked_password() {
        let key = PasswordKey::default();
        let pem = key.public_pem().await.unwrap().to_vec();
        assert!(pem.starts_with(b"-----BEGIN PUBLIC KEY-----"));
        // mysql_common's client side: the password and its NUL, masked, RSA-OAEP encrypted.
        let masked = b"secret\0".to_vec();
        let ciphertext = mysql_common::crypto::encrypt(&masked, &pem).unwrap();
        assert_eq!(ciphertext.len(), BITS / 8);
        assert_eq!(key.decrypt(&ciphertext).await.unwrap(), masked);
        // The same key each time; what another key encrypted does not decrypt.
        assert_eq!(key.public_pem().await.unwrap(), &pem[..]);
        let other = PasswordKey::default();
        let theirs =
            mysql_common::crypto::encrypt(&masked, other.public_pem().await.unwrap()).unwrap();
        assert!(matches!(
            key.decrypt(&theirs).await,
            Err(PasswordKeyError::Decrypt)
        ));
    }
}
