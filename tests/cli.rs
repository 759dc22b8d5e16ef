//! Subcommands that print rather than run (`llmsurge k8s job`), and the README's commands.

mod confidence_env;
mod config;
pub(crate) mod docs;
mod k8s;
mod messages_sources;
mod pipes;
mod readme;
mod ship;
