//! A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager,
//! started by the project itself, for integration tests and for `reconciled dev`.
//!
//! ```no_run
//! let cp = testenv::ControlPlane::shared(); // one per test binary; tests isolate by namespace
//! let config = cp.admin_config();           // a kube::Config for system:masters
//! # let _ = config;
//! ```
//!
//! Nothing here is a mock: the apiserver is the upstream binary built from Go modules (see
//! [`binaries`]), with RBAC on, so forbidden paths, `410 Gone` and restarts behave as in a real
//! cluster. kube-controller-manager runs only the garbage collector and the namespace controller,
//! so objects whose owners are deleted are collected and deleted namespaces finalize. What it
//! lacks is every other controller (no default service accounts, no Deployment rollouts, no
//! Service endpoints), the scheduler and the kubelet.

pub mod binaries;
pub mod etcd;
pub mod fixtures;
pub mod go_tool;
pub mod helm;
pub mod jaeger;
pub mod kubeconfig;
pub mod oras;
pub mod pki;
pub mod pod;
pub mod podman;
pub mod process;
pub mod proxy;
pub mod registry;

pub use proxy::Proxy;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use binaries::Binaries;
use process::Supervised;

/// Errors from starting, stopping or poking the control plane.
///
/// Every message is one line; where a process failed it names the log file to read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The binaries could not be found or built.
    #[error(transparent)]
    Binaries(#[from] binaries::Error),
    /// Certificates could not be generated.
    #[error(transparent)]
    Pki(#[from] pki::Error),
    /// A kubeconfig could not be written or read.
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    /// etcd could not be reached.
    #[error(transparent)]
    Etcd(#[from] etcd::Error),
    /// A process could not be started.
    #[error(transparent)]
    Process(#[from] process::Error),
    /// A file or directory could not be created.
    #[error("cannot prepare {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A component exited while starting.
    #[error("{component} exited during start-up ({status}): {last_line} (full log: {log})")]
    Exited {
        /// etcd, kube-apiserver or kube-controller-manager.
        component: &'static str,
        /// Its exit status.
        status: String,
        /// The last line of its log, usually the reason.
        last_line: String,
        /// The log file, kept for inspection.
        log: PathBuf,
    },
    /// A component kept running but never became ready.
    #[error("{component} was not ready after {after:?}: {detail} (full log: {log})")]
    NotReady {
        /// etcd or kube-apiserver.
        component: &'static str,
        /// How long we waited.
        after: Duration,
        /// The last probe failure.
        detail: String,
        /// The log file, kept for inspection.
        log: PathBuf,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long kube-controller-manager is watched for an early exit, unless its log shows sooner
/// that both controllers started.
const CONTROLLER_MANAGER_WATCH: Duration = Duration::from_secs(2);
const PORT_ATTEMPTS: usize = 3;

/// A user minted by [`ControlPlane::user`]: authenticated by a client certificate, with no
/// rights until a test binds some.
#[derive(Debug, Clone)]
pub struct User {
    /// The user name (certificate CN).
    pub name: String,
    /// A `kube::Config` that authenticates as this user.
    pub config: kube::Config,
    /// A kubeconfig file for this user.
    pub kubeconfig: PathBuf,
}

/// A running etcd, kube-apiserver and kube-controller-manager on loopback, stopped and deleted
/// on drop.
///
/// Methods that wait (start, restart) block the calling thread; from async code call them via
/// `tokio::task::spawn_blocking`, or accept that the current task stalls for a few seconds.
#[derive(Debug)]
pub struct ControlPlane {
    // Declared before `dir` so that the processes stop before their files disappear.
    controller_manager: Mutex<Supervised>,
    apiserver: Mutex<Supervised>,
    etcd: Mutex<Supervised>,
    bins: Binaries,
    pki: pki::Pki,
    etcd_ports: etcd::Ports,
    api_port: u16,
    admin: kube::Config,
    admin_kubeconfig: PathBuf,
    extra_args: Vec<String>,
    dir: tempfile::TempDir,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A port that was free a moment ago. Another process may take it before we bind it; callers
/// detect that from the component's log and retry with fresh ports.
pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn last_line(log: &Path) -> String {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(empty log)")
        .chars()
        .take(400)
        .collect()
}

fn port_taken(log: &Path) -> bool {
    std::fs::read_to_string(log).is_ok_and(|t| t.contains("address already in use"))
}

impl ControlPlane {
    /// Builds the binaries if needed, then starts etcd and kube-apiserver on fresh loopback ports,
    /// waits until `/readyz` answers `ok`, and starts kube-controller-manager.
    ///
    /// kube-controller-manager is watched only through its start-up (at most 2 s, usually a
    /// fraction of a second): its controllers work asynchronously, so tests poll for their
    /// effects, such as a dependent or a namespace disappearing.
    ///
    /// On failure the run directory is kept and the error names the log to read.
    pub fn start() -> Result<Self> {
        Self::start_with_args(&[])
    }

    /// Like [`start`](Self::start), with extra kube-apiserver flags, such as
    /// `--feature-gates=WatchList=false`. They are kept for restarts.
    pub fn start_with_args(extra_args: &[&str]) -> Result<Self> {
        let extra_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let started = Instant::now();
        let bins = binaries::ensure()?;
        let mut dir = tempfile::Builder::new()
            .prefix("reconciled-testenv-")
            .tempdir()
            .map_err(io_err(&std::env::temp_dir()))?;
        // Keep the logs if start-up fails: the error message points into this directory.
        // `start_in` turns cleanup back on once everything runs.
        dir.disable_cleanup(true);
        let cp = Self::start_in(bins, dir, extra_args)?;
        eprintln!(
            "testenv: kube-apiserver {} ready at https://127.0.0.1:{} in {:.1?} (kubeconfig: {})",
            binaries::kubernetes_version(),
            cp.api_port,
            started.elapsed(),
            cp.admin_kubeconfig.display()
        );
        Ok(cp)
    }

    fn start_in(
        bins: Binaries,
        mut dir: tempfile::TempDir,
        extra_args: Vec<String>,
    ) -> Result<Self> {
        let root = dir.path();
        let pki_dir = root.join("pki");
        std::fs::create_dir_all(&pki_dir).map_err(io_err(&pki_dir))?;
        let pki = pki::Pki::new()?;
        let serving = pki.serving_cert()?;
        let (sa_key, sa_pub) = pki::service_account_key()?;
        let files = [
            ("ca.crt", pki.ca_pem().to_string()),
            ("apiserver.crt", serving.cert_pem),
            ("apiserver.key", serving.key_pem),
            ("sa.key", sa_key),
            ("sa.pub", sa_pub),
        ];
        for (name, pem) in files {
            let path = pki_dir.join(name);
            std::fs::write(&path, pem).map_err(io_err(&path))?;
        }

        let (etcd, etcd_ports) = Self::start_etcd_fresh(&bins, root)?;
        // If the apiserver fails from here on, dropping `etcd` stops it.
        let (apiserver, api_port, admin, admin_kubeconfig) =
            Self::start_apiserver_fresh(&bins, root, &pki, etcd_ports.client, &extra_args)?;
        // If it fails to start, dropping `apiserver` and `etcd` stops them.
        let controller_manager = start_controller_manager(&bins, root, &admin_kubeconfig)?;
        dir.disable_cleanup(false);
        Ok(Self {
            controller_manager: Mutex::new(controller_manager),
            apiserver: Mutex::new(apiserver),
            etcd: Mutex::new(etcd),
            bins,
            pki,
            etcd_ports,
            api_port,
            admin,
            admin_kubeconfig,
            extra_args,
            dir,
        })
    }

    /// Starts kube-apiserver on a fresh port, retrying when another process grabbed it first.
    fn start_apiserver_fresh(
        bins: &Binaries,
        root: &Path,
        pki: &pki::Pki,
        etcd_port: u16,
        extra_args: &[String],
    ) -> Result<(Supervised, u16, kube::Config, PathBuf)> {
        let log = root.join("apiserver.log");
        let admin_kubeconfig = root.join("admin.kubeconfig");
        let admin_cert = pki.client_cert("reconciled-admin", &["system:masters"])?;
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port().map_err(io_err(root))?;
            let server = format!("https://127.0.0.1:{port}");
            let admin = kubeconfig::write(
                &admin_kubeconfig,
                &server,
                pki.ca_pem(),
                "admin",
                &admin_cert,
            )?;
            let mut api = spawn_apiserver(bins, root, port, etcd_port, extra_args)?;
            match wait_apiserver_ready(&mut api, &admin, &log) {
                Ok(()) => return Ok((api, port, admin, admin_kubeconfig)),
                Err(e) if port_taken(&log) => {
                    api.stop(Duration::from_secs(1));
                    last_err = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.expect("at least one attempt"))
    }

    /// Starts etcd on fresh ports, retrying when another process grabbed a port first.
    fn start_etcd_fresh(bins: &Binaries, root: &Path) -> Result<(Supervised, etcd::Ports)> {
        let log = root.join("etcd.log");
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            let ports = etcd::Ports {
                client: free_port().map_err(io_err(root))?,
                peer: free_port().map_err(io_err(root))?,
            };
            let mut proc = etcd::spawn(&bins.etcd, &root.join("etcd-data"), &log, ports)?;
            match wait_etcd_healthy(&mut proc, ports.client, &log) {
                Ok(()) => return Ok((proc, ports)),
                Err(e) if port_taken(&log) => {
                    proc.stop(Duration::from_secs(1));
                    let _ = std::fs::remove_dir_all(root.join("etcd-data"));
                    last_err = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.expect("at least one attempt"))
    }

    /// The control plane shared by every test in this test binary, started on first use.
    ///
    /// Tests must isolate themselves (one namespace each), since they run concurrently against
    /// the same apiserver. It is never dropped: its processes are killed and its directory is
    /// removed when the test binary exits, and killed by the kernel if the binary dies.
    ///
    /// # Panics
    /// If the control plane cannot start, with a one-line reason. Integration tests must fail,
    /// never skip, when there is no control plane.
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
        Self::own(&SHARED, &[])
    }

    /// A control plane of one group of tests, apart from [`shared`](Self::shared): for tests
    /// that restart the apiserver, compact etcd, run it with other flags, or count every request
    /// it serves, which would disturb (or be disturbed by) the other tests of the binary. Started
    /// on first use with `extra_args` (as [`start_with_args`](Self::start_with_args)) and kept in
    /// `cell`, so each group names its own `static`; like the shared one it is never dropped,
    /// and its directory is removed when the test binary exits.
    ///
    /// # Panics
    /// If the control plane cannot start, with a one-line reason.
    pub fn own(
        cell: &'static OnceLock<Result<ControlPlane, String>>,
        extra_args: &[&str],
    ) -> &'static ControlPlane {
        let cp = cell.get_or_init(|| {
            ControlPlane::start_with_args(extra_args)
                .inspect(|cp| process::remove_at_exit(cp.dir.path()))
                .map_err(|e| e.to_string())
        });
        match cp {
            Ok(cp) => cp,
            Err(reason) => panic!("testenv: control plane did not start: {reason}"),
        }
    }

    /// A `kube::Config` for an admin (group `system:masters`).
    pub fn admin_config(&self) -> kube::Config {
        self.admin.clone()
    }

    /// A new admin client. Make one per test (per tokio runtime): a client's connection pool is
    /// bound to the runtime it was first used on.
    pub fn admin_client(&self) -> kube::Client {
        kube::Client::try_from(self.admin.clone()).expect("the admin kubeconfig is valid")
    }

    /// The admin kubeconfig file, for `kubectl --kubeconfig`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// The apiserver's address, for a [`Proxy`] to forward to.
    pub fn server_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.api_port))
    }

    /// The apiserver's URL.
    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.api_port)
    }

    /// The run directory: certificates, logs, etcd data.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A `kubectl` command bound to the admin kubeconfig.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(&self.bins.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .stdin(Stdio::null());
        cmd
    }

    /// Mints a user with a client certificate for `name` in `groups` (at most two) and no rights.
    ///
    /// RBAC denies everything the user has not been granted, which is what forbidden-path tests
    /// need. Minting the same name twice gives two valid certificates for one identity.
    pub fn user(&self, name: &str, groups: &[&str]) -> Result<User> {
        let users = self.dir.path().join("users");
        std::fs::create_dir_all(&users).map_err(io_err(&users))?;
        let cert = self.pki.client_cert(name, groups)?;
        let path = users.join(format!("{name}.kubeconfig"));
        let config = kubeconfig::write(&path, &self.server_url(), self.pki.ca_pem(), name, &cert)?;
        Ok(User {
            name: name.to_string(),
            config,
            kubeconfig: path,
        })
    }

    /// The pids of kube-apiserver, kube-controller-manager and etcd, while they run.
    pub fn pids(&self) -> Vec<u32> {
        let api = self.apiserver.lock().unwrap().pid();
        let cm = self.controller_manager.lock().unwrap().pid();
        let etcd = self.etcd.lock().unwrap().pid();
        api.into_iter().chain(cm).chain(etcd).collect()
    }

    /// Stops kube-apiserver (SIGTERM, then SIGKILL after 3 s) and starts it again on the same
    /// port with the same etcd, then waits for `/readyz`.
    ///
    /// Clients keep working: the URL and CA do not change. Watches are cut, and the new
    /// apiserver's watch cache starts empty at etcd's current revision. kube-controller-manager
    /// keeps running and reconnects by itself, like any other client.
    ///
    /// Where it may surprise: with watches open (kube-controller-manager always has some) the
    /// apiserver's graceful shutdown would wait up to a minute for them, so after 3 s it is
    /// killed. That makes this a crash-and-restart, which is the fault worth testing anyway;
    /// it takes about 5 s.
    pub fn restart_apiserver(&self) -> Result<()> {
        let mut api = self.apiserver.lock().unwrap();
        api.stop(Duration::from_secs(3));
        let log = self.dir.path().join("apiserver.log");
        *api = spawn_apiserver(
            &self.bins,
            self.dir.path(),
            self.api_port,
            self.etcd_ports.client,
            &self.extra_args,
        )?;
        wait_apiserver_ready(&mut api, &self.admin, &log)
    }

    /// Compacts etcd up to its current revision and returns that revision.
    ///
    /// etcd then refuses any watch from an older revision. The apiserver's watch cache still
    /// serves recent history from memory, so a client sees `410 Gone` for an old
    /// resourceVersion only once that cache no longer holds it, which
    /// [`restart_apiserver`](Self::restart_apiserver) guarantees: a real cluster loses its watch
    /// cache the same way, on an apiserver restart or rollout.
    pub fn compact_etcd(&self) -> Result<i64> {
        Ok(etcd::compact(self.etcd_ports.client)?)
    }

    /// The current etcd revision.
    pub fn etcd_revision(&self) -> Result<i64> {
        Ok(etcd::revision(self.etcd_ports.client)?)
    }

    /// Stops etcd. The apiserver stays up but every request that needs storage fails until
    /// [`start_etcd`](Self::start_etcd).
    pub fn stop_etcd(&self) {
        self.etcd.lock().unwrap().stop(Duration::from_secs(10));
    }

    /// Starts etcd again on the same ports and data, and waits until it is healthy.
    pub fn start_etcd(&self) -> Result<()> {
        let mut etcd = self.etcd.lock().unwrap();
        if etcd.pid().is_some() {
            return Ok(());
        }
        let root = self.dir.path();
        let log = root.join("etcd.log");
        *etcd = etcd::spawn(
            &self.bins.etcd,
            &root.join("etcd-data"),
            &log,
            self.etcd_ports,
        )?;
        wait_etcd_healthy(&mut etcd, self.etcd_ports.client, &log)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Its data lives in a temporary directory that goes with it, so a graceful shutdown
        // saves nothing: signal all three at once and bound the whole stop, rather than wait
        // for each in turn (the apiserver alone can spend seconds draining its watches).
        let deadline = Instant::now() + STOP_GRACE;
        let mut procs = [
            &mut self.controller_manager,
            &mut self.apiserver,
            &mut self.etcd,
        ]
        .map(|m| m.get_mut().unwrap_or_else(|e| e.into_inner()));
        for p in procs.iter_mut() {
            p.terminate();
        }
        for p in procs.iter_mut() {
            p.reap_by(deadline);
        }
        process::forget_dir(self.dir.path());
    }
}

