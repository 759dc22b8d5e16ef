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
    let full = super::Cli::command();
    // clap_complete offers hidden subcommands too; the internal worker one must not be.
    let mut cmd = clap::Command::new("llmsurge")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    // Into memory first: clap_complete panics on a write error (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "llmsurge", &mut script);
    crate::stdout::print(&String::from_utf8_lossy(&script));
    crate::exit_codes::OK
}
