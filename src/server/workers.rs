//! Thread-per-core serving, as nginx's workers do: `server.workers`
//! threads, each with a current-thread tokio runtime of its own and its
//! own listening socket on the same address (`SO_REUSEPORT`: the kernel
//! spreads new connections over them). A connection, its requests and
//! whatever they spawn stay on the thread that accepted it, so the hot
//! path has no cross-thread wake-ups; the upstream pool keeps each
//! thread's connections apart (`upstream::direct`). Background work (the
//! config reload, health checks, flushes) stays on the main runtime.
//!
//! Each worker's runtime lives until the gateway has finished shutting
//! down (`release`), so tasks its requests started (a stored answer's
//! write, a cache fill) finish on it rather than being dropped with it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::Server;

/// The listen backlog of each worker's socket (the kernel caps it at
/// `net.core.somaxconn`).
const BACKLOG: u32 = 1024;

/// How long a worker's runtime waits for its blocking tasks at the end.
const RUNTIME_EXIT: Duration = Duration::from_secs(2);

/// The workers, not yet started: a listening socket on one address and a
/// runtime each, all made before the gateway says it listens.
pub struct Listeners {
    sockets: Vec<(std::net::TcpListener, Unstarted)>,
    addr: SocketAddr,
}

impl Listeners {
    /// Binds `addr` `workers` times with `SO_REUSEPORT` (port 0: the port
    /// the first socket got), and makes each worker's runtime. An address another process already listens
    /// on is refused, as a plain bind would be, even when that process
    /// also set `SO_REUSEPORT`. Call it on a tokio runtime.
    pub fn bind(addr: SocketAddr, workers: usize) -> io::Result<Self> {
        if addr.port() != 0 {
            // A socket without SO_REUSEPORT cannot share the port: this
            // bind fails while anyone listens there.
            socket(addr)?.bind(addr)?;
        }
        let mut sockets = Vec::with_capacity(workers);
        let mut at = addr;
        for _ in 0..workers.max(1) {
            let s = socket(at)?;
            s.set_reuseport(true)?;
            s.bind(at)?;
            let listener = s.listen(BACKLOG)?;
            at = listener.local_addr()?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            sockets.push((listener.into_std()?, Unstarted(Some(runtime))));
        }
        Ok(Listeners { sockets, addr: at })
    }

    /// The address bound (with the port chosen when asked for 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// A worker's runtime until its thread takes it: one never started (a
/// failed bind or thread, a test) ends without blocking, as an async
/// context requires.
struct Unstarted(Option<Runtime>);

impl Drop for Unstarted {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

fn socket(addr: SocketAddr) -> io::Result<TcpSocket> {
    let s = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    Ok(s)
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
    for (i, (socket, runtime)) in listeners.sockets.drain(..).enumerate() {
        let (done, rx) = oneshot::channel::<()>();
        let (server, release) = (server.clone(), release.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("conclave-w{i}"))
            .spawn(move || worker(runtime, &server, socket, done, &release));
        match spawned {
            Ok(_) => drained.push(rx),
            Err(e) => tracing::error!("cannot start worker {i}: {e}"),
        }
    }
    for rx in drained {
        let _ = rx.await;
    }
}

/// One worker: its runtime, serving its socket until the drain ends, then
/// kept until `release`.
fn worker(
    mut runtime: Unstarted,
    server: &Server,
    socket: std::net::TcpListener,
    done: oneshot::Sender<()>,
    release: &CancellationToken,
) {
    let Some(runtime) = runtime.0.take() else {
        return;
    };
    crate::upstream::keep_apart();
    runtime.block_on(async {
        match socket
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(socket))
        {
            Ok(listener) => server.serve(listener).await,
            Err(e) => tracing::error!("a worker cannot listen: {e}"),
        }
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
        assert_eq!(l.sockets.len(), 3);
        let port = l.local_addr().port();
        assert_ne!(port, 0);
        for (s, _) in &l.sockets {
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
