//! `llmsurge completions SHELL`: a completion script for the shell, from the clap
//! definitions (so it always matches the flags of this build).

use clap::CommandFactory;

/// Flags of `llmsurge completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Prints the script on stdout; returns the exit code.
pub fn print_completions(args: &CompletionsArgs) -> i32 {
    let mut cmd = super::Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "llmsurge", &mut std::io::stdout());
    crate::exit_codes::OK
}
