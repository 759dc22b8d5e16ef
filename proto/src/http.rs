//! The plain-HTTP client builder and the one-line error chain of every process: the
//! workers (the target), the coordinator (metrics scrapes, profiler calls) and the binary
//! (the target's readiness and `/tokenize` checks).
//!
//! Here because all three build reqwest clients and print errors; the crate is the lowest
//! all three share.

use serde::{Deserialize, Serialize};
use std::error::Error;
use std::path::{Path, PathBuf};

/// How every client llmsurge builds speaks TLS (`--ca-cert`, `--insecure`,
/// `--client-cert`/`--client-key`): the same for the target check, the probe, the workers
/// and the scrapes. Paths, not contents, cross the process boundary: each process reads
/// the files itself, and no key material ever reaches a report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsConfig {
    /// A PEM bundle of CA certificates trusted beside the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
    /// Skip certificate verification altogether (never silent: the CLI warns and the
    /// report says so).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// The client certificate (PEM, the chain from the leaf) for mutual TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<PathBuf>,
}

/// Why the TLS settings cannot be used; the message names the flag and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// A file could not be read.
    #[error("{flag} {path}: {source}")]
    Read {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file is not what the flag needs.
    #[error("{flag} {path}: {why}")]
    Content {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The key is not the private key of the certificate.
    #[error(
        "--client-key {key} does not match --client-cert {cert}: they are not a pair; pass the key the certificate was issued for"
    )]
    NotAPair {
        /// The certificate file.
        cert: String,
        /// The key file.
        key: String,
    },
    /// Only one of `--client-cert` and `--client-key` was given.
    #[error("--client-cert and --client-key go together: pass both for mutual TLS")]
    HalfIdentity,
}

impl TlsConfig {
    /// The CA certificates of `--ca-cert` (none without it).
    fn roots(&self) -> Result<Vec<reqwest::Certificate>, TlsSetupError> {
        let Some(path) = &self.ca_cert else {
            return Ok(Vec::new());
        };
        let pem = read("--ca-cert", path)?;
        let content = |why: String| TlsSetupError::Content {
            flag: "--ca-cert",
            path: path.display().to_string(),
            why,
        };
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            content(format!(
                "not a PEM certificate bundle ({})",
                error_chain(&e)
            ))
        })?;
        if certs.is_empty() {
            return Err(content(
                "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
            ));
        }
        Ok(certs)
    }

    /// The client identity of `--client-cert` and `--client-key` (none without them).
    fn identity(&self) -> Result<Option<reqwest::Identity>, TlsSetupError> {
        let (cert_path, key_path) = match (&self.client_cert, &self.client_key) {
            (None, None) => return Ok(None),
            (Some(c), Some(k)) => (c, k),
            _ => return Err(TlsSetupError::HalfIdentity),
        };
        let cert = read("--client-cert", cert_path)?;
        let key = read("--client-key", key_path)?;
        let has = |pem: &[u8], what: &str| pem.windows(what.len()).any(|w| w == what.as_bytes());
        if !has(&cert, "-----BEGIN CERTIFICATE-----") {
            return Err(TlsSetupError::Content {
                flag: "--client-cert",
                path: cert_path.display().to_string(),
                why: "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
            });
        }
        if !has(&key, "PRIVATE KEY-----") {
            // The key's contents are never shown, only where it is.
            return Err(TlsSetupError::Content {
                flag: "--client-key",
                path: key_path.display().to_string(),
                why: "holds no PEM private key (-----BEGIN PRIVATE KEY-----)".into(),
            });
        }
        let mut both = cert;
        both.push(b'\n');
        both.extend_from_slice(&key);
        let content = |e: &reqwest::Error| TlsSetupError::Content {
            flag: "--client-key",
            path: key_path.display().to_string(),
            why: format!(
                "does not make an identity with --client-cert ({})",
                error_chain(e)
            ),
        };
        let identity = reqwest::Identity::from_pem(&both).map_err(|e| content(&e))?;
        // Whether the key belongs to the certificate is found only when a client is
        // built (as "builder error"): build one here, without roots, to say so.
        let _ = rustls::crypto::ring::default_provider().install_default();
        match reqwest::Client::builder()
            .tls_certs_only(std::iter::empty())
            .identity(identity.clone())
            .build()
        {
            Ok(_) => Ok(Some(identity)),
            Err(e)
                if sources(&e).any(|s| {
                    matches!(
                        s.downcast_ref::<rustls::Error>(),
                        Some(rustls::Error::InconsistentKeys(_))
                    )
                }) =>
            {
                Err(TlsSetupError::NotAPair {
                    cert: cert_path.display().to_string(),
                    key: key_path.display().to_string(),
                })
            }
            Err(e) => Err(content(&e)),
        }
    }

    /// Reads every file the settings name and checks that they make a client, so that a
    /// bad file is a usage error before any worker starts.
    pub fn check(&self) -> Result<(), TlsSetupError> {
        self.roots()?;
        self.identity()?;
        Ok(())
    }
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsSetupError> {
    std::fs::read(path).map_err(|source| TlsSetupError::Read {
        flag,
        path: path.display().to_string(),
        source,
    })
}

