//! The reference server's integration tests, one binary (STYLE.md): each
//! module drives the real `switchyard-reference-server` binary over stdio
//! and Streamable HTTP, in both eras.

mod resources;
mod tasks;
