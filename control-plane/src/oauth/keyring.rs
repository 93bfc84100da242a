//! The key ring that encrypts secrets at rest (OAuth tokens and client
//! secrets, secret header, environment and URL values): AES-256-GCM (ring's AEAD) with a fresh
//! random 96-bit nonce per seal, under 256-bit keys read from files
//! (`[store] token_encryption_key_file`, the active key, and
//! `token_encryption_previous_key_files`, older keys that still open what
//! they sealed). Each key has an id, derived from the key by SHA-256 (not
//! reversible, so it may be shown), carried in every sealed value: a value
//! sealed under an older key still opens, and [`KeyRing::is_current`] says
//! when it should be sealed again under the active one, so that a key is
//! rotated without re-authorizing every server.
//!
//! A sealed value is bound to what it is for: the associated data (`aad`,
//! e.g. the store key of its record and the issuer of its token) must be
//! the same to open it, so a value moved to another record, or presented
//! for another issuer, does not open. Format:
//! `sy1.<key id>.<base64url(nonce ‖ ciphertext ‖ tag)>`. Errors never
//! carry plaintext or key bytes.

use base64::Engine as _;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// The prefix of a sealed value (the format's version).
const PREFIX: &str = "sy1";

/// Why a sealed value did not open.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    /// Not a sealed value of this format.
    #[error("not a sealed value (expected sy1.<key id>.<data>)")]
    Malformed,
    /// Sealed under a key that is not in the ring.
    #[error(
        "sealed under key {0}, which is not in the key ring (add its file to [store] token_encryption_previous_key_files)"
    )]
    UnknownKey(String),
    /// The integrity check failed: tampered, or bound to other data.
    #[error("the sealed value does not open: tampered, or bound to another record")]
    Tampered,
}

/// One key and its id.
struct Key {
    id: String,
    key: LessSafeKey,
}

impl Key {
    fn new(bytes: &[u8; 32]) -> Key {
        let digest = Sha256::digest([b"switchyard key id\0".as_slice(), bytes].concat());
        let id: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, bytes).expect("32 bytes"));
        Key { id, key }
    }
}

