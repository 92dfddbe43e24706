//! Time-to-first-token load generator for `benches/overhead.py`: a closed
//! loop of `--concurrency` clients streaming chat completions for
//! `--seconds`, printing one JSON line with TTFT and total-latency
//! percentiles in microseconds. (wrk measures whole responses only.)
//!
//! cargo bench --bench ttft -- --url http://127.0.0.1:4000/v1/chat/completions \
//!     --model bench --concurrency 64 --seconds 5
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tokio::time::Instant;

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_owned())
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = arg(&args, "--url", "http://127.0.0.1:4000/v1/chat/completions");
    let model = arg(&args, "--model", "bench");
    let concurrency: usize = arg(&args, "--concurrency", "64").parse().unwrap();
    let seconds: f64 = arg(&args, "--seconds", "5").parse().unwrap();
    let body = serde_json::json!({
        "model": model,
        "stream": true,
        "messages": [{"role": "user", "content": "Benchmark the gateway overhead please"}]
    })
    .to_string();
    let client = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut ttft = Vec::new();
            let mut total = Vec::new();
            let mut errors = 0u64;
            while Instant::now() < end {
                let t0 = Instant::now();
                let resp = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                let Ok(mut resp) = resp else {
                    errors += 1;
                    continue;
                };
                if !resp.status().is_success() {
                    errors += 1;
                    continue;
                }
                let mut first = None;
                let mut ok = true;
                loop {
                    match resp.chunk().await {
                        Ok(Some(c)) => {
                            if first.is_none() && c.windows(5).any(|w| w == b"data:") {
                                first = Some(t0.elapsed());
                            }
                        }
                        Ok(None) => break,
                        Err(_) => {
                            ok = false;
                            break;
                        }
                    }
                }
                match (ok, first) {
                    (true, Some(f)) => {
                        ttft.push(f.as_micros() as u64);
                        total.push(t0.elapsed().as_micros() as u64);
                    }
                    _ => errors += 1,
                }
            }
            (ttft, total, errors)
        }));
    }
    let (mut ttft, mut total, mut errors) = (Vec::new(), Vec::new(), 0);
    for t in tasks {
        let (a, b, e) = t.await.unwrap();
        ttft.extend(a);
        total.extend(b);
        errors += e;
    }
    ttft.sort_unstable();
    total.sort_unstable();
    println!(
        "{}",
        serde_json::json!({
            "requests": total.len(),
            "errors": errors,
            "ttft_p50_us": pct(&ttft, 50.0),
            "ttft_p99_us": pct(&ttft, 99.0),
            "total_p50_us": pct(&total, 50.0),
            "total_p99_us": pct(&total, 99.0),
        })
    );
}
