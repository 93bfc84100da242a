//! Secret values of a server's spec at rest. The inline values of
//! secret headers and environment variables ([`is_secret_entry`]: a
//! secret-looking name, `Authorization`, `X-Api-Key`, `DB_PASSWORD`, ...,
//! or a value that holds a secret, `DATABASE_URL=postgresql://app:PW@db/x`)
//! and the secret parts of its URL and arguments (what answers show
//! `[redacted]`: the password, `?api_key=`, a credential in the path, the
//! fragment, `--api-key K`; [`map_url_secrets`], [`map_arg_secrets`]) are
//! written to the store sealed with the key ring
//! of secrets at rest ([`KeyRing`], `[store] token_encryption_key_file`),
//! each bound to its server, field and name
//! (`servers/NAME/headers/X-Api-Key`, `servers/NAME/url/password`,
//! `servers/NAME/args/args 2`), so a
//! sealed value moved elsewhere does not open. A sealed URL part is
//! URL-safe text, so the stored URL stays a URL with the same parts, and
//! arguments keep their places.
//! Values are opened only where they are used ([`open`], [`url()`]): the
//! sidecar files `switchyard up` writes, OAuth discovery and the URL
//! tokens are bound to, and comparisons of specs, which compare opened
//! values (a value sealed again under a fresh nonce is the same value).
//! Without a key ring, values are stored as given. Errors name the server,
//! field and name, never a value.

use super::KeyRing;
use std::collections::BTreeMap;
use switchyard_common::server_spec::{
    SecretPart, ServerConfig, is_secret_entry, looks_sealed, map_arg_secrets, map_url_secrets,
};

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

