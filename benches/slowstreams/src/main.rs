//! Slow-streams benchmark for conclave (issue 29): 10,000 concurrent streams that each
//! get a token every 50 ms for 60 s.
//!
//! Two modes, both on loopback:
//!
//! - `slowstreams upstream --listen ADDR [--interval-ms 50] [--duration-secs 60] [--threads 1]`
//!   an OpenAI-compatible upstream: `POST /v1/chat/completions` with `stream: true` answers
//!   SSE chunks, one every interval for the duration, each carrying its send time (µs since
//!   the UNIX epoch) as its content, then a chunk with `finish_reason` and `usage`, then
//!   `data: [DONE]`. `GET /v1/models` lists `slow-model`.
//! - `slowstreams load --url URL [--streams 10000] [--ramp 10] [--tokens 1200] [--threads 1]`
//!   opens that many streaming requests (one HTTP/1.1 connection each, ramped over `--ramp`
//!   seconds), reads their events and prints completed / dropped streams, the inter-token gap
//!   and the transit time (receive time minus the upstream's send time) p50/p99/max.
//!
//! Run by `benches/slow-streams.sh`, which builds it, starts conclave and compares.

mod hist;
mod load;
mod upstream;

use std::time::Duration;

/// Command-line options shared by both modes (each mode reads what it needs).
#[derive(Debug, Clone)]
pub struct Opts {
    pub listen: String,
    pub url: String,
    pub interval: Duration,
    pub duration: Duration,
    pub streams: usize,
    pub ramp: Duration,
    pub tokens: u64,
    pub threads: usize,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        listen: "127.0.0.1:18100".into(),
        url: "http://127.0.0.1:18100/v1/chat/completions".into(),
        interval: Duration::from_millis(50),
        duration: Duration::from_secs(60),
        streams: 10_000,
        ramp: Duration::from_secs(10),
        tokens: 1200,
        threads: 1,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let val = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || val.parse::<u64>().map_err(|e| format!("{flag} {val}: {e}"));
        match flag.as_str() {
            "--listen" => o.listen = val.clone(),
            "--url" => o.url = val.clone(),
            "--interval-ms" => o.interval = Duration::from_millis(num()?.max(1)),
            "--duration-secs" => o.duration = Duration::from_secs(num()?),
            "--streams" => o.streams = usize::try_from(num()?).map_err(|e| e.to_string())?,
            "--ramp" => o.ramp = Duration::from_secs(num()?),
            "--tokens" => o.tokens = num()?,
            "--threads" => o.threads = usize::try_from(num()?.max(1)).map_err(|e| e.to_string())?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(o)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: slowstreams upstream|load [--listen ADDR] [--url URL] [--interval-ms 50] \
                 [--duration-secs 60] [--streams N] [--ramp SECS] [--tokens N] [--threads N]";
    let (mode, rest) = match args.get(1) {
        Some(m) => (m.as_str(), &args[2..]),
        None => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let opts = match parse(rest) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\n{usage}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.threads)
        .enable_all()
        .build();
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            std::process::exit(1);
        }
    };
    let res = match mode {
        "upstream" => rt.block_on(upstream::run(opts)),
        "load" => rt.block_on(load::run(opts)),
        _ => Err(usage.to_string()),
    };
    if let Err(e) = res {
        eprintln!("slowstreams {mode}: {e}");
        std::process::exit(1);
    }
}