/// The most redirects a client follows (reqwest's own default).
const MAX_REDIRECTS: usize = 10;

/// The redirect policy of every client llmsurge makes: follow a redirect only within
/// the origin (scheme, host, port) of the first request. Every request carries the
/// target's credentials (an API key in `x-api-key`, `api-key`, a gateway's own header),
/// and reqwest drops only `Authorization` on a redirect to another host: following one
/// would send the key to whoever the target names.
pub fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if same && attempt.previous().len() <= MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// A reqwest client builder for requests to `url`, with the TLS settings of `tls`, that
/// follows redirects only within the first request's origin ([`same_origin_redirects`]).
/// reqwest is built without a crypto provider, so ring's is installed for the process
/// first (a no-op once one is). To a plain `http://` URL the client gets no TLS roots:
/// reading the system's root certificates takes ~10 ms (hundreds of files) on every
/// process's start-up path, and a plain target is never TLS (no redirect leaves its
/// origin). Otherwise `--ca-cert` adds to the system's roots (which honour
/// `SSL_CERT_FILE` and `SSL_CERT_DIR`), `--insecure` verifies nothing, and a client
/// certificate is offered when the server asks for one.
pub fn client_builder(url: &str, tls: &TlsConfig) -> Result<reqwest::ClientBuilder, TlsSetupError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = reqwest::Client::builder().redirect(same_origin_redirects());
    if is_plain_http(url) {
        return Ok(builder.tls_certs_only(std::iter::empty()));
    }
    let mut builder = builder.tls_certs_merge(tls.roots()?);
    if tls.insecure {
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    if let Some(identity) = tls.identity()? {
        builder = builder.identity(identity);
    }
    Ok(builder)
}

/// `builder` speaking only HTTP/2 when the run does (`--http2`), as the run's own
/// requests do: with prior knowledge (h2c) on `http://`, where the server may speak
/// nothing else and an HTTP/1.1 request would fail; offering ALPN `h2` alone on
/// `https://` (hyper then speaks h2 whatever the server chose: the target check makes
/// sure it chose `h2`, and stops the run otherwise).
pub fn http2_when(builder: reqwest::ClientBuilder, http2: bool) -> reqwest::ClientBuilder {
    if http2 {
        builder.http2_prior_knowledge()
    } else {
        builder
    }
}

/// Whether `url` is `http://…` (the scheme in any case, as URLs allow).
fn is_plain_http(url: &str) -> bool {
    url.get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
}

/// Why a connection (or the TLS session on it) failed, when the cause is one a user can
/// act on: each says what it is and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectProblem {
    /// Nothing listens on the port.
    Refused,
    /// The URL's host name does not resolve (DNS).
    UnknownHost(String),
    /// An `http://` request was answered with what is not HTTP: TLS, on an HTTPS port.
    TlsOnPlainHttp,
    /// An h2c request (`--http2` on `http://`) was answered with what is not HTTP/2: an
    /// HTTP/1.1 server's answer to the preface, or TLS.
    NotH2c,
    /// The server's certificate chain ends at a CA the client does not trust.
    UnknownIssuer,
    /// The server's certificate (or one of its chain) has expired or is not valid yet.
    Expired,
    /// The server's certificate does not name the host of the URL.
    HostMismatch,
    /// The server refused the client's certificate, or wanted one and got none.
    ClientCertRefused,
    /// The server answered the TLS handshake with something that is not TLS (plain HTTP).
    NotTls,
    /// The server's own certificate is a CA's (basic constraints `CA:TRUE`): what
    /// `openssl req -x509` makes unless told otherwise.
    CaAsServerCertificate,
    /// Another certificate problem (bad signature, revoked, wrong purpose, …).
    BadCertificate,
}

