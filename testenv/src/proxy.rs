//! A loopback TCP proxy in front of the apiserver, for cutting a client's connections on demand.
//!
//! It forwards bytes unchanged (TLS passes through end to end), so the client talks to the real
//! apiserver; the proxy only decides *whether* bytes flow. That makes "the watch connection
//! dropped" and "the client was cut off while the cluster changed" deterministic in tests,
//! which an apiserver restart alone is not: clients reconnect on their own schedule.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

#[derive(Debug, Default)]
struct State {
    paused: AtomicBool,
    conns: Mutex<Vec<AbortHandle>>,
}

/// A running proxy. Dropping it stops it and cuts every connection.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
    accept: AbortHandle,
}

impl Proxy {
    /// Starts a proxy on a free loopback port forwarding to `target`. Needs a tokio runtime; the
    /// proxy lives on it.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::default());
        let st = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if st.paused.load(Ordering::SeqCst) {
                    // Refused: the client sees its connection closed at once.
                    drop(inbound);
                    continue;
                }
                let task = tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let mut inbound = inbound;
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
                let mut conns = st.conns.lock().unwrap();
                conns.retain(|c| !c.is_finished());
                conns.push(task.abort_handle());
            }
        })
        .abort_handle();
        Ok(Self {
            addr,
            state,
            accept,
        })
    }

    /// The proxy's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Drops every open connection; new ones are still accepted.
    pub fn cut(&self) {
        for c in self.state.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    /// Drops every open connection and refuses new ones until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.state.paused.store(true, Ordering::SeqCst);
        self.cut();
    }

    /// Accepts connections again.
    pub fn resume(&self) {
        self.state.paused.store(false, Ordering::SeqCst);
    }

    /// `base` with its server URL pointed at this proxy; credentials and CA unchanged. The
    /// serving certificate names 127.0.0.1, not a port, so TLS verification still passes.
    pub fn config(&self, base: &kube::Config) -> kube::Config {
        let mut cfg = base.clone();
        cfg.cluster_url = format!("https://127.0.0.1:{}", self.port())
            .parse()
            .expect("valid URL");
        cfg
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
