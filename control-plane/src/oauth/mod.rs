//! Stage D (design §4 D): OAuth for upstream servers, authorized once by an
//! admin and shared by every session. Built so far: the key ring that
//! encrypts secrets at rest ([`keyring`]), and the token records with the
//! refresh lock they are refreshed under ([`tokens`]). Secret header
//! values (`auth = "headers"`, `header_files`) are read by the sidecars
//! and never reach the control plane. Still to come (issue #16):
//! `auth = "oauth"`, discovery and registration, the callback, the
//! refresher and the push to sidecars.

pub mod keyring;
pub mod tokens;

pub use keyring::{KeyRing, SealError};