impl ConnectProblem {
    /// The short name (an error kind's sub-cause in messages).
    pub fn describe(&self) -> String {
        let text = match self {
            ConnectProblem::Refused => "connection refused: nothing listens on that port",
            ConnectProblem::UnknownHost(host) => return format!("cannot resolve host {host}"),
            ConnectProblem::TlsOnPlainHttp => {
                "the server answered an http:// request with TLS (or something else that is not HTTP)"
            }
            ConnectProblem::NotH2c => {
                "the server answered an h2c request (--http2 on http://: HTTP/2 with prior knowledge) with what is not HTTP/2 (HTTP/1.1, or TLS)"
            }
            ConnectProblem::UnknownIssuer => {
                "TLS: the server's certificate is signed by an unknown issuer (a CA the client does not trust)"
            }
            ConnectProblem::Expired => {
                "TLS: the server's certificate has expired (or is not valid yet)"
            }
            ConnectProblem::HostMismatch => {
                "TLS: the server's certificate is not valid for this host name"
            }
            ConnectProblem::ClientCertRefused => {
                "TLS: the server refused the client certificate (or wanted one and got none)"
            }
            ConnectProblem::NotTls => {
                "TLS: the server did not answer with TLS (it speaks plain HTTP on this port?)"
            }
            ConnectProblem::CaAsServerCertificate => {
                "TLS: the server's certificate is a CA certificate (basic constraints CA:TRUE), which a client refuses as a server's own"
            }
            ConnectProblem::BadCertificate => "TLS: the server's certificate is not acceptable",
        };
        text.to_string()
    }

    /// What to do about it.
    pub fn advice(&self) -> &'static str {
        match self {
            ConnectProblem::Refused => "start the server, or check the host and port",
            ConnectProblem::UnknownHost(_) => {
                "check the host name in the URL, or this machine's DNS"
            }
            ConnectProblem::TlsOnPlainHttp => "use an https:// URL for this port",
            ConnectProblem::NotH2c => {
                "drop --http2 for a server that speaks HTTP/1.1 only, or use an https:// URL for a TLS port"
            }
            ConnectProblem::UnknownIssuer => {
                "pass the CA's certificate with --ca-cert FILE (or SSL_CERT_FILE), or --insecure to skip verification"
            }
            ConnectProblem::Expired => {
                "renew the server's certificate, check this host's clock, or pass --insecure to skip verification"
            }
            ConnectProblem::HostMismatch => {
                "use a host name the certificate names, or pass --insecure to skip verification"
            }
            ConnectProblem::ClientCertRefused => {
                "pass --client-cert FILE and --client-key FILE with a certificate signed by a CA the server trusts"
            }
            ConnectProblem::NotTls => "use an http:// URL for this port",
            ConnectProblem::CaAsServerCertificate => {
                "give the server a certificate its CA signed, or make the self-signed one with -addext basicConstraints=critical,CA:FALSE; or pass --insecure to skip verification"
            }
            ConnectProblem::BadCertificate => {
                "fix the server's certificate, or pass --insecure to skip verification"
            }
        }
    }

    /// `describe; advice`, the one line a user sees.
    pub fn line(&self) -> String {
        format!("{}; {}", self.describe(), self.advice())
    }
}

