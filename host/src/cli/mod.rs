//! The binary's subcommands, one file each; `main.rs` only parses, sets up logging and
//! dispatches. `run` and `dev` run guests on a [`host::Host`]; `status` reads a running host;
//! `pack` and `push` deliver modules, and `sign`, `attach` and `verify` vouch for a module or
//! the host's image in a registry; `rollout` resumes a Reconciler's rollout; `new`, `test` (and its `--chaos`, in `chaos`) and `replay` help authors. Also the
//! binary's allocator in musl builds.

pub(crate) mod attach;
pub(crate) mod chaos;
pub(crate) mod dev;
pub(crate) mod host;
pub(crate) mod new;
pub(crate) mod pack;
pub(crate) mod push;
pub(crate) mod record;
pub(crate) mod replay;
pub(crate) mod rollout;
pub(crate) mod run;
pub(crate) mod sign;
pub(crate) mod status;
pub(crate) mod test;
pub(crate) mod verify;

/// musl's malloc is slow on the informer's allocation-heavy decoding, so the static musl binary
/// of the image allocates with mimalloc; glibc builds keep the system allocator.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
