//! Subcommands that help authors rather than run guests: `reconciled push`,
//! `reconciled new`, `reconciled test` and `reconciled replay`.

pub(crate) mod new;
pub(crate) mod push;
pub(crate) mod record;
pub(crate) mod replay;
pub(crate) mod test;
