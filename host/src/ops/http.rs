//! The host's operational endpoints — `/healthz`, `/readyz`, `/metrics`, `/status` — and the
//! client half that `reconciled status` uses to read them.
//!
//! Plain HTTP/1.1 on whatever listener the caller binds: these are meant for the kubelet's
//! probes, a Prometheus scrape and an operator's terminal, not for the internet. axum routes;
//! hyper serves each connection, because axum's own server has no header-read timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::http::uri::PathAndQuery;
use hyper::server::conn::http1;
use hyper::{Request, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tower_service::Service as _;

use crate::ops::status::Status;

/// The paths served, in the order a 404 lists them.
const PATHS: [&str; 4] = ["/healthz", "/readyz", "/metrics", "/status"];

/// The content type of what [`crate::ops::metrics::encode`] writes: OpenMetrics text, which
/// Prometheus must be told it is.
const METRICS_CONTENT_TYPE: &str = crate::ops::metrics::CONTENT_TYPE;

/// How long a connection may take to send a request's headers, and how long a kept-alive one
/// may sit idle: a client that connects and sends nothing would otherwise hold its task forever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`get`] waits for the whole exchange, so `reconciled status` never hangs on a
/// stuck host.
const GET_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors reading the endpoints.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing listens on the address [`get`] was given.
    #[error(
        "nothing is listening on {addr} (connection refused): the host is not running, \
         or it listens on another address; pass that address with --addr"
    )]
    NotListening {
        /// The address tried.
        addr: SocketAddr,
    },
    /// Connecting failed for another reason than a refusal.
    #[error(
        "cannot connect to the host at {addr}: {source}; check --addr and that the address is reachable from here"
    )]
    Connect {
        /// The address tried.
        addr: SocketAddr,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The path cannot be put in a request line.
    #[error(
        "{path:?} is not a valid request path; paths start with / and contain no spaces, as in /status"
    )]
    Path {
        /// The path given.
        path: String,
    },
    /// Connected, but the HTTP exchange failed.
    #[error(
        "GET {path} from {addr} failed: {source}; is {addr} the host's endpoints address (--addr)?"
    )]
    Request {
        /// The address.
        addr: SocketAddr,
        /// The path requested.
        path: String,
        /// What went wrong.
        #[source]
        source: hyper::Error,
    },
    /// The host did not answer in time.
    #[error(
        "the host at {addr} did not answer GET {path} within {}s; it may be overloaded or stuck, see its logs",
        GET_TIMEOUT.as_secs()
    )]
    Timeout {
        /// The address.
        addr: SocketAddr,
        /// The path requested.
        path: String,
    },
    /// [`get_status`] got another answer than 200.
    #[error("the host at {addr} answered GET /status with {code}: {body}")]
    Unexpected {
        /// The address.
        addr: SocketAddr,
        /// The HTTP status.
        code: u16,
        /// The body, on one line.
        body: String,
    },
    /// [`get_status`] got a document this version cannot read.
    #[error(
        "the host at {addr} served a /status document this reconciled cannot read: {source}; \
         if the host runs another version, `reconciled status --json` prints the document as it is"
    )]
    Document {
        /// The address.
        addr: SocketAddr,
        /// What did not fit the schema.
        #[source]
        source: serde_json::Error,
    },
}

/// What the endpoints serve; implemented by the supervisor.
///
/// The methods are called on the connection's task, once per request, while the server waits:
/// they must be cheap and must not block. A panic ends only that connection.
pub trait Endpoints: Send + Sync + 'static {
    /// The Prometheus text for `/metrics`, as built by [`crate::ops::metrics::encode`].
    fn metrics(&self) -> String;
    /// The status document for `/status`.
    fn status(&self) -> Status;
    /// Ok when ready; otherwise one human reason per item, saying what is wrong and what to do
    /// (e.g. `guest cmgen: configmaps: forbidden: ... add rule {...}`).
    ///
    /// Line breaks in a reason are served as spaces, so that `/readyz` keeps one reason per line.
    fn readiness(&self) -> Result<(), Vec<String>>;
}

