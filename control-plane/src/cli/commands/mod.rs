//! One module per subcommand (or group of subcommands), each with the
//! functions [`super::run`] dispatches to. A command takes its parsed
//! flags (the clap types are in [`super`]), checks their values (a bad one
//! exits 64), talks to the control plane through [`super::connect`], and
//! prints with [`super::render`].

pub mod background;
pub mod call;
pub mod check_config;
pub mod events;
pub mod interactions;
pub mod resources;
pub mod servers;
pub mod sessions;
pub mod tool_settings;
pub mod tools;
pub mod up;
