//! The reference server's integration tests, one binary (STYLE.md): each
//! feature module (`tasks`, `resources`) drives the real
//! `switchyard-reference-server` binary over stdio and Streamable HTTP, in
//! both eras, with the raw JSON-RPC client of `common`.

mod common;

mod resources;
mod tasks;
