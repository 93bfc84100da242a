//! Secret values of a server's spec at rest. The inline values of
//! secret-looking headers and environment variables
//! ([`is_secret_name`]: `Authorization`, `X-Api-Key`, `DB_PASSWORD`, ...)
//! are written to the store sealed with the key ring of secrets at rest
//! ([`KeyRing`], `[store] token_encryption_key_file`), each bound to its
//! server, field and name (`servers/NAME/headers/X-Api-Key`), so a sealed
//! value moved elsewhere does not open. They are opened only where they
//! are used ([`open`]): the sidecar files `switchyard up` writes, OAuth
//! discovery requests, and comparisons of specs, which compare opened
//! values (a value sealed again under a fresh nonce is the same value).
//! Without a key ring, values are stored as given. Errors name the server,
//! field and name, never a value.

use super::KeyRing;
use std::collections::BTreeMap;
use switchyard_common::server_spec::{ServerConfig, is_secret_name};

/// The fields of a spec whose secret-looking values are sealed.
const FIELDS: [&str; 2] = ["headers", "env"];

fn field_mut<'a>(spec: &'a mut ServerConfig, field: &str) -> &'a mut BTreeMap<String, String> {
    match field {
        "headers" => &mut spec.headers,
        _ => &mut spec.env,
    }
}

/// What a sealed value of `server`'s `field` entry `name` is bound to.
fn aad(server: &str, field: &str, name: &str) -> String {
    format!("servers/{server}/{field}/{name}")
}

/// Seals the secret-looking header and environment values of `spec` that
/// are not sealed for their place already (a value copied back from the
/// stored spec, e.g. one an admin left `[redacted]`, stays as it is).
pub fn seal(ring: &KeyRing, spec: &mut ServerConfig) {
    let server = spec.name.clone();
    for field in FIELDS {
        for (name, value) in field_mut(spec, field).iter_mut() {
            if !is_secret_name(name) {
                continue;
            }
            let bound = aad(&server, field, name);
            if ring.open(value, &bound).is_err() {
                *value = ring.seal(value.as_bytes(), &bound);
            }
        }
    }
}

/// `spec` with its sealed values opened (a copy; values that were stored
/// as given stay as they are). Errors: a value sealed under a key that is
/// not in the ring, tampered with, or moved from another server, field or
/// name; a sealed value with no key ring configured.
pub fn open(ring: Option<&KeyRing>, spec: &ServerConfig) -> Result<ServerConfig, String> {
    let mut out = spec.clone();
    for field in FIELDS {
        for (name, value) in field_mut(&mut out, field).iter_mut() {
            if !is_secret_name(name) || !looks_sealed(value) {
                continue;
            }
            let place = format!("servers.{}.{field}.{name}", spec.name);
            let Some(ring) = ring else {
                return Err(format!(
                    "{place}: the value is sealed, and no [store] token_encryption_key_file is configured to open it"
                ));
            };
            let plain = ring
                .open(value, &aad(&spec.name, field, name))
                .map_err(|e| format!("{place}: {e}"))?;
            *value = String::from_utf8(plain.to_vec())
                .map_err(|_| format!("{place}: the sealed value is not UTF-8"))?;
        }
    }
    Ok(out)
}

/// Whether two specs are the same once opened (`false` when either does
/// not open).
pub fn same(ring: Option<&KeyRing>, a: &ServerConfig, b: &ServerConfig) -> bool {
    a == b || matches!((open(ring, a), open(ring, b)), (Ok(a), Ok(b)) if a == b)
}

/// Whether `spec` holds secret-looking values stored as given.
pub fn has_plain_secrets(spec: &ServerConfig) -> bool {
    [&spec.headers, &spec.env]
        .iter()
        .any(|m| m.iter().any(|(k, v)| is_secret_name(k) && !looks_sealed(v)))
}

/// Whether `value` has the shape of a sealed value (`sy1.<12 hex>.<data>`).
fn looks_sealed(value: &str) -> bool {
    let mut parts = value.splitn(3, '.');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some("sy1"), Some(id), Some(data))
            if id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()) && !data.is_empty()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ServerConfig {
        let mut s: ServerConfig = toml::from_str(
            "name = \"files\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"",
        )
        .expect("a spec");
        s.headers.insert("X-Api-Key".into(), "hunter2".into());
        s.headers.insert("X-Team".into(), "blue".into());
        s.env.insert("DB_PASSWORD".into(), "swordfish".into());
        s
    }

    #[test]
    fn secret_values_are_sealed_bound_to_their_place_and_open_again() {
        let ring = KeyRing::new(&[7; 32], &[]);
        let given = spec();
        let mut stored = given.clone();
        seal(&ring, &mut stored);
        assert!(stored.headers["X-Api-Key"].starts_with("sy1."));
        assert!(!format!("{stored:?}{}", toml::to_string(&stored).unwrap()).contains("hunter2"));
        assert!(!toml::to_string(&stored).unwrap().contains("swordfish"));
        assert_eq!(stored.headers["X-Team"], "blue", "not secret: as given");
        assert!(!has_plain_secrets(&stored) && has_plain_secrets(&given));
        assert_eq!(open(Some(&ring), &stored).unwrap(), given);
        // Sealed again (a fresh nonce): another text, the same spec.
        let mut again = given.clone();
        seal(&ring, &mut again);
        assert_ne!(again, stored);
        assert!(same(Some(&ring), &again, &stored));
        // A sealed value kept as it is (an admin left it `[redacted]`).
        let mut kept = stored.clone();
        seal(&ring, &mut kept);
        assert_eq!(kept, stored);
        // Moved to another header, or to another server: it does not open,
        // and the error names the place, not the value.
        let mut moved = stored.clone();
        let v = moved.headers["X-Api-Key"].clone();
        moved.headers.insert("Authorization".into(), v.clone());
        let e = open(Some(&ring), &moved).unwrap_err();
        assert!(e.contains("servers.files.headers.Authorization"), "{e}");
        assert!(!e.contains("hunter2") && !e.contains(&v), "{e}");
        let mut other = stored.clone();
        other.name = "other".into();
        assert!(open(Some(&ring), &other).is_err());
        // Another key, or none.
        assert!(open(Some(&KeyRing::new(&[8; 32], &[])), &stored).is_err());
        let e = open(None, &stored).unwrap_err();
        assert!(e.contains("token_encryption_key_file"), "{e}");
        // A plain value that merely starts like one is sealed, not kept.
        let mut odd = given.clone();
        odd.headers
            .insert("X-Api-Key".into(), "sy1.0123456789ab.AAAA".into());
        seal(&ring, &mut odd);
        assert_eq!(
            open(Some(&ring), &odd).unwrap().headers["X-Api-Key"],
            "sy1.0123456789ab.AAAA"
        );
    }
}
