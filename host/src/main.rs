//! `reconciled`: run wasm reconcilers against a Kubernetes cluster.
//!
//! This file parses the command line, sets up logging and dispatches; each subcommand is a
//! file of `cli/`.

// A function over 100 lines of code hides more than one job: each exception carries its reason
// (`#[expect(clippy::too_many_lines, reason = "…")]`), and `tests/layout.rs` checks it does.
#![warn(clippy::too_many_lines)]

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

#[derive(Parser)]
#[command(
    name = "reconciled",
    version,
    about = "A WebAssembly-hosted reconciler runtime for Kubernetes"
)]
struct Cli {
    /// Send traces (a span per reconcile, with the guest's host calls under it) over OTLP/HTTP
    /// to this endpoint, such as http://127.0.0.1:4318; else the OTEL_EXPORTER_OTLP_ENDPOINT
    /// variables; off when none is set.
    #[arg(long, global = true, value_name = "URL")]
    otlp_endpoint: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load guests and reconcile until Ctrl-C.
    Run(cli::run::RunArgs),
    /// Run every .wasm in a folder and reload each when it changes (the development loop).
    Dev(cli::dev::DevArgs),
    /// Show the guests of a running host: version, source, load time, errors, reconciles.
    Status(cli::status::StatusArgs),
    /// Print a ConfigMap manifest that delivers a module to a namespace (gzipped if needed).
    Pack(cli::pack::PackArgs),
    /// Publish a module to an OCI registry as a Wasm artifact; prints the reference pinned by
    /// digest.
    Push(cli::push::PushArgs),
    /// Sign a manifest in a registry (the host's image, a module) with a cosign key-pair
    /// signature; prints the reference pinned by the digest signed.
    Sign(cli::sign::SignArgs),
    /// Attach a file (an SBOM) to a manifest in a registry as an OCI referrer; prints its
    /// digest.
    Attach(cli::attach::AttachArgs),
    /// Check a manifest in a registry before running it: its signature, its attached artifacts
    /// (an SBOM) and an index's platforms.
    Verify(cli::verify::VerifyArgs),
    /// Write a new reconciler project (Rust, TypeScript or Python): a CRD, the reconciler, a
    /// test and a README; it builds with ./build.sh and runs with `reconciled dev`.
    New(cli::new::NewArgs),
    /// Run a guest against fixtures (objects, request, expected writes and Events) with no
    /// cluster; exits non-zero when an outcome differs from its expected.yaml.
    Test(cli::test::TestArgs),
    /// Replay reconciles recorded with `run --record` against another version of the guest,
    /// offline; report per request the writes, Events and reads that differ.
    Replay(cli::replay::ReplayArgs),
    /// Steer a Reconciler's step-by-step rollout: `rollout resume NAMESPACE/NAME` resumes a
    /// pause or a halt.
    Rollout(cli::rollout::RolloutArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `reconciled test` and `replay` print their report on stdout: logs (the guests' own included, with
    // RUST_LOG=info) go to stderr, and only warnings by default.
    let testing = matches!(cli.command, Command::Test(_) | Command::Replay(_));
    // A chaos sweep makes guests fail on purpose, hundreds of times: their warnings would bury
    // the report. A single plan (`--plan`) shows them.
    let sweeping = matches!(&cli.command, Command::Test(t) if t.chaos && t.plan.is_none());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // kube's request builder logs every failed request at ERROR, including the
        // embedded control plane's readiness polls; our own modules log failures with
        // their context, so its lines are only noise.
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(if sweeping {
                "warn,guest=off"
            } else if testing {
                "warn"
            } else {
                "info,kube_client::client::builder=off"
            })
        });
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(move || -> Box<dyn std::io::Write> {
            if testing {
                Box::new(std::io::stderr())
            } else {
                Box::new(std::io::stdout())
            }
        })
        .with_filter(filter);
    // Traces carry the host's own spans only, whatever RUST_LOG says of the logs.
    let (spans, traces) = match reconciled::ops::traces::endpoint(cli.otlp_endpoint.as_deref()) {
        None => (None, None),
        Some(endpoint) => match reconciled::ops::traces::layer(&endpoint) {
            Ok((layer, traces)) => (
                Some(layer.with_filter(tracing_subscriber::EnvFilter::new("reconciled=info"))),
                Some(traces),
            ),
            Err(e) => {
                eprintln!("reconciled: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    tracing_subscriber::registry().with(logs).with(spans).init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("reconciled: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Run(args) => rt.block_on(cli::run::run(args)),
        Command::Dev(args) => rt.block_on(cli::dev::dev(args)),
        Command::Status(args) => rt.block_on(cli::status::status(args)),
        Command::Pack(args) => cli::pack::pack(args),
        Command::Push(args) => rt.block_on(cli::push::push(args)),
        Command::Sign(args) => rt.block_on(cli::sign::sign(args)),
        Command::Attach(args) => rt.block_on(cli::attach::attach(args)),
        Command::Verify(args) => rt.block_on(cli::verify::verify(args)),
        Command::New(args) => cli::new::new(args),
        Command::Test(args) => rt.block_on(cli::test::test(args)),
        Command::Replay(args) => rt.block_on(cli::replay::replay(args)),
        Command::Rollout(args) => rt.block_on(cli::rollout::rollout(args)),
    };
    // Everything was stopped in order already; a blocking task still running (storing a
    // compiled artifact) must not hold the exit up.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    if let Some(traces) = traces {
        traces.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reconciled: {e:#}");
            ExitCode::FAILURE
        }
    }
}
