//! Reading a TOML configuration (the control plane's file, a sidecar's
//! file) into its typed shape, with an error that names the key it is
//! about as a path (`servers[1].liveness_interval_sec`, `mcp.listen`) and
//! where it is (line and column, 1-based), on one line.
//!
//! A syntax error has no key: only its place. An unknown key is named
//! itself (`control_plane.listne: unknown field `listne`, …`), a missing
//! one by the table that lacks it (`servers[0]: missing field `name``).

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
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, column)
    });
    TomlError {
        key,
        position,
        message: e.message().trim_end().replace('\n', " "),
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
            "limits.size: invalid type: string \"big\", expected u32 (line 2, column 8)"
        );
        assert_eq!(
            err("top = 1.5\n"),
            "top: invalid type: floating point `1.5`, expected u64 (line 1, column 7)"
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