/// The actionable cause of `e`, if it has one: looks through the sources (and into the
/// I/O errors that carry rustls's errors) for a refused connection or a TLS failure.
pub fn connect_problem(e: &(dyn Error + 'static)) -> Option<ConnectProblem> {
    // The request's URL: its host for a name that does not resolve, its scheme for an
    // answer that is not HTTP.
    let url = sources(e).find_map(|s| s.downcast_ref::<reqwest::Error>()?.url());
    // Matched by text: neither error is a public type (reqwest's and hyper-util's DNS
    // errors, hyper's parse error kind).
    let said = |text: &str| sources(e).any(|s| s.to_string() == text);
    if said("error resolving DNS") || said("dns error") {
        let host = url.and_then(reqwest::Url::host_str).unwrap_or("of the URL");
        return Some(ConnectProblem::UnknownHost(host.to_string()));
    }
    if url.is_some_and(|u| u.scheme() == "http") && said("invalid HTTP version parsed") {
        return Some(ConnectProblem::TlsOnPlainHttp);
    }
    // h2's FRAME_SIZE_ERROR on a plain connection: the first bytes read as a frame's
    // length were an HTTP/1.1 status line or a TLS record (megabytes, over the limit).
    if url.is_some_and(|u| u.scheme() == "http")
        && sources(e).any(|s| s.to_string().ends_with("frame with invalid size"))
    {
        return Some(ConnectProblem::NotH2c);
    }
    sources(e).find_map(|s| {
        if let Some(tls) = s.downcast_ref::<rustls::Error>() {
            return tls_problem(tls);
        }
        let io = s.downcast_ref::<std::io::Error>()?;
        if io.kind() == std::io::ErrorKind::ConnectionRefused {
            return Some(ConnectProblem::Refused);
        }
        // io::Error's own `source()` skips the error it wraps: look at it here.
        let inner = io.get_ref()?;
        inner
            .downcast_ref::<rustls::Error>()
            .and_then(tls_problem)
            .or_else(|| connect_problem(inner))
    })
}

/// The actionable cause of a TLS failure, if it has one (a certificate, a refused client
/// certificate, an answer that is not TLS).
pub fn tls_problem(e: &rustls::Error) -> Option<ConnectProblem> {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    Some(match e {
        E::InvalidCertificate(c) => match c {
            C::UnknownIssuer => ConnectProblem::UnknownIssuer,
            C::Expired
            | C::ExpiredContext { .. }
            | C::NotValidYet
            | C::NotValidYetContext { .. } => ConnectProblem::Expired,
            C::NotValidForName | C::NotValidForNameContext { .. } => ConnectProblem::HostMismatch,
            // webpki's error, which rustls passes on only as text.
            C::Other(other) if other.to_string().contains("CaUsedAsEndEntity") => {
                ConnectProblem::CaAsServerCertificate
            }
            _ => ConnectProblem::BadCertificate,
        },
        E::AlertReceived(
            A::CertificateRequired
            | A::BadCertificate
            | A::UnknownCA
            | A::CertificateUnknown
            | A::UnsupportedCertificate
            | A::CertificateExpired
            | A::CertificateRevoked
            | A::AccessDenied,
        ) => ConnectProblem::ClientCertRefused,
        E::InvalidMessage(_) => ConnectProblem::NotTls,
        _ => return None,
    })
}

/// Why a body read with [`read_limited`] was not read whole.
#[derive(Debug, thiserror::Error)]
pub enum LimitedReadError {
    /// The server sent more than the limit (or announced it in its Content-Length).
    #[error("larger than {}", crate::limits::describe(*.0))]
    TooLarge(usize),
    /// The transport failed while the body was read.
    #[error("{}", error_chain(.0))]
    Transport(#[from] reqwest::Error),
}

/// The whole body of `response`, when it is at most `limit` bytes: reading stops at the
/// limit, so a server that sends without end costs `limit` bytes, not all it sends (see
/// [`crate::limits`]). Not bounded in time: the client's timeout bounds it.
pub async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, LimitedReadError> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(LimitedReadError::TooLarge(limit));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(LimitedReadError::TooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The error, then its source, its source's source, and so on.
pub fn sources<'a>(
    e: &'a (dyn Error + 'static),
) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(e), |&e| e.source())
}

/// The error and its sources on one line, each source once (reqwest repeats them):
/// `error sending request for url (…): client error (Connect): Connection refused`.
pub fn error_chain(e: &(dyn Error + 'static)) -> String {
    let mut out = e.to_string();
    for s in sources(e).skip(1) {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// The innermost source's message alone (`Connection refused (os error 111)`), for a
/// message that names the URL itself; the error's own message when it has no source.
pub fn root_cause(e: &(dyn Error + 'static)) -> String {
    sources(e)
        .last()
        .map_or_else(|| e.to_string(), ToString::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|l| l as &(dyn Error + 'static))
        }
    }

    fn chain() -> Layer {
        Layer(
            "error sending request: client error (Connect)",
            Some(Box::new(Layer(
                "client error (Connect)",
                Some(Box::new(Layer("Connection refused", None))),
            ))),
        )
    }

    #[test]
    fn the_chain_names_each_source_once() {
        assert_eq!(
            error_chain(&chain()),
            "error sending request: client error (Connect): Connection refused"
        );
        assert_eq!(error_chain(&Layer("alone", None)), "alone");
    }

    #[test]
    fn the_root_cause_is_the_innermost_message() {
        assert_eq!(root_cause(&chain()), "Connection refused");
        assert_eq!(root_cause(&Layer("alone", None)), "alone");
    }

    #[test]
    fn only_plain_http_skips_the_root_store() {
        assert!(is_plain_http("http://127.0.0.1:8000"));
        assert!(is_plain_http("HTTP://host"));
        assert!(!is_plain_http("https://host"));
        assert!(!is_plain_http("http:"));
    }
}
