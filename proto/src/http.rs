//! The plain-HTTP client builder and the one-line error chain of every process: the
//! workers (the target), the coordinator (metrics scrapes, profiler calls) and the binary
//! (the target's readiness and `/tokenize` checks).
//!
//! Here because all three build reqwest clients and print errors; the crate is the lowest
//! all three share.

use std::error::Error;

/// A reqwest client builder for requests to `url`. reqwest is built without a crypto
/// provider, so ring's is installed for the process first (a no-op once one is). To a
/// plain `http://` URL the client gets no TLS roots: reading the system's root
/// certificates takes ~10 ms (hundreds of files) on every process's start-up path, and a
/// plain target is never TLS (the workers follow no redirects).
pub fn client_builder(url: &str) -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = reqwest::Client::builder();
    if is_plain_http(url) {
        builder.tls_certs_only(std::iter::empty())
    } else {
        builder
    }
}

/// Whether `url` is `http://…` (the scheme in any case, as URLs allow).
fn is_plain_http(url: &str) -> bool {
    url.get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
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