/// How long a dropped control plane's processes get to exit on SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_millis(500);

fn spawn_apiserver(
    bins: &Binaries,
    root: &Path,
    port: u16,
    etcd_port: u16,
    extra_args: &[String],
) -> Result<Supervised> {
    let pki = root.join("pki");
    let p = |name: &str| pki.join(name).display().to_string();
    let log_path = root.join("apiserver.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(io_err(&log_path))?;
    let mut cmd = Command::new(&bins.kube_apiserver);
    cmd.arg(format!("--etcd-servers=http://127.0.0.1:{etcd_port}"))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--cert-dir={}", pki.display()))
        .arg(format!("--tls-cert-file={}", p("apiserver.crt")))
        .arg(format!("--tls-private-key-file={}", p("apiserver.key")))
        .arg(format!("--client-ca-file={}", p("ca.crt")))
        .arg("--authorization-mode=RBAC")
        .arg("--service-account-issuer=https://kubernetes.default.svc")
        .arg(format!("--service-account-key-file={}", p("sa.pub")))
        .arg(format!(
            "--service-account-signing-key-file={}",
            p("sa.key")
        ))
        .arg("--service-cluster-ip-range=10.96.0.0/24")
        // kube-controller-manager runs only the garbage collector and the namespace controller:
        // the endpoints of `kubernetes` are not reconciled, and no default service accounts
        // exist for the ServiceAccount admission plugin to find.
        .arg("--endpoint-reconciler-type=none")
        .arg("--disable-admission-plugins=ServiceAccount")
        .arg("--profiling=false")
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io_err(&log_path))?)
        .stderr(log);
    Ok(Supervised::spawn(cmd)?)
}

