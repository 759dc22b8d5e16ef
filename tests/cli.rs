//! Subcommands that print rather than run: `llmsurge k8s job`.

mod k8s;
