//! Subcommands that help authors rather than run guests: `reconciled push`,
//! `reconciled new` and `reconciled test`.

pub(crate) mod new;
pub(crate) mod push;
pub(crate) mod test;