/// The active key, which seals, and the older keys, which only open.
pub struct KeyRing {
    active: Key,
    older: Vec<Key>,
    rng: SystemRandom,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("active", &self.active.id)
            .field(
                "older",
                &self.older.iter().map(|k| &k.id).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl KeyRing {
    /// A ring sealing with `active` and opening with it and `older`
    /// (a key given twice counts once).
    pub fn new(active: &[u8; 32], older: &[[u8; 32]]) -> KeyRing {
        let active = Key::new(active);
        let mut keys: Vec<Key> = Vec::new();
        for k in older.iter().map(Key::new) {
            if k.id != active.id && !keys.iter().any(|o| o.id == k.id) {
                keys.push(k);
            }
        }
        KeyRing {
            active,
            older: keys,
            rng: SystemRandom::new(),
        }
    }

    /// The ring of `[store]`'s key files: `None` without an active key.
    /// Errors name the configuration key and the file.
    pub fn load(
        config: &crate::config::StoreConfig,
    ) -> Result<Option<KeyRing>, switchyard_common::tls::CredentialError> {
        let Some(active) = &config.token_encryption_key_file else {
            return Ok(None);
        };
        let active = crate::config::load_key_file("store.token_encryption_key_file", active)?;
        let older = config
            .token_encryption_previous_key_files
            .iter()
            .map(|f| crate::config::load_key_file("store.token_encryption_previous_key_files", f))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(KeyRing::new(&active, &older)))
    }

    /// The active key's id (12 hex digits).
    pub fn active_id(&self) -> &str {
        &self.active.id
    }

    /// Seals `plaintext` under the active key, bound to `aad`.
    pub fn seal(&self, plaintext: &[u8], aad: &str) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .expect("the system's random source works");
        let mut data = Zeroizing::new(plaintext.to_vec());
        self.active
            .key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad.as_bytes()),
                &mut *data,
            )
            .expect("AES-GCM seals any length we store");
        let mut out = Vec::with_capacity(NONCE_LEN + data.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&data);
        format!(
            "{PREFIX}.{}.{}",
            self.active.id,
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
        )
    }

    /// Opens `sealed`, which must be bound to `aad`.
    pub fn open(&self, sealed: &str, aad: &str) -> Result<Zeroizing<Vec<u8>>, SealError> {
        let mut parts = sealed.splitn(3, '.');
        let (Some(PREFIX), Some(id), Some(data)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(SealError::Malformed);
        };
        let key = std::iter::once(&self.active)
            .chain(&self.older)
            .find(|k| k.id == id)
            .ok_or_else(|| SealError::UnknownKey(id.chars().take(12).collect()))?;
        let mut bytes = Zeroizing::new(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(data)
                .map_err(|_| SealError::Malformed)?,
        );
        if bytes.len() < NONCE_LEN + AES_256_GCM.tag_len() {
            return Err(SealError::Malformed);
        }
        let nonce = Nonce::try_assume_unique_for_key(&bytes[..NONCE_LEN])
            .map_err(|_| SealError::Malformed)?;
        let plain_len = key
            .key
            .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut bytes[NONCE_LEN..])
            .map_err(|_| SealError::Tampered)?
            .len();
        Ok(Zeroizing::new(
            bytes[NONCE_LEN..NONCE_LEN + plain_len].to_vec(),
        ))
    }

    /// Whether `sealed` is sealed under the active key (else it should be
    /// sealed again, after opening, when its record is next written).
    pub fn is_current(&self, sealed: &str) -> bool {
        sealed
            .strip_prefix(PREFIX)
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.split('.').next())
            == Some(self.active.id.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 32] = [7; 32];
    const B: [u8; 32] = [9; 32];

    #[test]
    fn seals_open_only_with_their_binding() {
        let ring = KeyRing::new(&A, &[]);
        let sealed = ring.seal(b"gho_secret-token", "oauth/github|https://issuer");
        assert!(sealed.starts_with(&format!("sy1.{}.", ring.active_id())));
        assert!(!sealed.contains("secret"));
        assert_eq!(
            &*ring.open(&sealed, "oauth/github|https://issuer").unwrap(),
            b"gho_secret-token"
        );
        // Another record or issuer: does not open.
        assert_eq!(
            ring.open(&sealed, "oauth/gitlab|https://issuer"),
            Err(SealError::Tampered)
        );
        // Two seals of one value differ (fresh nonces).
        assert_ne!(sealed, ring.seal(b"gho_secret-token", "x"));
        // Any flipped character: refused, never a wrong plaintext.
        for i in 17..sealed.len() {
            let mut t: Vec<char> = sealed.chars().collect();
            t[i] = if t[i] == 'A' { 'B' } else { 'A' };
            let t: String = t.into_iter().collect();
            if t != sealed {
                assert!(ring.open(&t, "oauth/github|https://issuer").is_err(), "{i}");
            }
        }
        for bad in ["", "sy1", "sy1.x", "sy2.a.b", "sy1.abc.!!!"] {
            assert!(ring.open(bad, "a").is_err(), "{bad}");
        }
    }

    #[test]
    fn a_key_rotates_without_losing_what_the_old_one_sealed() {
        let old = KeyRing::new(&A, &[]);
        let sealed = old.seal(b"refresh", "r");
        let rotated = KeyRing::new(&B, &[A]);
        assert_ne!(old.active_id(), rotated.active_id());
        assert!(!rotated.is_current(&sealed));
        let plain = rotated.open(&sealed, "r").unwrap();
        let resealed = rotated.seal(&plain, "r");
        assert!(rotated.is_current(&resealed));
        // Without the old key: a clear error naming its id, no bytes.
        let without = KeyRing::new(&B, &[]);
        let e = without.open(&sealed, "r").unwrap_err();
        assert_eq!(e, SealError::UnknownKey(old.active_id().to_owned()));
        assert!(
            e.to_string()
                .contains("token_encryption_previous_key_files")
        );
        // Debug shows ids only.
        let shown = format!("{rotated:?}");
        assert!(
            shown.contains(old.active_id()) && !shown.contains("[9"),
            "{shown}"
        );
    }
}
