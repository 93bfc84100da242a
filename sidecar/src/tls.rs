//! TLS set-up: rustls with the ring crypto provider, installed once per
//! process before any client or server is built.

/// Installs ring as the process-wide rustls provider; later calls (and a
/// provider installed by someone else first) are fine.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
