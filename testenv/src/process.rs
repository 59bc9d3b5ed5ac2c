//! Child processes that cannot outlive the process that started them.
//!
//! Two mechanisms, because each covers a hole in the other:
//! - `PR_SET_PDEATHSIG(SIGKILL)` kills a child when its parent dies, even on `SIGKILL` or abort.
//!   Linux ties that signal to the *thread* that forked, not the process, and test threads come
//!   and go, so every child is forked from one spawner thread that lives as long as the process.
//! - An `atexit` sweep kills what is still registered and removes registered directories. The
//!   shared control plane lives in a `static`, which is never dropped, so without the sweep a
//!   normal test-binary exit would leave its temporary directory behind.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Errors from starting or stopping a supervised child.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The program could not be started at all.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program's path.
        program: String,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The spawner thread is gone; only possible if it panicked.
    #[error("the testenv spawner thread has stopped; the process is shutting down")]
    SpawnerGone,
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// What the at-exit sweep must clean up.
#[derive(Default)]
struct Registry {
    pids: Vec<u32>,
    dirs: Vec<PathBuf>,
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        // SAFETY: `sweep_at_exit` is a plain `extern "C" fn` that touches only the registry.
        unsafe { libc::atexit(sweep_at_exit) };
        Mutex::new(Registry::default())
    })
}

extern "C" fn sweep_at_exit() {
    // `try_lock`: at exit another thread may have died holding the lock; never block exit on it.
    let Ok(reg) = registry().try_lock() else {
        return;
    };
    for &pid in &reg.pids {
        // SAFETY: plain syscalls on a pid we started and have not reaped.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
            libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0);
        }
    }
    for dir in &reg.dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Registers `dir` to be removed at process exit, for state that is never dropped.
pub(crate) fn remove_at_exit(dir: &Path) {
    registry().lock().unwrap().dirs.push(dir.to_path_buf());
}

/// Forgets a directory registered with [`remove_at_exit`] once its owner removed it.
pub(crate) fn forget_dir(dir: &Path) {
    registry().lock().unwrap().dirs.retain(|d| d != dir);
}

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so `recv` only fails while the process exits.
                while let Ok((mut cmd, reply)) = rx.recv() {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawn the testenv spawner thread");
        Mutex::new(tx)
    })
}

/// A child process that is killed when this value drops, when the process exits, or when the
/// process dies.
#[derive(Debug)]
pub(crate) struct Supervised {
    child: Option<Child>,
    program: String,
}

impl Supervised {
    /// Starts `cmd` from the spawner thread with a parent-death signal.
    pub(crate) fn spawn(mut cmd: Command) -> Result<Self, Error> {
        let program = cmd.get_program().to_string_lossy().into_owned();
        // SAFETY: the closure only calls async-signal-safe syscalls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl; then nobody would signal us.
                if libc::getppid() == 1 {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let (tx, rx) = mpsc::channel();
        spawner()
            .lock()
            .unwrap()
            .send((cmd, tx))
            .map_err(|_| Error::SpawnerGone)?;
        let child = rx
            .recv()
            .map_err(|_| Error::SpawnerGone)?
            .map_err(|source| Error::Spawn {
                program: program.clone(),
                source,
            })?;
        registry().lock().unwrap().pids.push(child.id());
        Ok(Self {
            child: Some(child),
            program,
        })
    }

    /// The child's pid, while it is running.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the child has exited on its own; returns its status text if so.
    pub(crate) fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    /// Asks the child to stop with SIGTERM, waits up to `grace`, then kills it. Always reaps it.
    pub(crate) fn stop(&mut self, grace: Duration) {
        self.terminate();
        self.reap_by(Instant::now() + grace);
    }

    /// Sends SIGTERM and returns at once; [`reap_by`](Self::reap_by) finishes the stop. Lets a
    /// caller signal several children together, so their shutdowns overlap.
    pub(crate) fn terminate(&mut self) {
        if let Some(child) = &self.child {
            // SAFETY: signalling a child we have not yet reaped, so the pid cannot be reused.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        }
    }

    /// Waits for the child to exit until `deadline`, then kills it. Always reaps it.
    pub(crate) fn reap_by(&mut self, deadline: Instant) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
            }
        }
        registry().lock().unwrap().pids.retain(|&p| p != pid);
    }

    /// The program this child runs, for messages.
    pub(crate) fn program(&self) -> &str {
        &self.program
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}
