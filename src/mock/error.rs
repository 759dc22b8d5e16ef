//! Why the mock server could not be configured or started; the ground every layer
//! of the mock may name.

use std::net::SocketAddr;

/// Why the mock server could not be configured or started.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// A setting is out of range; the message names the flag and the value.
    #[error("{0}")]
    InvalidConfig(String),
    /// An `LLMSURGE_MOCK_*` variable is unknown or does not parse.
    #[error("{0}")]
    Env(String),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The tokio runtime could not be built.
    #[error("cannot start the mock server runtime: {0}")]
    Runtime(std::io::Error),
    /// The `--record` file could not be created.
    #[error("--record {path}: {source}")]
    Record {
        /// The file asked for.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The `--truth` file could not be created.
    #[error("--truth {path}: {source}")]
    Truth {
        /// The file asked for.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TLS certificate, key or client CA could not be used; the message names the
    /// flag and the file.
    #[error("{0}")]
    Tls(String),
    /// The server thread could not be spawned.
    #[error("cannot spawn the mock server thread: {0}")]
    Thread(std::io::Error),
}