/// Serves the endpoints on `listener`, one task per connection. Never returns: drop the future
/// (abort its task) to stop, which also aborts the connections in flight.
///
/// `HEAD` is answered like `GET` without the body, another method with 405, an unknown path
/// with 404 whatever the method. An error on one connection is logged at debug and never stops
/// the server. A failure to accept (running out of file descriptors, say) is logged and retried
/// every second, for as long as it lasts.
pub async fn serve(listener: TcpListener, endpoints: Arc<dyn Endpoints>) {
    serve_with(listener, endpoints, HEADER_READ_TIMEOUT).await;
}

async fn serve_with(
    mut listener: TcpListener,
    endpoints: Arc<dyn Endpoints>,
    header_read_timeout: Duration,
) {
    let router = router(endpoints);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let mut connections = JoinSet::new();
    loop {
        // Reap finished connections here so the set does not grow with every scrape.
        while let Some(done) = connections.try_join_next() {
            if let Err(e) = done
                && e.is_panic()
            {
                tracing::warn!(error = %e, "an endpoints request panicked; its connection was closed");
            }
        }
        let (stream, peer) = axum::serve::Listener::accept(&mut listener).await;
        let router = router.clone();
        // hyper calls through `&self`, a tower service through `&mut self`: each request gets
        // its own handle on the router (an Arc). The router is always ready, so `poll_ready`
        // can be skipped, as in axum's own example of serving through hyper.
        let service = service_fn(move |req: Request<Incoming>| router.clone().call(req));
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        connections.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "endpoints connection failed");
            }
        });
    }
}

type Shared = State<Arc<dyn Endpoints>>;

fn router(endpoints: Arc<dyn Endpoints>) -> Router {
    use axum::routing::get;
    Router::new()
        // Answering at all shows the process and its runtime are alive.
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        // Applies to the routes above, so it must come after them.
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .with_state(endpoints)
}

async fn readyz(State(endpoints): Shared) -> Response {
    match endpoints.readiness() {
        Ok(()) => "ok\n".into_response(),
        Err(reasons) => (StatusCode::SERVICE_UNAVAILABLE, not_ready(&reasons)).into_response(),
    }
}

async fn metrics(State(endpoints): Shared) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        endpoints.metrics(),
    )
}

async fn status(State(endpoints): Shared) -> Response {
    match serde_json::to_string_pretty(&endpoints.status()) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json + "\n").into_response(),
        // Only a bug can get here (the document has no map with non-string keys).
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot serialise the status document: {e}; this is a bug in reconciled\n"),
        )
            .into_response(),
    }
}

async fn not_found(uri: Uri) -> (StatusCode, String) {
    let (path, paths) = (uri.path(), PATHS.join(", "));
    let body = format!("no endpoint at {path}; the host serves {paths}\n");
    (StatusCode::NOT_FOUND, body)
}

async fn method_not_allowed(method: Method, uri: Uri) -> impl IntoResponse {
    let path = uri.path();
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET, HEAD")],
        format!("{path} answers only GET (and HEAD), not {method}\n"),
    )
}

fn not_ready(reasons: &[String]) -> String {
    let mut out = String::from("not ready:\n");
    if reasons.is_empty() {
        out.push_str("(no reason given)\n");
    }
    for reason in reasons {
        out.push_str(&reason.replace(['\r', '\n'], " "));
        out.push('\n');
    }
    out
}

/// GETs `path` (which may carry a query) from the host at `addr`, for `reconciled status` and
/// tests; returns the status code and the body.
///
/// Any status is a success here, 404 and 503 included: the caller decides what they mean.
/// Gives up with [`Error::Timeout`] after 10 s. A body that is not UTF-8 is decoded lossily.
pub async fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), Error> {
    tokio::time::timeout(GET_TIMEOUT, exchange(addr, path))
        .await
        .unwrap_or_else(|_| {
            Err(Error::Timeout {
                addr,
                path: path.into(),
            })
        })
}

