//! The `llmsurge` command line.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "llmsurge", version, about = "Load generator and benchmark for OpenAI-compatible LLM inference servers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the built-in mock OpenAI-compatible server.
    MockServer,
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::MockServer => {}
    }
}
