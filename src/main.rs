//! The `llmsurge` executable: the coordinator, the mock server, and (through a hidden
//! subcommand) every worker process.

fn main() {
    std::process::exit(llmsurge::main());
}
