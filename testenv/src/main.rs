//! `testenv`: start the loopback control plane by hand, or just build its binaries.

use std::process::ExitCode;

const USAGE: &str = "usage: testenv <up|prepare [control-plane|tools]>
  up       start etcd, kube-apiserver and kube-controller-manager on loopback, print a
           kubeconfig, run until Ctrl-C
  prepare  build (or find cached) kube-apiserver, kube-controller-manager, kubectl, etcd,
           the test OCI registry, oras, helm and Jaeger, print their paths; `control-plane`
           the first four only, `tools` the others only";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["up"] => up(),
        ["prepare"] => prepare_control_plane().and_then(|()| prepare_tools()),
        ["prepare", "control-plane"] => prepare_control_plane(),
        ["prepare", "tools"] => prepare_tools(),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("testenv: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a control plane needs: kube-apiserver, kube-controller-manager, kubectl and etcd.
fn prepare_control_plane() -> anyhow::Result<()> {
    let bins = testenv::binaries::ensure()?;
    println!("kube-apiserver          {}", bins.kube_apiserver.display());
    println!(
        "kube-controller-manager {}",
        bins.kube_controller_manager.display()
    );
    println!("kubectl                 {}", bins.kubectl.display());
    println!("etcd                    {}", bins.etcd.display());
    Ok(())
}

/// The programs some tests run beside the control plane: the OCI registry, helm, Jaeger and
/// oras. A test that asks for one while this builds it waits for the build (a file lock).
fn prepare_tools() -> anyhow::Result<()> {
    println!(
        "registry                {}",
        testenv::registry::binary()?.display()
    );
    println!(
        "helm                    {}",
        testenv::helm::binary()?.display()
    );
    println!(
        "jaeger                  {}",
        testenv::jaeger::binary()?.display()
    );
    println!(
        "oras                    {}",
        testenv::oras::binary()
            .map_err(anyhow::Error::msg)?
            .display()
    );
    Ok(())
}

fn up() -> anyhow::Result<()> {
    let cp = testenv::ControlPlane::start()?;
    let kubeconfig = cp.kubeconfig_path().display().to_string();
    let kubectl = testenv::binaries::ensure()?.kubectl;
    println!("control plane up at {}", cp.server_url());
    println!("  export KUBECONFIG={kubeconfig}");
    println!(
        "  {} --kubeconfig {kubeconfig} get namespaces",
        kubectl.display()
    );
    println!("press Ctrl-C to stop");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(tokio::signal::ctrl_c())?;
    println!("stopping");
    drop(cp);
    Ok(())
}
