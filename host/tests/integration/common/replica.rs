//! Replicas of the host as real `reconciled run` processes, each reaching the API server
//! through a proxy of its own so that a test can cut one off; killed on drop, with the tail of
//! its log printed when the test fails.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use reconciled::ops::status::Status;
use testenv::{ControlPlane, Proxy};

use super::host::{TempDir, free_port};

/// One `reconciled run` replica behind its own proxy; killed on drop.
pub struct Replica {
    pub id: String,
    pub addr: SocketAddr,
    pub proxy: Proxy,
    kubeconfig: PathBuf,
    config: PathBuf,
    cache: PathBuf,
    pub log: PathBuf,
    /// Variables the process gets besides the harness's own.
    pub env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Replica {
    pub async fn new(cp: &ControlPlane, dir: &Path, id: &str, config: &Path) -> Self {
        let mut r = Self::new_stopped(cp, dir, id, config).await;
        r.start();
        r
    }

    /// Has this replica keep compiled modules in the suite's shared precompile cache
    /// ([`super::controllers::shared_cache`]) rather than in one of its own, so that it compiles
    /// only modules no test compiled before. Not for tests of compiling or of the cache.
    pub fn share_compiled(&mut self) {
        self.cache = super::controllers::shared_cache();
    }

    pub async fn new_stopped(cp: &ControlPlane, dir: &Path, id: &str, config: &Path) -> Self {
        let proxy = Proxy::start(cp.server_addr()).await.unwrap();
        let kubeconfig = dir.join(format!("{id}.kubeconfig"));
        let text = std::fs::read_to_string(cp.kubeconfig_path()).unwrap();
        let proxied = text.replace(
            &cp.server_url(),
            &format!("https://127.0.0.1:{}", proxy.port()),
        );
        assert_ne!(
            text,
            proxied,
            "the kubeconfig names the server as {}",
            cp.server_url()
        );
        std::fs::write(&kubeconfig, proxied).unwrap();
        Self {
            id: id.to_string(),
            addr: free_port(),
            proxy,
            kubeconfig,
            config: config.to_path_buf(),
            cache: dir.join("cache"),
            log: dir.join(format!("{id}.log")),
            env: Vec::new(),
            child: None,
        }
    }

    /// A host alone (the config has no [replicas]), through a proxy like the replicas.
    pub async fn solo(cp: &ControlPlane, dir: &Path, config: &Path) -> Self {
        let mut r = Self::new_stopped(cp, dir, "solo", config).await;
        r.start_with(false);
        r
    }

    pub fn start(&mut self) {
        self.start_with(true);
    }

    pub fn start_with(&mut self, replica: bool) {
        assert!(self.child.is_none(), "replica {} runs already", self.id);
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_reconciled"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--config")
            .arg(&self.config)
            .arg("--listen")
            .arg(self.addr.to_string())
            .args(if replica {
                vec!["--replica-id", self.id.as_str()]
            } else {
                Vec::new()
            })
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("RECONCILED_CACHE_DIR", &self.cache)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// The running process's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits up to `within` for the process to exit on its own; its status, or `None` if it
    /// still runs.
    pub async fn exited(
        &mut self,
        within: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let child = self.child.as_mut()?;
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    pub fn sigterm(&mut self) -> Child {
        let c = self.child.take().expect("running");
        let pid = i32::try_from(c.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        c
    }

    pub async fn status(&self) -> Option<Status> {
        self.child.as_ref()?;
        reconciled::ops::http::get_status(self.addr).await.ok()
    }

    pub async fn relists(&self) -> u64 {
        let (_, body) = reconciled::ops::http::get(self.addr, "/metrics")
            .await
            .unwrap();
        body.lines()
            .filter(|l| l.starts_with("reconciled_informer_relists_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!(
                "--- replica {} log (last 60 lines) ---\n{}",
                self.id,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

/// Says what the test does, with the wall-clock time, so a failure can be read against the
/// replicas' logs.
pub fn step(what: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let (s, ms) = (now.as_secs() % 86_400, now.subsec_millis());
    eprintln!(
        "[{:02}:{:02}:{:02}.{ms:03}] {what}",
        s / 3600,
        s / 60 % 60,
        s % 60
    );
}

/// Keeps the replicas' logs when the test fails, and says where.
pub struct KeepOnFailure(pub TempDir);

impl Drop for KeepOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let dir = std::mem::replace(&mut self.0.0, PathBuf::new());
            eprintln!("replica logs kept in {}", dir.display());
        }
    }
}