/// Starts kube-controller-manager with the garbage collector and the namespace controller only,
/// as the admin, then watches it for up to [`CONTROLLER_MANAGER_WATCH`] (less once its log shows
/// both controllers running), so that a bad flag or a rejected kubeconfig fails `start` with its
/// log rather than going unnoticed.
fn start_controller_manager(
    bins: &Binaries,
    root: &Path,
    admin_kubeconfig: &Path,
) -> Result<Supervised> {
    let log_path = root.join("controller-manager.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(io_err(&log_path))?;
    let mut cmd = Command::new(&bins.kube_controller_manager);
    cmd.arg(format!("--kubeconfig={}", admin_kubeconfig.display()))
        // The canonical names; `garbagecollector` and `namespace` are their older aliases.
        .arg("--controllers=garbage-collector-controller,namespace-controller")
        .arg("--leader-elect=false")
        // Every controller acts as the admin: no per-controller service accounts, whose tokens
        // would need the serviceaccount-token controller.
        .arg("--use-service-account-credentials=false")
        // No HTTPS endpoint (healthz, metrics): nothing probes it, and no port can collide.
        // With serving off, no --authentication/--authorization-kubeconfig is needed either.
        .arg("--secure-port=0")
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io_err(&log_path))?)
        .stderr(log);
    let mut proc = Supervised::spawn(cmd)?;
    let started = Instant::now();
    while started.elapsed() < CONTROLLER_MANAGER_WATCH {
        if let Some(status) = proc.exited() {
            return Err(Error::Exited {
                component: "kube-controller-manager",
                status: format!("{status}, {}", proc.program()),
                last_line: last_line(&log_path),
                log: log_path,
            });
        }
        if controllers_started(&log_path) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(proc)
}

