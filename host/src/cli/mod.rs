//! Subcommands that help authors rather than run guests: `reconciled push`,
//! `reconciled new`, `reconciled test` and `reconciled replay`. Also the binary's allocator in
//! musl builds, kept out of `main.rs`, which is long enough.

pub(crate) mod new;
pub(crate) mod push;
pub(crate) mod record;
pub(crate) mod replay;
pub(crate) mod test;

/// musl's malloc is slow on the informer's allocation-heavy decoding, so the static musl binary
/// of the image allocates with mimalloc; glibc builds keep the system allocator.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
