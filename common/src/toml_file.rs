//! Reading a TOML configuration (the control plane's file, a sidecar's
//! file) into its typed shape, with an error that names the key it is
//! about as a path (`servers[1].liveness_interval_sec`, `mcp.listen`) and
//! where it is (line and column, 1-based), on one line.
//!
//! A syntax error has no key: only its place. An unknown key is named
//! itself (`control_plane.listne: unknown field `listne`, …`), a missing
//! one by the table that lacks it (`servers[0]: missing field `name``).
//!
//! The error never repeats a value of the file: a secret in the wrong
//! place (`headers = "Bearer …"`, `auth = "ghp_…"`) would otherwise be
//! printed, and kept in CI logs. A value of the wrong type is named by its
//! kind (`invalid type: a string, expected a map`), an unknown variant by
//! its place only; a number out of range for a numeric key is shown.
//! Control characters in keys and messages are escaped (`\u{1b}`), so the
//! error stays one line and cannot drive a terminal.

use crate::serde_errors::{escape_controls, without_values};
use std::fmt;

/// Why a TOML text is not the expected configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TomlError {
    /// The dotted path of the value the error is about (`servers[1].url`),
    /// or `None` for a syntax error or one about the whole document.
    pub key: Option<String>,
    /// 1-based line and column of the error, when toml knows it.
    pub position: Option<(usize, usize)>,
    /// What is wrong, toml's (or the type's) own words, one line.
    pub message: String,
}

impl fmt::Display for TomlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.key, self.position) {
            (Some(key), Some((line, column))) => {
                write!(f, "{key}: {} (line {line}, column {column})", self.message)
            }
            (Some(key), None) => write!(f, "{key}: {}", self.message),
            (None, Some((line, column))) => {
                write!(f, "line {line}, column {column}: {}", self.message)
            }
            (None, None) => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for TomlError {}

/// The largest configuration file read: 16 MiB. Larger (or endless, as
/// `/dev/zero`) is an error, not a process that reads until memory runs
/// out.
pub const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// Reads a configuration file of at most [`MAX_CONFIG_BYTES`] as UTF-8.
/// Errors: the OS error, `InvalidData` for a larger file or text that is
/// not UTF-8.
pub fn read_config(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} MiB", MAX_CONFIG_BYTES >> 20),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Parses `text` as TOML into `T`. Errors: [`TomlError`], naming the key
/// and the position.
pub fn from_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, TomlError> {
    let deserializer = toml::Deserializer::parse(text).map_err(|e| error(None, &e, text))?;
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        // The path of an error about the document itself is ".".
        let key = (path != ".").then_some(path);
        error(key, e.inner(), text)
    })
}