/// Whether kube-controller-manager's log says both of its controllers are running, the garbage
/// collector with its resource monitors synced (a fraction of a second after start-up here).
fn controllers_started(log: &Path) -> bool {
    std::fs::read_to_string(log).is_ok_and(|t| {
        t.contains("\"Proceeding to collect garbage\"")
            && t.contains("\"Starting namespace controller\"")
    })
}

fn wait_etcd_healthy(proc: &mut Supervised, port: u16, log: &Path) -> Result<()> {
    let started = Instant::now();
    loop {
        if let Some(status) = proc.exited() {
            return Err(Error::Exited {
                component: "etcd",
                status,
                last_line: last_line(log),
                log: log.into(),
            });
        }
        if etcd::healthy(port) {
            return Ok(());
        }
        if started.elapsed() > READY_TIMEOUT {
            return Err(Error::NotReady {
                component: "etcd",
                after: READY_TIMEOUT,
                detail: "/health never reported healthy".into(),
                log: log.into(),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `/readyz` with the admin identity until it answers `ok`.
///
/// The probe runs on its own thread with its own runtime, so this works the same from plain
/// threads and from inside a tokio test.
fn wait_apiserver_ready(proc: &mut Supervised, admin: &kube::Config, log: &Path) -> Result<()> {
    let started = Instant::now();
    let program = proc.program().to_string();
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(io_err(log))?;
            rt.block_on(async {
                let client =
                    kube::Client::try_from(admin.clone()).map_err(|e| Error::NotReady {
                        component: "kube-apiserver",
                        after: Duration::ZERO,
                        detail: format!("cannot build a client: {e}"),
                        log: log.into(),
                    })?;
                loop {
                    if let Some(status) = proc.exited() {
                        return Err(Error::Exited {
                            component: "kube-apiserver",
                            status: format!("{status}, {program}"),
                            last_line: last_line(log),
                            log: log.into(),
                        });
                    }
                    let req = http::Request::get("/readyz")
                        .body(Vec::new())
                        .expect("static request");
                    let detail = match tokio::time::timeout(
                        Duration::from_secs(5),
                        client.request_text(req),
                    )
                    .await
                    {
                        Ok(Ok(body)) if body.trim() == "ok" => return Ok(()),
                        Ok(Ok(body)) => body.chars().take(200).collect(),
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => "/readyz timed out".to_string(),
                    };
                    if started.elapsed() > READY_TIMEOUT {
                        return Err(Error::NotReady {
                            component: "kube-apiserver",
                            after: READY_TIMEOUT,
                            detail,
                            log: log.into(),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}
