//! The floor of a Rust proxy hop: HTTP/1 on hyper on both sides, a thread
//! per core (a current-thread runtime and an `SO_REUSEPORT` socket each),
//! and a per-thread stack of keep-alive upstream connections. A request's
//! body is read whole and sent on (its method and path) with its
//! `content-type` and `authorization`; the answer's body is read whole and sent back with its
//! status and `content-type`. Nothing else: no parsing, no limits, no
//! telemetry. Usage: `floor LISTEN UPSTREAM [WORKERS]` (addresses as
//! `127.0.0.1:PORT`; loopback benches only).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Pool = Rc<RefCell<Vec<SendRequest<Full<Bytes>>>>>;
type Failure = Box<dyn std::error::Error + Send + Sync>;

async fn forward(
    pool: Pool,
    up: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Failure> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let mut out = Request::builder()
        .method(parts.method)
        .uri(parts.uri.path())
        .header(HOST, "127.0.0.1");
    for name in [CONTENT_TYPE, AUTHORIZATION] {
        if let Some(v) = parts.headers.get(&name) {
            out = out.header(name, v);
        }
    }
    let out = out.body(Full::new(body))?;
    let idle = loop {
        match pool.borrow_mut().pop() {
            Some(s) if s.is_closed() => continue,
            other => break other,
        }
    };
    let mut sender = match idle {
        Some(s) => s,
        None => {
            let stream = tokio::net::TcpStream::connect(up).await?;
            stream.set_nodelay(true)?;
            let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::task::spawn_local(conn);
            s
        }
    };
    let resp = sender.send_request(out).await?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await?.to_bytes();
    pool.borrow_mut().push(sender);
    let mut back = Response::builder().status(parts.status);
    if let Some(ct) = parts.headers.get(CONTENT_TYPE) {
        back = back.header(CONTENT_TYPE, ct);
    }
    Ok(back.body(Full::new(body))?)
}

async fn answer(
    pool: Pool,
    up: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    Ok(forward(pool, up, req).await.unwrap_or_else(|e| {
        let mut r = Response::new(Full::new(Bytes::from(e.to_string())));
        *r.status_mut() = StatusCode::BAD_GATEWAY;
        r
    }))
}

fn listener(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    sock.set_reuse_port(true)?;
    sock.set_reuse_address(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(1024)?;
    tokio::net::TcpListener::from_std(sock.into())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: floor LISTEN UPSTREAM [WORKERS]";
    let listen: SocketAddr = args.next().and_then(|a| a.parse().ok()).expect(usage);
    let up: SocketAddr = args.next().and_then(|a| a.parse().ok()).expect(usage);
    let workers: usize = args
        .next()
        .map_or(Some(2), |w| w.parse().ok())
        .expect(usage);
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    let listener = listener(listen).expect("listen");
                    let pool: Pool = Rc::default();
                    while let Ok((stream, _)) = listener.accept().await {
                        let _ = stream.set_nodelay(true);
                        let pool = pool.clone();
                        tokio::task::spawn_local(async move {
                            let svc = hyper::service::service_fn(move |req| {
                                answer(pool.clone(), up, req)
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                });
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}