fn error(key: Option<String>, e: &toml::de::Error, text: &str) -> TomlError {
    let position = e.span().map(|span| {
        let start = span.start.min(text.len());
        // A span always starts on a character boundary of `text`.
        let before = text.get(..start).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        // Neither a byte-order mark nor the CR of a CRLF line ending is a
        // column.
        let prefix = before.rsplit('\n').next().unwrap_or("");
        let prefix = prefix.strip_prefix('\u{feff}').unwrap_or(prefix);
        let prefix = prefix.strip_suffix('\r').unwrap_or(prefix);
        (line, prefix.chars().count() + 1)
    });
    TomlError {
        key: key.map(|k| escape_controls(&k)),
        position,
        message: escape_controls(&without_values(e.message().trim_end())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct File {
        #[serde(default)]
        top: Option<u64>,
        #[serde(default)]
        servers: Vec<Server>,
        #[serde(default)]
        limits: Option<Limits>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Server {
        name: String,
        #[serde(default)]
        interval_sec: u64,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Limits {
        size: u32,
    }

    fn err(text: &str) -> String {
        from_toml::<File>(text).unwrap_err().to_string()
    }

    #[test]
    fn a_wrong_type_names_the_key_with_its_index_and_its_place() {
        let text = "[[servers]]\nname = \"a\"\n\n[[servers]]\nname = \"b\"\ninterval_sec = -1\n";
        assert_eq!(
            err(text),
            "servers[1].interval_sec: invalid value: integer `-1`, expected u64 (line 6, column 16)"
        );
        assert_eq!(
            err("[limits]\nsize = \"big\"\n"),
            "limits.size: invalid type: a string, expected u32 (line 2, column 8)"
        );
        assert_eq!(
            err("top = 1.5\n"),
            "top: invalid type: a floating point number, expected u64 (line 1, column 7)"
        );
    }

    #[test]
    fn an_unknown_or_missing_key_names_its_table() {
        let e = err("[limits]\nsize = 1\nsise = 2\n");
        assert!(
            e.starts_with("limits.sise: unknown field `sise`, expected `size` (line 3"),
            "{e}"
        );
        let e = err("[[servers]]\ninterval_sec = 1\n");
        assert!(e.starts_with("servers[0]: missing field `name`"), "{e}");
        let e = err("topp = 1\n");
        assert!(e.starts_with("topp: unknown field `topp`"), "{e}");
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Secrets {
        #[serde(default)]
        headers: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        auth: Option<Auth>,
        #[serde(default)]
        client_secret: Option<String>,
        #[serde(default)]
        count: Option<u8>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Auth {
        None,
        Oauth,
    }

    /// A value in the wrong place is never repeated: it may be a secret.
    #[test]
    fn values_are_described_not_repeated() {
        let e = |text: &str| from_toml::<Secrets>(text).unwrap_err().to_string();
        for (text, want) in [
            (
                "headers = \"Bearer ghp_SECRET\"\n",
                "headers: invalid type: a string, expected a map (line 1, column 11)",
            ),
            (
                "auth = \"ghp_SECRET\"\n",
                "auth: unknown variant, expected `none` or `oauth` (line 1, column 8)",
            ),
            (
                "client_secret = 123456789\n",
                "client_secret: invalid type: an integer, expected a string (line 1, column 17)",
            ),
            // A number out of range for a numeric key is shown.
            (
                "count = 300\n",
                "count: invalid value: integer `300`, expected u8 (line 1, column 9)",
            ),
        ] {
            let got = e(text);
            assert_eq!(got, want);
            assert!(!got.contains("SECRET") && !got.contains("123456789"));
        }
    }

    /// Keys with control characters cannot break the line or drive a
    /// terminal.
    #[test]
    fn control_characters_are_escaped() {
        let e = err("[limits]\n\"a\\nerror: all good\\u001b[31m\" = 1\n");
        assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e:?}");
        assert!(
            e.starts_with("limits.a\\u{a}error: all good\\u{1b}[31m: unknown field"),
            "{e}"
        );
    }

    /// A byte-order mark and the CR of CRLF endings are not columns.
    #[test]
    fn columns_skip_a_bom_and_carriage_returns() {
        let at = |text: &str| from_toml::<File>(text).unwrap_err().position;
        assert_eq!(at("top = \"x\"\n"), at("\u{feff}top = \"x\"\n"));
        assert_eq!(
            at("[limits]\nsize = \"x\n"),
            at("[limits]\r\nsize = \"x\r\n")
        );
    }

    #[test]
    fn a_config_file_is_read_up_to_its_limit() {
        let e = read_config(std::path::Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.to_string(), "larger than 16 MiB");
        let dir = std::env::temp_dir().join(format!("toml-file-{}", std::process::id()));
        std::fs::write(&dir, b"\xff\xfe").unwrap();
        assert_eq!(read_config(&dir).unwrap_err().to_string(), "not UTF-8 text");
        std::fs::write(&dir, "top = 1\n").unwrap();
        assert_eq!(read_config(&dir).unwrap(), "top = 1\n");
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn a_syntax_error_has_its_place_and_no_key() {
        let e = from_toml::<File>("[limits]\nsize = \n").unwrap_err();
        assert_eq!((e.key, e.position.map(|p| p.0)), (None, Some(2)));
        assert!(!e.message.contains('\n'));
        // Columns count characters, not bytes.
        let e = from_toml::<File>("[[servers]]\nname = \"é\" x\n").unwrap_err();
        assert_eq!(e.position, Some((2, 12)), "{e}");
    }
}
