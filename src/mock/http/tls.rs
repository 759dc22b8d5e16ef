//! HTTPS for the mock (`--tls-cert`, `--tls-key`, `--tls-client-ca`): a rustls server
//! config that offers h2 and HTTP/1.1 by ALPN and, for mutual TLS, requires a client
//! certificate signed by a given CA. The tests make their certificates at run time.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::mock::config::MockConfig;
use crate::mock::error::MockError;

/// The acceptor of `config`'s TLS settings; `None` serves plain HTTP.
pub fn acceptor(config: &MockConfig) -> Result<Option<TlsAcceptor>, MockError> {
    let (Some(cert_path), Some(key_path)) = (&config.tls_cert, &config.tls_key) else {
        return Ok(None);
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| MockError::Tls(format!("cannot set up TLS: {e}")))?;
    let builder = match &config.tls_client_ca {
        None => builder.with_no_client_auth(),
        Some(ca_path) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certs("--tls-client-ca", ca_path)? {
                roots.add(cert).map_err(|e| {
                    MockError::Tls(format!("--tls-client-ca {}: {e}", ca_path.display()))
                })?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| MockError::Tls(format!("--tls-client-ca {}: {e}", ca_path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let chain = certs("--tls-cert", cert_path)?;
    // The key's contents are never shown, only where it is.
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| {
        MockError::Tls(format!(
            "--tls-key {}: no PEM private key read ({e})",
            key_path.display()
        ))
    })?;
    let mut server = builder.with_single_cert(chain, key).map_err(|e| {
        MockError::Tls(format!(
            "--tls-cert {} and --tls-key {} do not make a certificate ({e})",
            cert_path.display(),
            key_path.display()
        ))
    })?;
    // h2 first: a client that offers both gets HTTP/2, as from a real server.
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // `SSLKEYLOGFILE`, as curl and browsers read it: the sessions' secrets appended to
    // that file (NSS key log format), so a capture can be decrypted (Wireshark,
    // scripts/lib/wire.py); nothing is written without it. Checked once the certificate
    // is good, so a start that fails on it leaves no file behind.
    check_key_log()?;
    server.key_log = Arc::new(rustls::KeyLogFile::new());
    Ok(Some(TlsAcceptor::from(Arc::new(server))))
}

/// Opens `SSLKEYLOGFILE` (when set) as rustls will, creating it readable by its owner
/// only: rustls says nothing of a path it cannot write, so a capture would meet an empty
/// key log long after the run. A FIFO or a device is refused too (opened without
/// waiting: a FIFO with no reader would hold the start for ever).
fn check_key_log() -> Result<(), MockError> {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(path) = std::env::var_os("SSLKEYLOGFILE").filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let fail = |why: String| {
        MockError::Tls(format!(
            "SSLKEYLOGFILE {}: cannot append the TLS secrets to it ({why})",
            Path::new(&path).display()
        ))
    };
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| fail(e.to_string()))?;
    match file.metadata() {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(fail("not a regular file".into())),
        Err(e) => Err(fail(e.to_string())),
    }
}

/// Every certificate of the PEM file at `path`; at least one.
fn certs(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, MockError> {
    let fail = |why: String| MockError::Tls(format!("{flag} {}: {why}", path.display()));
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| fail(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}