/// Seals the secret-looking header and environment values, the URL's
/// secret parts and the arguments' of `spec` that are not sealed for their
/// place already (a value copied back from the stored spec, e.g. one an
/// admin left `[redacted]`, stays as it is).
pub fn seal(ring: &KeyRing, spec: &mut ServerConfig) {
    let server = spec.name.clone();
    let seal_part = |field: &str, part: &SecretPart<'_>| {
        let bound = aad(&server, field, &part.place);
        Ok::<_, std::convert::Infallible>(
            ring.open(part.value, &bound)
                .is_err()
                .then(|| ring.seal(part.value.as_bytes(), &bound)),
        )
    };
    if let Some(url) = &spec.url {
        let Ok(sealed) = map_url_secrets(url, |part| seal_part("url", part));
        spec.url = Some(sealed);
    }
    let Ok(args) = map_arg_secrets(&spec.args, |part| seal_part("args", part));
    spec.args = args;
    for field in FIELDS {
        for (name, value) in field_mut(spec, field).iter_mut() {
            if !is_secret_entry(name, value) {
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
    out.url = spec.url.is_some().then(|| url(ring, spec)).transpose()?;
    out.args = args(ring, spec)?;
    for field in FIELDS {
        for (name, value) in field_mut(&mut out, field).iter_mut() {
            if !looks_sealed(value) {
                continue;
            }
            *value = open_value(ring, value, &aad(&spec.name, field, name), || {
                format!("servers.{}.{field}.{name}: the value", spec.name)
            })?;
        }
    }
    Ok(out)
}

/// `sealed` opened, bound to `bound`; errors start with `what()`.
fn open_value(
    ring: Option<&KeyRing>,
    sealed: &str,
    bound: &str,
    what: impl Fn() -> String,
) -> Result<String, String> {
    let Some(ring) = ring else {
        return Err(format!(
            "{} is sealed, and no [store] token_encryption_key_file is configured to open it",
            what()
        ));
    };
    let plain = ring
        .open(sealed, bound)
        .map_err(|e| format!("{}: {e}", what()))?;
    String::from_utf8(plain.to_vec())
        .map_err(|_| format!("{}: the sealed value is not UTF-8", what()))
}

/// A sealed part of `server`'s `field` (`url`, `args`) opened; `None` for
/// a part stored as given.
fn open_part(
    ring: Option<&KeyRing>,
    server: &str,
    field: &str,
    part: &SecretPart<'_>,
) -> Result<Option<String>, String> {
    if !looks_sealed(part.value) {
        return Ok(None);
    }
    open_value(ring, part.value, &aad(server, field, &part.place), || {
        format!("servers.{server}.{field}: the {}", part.what)
    })
    .map(Some)
}

/// `spec`'s URL with its sealed parts opened (empty for a server without
/// one), for where it is used or compared: OAuth discovery, the URL an
/// authorization and its tokens are bound to. Errors as [`open`]'s.
pub fn url(ring: Option<&KeyRing>, spec: &ServerConfig) -> Result<String, String> {
    let url = spec.url.as_deref().unwrap_or_default();
    map_url_secrets(url, |part| open_part(ring, &spec.name, "url", part))
}

/// `spec`'s arguments with their sealed parts opened. Errors as
/// [`open`]'s.
pub fn args(ring: Option<&KeyRing>, spec: &ServerConfig) -> Result<Vec<String>, String> {
    map_arg_secrets(&spec.args, |part| open_part(ring, &spec.name, "args", part))
}

/// Whether two specs are the same once opened (`false` when either does
/// not open).
pub fn same(ring: Option<&KeyRing>, a: &ServerConfig, b: &ServerConfig) -> bool {
    a == b || matches!((open(ring, a), open(ring, b)), (Ok(a), Ok(b)) if a == b)
}

/// Whether `spec` holds secret-looking values stored as given (headers,
/// environment, URL parts, arguments).
pub fn has_plain_secrets(spec: &ServerConfig) -> bool {
    let plain = |part: &SecretPart<'_>| match looks_sealed(part.value) {
        true => Ok(None),
        false => Err(()),
    };
    map_url_secrets(spec.url.as_deref().unwrap_or_default(), plain).is_err()
        || map_arg_secrets(&spec.args, plain).is_err()
        || [&spec.headers, &spec.env].iter().any(|m| {
            m.iter()
                .any(|(k, v)| is_secret_entry(k, v) && !looks_sealed(v))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ServerConfig {
        let mut s: ServerConfig = toml::from_str(
            "name = \"files\"\ntransport = \"http\"\nurl = \"http://alice:PW-SECRET@127.0.0.1:9/mcp?api_key=K-SECRET&team=blue\"",
        )
        .expect("a spec");
        s.headers.insert("X-Api-Key".into(), "hunter2".into());
        s.headers.insert("X-Team".into(), "blue".into());
        s.env.insert("DB_PASSWORD".into(), "swordfish".into());
        s.env.insert(
            "DATABASE_URL".into(),
            "postgresql://app:pg-SECRET@db/x".into(),
        );
        s.env.insert("LOG".into(), "info".into());
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
        // A value that holds a secret under a plain name: sealed whole.
        assert!(stored.env["DATABASE_URL"].starts_with("sy1."));
        assert!(!toml::to_string(&stored).unwrap().contains("pg-SECRET"));
        assert_eq!(stored.headers["X-Team"], "blue", "not secret: as given");
        assert_eq!(stored.env["LOG"], "info", "not secret: as given");
        // The URL's secret parts too; it stays a URL with the same parts.
        let url = stored.url.clone().unwrap();
        assert!(
            !url.contains("PW-SECRET") && !url.contains("K-SECRET"),
            "{url}"
        );
        assert!(
            url.starts_with("http://alice:sy1.") && url.ends_with("&team=blue"),
            "{url}"
        );
        assert_eq!(
            switchyard_common::server_spec::redacted_url(&url),
            "http://alice:[redacted]@127.0.0.1:9/mcp?api_key=[redacted]&team=blue"
        );
        assert_eq!(
            super::url(Some(&ring), &stored).unwrap(),
            given.url.clone().unwrap()
        );
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
        // A URL part moved to another place does not open either, and the
        // error names the part.
        let mut swapped = stored.clone();
        let (pw, key) = {
            let u = url::Url::parse(&url).unwrap();
            let key = u
                .query_pairs()
                .find(|(k, _)| k == "api_key")
                .unwrap()
                .1
                .into_owned();
            (u.password().unwrap().to_owned(), key)
        };
        swapped.url = Some(
            url.replace(&pw, "P")
                .replace(&key, &pw)
                .replace(":P@", &format!(":{key}@")),
        );
        let e = open(Some(&ring), &swapped).unwrap_err();
        assert!(e.contains("servers.files.url: the password"), "{e}");
        assert!(!e.contains("PW-SECRET") && !e.contains(&pw), "{e}");
        // Stored as given without a ring; sealed with one.
        assert!(has_plain_secrets(&given));
        let mut only_url = given.clone();
        only_url.headers.clear();
        only_url.env.clear();
        assert!(has_plain_secrets(&only_url));
        seal(&ring, &mut only_url);
        assert!(!has_plain_secrets(&only_url));
        // Arguments: the secret parts, each bound to its place.
        let mut stdio = given.clone();
        stdio.args = [
            "--api-key",
            "K-SECRET",
            "postgresql://app:PG-SECRET@db/x",
            "-v",
        ]
        .map(String::from)
        .to_vec();
        let mut sealed = stdio.clone();
        seal(&ring, &mut sealed);
        let text = sealed.args.join(" ");
        assert!(
            !text.contains("K-SECRET") && !text.contains("PG-SECRET"),
            "{text}"
        );
        assert!(sealed.args[2].starts_with("postgresql://app:sy1.") && sealed.args[3] == "-v");
        assert!(has_plain_secrets(&stdio) && !has_plain_secrets(&sealed));
        assert_eq!(open(Some(&ring), &sealed).unwrap(), stdio);
        let mut shifted = sealed.clone();
        shifted.args.insert(0, "-x".into());
        let e = open(Some(&ring), &shifted).unwrap_err();
        assert!(e.starts_with("servers.files.args: the args[2]"), "{e}");
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
