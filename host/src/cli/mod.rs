//! Subcommands that help authors rather than run guests: `reconciled push`.

pub(crate) mod push;
