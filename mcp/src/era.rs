//! Protocol eras and versions (2026-07-28 basic/versioning, "Backward
//! Compatibility with Initialization-Based Versions").
//!
//! 2025-11-25 and earlier versions open a session with `initialize`; 2026-07-28
//! is stateless, every request carrying its version in `_meta`
//! ([`crate::meta::PROTOCOL_VERSION`]). How a client tells them apart is the
//! sidecar's negotiation (`switchyard_sidecar::upstream::era`).

use serde::Serialize;

/// The modern protocol version we speak.
pub const MODERN_VERSION: &str = "2026-07-28";
/// The legacy version we ask for in `initialize`.
pub const LEGACY_VERSION: &str = "2025-11-25";
/// Legacy versions we accept when a server answers `initialize` with an
/// older one (each is a superset-compatible subset of what we use).
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Which era a peer speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Era {
    /// 2026-07-28 and later: stateless, per-request `_meta`.
    Modern,
    /// 2025-11-25 and earlier: `initialize` handshake.
    Legacy,
}

/// Which protocol era to speak with a server (the `era` key of a server's
/// configuration): `auto`, `2026-07-28` (or `modern`), `2025-11-25` (or
/// `legacy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EraPreference {
    /// Probe for 2026-07-28, fall back to the 2025-11-25 handshake.
    #[default]
    Auto,
    /// Only 2026-07-28 (no fallback).
    Modern,
    /// Only the `initialize` handshake (2025-11-25), without probing.
    Legacy,
}

impl std::str::FromStr for EraPreference {
    type Err = String;
    /// Errors: the text is none of the accepted names (the message lists them).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(EraPreference::Auto),
            "2026-07-28" | "modern" => Ok(EraPreference::Modern),
            "2025-11-25" | "legacy" => Ok(EraPreference::Legacy),
            // Not repeated: a secret typed in the wrong place would be.
            _ => Err("unknown protocol era: expected auto, 2026-07-28 or 2025-11-25".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preferences_parse_by_version_or_name() {
        assert_eq!("auto".parse(), Ok(EraPreference::Auto));
        assert_eq!("2026-07-28".parse(), Ok(EraPreference::Modern));
        assert_eq!("legacy".parse(), Ok(EraPreference::Legacy));
        // The text is not repeated: a secret typed in the wrong place
        // would be.
        let e = "ghp_2024".parse::<EraPreference>().unwrap_err();
        assert!(
            !e.contains("ghp_2024") && e.contains("expected auto"),
            "{e}"
        );
    }
}
