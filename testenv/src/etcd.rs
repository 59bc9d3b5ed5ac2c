//! etcd on loopback: start it, probe it, and compact it to force `410 Gone` on old watches.
//!
//! etcd listens on plain HTTP: it is bound to 127.0.0.1, and TLS would only slow every test.
//! Compaction goes through etcd's JSON gateway (`/v3/kv/...`) with a tiny HTTP/1.1 client,
//! since this crate has no other use for an HTTP stack of its own.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::{self, Supervised};

/// Errors from running or talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The process could not be started.
    #[error(transparent)]
    Process(#[from] process::Error),
    /// A request to etcd's gateway failed.
    #[error("etcd at 127.0.0.1:{port} did not answer {path}: {detail}")]
    Request {
        /// The client port.
        port: u16,
        /// The gateway path.
        path: &'static str,
        /// What went wrong.
        detail: String,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Ports one etcd member listens on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ports {
    pub(crate) client: u16,
    pub(crate) peer: u16,
}

/// Starts etcd with its data in `data_dir` and its log in `log`.
///
/// `--unsafe-no-fsync`: test data is disposable, and fsync dominates write latency on shared disks.
pub(crate) fn spawn(bin: &Path, data_dir: &Path, log: &Path, ports: Ports) -> Result<Supervised> {
    let client = format!("http://127.0.0.1:{}", ports.client);
    let peer = format!("http://127.0.0.1:{}", ports.peer);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|source| process::Error::Spawn {
            program: "etcd log".into(),
            source,
        })?;
    let mut cmd = Command::new(bin);
    cmd.arg("--name=testenv")
        .arg(format!("--data-dir={}", data_dir.display()))
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster=testenv={peer}"))
        .arg("--unsafe-no-fsync")
        .arg("--log-level=warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|source| process::Error::Spawn {
            program: "etcd log".into(),
            source,
        })?)
        .stderr(log);
    Ok(Supervised::spawn(cmd)?)
}

/// Whether etcd answers `/health` with `"health":"true"`.
pub(crate) fn healthy(port: u16) -> bool {
    get(port, "/health").is_ok_and(|body| body.contains(r#""health":"true""#))
}

/// The current etcd revision (the newest resourceVersion the apiserver can have handed out).
pub(crate) fn revision(port: u16) -> Result<i64> {
    // Any range request returns the store's revision in its header; "AA==" is the key "\0".
    let body = post(port, "/v3/kv/range", r#"{"key":"AA=="}"#)?;
    parse_revision(&body).ok_or_else(|| Error::Request {
        port,
        path: "/v3/kv/range",
        detail: format!("no header.revision in {body}"),
    })
}

/// Compacts etcd up to its current revision, physically, and returns that revision.
///
/// Watches that start from an older revision then fail with "required revision has been
/// compacted", which the apiserver reports as `410 Gone` (once its watch cache no longer holds
/// the history; see `ControlPlane::compact_etcd`).
pub(crate) fn compact(port: u16) -> Result<i64> {
    let rev = revision(port)?;
    let body = format!(r#"{{"revision":"{rev}","physical":true}}"#);
    post(port, "/v3/kv/compaction", &body)?;
    Ok(rev)
}

fn parse_revision(body: &str) -> Option<i64> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    // proto3 JSON renders int64 as a string.
    let rev = &v["header"]["revision"];
    rev.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| rev.as_i64())
}

fn get(port: u16, path: &'static str) -> Result<String> {
    request(
        port,
        path,
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
    )
}

fn post(port: u16, path: &'static str, body: &str) -> Result<String> {
    request(
        port,
        path,
        format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

fn request(port: u16, path: &'static str, req: String) -> Result<String> {
    let fail = |detail: String| Error::Request { port, path, detail };
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| fail(e.to_string()))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| fail(e.to_string()))?;
    stream
        .write_all(req.as_bytes())
        .map_err(|e| fail(e.to_string()))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| fail(e.to_string()))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| fail("malformed response".into()))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(fail(format!("{status}: {body}")));
    }
    // The gateway may answer chunked; the JSON object is the part between the outer braces.
    let body = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) if a <= b => &body[a..=b],
        _ => body,
    };
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_is_read_from_a_string_or_a_number() {
        assert_eq!(parse_revision(r#"{"header":{"revision":"42"}}"#), Some(42));
        assert_eq!(parse_revision(r#"{"header":{"revision":7}}"#), Some(7));
        assert_eq!(parse_revision(r#"{"header":{}}"#), None);
    }
}