/// GETs and reads `/status` from the host at `addr`.
///
/// Anything but a 200 is [`Error::Unexpected`]; a document that does not fit [`Status`] (a host
/// of another version that added a state, say) is [`Error::Document`].
pub async fn get_status(addr: SocketAddr) -> Result<Status, Error> {
    let (code, body) = get(addr, "/status").await?;
    if code != 200 {
        let body = crate::text::one_line(body.trim_end());
        return Err(Error::Unexpected { addr, code, body });
    }
    serde_json::from_str(&body).map_err(|source| Error::Document { addr, source })
}

async fn exchange(addr: SocketAddr, path: &str) -> Result<(u16, String), Error> {
    // Checked here because a bare `status` would otherwise parse as an authority and be sent.
    let invalid = || Error::Path { path: path.into() };
    if !path.starts_with('/') || path.parse::<PathAndQuery>().is_err() {
        return Err(invalid());
    }
    let request = Request::get(path)
        .header(header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|_| invalid())?;
    let stream = TcpStream::connect(addr).await.map_err(|source| {
        if source.kind() == std::io::ErrorKind::ConnectionRefused {
            Error::NotListening { addr }
        } else {
            Error::Connect { addr, source }
        }
    })?;
    let failed = |source| Error::Request {
        addr,
        path: path.into(),
        source,
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(failed)?;
    let response = async move {
        let response = sender.send_request(request).await?;
        // Without a sender the connection closes once the body is read, which ends the join.
        drop(sender);
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok::<_, hyper::Error>((status, String::from_utf8_lossy(&body).into_owned()))
    };
    // The connection's own error, if any, is also what the response reports.
    let (response, _) = tokio::join!(response, connection);
    response.map_err(failed)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::ops::status::{GuestMemory, GuestState, GuestStatus, Reconciles};

    struct Fake {
        readiness: Mutex<Result<(), Vec<String>>>,
        status: Status,
    }

    impl Endpoints for Fake {
        fn metrics(&self) -> String {
            "# HELP up h\n# TYPE up gauge\nup 1\n".into()
        }
        fn status(&self) -> Status {
            self.status.clone()
        }
        fn readiness(&self) -> Result<(), Vec<String>> {
            self.readiness.lock().unwrap().clone()
        }
    }

    async fn start_with(
        readiness: Result<(), Vec<String>>,
        status: Status,
        header_read_timeout: Duration,
    ) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let fake = Arc::new(Fake {
            readiness: Mutex::new(readiness),
            status,
        });
        tokio::spawn(serve_with(listener, fake, header_read_timeout));
        addr
    }

    async fn start(readiness: Result<(), Vec<String>>) -> SocketAddr {
        start_with(readiness, Status::default(), HEADER_READ_TIMEOUT).await
    }

    /// Sends `request` as is and returns the status line, the headers (names lowercased) and
    /// the body: for what [`get`] cannot send or does not return.
    async fn raw(addr: SocketAddr, request: &str) -> (String, Vec<(String, String)>, String) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().to_owned();
        let headers = lines
            .map(|l| {
                let (k, v) = l.split_once(": ").unwrap();
                (k.to_ascii_lowercase(), v.to_owned())
            })
            .collect();
        (status, headers, body.to_owned())
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    #[tokio::test]
    async fn serves_each_route() {
        let addr = start(Ok(())).await;
        assert_eq!(get(addr, "/healthz").await.unwrap(), (200, "ok\n".into()));
        assert_eq!(get(addr, "/readyz").await.unwrap(), (200, "ok\n".into()));
        assert_eq!(
            get(addr, "/metrics").await.unwrap(),
            (200, "# HELP up h\n# TYPE up gauge\nup 1\n".into())
        );
        let (code, body) = get(addr, "/status").await.unwrap();
        assert_eq!(code, 200);
        assert_eq!(
            body,
            "{\n  \"guests\": [],\n  \"informers\": [],\n  \"sources_without_guests\": [],\n  \"uptime_seconds\": 0,\n  \"tenants\": []\n}\n",
            "pretty JSON, one line feed at the end"
        );
        assert_eq!(
            get(addr, "/healthz?verbose=1").await.unwrap(),
            (200, "ok\n".into()),
            "a query does not change the route"
        );
    }

    #[tokio::test]
    async fn get_status_reads_back_the_document_the_endpoint_serves() {
        let status = Status {
            guests: vec![GuestStatus {
                name: "cmgen".into(),
                state: GuestState::Failing,
                reason: Some("trapped".into()),
                blame: Some(crate::guest::Blame::Guest),
                failing_since: None,
                failing_keys: Some(1),
                digest: Some("ab".repeat(32)),
                settings_hash: None,
                source: "file /cmgen.wasm".into(),
                loaded_at: None,
                loads: 1,
                rejections: 0,
                last_error: None,
                last_error_at: None,
                last_load_ms: Some(3.25),
                reconciles: Reconciles {
                    traps: 1,
                    ..Reconciles::default()
                },
                queued: 2,
                informers: Vec::new(),
                memory: Some(GuestMemory {
                    cached_bytes: 4096,
                    peak_instance_bytes: 1 << 20,
                    compiled_bytes: 300_000,
                }),
                shard: Some(3),
                owner: Some("replica-b".into()),
                key_shards: None,
                shadow: None,
                rollout: None,
            }],
            uptime_seconds: 5,
            ..Status::default()
        };
        let addr = start_with(Ok(()), status.clone(), HEADER_READ_TIMEOUT).await;
        assert_eq!(get_status(addr).await.unwrap(), status);
    }

    /// A one-shot server that answers whatever is asked with `response`.
    async fn answer_once(response: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0; 1024];
            let _ = stream.read(&mut request).await.unwrap();
            stream.write_all(response.as_bytes()).await.unwrap();
        });
        addr
    }

    #[tokio::test]
    async fn get_status_names_a_document_it_cannot_read_and_what_to_do() {
        let body = r#"{"guests":[{"name":"g","state":"paused","source":"s"}]}"#;
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let addr = answer_once(response.leak()).await;
        let err = get_status(addr).await.unwrap_err();
        assert!(matches!(err, Error::Document { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("unknown variant `paused`")
                && message.contains("reconciled status --json"),
            "{message}"
        );

        let addr = answer_once(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 9\r\nconnection: close\r\n\r\nbroken\nup",
        )
        .await;
        let err = get_status(addr).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("the host at {addr} answered GET /status with 500: broken up")
        );
    }

    #[tokio::test]
    async fn content_types_match_each_route() {
        let addr = start(Ok(())).await;
        for (path, expected) in [
            ("/healthz", "text/plain; charset=utf-8"),
            ("/metrics", METRICS_CONTENT_TYPE),
            ("/status", "application/json"),
        ] {
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let (status, headers, _) = raw(addr, &request).await;
            assert_eq!(status, "HTTP/1.1 200 OK", "{path}");
            assert_eq!(header(&headers, "content-type"), Some(expected), "{path}");
        }
    }

    #[tokio::test]
    async fn readyz_lists_one_reason_per_line_when_not_ready() {
        let addr = start(Err(vec![
            "guest cmgen: configmaps: forbidden; add rule {\"verbs\":[\"list\"]}".into(),
            "guest other: not synced\nyet".into(),
        ]))
        .await;
        assert_eq!(
            get(addr, "/readyz").await.unwrap(),
            (
                503,
                "not ready:\n\
                 guest cmgen: configmaps: forbidden; add rule {\"verbs\":[\"list\"]}\n\
                 guest other: not synced yet\n"
                    .into()
            )
        );
        assert_eq!(
            get(addr, "/healthz").await.unwrap(),
            (200, "ok\n".into()),
            "not ready is still alive"
        );
    }

    #[tokio::test]
    async fn readyz_without_reasons_still_says_something() {
        let addr = start(Err(vec![])).await;
        assert_eq!(
            get(addr, "/readyz").await.unwrap(),
            (503, "not ready:\n(no reason given)\n".into())
        );
    }

    #[tokio::test]
    async fn unknown_path_is_404_and_lists_the_known_paths() {
        let addr = start(Ok(())).await;
        assert_eq!(
            get(addr, "/health").await.unwrap(),
            (
                404,
                "no endpoint at /health; the host serves /healthz, /readyz, /metrics, /status\n"
                    .into()
            )
        );
    }

    #[tokio::test]
    async fn other_methods_get_405_with_allow() {
        let addr = start(Ok(())).await;
        let (status, headers, body) = raw(
            addr,
            "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        .await;
        assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
        assert_eq!(header(&headers, "allow"), Some("GET, HEAD"));
        assert_eq!(body, "/readyz answers only GET (and HEAD), not POST\n");

        let (status, _, _) = raw(
            addr,
            "DELETE /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(
            status, "HTTP/1.1 404 Not Found",
            "an unknown path is 404 whatever the method"
        );
    }

    #[tokio::test]
    async fn head_has_the_headers_of_get_and_no_body() {
        let addr = start(Ok(())).await;
        let (status, headers, body) = raw(
            addr,
            "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(header(&headers, "content-length"), Some("33"));
        assert_eq!(header(&headers, "content-type"), Some(METRICS_CONTENT_TYPE));
        assert_eq!(body, "");
    }

    #[tokio::test]
    async fn a_broken_connection_does_not_stop_the_server() {
        let addr = start(Ok(())).await;
        let (status, _, _) = raw(addr, "NOT HTTP AT ALL\r\n\r\n").await;
        assert_eq!(status, "HTTP/1.1 400 Bad Request");
        drop(TcpStream::connect(addr).await.unwrap());
        assert_eq!(get(addr, "/healthz").await.unwrap(), (200, "ok\n".into()));
    }

    /// Reads until the server closes `stream`; fails if it has not within `within`.
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> Vec<u8> {
        let mut rest = Vec::new();
        tokio::time::timeout(within, stream.read_to_end(&mut rest))
            .await
            .expect("the server kept the connection open")
            .unwrap();
        rest
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_after_the_header_read_timeout() {
        let addr = start_with(Ok(()), Status::default(), Duration::from_millis(200)).await;
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let opened = std::time::Instant::now();
        closed_within(&mut silent, Duration::from_secs(5)).await;
        assert!(
            opened.elapsed() >= Duration::from_millis(150),
            "closed too early"
        );
        assert_eq!(get(addr, "/healthz").await.unwrap(), (200, "ok\n".into()));
    }

    #[tokio::test]
    async fn a_kept_alive_connection_left_idle_is_closed_too() {
        let addr = start_with(Ok(()), Status::default(), Duration::from_millis(200)).await;
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let answer =
            String::from_utf8(closed_within(&mut idle, Duration::from_secs(5)).await).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("\r\n\r\nok\n"),
            "answered, then closed once idle: {answer:?}"
        );
    }

    #[tokio::test]
    async fn get_against_a_closed_port_says_the_host_is_not_running() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let err = get(addr, "/status").await.unwrap_err();
        assert!(matches!(err, Error::NotListening { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "nothing is listening on {addr} (connection refused): the host is not running, \
                 or it listens on another address; pass that address with --addr"
            )
        );
    }

    #[tokio::test]
    async fn get_rejects_an_invalid_path_before_connecting() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        for path in ["status", "/status page"] {
            let err = get(addr, path).await.unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "{path:?} is not a valid request path; paths start with / and contain no spaces, as in /status"
                )
            );
        }
    }
}
