//! Integrity-protected MRTR `requestState` (2026-07-28).
//!
//! The state is a small JSON object, sealed as
//! `base64url(json) "." base64url(HMAC-SHA256(key, base64url(json)))` (no
//! padding). The client must echo it byte for byte; anything else fails
//! verification. rmcp's own `RequestStateCodec` (feature `request-state`)
//! would need the `hmac` crate, which this workspace does not carry, so the
//! HMAC is built here on `sha2` (RFC 2104, a few lines).
//!
//! The key is fixed, so a state survives a server restart and is accepted by
//! any instance of this server: the stateless property MRTR is designed for.
//! This is a test server; do not copy the fixed key anywhere real.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

/// HMAC key for every sealed state.
const KEY: &[u8] = b"switchyard-reference-server/mrtr-request-state/v1";

/// How long a sealed state stays valid, in seconds.
pub const TTL_SECS: u64 = 600;

/// Why an echoed `requestState` was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum StateError {
    /// Not `payload.tag`, not base64url, not JSON, or the tag does not match.
    Tampered,
    /// Verified, but past its expiry.
    Expired,
}

/// Seals `payload` (a JSON object; `exp` is added) into an opaque string.
pub fn seal(mut payload: Map<String, Value>) -> String {
    payload.insert("exp".into(), Value::from(now() + TTL_SECS));
    let body = URL_SAFE_NO_PAD.encode(Value::Object(payload).to_string());
    let tag = URL_SAFE_NO_PAD.encode(hmac_sha256(KEY, body.as_bytes()));
    format!("{body}.{tag}")
}

/// Verifies and opens a sealed state, returning its JSON object.
pub fn open(sealed: &str) -> Result<Map<String, Value>, StateError> {
    let (body, tag) = sealed.split_once('.').ok_or(StateError::Tampered)?;
    let tag = URL_SAFE_NO_PAD
        .decode(tag)
        .map_err(|_| StateError::Tampered)?;
    let expected = hmac_sha256(KEY, body.as_bytes());
    // Constant-time comparison.
    let differs = tag.len() != expected.len()
        || tag
            .iter()
            .zip(expected.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            != 0;
    if differs {
        return Err(StateError::Tampered);
    }
    let json = URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| StateError::Tampered)?;
    let Ok(Value::Object(payload)) = serde_json::from_slice(&json) else {
        return Err(StateError::Tampered);
    };
    match payload.get("exp").and_then(Value::as_u64) {
        Some(exp) if exp >= now() => Ok(payload),
        Some(_) => Err(StateError::Expired),
        None => Err(StateError::Tampered),
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// HMAC-SHA256 (RFC 2104).
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let tag = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn round_trips_and_rejects_any_change() {
        let mut payload = Map::new();
        payload.insert("round".into(), 1.into());
        let sealed = seal(payload);
        assert_eq!(open(&sealed).unwrap()["round"], 1);
        // Flip one character of the body, then of the tag.
        for at in [2, sealed.len() - 2] {
            let mut bytes = sealed.clone().into_bytes();
            bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(bytes).unwrap();
            assert_eq!(open(&altered), Err(StateError::Tampered), "{altered}");
        }
        assert_eq!(open("nonsense"), Err(StateError::Tampered));
        assert_eq!(open(&format!("{sealed}x")), Err(StateError::Tampered));
    }
}
