//! The one integration-test binary (one link, shared by every module): the real
//! `llmsurge` binary and the real mock server over loopback.

mod cache_reset;
mod cli;
mod engine;
mod formats;
mod gpu;
mod mock_server;
mod scenario;
mod support;
mod sweep;
mod sweep_edges;
mod sweep_inputs;
mod sweep_plot;
mod sweep_runs;
mod sweep_sla;
