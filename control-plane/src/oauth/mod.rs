//! Stage D (design §4 D): OAuth for upstream servers, authorized once by an
//! admin and shared by every session. Built so far: the key ring that
//! encrypts secrets at rest ([`keyring`]). Still to come (issue #16):
//! the auth types per server, discovery and registration, the callback,
//! the token records, the single-flight refresh and the push to sidecars.

pub mod keyring;

pub use keyring::{KeyRing, SealError};
