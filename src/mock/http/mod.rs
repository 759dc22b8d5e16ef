//! The top layer of the mock: HTTP. `app` holds what every connection shares; `body`
//! streams a planned response through its API format's writer at the plan's deadlines;
//! `metrics` answers `/metrics` and the profiler endpoints; `info` answers `/version` and
//! `/server_info`; `handler` routes and answers
//! every endpoint; `tls` makes the HTTPS acceptor of `--tls-cert`; `server` binds,
//! accepts and shuts down. Nothing below imports this.

pub mod app;
pub mod body;
pub mod cache_reset;
pub mod handler;
pub mod info;
pub mod metrics;
pub mod server;
pub mod tls;
