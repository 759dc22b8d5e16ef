//! `benchmark run` flags: reports.

use clap::Args;
use std::path::PathBuf;

/// Reports.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Outputs: aliases json, console (comma-separated or repeated).
    #[arg(
        long,
        env = "LLMSURGE_OUTPUTS",
        value_delimiter = ',',
        default_value = "json,console",
        help_heading = "Output"
    )]
    pub outputs: Vec<String>,

    /// Directory for report files.
    #[arg(
        long,
        env = "LLMSURGE_OUTPUT_DIR",
        default_value = ".",
        help_heading = "Output"
    )]
    pub output_dir: PathBuf,

    /// Print the resolved plan and exit without sending anything.
    #[arg(long)]
    pub dry_run: bool,
}
