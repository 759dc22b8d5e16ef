//! `benchmark run` flags: the workload.

use clap::Args;

/// The workload.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Data")]
pub struct DataArgs {
    /// Workload: a synthetic spec, e.g. "prompt_tokens=256,output_tokens=128".
    #[arg(
        long,
        env = "LLMSURGE_DATA",
        default_value = "prompt_tokens=256,output_tokens=128",
        help_heading = "Data"
    )]
    pub data: String,

    /// Send `ignore_eos: true` so the server generates exactly the requested output tokens.
    #[arg(long, env = "LLMSURGE_IGNORE_EOS", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub ignore_eos: bool,
}
