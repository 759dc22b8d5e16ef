//! The `llmsurge` command line.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "llmsurge",
    version,
    about = "Load generator and benchmark for OpenAI-compatible LLM inference servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the built-in mock OpenAI-compatible server.
    MockServer(llmsurge::mock::MockConfig),
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::MockServer(config) => {
            use llmsurge::exit_codes;
            if let Err(e) = config.validate().and_then(|()| llmsurge::mock::check_env()) {
                eprintln!("error: {e}");
                std::process::exit(exit_codes::USAGE);
            }
            if let Err(e) = llmsurge::mock::run_cli(config) {
                eprintln!("error: {e:#}");
                std::process::exit(exit_codes::RUN_FAILED);
            }
        }
    }
}
