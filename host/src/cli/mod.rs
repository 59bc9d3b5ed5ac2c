//! Subcommands that help authors rather than run guests: `reconciled push` and
//! `reconciled new`.

pub(crate) mod new;
pub(crate) mod push;
