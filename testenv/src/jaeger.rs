//! Jaeger on loopback (github.com/jaegertracing/jaeger v1.75.0, its `jaeger` command built from
//! `testenv/jaeger` like the control plane and cached): an OTLP/HTTP receiver and the query
//! API, over memory storage, on free ports.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why Jaeger could not be built or started.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Building it failed.
    #[error(
        "cannot build Jaeger (testenv/jaeger) with Go: {0}; check that `go` 1.26 is on PATH and the module proxy is reachable"
    )]
    Build(String),
    /// Starting it failed, or it did not answer in time.
    #[error("cannot start Jaeger: {0}")]
    Start(String),
}

const JAEGER: crate::go_tool::Tool = crate::go_tool::Tool {
    name: "jaeger",
    module: "jaeger",
    sources: &[
        ("go.mod", include_str!("../jaeger/go.mod")),
        ("go.sum", include_str!("../jaeger/go.sum")),
        ("tools.go", include_str!("../jaeger/tools.go")),
    ],
    package: "github.com/jaegertracing/jaeger/cmd/jaeger",
};

/// The jaeger binary, built first if the cache lacks one for these sources.
pub fn binary() -> Result<PathBuf, Error> {
    crate::go_tool::binary(&JAEGER).map_err(Error::Build)
}

/// A running Jaeger; stopped when dropped.
#[derive(Debug)]
pub struct Jaeger {
    child: Child,
    otlp: SocketAddr,
    query: SocketAddr,
    dir: tempfile::TempDir,
}

impl Jaeger {
    /// Builds (if needed) and starts Jaeger, and waits until its query API answers.
    pub fn start() -> Result<Self, Error> {
        let bin = binary()?;
        let port = || crate::free_port().map_err(|e| Error::Start(format!("no free port: {e}")));
        let (otlp, query, grpc) = (port()?, port()?, port()?);
        let dir = tempfile::Builder::new()
            .prefix("reconciled-jaeger-")
            .tempdir()
            .map_err(|e| Error::Start(e.to_string()))?;
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, config_yaml(otlp, query, grpc))
            .map_err(|e| Error::Start(format!("{}: {e}", config.display())))?;
        let log = std::fs::File::create(dir.path().join("jaeger.log"))
            .map_err(|e| Error::Start(e.to_string()))?;
        let child = Command::new(&bin)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| Error::Start(e.to_string()))?)
            .stderr(log)
            .spawn()
            .map_err(|e| Error::Start(format!("{}: {e}", bin.display())))?;
        let mut jaeger = Self {
            child,
            otlp: SocketAddr::from(([127, 0, 0, 1], otlp)),
            query: SocketAddr::from(([127, 0, 0, 1], query)),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if jaeger.get("/api/services").is_some_and(|(s, _)| s == 200) {
                return Ok(jaeger);
            }
            if let Ok(Some(status)) = jaeger.child.try_wait() {
                return Err(Error::Start(format!(
                    "it exited ({status}):\n{}",
                    jaeger.log_tail()
                )));
            }
            if Instant::now() >= deadline {
                return Err(Error::Start(format!(
                    "its query API did not answer within 30 s:\n{}",
                    jaeger.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Where OTLP/HTTP goes: `http://127.0.0.1:<port>`.
    pub fn otlp_endpoint(&self) -> String {
        format!("http://{}", self.otlp)
    }

    /// `GET path` of the query API (such as `/api/traces?service=x`); status and body, or
    /// `None` if it did not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = TcpStream::connect_timeout(&self.query, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.0\r\nHost: {}\r\nAccept: application/json\r\n\r\n",
            self.query
        )
        .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_string();
        Some((status, body))
    }

    /// The end of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("jaeger.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(30).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The all-in-one pipeline, cut to what the tests use: OTLP/HTTP in, memory storage, the
/// query API; no other receiver, and no port of its own besides these.
fn config_yaml(otlp: u16, query: u16, grpc: u16) -> String {
    format!(
        "service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{grpc}
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
"
    )
}
