//! Certificates generated at test time (rcgen, ring): one test CA per
//! [`TestPki`], and leaf certificates it signs, written as PEM files into a
//! directory, for TLS and mTLS tests on loopback. Nothing is reused across
//! runs and no private key is checked in.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

/// A test certificate authority writing its files into `dir`.
pub struct TestPki {
    dir: PathBuf,
    name: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// The CA certificate (PEM file).
    pub ca_file: PathBuf,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki")
            .field("name", &self.name)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// A leaf certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The certificate.
    pub cert_file: PathBuf,
    /// The private key (PKCS#8).
    pub key_file: PathBuf,
}

impl TestPki {
    /// A new CA called `name` (its common name), files under `dir`
    /// (`NAME-ca.pem`).
    pub fn new(dir: &Path, name: &str) -> TestPki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("self-sign the CA");
        let ca_file = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca_file, issuer.pem()).expect("write the CA");
        TestPki {
            dir: dir.to_owned(),
            name: name.to_owned(),
            issuer,
            ca_file,
        }
    }

    /// A leaf with common name `cn`, DNS names `dns` plus `localhost`, the
    /// IP address 127.0.0.1, usable as server and as client certificate.
    /// Files: `NAME-CN.pem`, `NAME-CN.key`.
    pub fn leaf(&self, cn: &str, dns: &[&str]) -> Leaf {
        let mut names: Vec<String> = dns.iter().map(|s| s.to_string()).collect();
        names.push("localhost".into());
        let mut params = CertificateParams::new(names).expect("leaf params");
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign the leaf");
        let cert_file = self.dir.join(format!("{}-{cn}.pem", self.name));
        let key_file = self.dir.join(format!("{}-{cn}.key", self.name));
        std::fs::write(&cert_file, cert.pem()).expect("write the certificate");
        std::fs::write(&key_file, key.serialize_pem()).expect("write the key");
        Leaf {
            cert_file,
            key_file,
        }
    }
}
