//! Thread-per-core serving, as nginx's workers do: `server.workers`
//! threads, each with a current-thread tokio runtime of its own and its
//! own listening socket on the same address (Linux's `SO_REUSEPORT`: the
//! kernel spreads new connections over them; elsewhere the workers share
//! one socket). A connection, its requests and whatever they spawn stay on
//! the thread that accepted it, and so do the connections to plain-http
//! upstreams they open (`upstream::direct` keeps each thread's apart), so
//! a plain request wakes no other thread. What all workers share (Redis,
//! reqwest's pools for https upstreams, the event log's writer) may. The
//! config reload, health checks and flushes stay on the main runtime.
//!
//! Each worker's runtime lives until the gateway has made its last
//! flushes (`release`), so what a request started there (a stored
//! answer's write, a cache fill) is not cut off by the drain's end.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::Server;

/// The listen backlog of each worker's socket (the kernel caps it at
/// `net.core.somaxconn`).
#[cfg(target_os = "linux")]
const BACKLOG: u32 = 1024;

/// How long a worker's runtime waits for its blocking tasks at the end.
const RUNTIME_EXIT: Duration = Duration::from_secs(2);

/// The workers, not yet started: a listening socket on one address and a
/// runtime each, the socket registered with its runtime, all made before
/// the gateway says it listens.
pub struct Listeners {
    workers: Vec<Unstarted>,
    addr: SocketAddr,
}

/// A worker's runtime and socket until its thread takes them: one never
/// started (a failed bind or thread, a test) ends without blocking, as an
/// async context requires.
struct Unstarted {
    listener: Option<TcpListener>,
    runtime: Option<Runtime>,
}

impl Drop for Unstarted {
    fn drop(&mut self) {
        // The socket leaves its runtime's reactor before the runtime goes.
        drop(self.listener.take());
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Listeners {
    /// Binds `addr` for `workers` workers (port 0: the port the first
    /// socket got) and makes each worker's runtime. An address another
    /// process already listens on is refused, as a plain bind would be,
    /// even when that process set `SO_REUSEPORT`. Call it on a tokio
    /// runtime.
    pub fn bind(addr: SocketAddr, workers: usize) -> io::Result<Self> {
        let sockets = sockets(addr, workers.max(1))?;
        let addr = match sockets.first() {
            Some(s) => s.local_addr()?,
            None => addr,
        };
        let mut out = Vec::with_capacity(sockets.len());
        for socket in sockets {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let mut worker = Unstarted {
                listener: None,
                runtime: Some(runtime),
            };
            socket.set_nonblocking(true)?;
            if let Some(rt) = &worker.runtime {
                let _in = rt.enter();
                worker.listener = Some(TcpListener::from_std(socket)?);
            }
            out.push(worker);
        }
        Ok(Listeners { workers: out, addr })
    }

    /// The address bound (with the port chosen when asked for 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// One socket per worker with `SO_REUSEPORT`, after a probe: a socket
/// without it cannot share the port, so its bind fails while anyone
/// listens there. (Two gateways started at the same instant may both pass
/// the probe; a process of the same user that binds later with
/// `SO_REUSEPORT` itself can join. A plain bind is always refused.)
#[cfg(target_os = "linux")]
fn sockets(addr: SocketAddr, n: usize) -> io::Result<Vec<std::net::TcpListener>> {
    use tokio::net::TcpSocket;
    let socket = |addr: SocketAddr| -> io::Result<TcpSocket> {
        let s = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        s.set_reuseaddr(true)?;
        Ok(s)
    };
    if addr.port() != 0 {
        socket(addr)?.bind(addr)?;
    }
    let mut out = Vec::with_capacity(n);
    let mut at = addr;
    for _ in 0..n {
        let s = socket(at)?;
        s.set_reuseport(true)?;
        s.bind(at)?;
        let listener = s.listen(BACKLOG)?;
        at = listener.local_addr()?;
        out.push(listener.into_std()?);
    }
    Ok(out)
}

/// Elsewhere `SO_REUSEPORT` does not spread connections (or does not
/// exist): one socket, which every worker accepts from.
#[cfg(not(target_os = "linux"))]
fn sockets(addr: SocketAddr, n: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let first = std::net::TcpListener::bind(addr)?;
    let mut out = Vec::with_capacity(n);
    for _ in 1..n {
        out.push(first.try_clone()?);
    }
    out.insert(0, first);
    Ok(out)
}

/// Serves `server` on each of `listeners` on a thread of its own; returns
/// once every worker has drained (see `Server::serve`). The workers'
/// runtimes end when `release` is cancelled.
pub async fn serve_on_workers(
    server: Arc<Server>,
    mut listeners: Listeners,
    release: CancellationToken,
) {
    let mut drained = Vec::new();
    for (i, worker) in listeners.workers.drain(..).enumerate() {
        let (done, rx) = oneshot::channel::<()>();
        let (server, release) = (server.clone(), release.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("conclave-w{i}"))
            .spawn(move || run_worker(worker, &server, done, &release));
        match spawned {
            Ok(_) => drained.push(rx),
            Err(e) => tracing::error!("cannot start worker {i}: {e}"),
        }
    }
    if drained.is_empty() {
        tracing::error!("no worker could start: nothing accepts connections");
    }
    for rx in drained {
        let _ = rx.await;
    }
}

/// One worker: its runtime, serving its socket until the drain ends, then
/// kept until `release`.
fn run_worker(
    mut worker: Unstarted,
    server: &Server,
    done: oneshot::Sender<()>,
    release: &CancellationToken,
) {
    let (Some(runtime), Some(listener)) = (worker.runtime.take(), worker.listener.take()) else {
        return;
    };
    crate::upstream::keep_apart();
    runtime.block_on(async {
        server.serve(listener).await;
        let _ = done.send(());
        release.cancelled().await;
    });
    runtime.shutdown_timeout(RUNTIME_EXIT);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_worker_socket_shares_one_port_that_nobody_else_can_take() {
        let l = Listeners::bind("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        assert_eq!(l.workers.len(), 3);
        let port = l.local_addr().port();
        assert_ne!(port, 0);
        for w in &l.workers {
            let s = w.listener.as_ref().unwrap();
            assert_eq!(s.local_addr().unwrap().port(), port);
        }
        // A second gateway on the same address is refused, as a plain
        // bind would be.
        let again = Listeners::bind(l.local_addr(), 2).err().map(|e| e.kind());
        assert_eq!(again, Some(io::ErrorKind::AddrInUse));
        let plain = std::net::TcpListener::bind(l.local_addr())
            .err()
            .map(|e| e.kind());
        assert_eq!(plain, Some(io::ErrorKind::AddrInUse));
    }
}
